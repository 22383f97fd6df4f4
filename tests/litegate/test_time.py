"""Timeouts and deadlines: one way for every wait, none can overflow."""

from __future__ import annotations

import math
import threading
import time

import pytest

import litegate
from litegate._time import FOREVER, acquire_until, deadline_of, remaining, seconds


@pytest.mark.parametrize(
    ("value", "expected"),
    [(1, 1.0), (0.25, 0.25), (FOREVER, math.inf), (1e12, math.inf), (math.inf, math.inf)],
)
def test_seconds_takes_positive_numbers_and_no_limit_from_forever_up(
    value: float, expected: float
) -> None:
    assert seconds("timeout", value) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "timeout must be greater than zero, got 0; use float('inf')"),
        (-1.5, "timeout must be greater than zero, got -1.5"),
        (math.nan, "timeout must be greater than zero, got nan"),
        (True, "timeout must be a number of seconds, got True"),
        ("5", "timeout must be a number of seconds, got '5'"),
        (None, "timeout must be a number of seconds, got None"),
    ],
)
def test_seconds_refuses_what_is_not_a_positive_number(value: object, message: str) -> None:
    with pytest.raises(litegate.ConfigError) as info:
        seconds("timeout", value)
    assert str(info.value).startswith(message)


def test_deadlines_and_what_remains() -> None:
    assert deadline_of(math.inf) == math.inf
    assert deadline_of(FOREVER) == math.inf
    assert remaining(math.inf) is None
    assert remaining(time.monotonic() - 5) == 0.0  # past: nothing left, never negative
    soon = deadline_of(100.0)
    left = remaining(soon)
    assert left is not None
    assert 0 < left <= 100.0


def test_acquire_until_waits_no_longer_than_the_deadline_and_never_overflows() -> None:
    lock = threading.Lock()
    assert acquire_until(lock, math.inf)  # free: taken at once, whatever the deadline
    assert not acquire_until(lock, time.monotonic() - 1)  # held, deadline passed: False
    threading.Timer(0.05, lock.release).start()
    assert acquire_until(lock, time.monotonic() + 1e15)  # beyond TIMEOUT_MAX: no OverflowError
    lock.release()
