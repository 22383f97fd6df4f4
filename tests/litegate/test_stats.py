"""The wait histogram behind stats()."""

from __future__ import annotations

import pytest

from litegate._stats import WaitHistogram


def test_empty() -> None:
    h = WaitHistogram()
    assert h.summary() == {
        "count": 0, "immediate": 0, "timeouts": 0, "p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0,
    }  # fmt: skip


def test_percentiles_within_bucket_precision() -> None:
    h = WaitHistogram()
    for ms in range(1, 101):  # 1..100 ms
        h.record(ms / 1000)
    assert h.count == 100
    assert h.percentile(50) == pytest.approx(0.050, rel=0.03)
    assert h.percentile(99) == pytest.approx(0.099, rel=0.03)
    assert h.percentile(100) == pytest.approx(0.100, rel=0.03)
    assert h.max == 0.1


def test_immediate_waits_count_as_zero() -> None:
    h = WaitHistogram()
    for _ in range(90):
        h.record_immediate()
    for _ in range(10):
        h.record(0.2)
    assert h.percentile(50) == 0.0
    assert h.percentile(90) == 0.0
    assert h.percentile(91) == pytest.approx(0.2, rel=0.03)
    s = h.summary()
    assert s["count"] == 100
    assert s["immediate"] == 90
    assert s["max_ms"] == 200.0


def test_never_reports_above_max() -> None:
    h = WaitHistogram()
    h.record(0.0123)
    assert h.percentile(99) <= 0.0123
    h.record_timeout()
    assert h.summary()["timeouts"] == 1


def test_batch_sizes_and_waits_use_one_percentile_rule() -> None:
    """Both summaries rank percentiles by the nearest-rank rule: the median
    of 1, 2, 3, 4, 5 is 3 for batch sizes as for waits (batch sizes rounded
    the rank half to even, and said 2)."""
    from litegate._batch import SizeHistogram
    from litegate._stats import WaitHistogram, nearest_rank

    sizes = SizeHistogram()
    waits = WaitHistogram()
    for n in (1, 2, 3, 4, 5):
        sizes.record(n)
        waits.record(n / 1000)
    assert sizes.summary()["p50"] == 3
    assert round(waits.percentile(50) * 1000) == 3
    assert [nearest_rank(q, 5) for q in (0, 50, 99, 100)] == [1, 3, 5, 5]
