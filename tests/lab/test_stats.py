"""The lab's statistics helpers on inputs whose answers are known by hand."""

from __future__ import annotations

import math

import pytest
from litegate_lab import _stats


def test_percentile_interpolates_between_ranks() -> None:
    data = [15.0, 20.0, 35.0, 40.0, 50.0]
    assert _stats.percentile(data, 0) == 15.0
    assert _stats.percentile(data, 100) == 50.0
    assert _stats.percentile(data, 50) == 35.0
    # rank (5 - 1) * 0.4 = 1.6: 20 + 0.6 * (35 - 20) = 29
    assert _stats.percentile(data, 40) == pytest.approx(29.0)
    # unsorted input gives the same answer
    assert _stats.percentile([50.0, 15.0, 40.0, 35.0, 20.0], 40) == pytest.approx(29.0)


def test_percentile_of_one_to_hundred() -> None:
    data = [float(x) for x in range(1, 101)]
    assert _stats.percentile(data, 50) == pytest.approx(50.5)
    assert _stats.percentile(data, 90) == pytest.approx(90.1)
    assert _stats.percentile(data, 99) == pytest.approx(99.01)
    assert _stats.percentiles(data, [50, 99]) == {50: pytest.approx(50.5), 99: pytest.approx(99.01)}


def test_percentile_single_value_and_errors() -> None:
    assert _stats.percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError, match="no values"):
        _stats.percentile([], 50)
    with pytest.raises(ValueError, match=r"0\.\.100"):
        _stats.percentile([1.0], 101)
    with pytest.raises(ValueError, match="NaN"):
        _stats.median([1.0, math.nan])


def test_median_odd_and_even() -> None:
    assert _stats.median([3.0, 1.0, 2.0]) == 2.0
    assert _stats.median([4.0, 1.0, 3.0, 2.0]) == 2.5


def test_stddev_population_and_sample() -> None:
    data = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]
    assert _stats.stddev(data) == pytest.approx(2.0)
    assert _stats.stddev(data, sample=True) == pytest.approx(math.sqrt(32 / 7))
    with pytest.raises(ValueError, match="two values"):
        _stats.stddev([1.0], sample=True)


def test_cv_known_values() -> None:
    # mean 10, sample sd of [8, 10, 12] = 2 -> 20 %
    assert _stats.cv([8.0, 10.0, 12.0]) == pytest.approx(0.2)
    # a negative mean uses its absolute value
    assert _stats.cv([-8.0, -10.0, -12.0]) == pytest.approx(0.2)
    assert _stats.cv([5.0, 5.0, 5.0]) == 0.0
    assert _stats.cv([0.0, 0.0]) == 0.0


def test_cv_undefined() -> None:
    assert _stats.cv([3.0]) is None  # one run says nothing about noise
    assert _stats.cv([-1.0, 1.0]) is None  # spread around a zero mean


def test_summarise() -> None:
    s = _stats.summarise([12.0, 8.0, 10.0])
    assert (s.n, s.median, s.min, s.max, s.values) == (3, 10.0, 8.0, 12.0, (12.0, 8.0, 10.0))
    assert s.cv == pytest.approx(0.2)
    assert s.spread == pytest.approx(2.0)
    assert s.to_json()["values"] == [12.0, 8.0, 10.0]
    one = _stats.summarise([4.0])
    assert one.cv is None
    assert one.spread is None


def test_noise_band_and_flag() -> None:
    base = _stats.summarise([90.0, 100.0, 110.0])  # median 100, cv 10 %
    tight = _stats.summarise([104.0, 105.0, 106.0])  # median 105, cv ~1 %
    far = _stats.summarise([149.0, 150.0, 151.0])
    band = _stats.noise_band(base, tight)
    assert band == pytest.approx(2 * 10.0)  # k x the larger spread
    near = _stats.compare(base, tight)
    assert near.delta == pytest.approx(5.0)
    assert near.delta_pct == pytest.approx(5.0)
    assert near.within_noise is True
    assert near.verdict == "~"
    away = _stats.compare(base, far)
    assert away.within_noise is False
    assert away.verdict == "higher"
    assert _stats.compare(far, base).verdict == "lower"
    # a narrower band (k = 0.4: 4 ms) no longer covers the 5 ms difference
    assert _stats.compare(base, tight, k=0.4).within_noise is False


def test_noise_unknown_with_one_run() -> None:
    a = _stats.summarise([10.0])
    b = _stats.summarise([20.0])
    c = _stats.compare(a, b)
    assert c.band is None
    assert c.within_noise is None
    assert c.verdict == "?"
    assert _stats.within_noise(1.0, None) is None
    assert _stats.within_noise(1.0, 2.0) is True
    assert _stats.within_noise(-3.0, 2.0) is False


