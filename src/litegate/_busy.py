"""Busy strategies: how long to sleep before retry number ``count``.

Each strategy is a plain function of the retry count (0 for the first retry,
as SQLite counts busy-handler calls) returning seconds. ``constant``,
``backoff``, ``jitter``, ``ceiling`` and ``reversed`` are exactly the busy
handlers Ruby's sqlite3 adapter offers, so results compare with theirs;
``sqlite-default`` is the delay table of SQLite's
own ``sqliteDefaultBusyCallback`` (what ``sqlite3.connect(timeout=...)``
installs).

litegate's own writers do not poll each other: they queue on the write gate.
A strategy is only used against writers that bypass litegate (the ``sqlite3``
shell, a migration tool), and by the lab to compare the strategies.
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Callable

from ._errors import ConfigError

BusyStrategy = Callable[[int], float]
"""A busy strategy: the seconds to sleep before retry number ``count``."""

_MS = 0.001
_SQLITE_BUSY = 5


def constant(count: int) -> float:
    """Always 1 ms."""
    return 1 * _MS


def backoff(count: int) -> float:
    """``count`` ms: grows without bound."""
    return count * _MS


def jitter(count: int) -> float:
    """A random 1..10 ms."""
    return random.randint(1, 10) * _MS  # spreading retries, not security


def ceiling(count: int) -> float:
    """``count`` ms, but never more than 10 ms."""
    return (10 if count > 10 else count) * _MS


def reversed_(count: int) -> float:
    """10 - ``count`` ms, but never less than 1 ms."""
    return (1 if count >= 10 else 10 - count) * _MS


_SQLITE_DELAYS_MS = (1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100)


def sqlite_default(count: int) -> float:
    """SQLite's own table: 1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100 ms,
    then 100 ms for every later retry."""
    if count < len(_SQLITE_DELAYS_MS):
        return _SQLITE_DELAYS_MS[count] * _MS
    return _SQLITE_DELAYS_MS[-1] * _MS


STRATEGIES: dict[str, BusyStrategy] = {
    "constant": constant,
    "backoff": backoff,
    "jitter": jitter,
    "ceiling": ceiling,
    "reversed": reversed_,
    "sqlite-default": sqlite_default,
}
"""The busy strategies by name, for ``connect(busy=...)``: how a writer waits
for SQLite's lock held by a writer that does not go through litegate."""


def get_strategy(busy: str | BusyStrategy) -> tuple[str, BusyStrategy]:
    """Resolve a strategy name (or a callable) to ``(name, function)``."""
    if callable(busy):
        return getattr(busy, "__name__", "custom"), busy
    try:
        return busy, STRATEGIES[busy]
    except (KeyError, TypeError):
        names = ", ".join(sorted(STRATEGIES))
        raise ConfigError(
            f"unknown busy strategy {busy!r}; pick one of {names} or pass a function "
            "of the retry count that returns seconds"
        ) from None


def is_busy(exc: sqlite3.Error) -> bool:
    """True when ``exc`` is SQLITE_BUSY (or one of its extended codes)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return (int(code) & 0xFF) == _SQLITE_BUSY
    return "locked" in str(exc)  # very old sqlite3 modules carry no code


def is_busy_error(exc: BaseException) -> bool:
    """``is_busy`` for any exception (False for what is not an OperationalError)."""
    return isinstance(exc, sqlite3.OperationalError) and is_busy(exc)


def retry_busy(
    run: Callable[[], object],
    strategy: BusyStrategy,
    deadline: float,
    on_retry: Callable[[], None] | None = None,
) -> int:
    """Call ``run`` until it does not raise SQLITE_BUSY; sleep ``strategy(n)``
    between tries. Returns how many retries it took.

    Raises :class:`TimeoutError` when ``deadline`` (``time.monotonic()``
    based) passes; any other error from ``run`` propagates at once.
    """
    count = 0
    while True:
        try:
            run()
            return count
        except sqlite3.OperationalError as exc:
            if not is_busy(exc):
                raise
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(str(exc)) from exc
            if on_retry is not None:
                on_retry()
            time.sleep(min(strategy(count), remaining))
            count += 1
