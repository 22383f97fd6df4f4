"""Timeouts and deadlines, one way for every wait.

``threading.Lock.acquire(timeout=...)`` refuses anything above
``threading.TIMEOUT_MAX`` (about 292 years) and infinity with an
``OverflowError``; a user who asks for ``timeout=1e12`` or ``float("inf")``
means "wait as long as it takes". Every wait in litegate goes through
:func:`acquire_until`, and every timeout a user gives through
:func:`seconds`, so no wait can overflow.
"""

from __future__ import annotations

import math
import threading
import time

from ._errors import ConfigError

# A timeout at or above this many seconds (31 years) means no limit.
FOREVER = 1e9


def seconds(name: str, value: object) -> float:
    """A user's timeout in seconds: a positive number; ``inf`` for no limit
    (anything from :data:`FOREVER` up). Raises ConfigError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name} must be a number of seconds, got {value!r}")
    if math.isnan(value) or not value > 0:
        raise ConfigError(
            f"{name} must be greater than zero, got {value!r}; use float('inf') to wait "
            "without a limit"
        )
    return math.inf if value >= FOREVER else float(value)


# sqlite3.connect()'s timeout= becomes SQLite's busy timeout in milliseconds,
# a C int: inf, or anything past 2**31 - 1 ms (~24.8 days), wraps to 0, which
# is no wait at all.
SQLITE_LONGEST = (2**31 - 1) / 1000


def sqlite_timeout(limit: float) -> float:
    """``sqlite3.connect(timeout=...)`` for a wait of ``limit`` seconds (inf:
    none): the longest SQLite takes, not a value that turns into 0."""
    return min(limit, SQLITE_LONGEST)


def deadline_of(limit: float) -> float:
    """The monotonic deadline ``limit`` seconds from now (inf: none)."""
    return math.inf if limit >= FOREVER else time.monotonic() + limit


def remaining(deadline: float) -> float | None:
    """Seconds left before ``deadline`` (>= 0), None for no deadline: the
    form ``Lock.acquire``-style waits that take None take."""
    if deadline == math.inf:
        return None
    return max(0.0, deadline - time.monotonic())


def acquire_until(lock: threading.Lock, deadline: float) -> bool:
    """``lock.acquire()`` until ``deadline`` (inf: no limit)."""
    if deadline == math.inf:
        return lock.acquire()
    return lock.acquire(timeout=min(threading.TIMEOUT_MAX, max(0.0, deadline - time.monotonic())))