def test_compare_with_zero_baseline() -> None:
    c = _stats.compare(_stats.summarise([0.0, 0.0]), _stats.summarise([1.0, 1.0]))
    assert c.delta_pct is None
    assert c.band == 0.0
    assert c.within_noise is False
    assert c.to_json()["verdict"] == "higher"


def test_describe() -> None:
    d = _stats.describe([1.0, 2.0, 3.0, 4.0])
    assert d["count"] == 4
    assert d["mean"] == pytest.approx(2.5)
    assert d["p50"] == pytest.approx(2.5)
    assert d["p99"] == pytest.approx(3.97)
    assert d["max"] == 4.0
    assert d["stddev"] == pytest.approx(math.sqrt(1.25))
    assert _stats.describe([])["count"] == 0


def test_jain_and_rsd_known_values() -> None:
    # 2, 4, 6: sum 12, sum of squares 56 -> 12^2 / (3 x 56) = 6/7;
    # mean 4, population variance (4 + 0 + 4) / 3 = 8/3 -> RSD sqrt(8/3) / 4 = sqrt(1/6)
    assert _stats.jain([2, 4, 6]) == pytest.approx(6 / 7)
    assert _stats.rsd([2, 4, 6]) == pytest.approx(math.sqrt(1 / 6))
    assert _stats.jain([7]) == 1.0
    assert _stats.rsd([7]) == 0.0


def test_share_figures() -> None:
    assert _stats.share_figures([2, 4, 6]) == {
        "jain": pytest.approx(6 / 7),
        "rsd": pytest.approx(math.sqrt(1 / 6)),
        "share_min_of_mean": 0.5,
        "share_max_of_mean": 1.5,
    }
    assert _stats.share_figures([10, 10, 10, 10]) == {
        "jain": 1.0,
        "rsd": 0.0,
        "share_min_of_mean": 1.0,
        "share_max_of_mean": 1.0,
    }
    # one worker got everything: Jain 1/n, the others 0 x the mean
    assert _stats.share_figures([0, 0, 0, 8]) == {
        "jain": 0.25,
        "rsd": pytest.approx(math.sqrt(3)),
        "share_min_of_mean": 0.0,
        "share_max_of_mean": 4.0,
    }
    # nobody completed anything: no mean to set the shares against
    assert _stats.share_figures([0, 0]) == {
        "jain": 1.0,
        "rsd": 0.0,
        "share_min_of_mean": None,
        "share_max_of_mean": None,
    }
    assert set(_stats.share_figures([]).values()) == {None}


def test_overtakes_counts_later_arrivals_granted_first() -> None:
    # first come, first served: nobody is overtaken
    assert _stats.overtakes([1, 2, 3, 4], [10, 11, 12, 13]) == [0, 0, 0, 0]
    # the first to arrive is granted last: the three after it overtook it
    assert _stats.overtakes([1, 2, 3, 4], [13, 10, 11, 12]) == [3, 0, 0, 0]
    # reversed: each is overtaken by every one that came after it
    assert _stats.overtakes([1, 2, 3, 4], [4, 3, 2, 1]) == [3, 2, 1, 0]
    # a place in a commit order works as well as a time
    assert _stats.overtakes([5.0, 1.0, 3.0], [1, 3, 2]) == [0, 2, 1]
    # equal arrivals, or equal grants (one group commit), overtake nobody
    assert _stats.overtakes([1, 1, 2], [3, 2, 1]) == [1, 1, 0]
    assert _stats.overtakes([1, 2, 3], [5, 5, 4]) == [1, 1, 0]
    assert _stats.overtakes([], []) == []
    with pytest.raises(ValueError, match="3 arrivals but 2 grants"):
        _stats.overtakes([1, 2, 3], [1, 2])


def test_overtakes_agrees_with_counting_every_pair() -> None:
    import random

    rnd = random.Random(7)
    arrived = [rnd.randrange(50) for _ in range(300)]
    granted = [rnd.randrange(80) for _ in range(300)]
    slow = [
        sum(1 for j in range(300) if arrived[j] > arrived[i] and granted[j] < granted[i])
        for i in range(300)
    ]
    assert _stats.overtakes(arrived, granted) == slow


def test_overtake_figures() -> None:
    assert _stats.overtake_figures([1, 2, 3, 4], [13, 10, 11, 12]) == {
        "worst_overtakes": 3.0,
        "p99_overtakes": pytest.approx(2.91),
        "overtaken_share": 0.25,
    }
    assert _stats.overtake_figures([], []) == {
        "worst_overtakes": 0.0,
        "p99_overtakes": 0.0,
        "overtaken_share": 0.0,
    }
