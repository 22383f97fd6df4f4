"""The misuse suite's contract, shared by its property-based
tests: a call given bad input either succeeds or raises a typed
:class:`litegate.Error` whose message says what to do; never another
exception, never a hang past its bound, never a lost committed row (each
suite counts rows after every case).

Each suite runs ``examples(n)`` cases per ``make test`` (the run's summary
line "misuse suite: ..." counts them); set ``LITEGATE_MISUSE_SCALE=20``
(say) to let Hypothesis look twenty times as long (with ``--timeout 0``:
pytest-timeout's 120 s is per test).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings

import litegate

T = TypeVar("T")

# A message "says what to do" when it has advice in it: one of these verbs,
# or what a value must be ("timeout must be greater than zero").
ADVICE = re.compile(
    r"\b(pass|pick|create|remove|rm|move|mv|make|raise|use|close|set|run|give|stop|check|"
    r"point|chmod|restore|delete|drop|keep|put|open it|write|install|see|must)\b",
    re.IGNORECASE,
)

CASES: dict[str, int] = {}
"""Cases run per suite in this session (printed at the end of the run by
tests/litegate/conftest.py)."""

HANG = 30.0
"""No single case may take longer than this (every wait in them is bounded
far below it)."""


def scaled(n: int) -> int:
    """``n`` cases times ``LITEGATE_MISUSE_SCALE``."""
    return max(1, int(n * float(os.environ.get("LITEGATE_MISUSE_SCALE", "1"))))


def examples(n: int, **overrides: Any) -> settings:
    """Hypothesis settings for a suite of ``n`` cases (times the scale)."""
    return settings(
        max_examples=scaled(n),
        deadline=None,  # timings on a shared machine vary; hangs are caught by HANG
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        **overrides,
    )


def ran(suite: str) -> None:
    """Count one case of ``suite``."""
    CASES[suite] = CASES.get(suite, 0) + 1


def says_what_to_do(message: str) -> bool:
    return ADVICE.search(message) is not None


def typed(exc: BaseException, known: re.Pattern[str] | None = None) -> None:
    """Fail unless ``exc`` is a litegate.Error whose message says what to do
    (``known``: a message, tracked elsewhere as a defect, excused from that)."""
    assert isinstance(exc, litegate.Error), f"untyped {type(exc).__name__}: {exc}"
    if known is not None and known.match(str(exc)):
        return
    assert says_what_to_do(str(exc)), f"{type(exc).__name__} with no advice: {exc}"


class Outcome:
    """What a call did: its value, or the typed error it raised."""

    def __init__(self, value: Any = None, error: litegate.Error | None = None) -> None:
        self.value = value
        self.error = error

    @property
    def ok(self) -> bool:
        return self.error is None

    def __repr__(self) -> str:
        return f"<Outcome {'ok' if self.ok else type(self.error).__name__}: {self.error or ''}>"


def attempt(fn: Callable[[], T], what: str = "", known: re.Pattern[str] | None = None) -> Outcome:
    """Run ``fn``: success, or a typed error that says what to do (checked
    here); anything else fails the case, as does taking longer than HANG."""
    t0 = time.monotonic()
    try:
        value = fn()
    except litegate.Error as exc:
        typed(exc, known)
        outcome = Outcome(error=exc)
    except Exception as exc:
        raise AssertionError(f"{what}: untyped {type(exc).__name__}: {exc}") from exc
    else:
        outcome = Outcome(value=value)
    took = time.monotonic() - t0
    assert took < HANG, f"{what}: took {took:.1f} s"
    return outcome
