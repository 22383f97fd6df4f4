"""Busy strategies exactly as Ruby's sqlite3 adapter (and SQLite's own table) define them."""

from __future__ import annotations

import sqlite3
import time

import pytest

import litegate
from litegate import _busy


def ms(fn: _busy.BusyStrategy, counts: range) -> list[float]:
    return [round(fn(c) * 1000, 6) for c in counts]


def test_constant() -> None:
    assert ms(_busy.constant, range(30)) == [1.0] * 30


def test_backoff() -> None:
    assert ms(_busy.backoff, range(30)) == [float(c) for c in range(30)]


def test_ceiling() -> None:
    assert ms(_busy.ceiling, range(15)) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 10, 10, 10, 10]


def test_reversed() -> None:
    assert ms(_busy.reversed_, range(13)) == [10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 1, 1, 1]


def test_jitter_stays_in_1_to_10_ms_and_varies() -> None:
    values = ms(_busy.jitter, range(2000))
    assert set(values) == {float(v) for v in range(1, 11)}


def test_sqlite_default_table() -> None:
    expected = [1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100, 100, 100]
    assert ms(_busy.sqlite_default, range(14)) == [float(v) for v in expected]


def test_registry_names() -> None:
    assert sorted(litegate.BUSY_STRATEGIES) == [
        "backoff", "ceiling", "constant", "jitter", "reversed", "sqlite-default",
    ]  # fmt: skip
    assert _busy.get_strategy("ceiling") == ("ceiling", _busy.ceiling)


def test_custom_callable() -> None:
    def mine(count: int) -> float:
        return 0.002

    assert _busy.get_strategy(mine) == ("mine", mine)


def test_unknown_name() -> None:
    with pytest.raises(litegate.ConfigError, match="pick one of backoff, ceiling"):
        _busy.get_strategy("yolo")


def test_retry_busy_retries_only_busy_and_honours_deadline() -> None:
    calls = {"n": 0}

    def busy_twice() -> None:
        calls["n"] += 1
        if calls["n"] <= 2:
            exc = sqlite3.OperationalError("database is locked")
            exc.sqlite_errorcode = 5  # type: ignore[attr-defined]
            raise exc

    assert _busy.retry_busy(busy_twice, _busy.constant, time.monotonic() + 5) == 2

    def always_busy() -> None:
        exc = sqlite3.OperationalError("database is locked")
        exc.sqlite_errorcode = 5  # type: ignore[attr-defined]
        raise exc

    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        _busy.retry_busy(always_busy, _busy.constant, t0 + 0.05)
    assert time.monotonic() - t0 >= 0.05

    def syntax() -> None:
        raise sqlite3.OperationalError("near 'x': syntax error")

    with pytest.raises(sqlite3.OperationalError, match="syntax"):
        _busy.retry_busy(syntax, _busy.constant, time.monotonic() + 5)
