"""Statistics for the lab: percentiles of one run, and how far to trust a
figure across runs.

The method is seed 002's: never trust one run's p99 or max. Repeat the run,
take the *median of each figure across runs*, and report its coefficient of
variation (CV) next to it. A difference between two configurations that is
smaller than the noise band (``k`` x the larger CV, default ``k = 2``) is
flagged "within noise" rather than reported as a win or a loss.

Everything here is plain Python on lists of floats (no numpy), so the
results are exactly reproducible and the unit tests can check them by hand.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

NOISE_K = 2.0
"""Default width of the noise band, in coefficients of variation."""


def _checked(values: Sequence[float]) -> list[float]:
    if len(values) == 0:
        raise ValueError("no values: a statistic of nothing is undefined")
    out = [float(v) for v in values]
    if any(math.isnan(v) for v in out):
        raise ValueError("NaN among the values")
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``values``.

    Linear interpolation between the two closest ranks (the definition
    numpy, R type 7 and Excel's PERCENTILE.INC use): p0 is the minimum, p100
    the maximum, p50 the median.
    """
    return _percentile_sorted(sorted(_checked(values)), q)


def _percentile_sorted(data: Sequence[float], q: float) -> float:
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be within 0..100, got {q!r}")
    pos = (len(data) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def percentiles(values: Sequence[float], qs: Sequence[float]) -> dict[float, float]:
    """Several percentiles with one sort."""
    data = sorted(_checked(values))
    return {q: _percentile_sorted(data, q) for q in qs}


def median(values: Sequence[float]) -> float:
    return percentile(values, 50.0)


def mean(values: Sequence[float]) -> float:
    data = _checked(values)
    return math.fsum(data) / len(data)


def stddev(values: Sequence[float], *, sample: bool = False) -> float:
    """Population standard deviation (``sample=True``: divide by n - 1)."""
    data = _checked(values)
    if sample and len(data) < 2:
        raise ValueError("a sample standard deviation needs at least two values")
    m = math.fsum(data) / len(data)
    ss = math.fsum((v - m) ** 2 for v in data)
    return math.sqrt(ss / (len(data) - 1 if sample else len(data)))


def cv(values: Sequence[float]) -> float | None:
    """Coefficient of variation across runs: sample standard deviation over
    the absolute mean, as a fraction (0.1 = 10 %).

    ``None`` when it is undefined: fewer than two runs, or a mean of zero
    with a non-zero spread. Identical values give 0.0 (also when all are 0).
    """
    data = _checked(values)
    if len(data) < 2:
        return None
    sd = stddev(data, sample=True)
    if sd == 0.0:
        return 0.0
    m = abs(math.fsum(data) / len(data))
    if m == 0.0:
        return None
    return sd / m


@dataclass(frozen=True)
class Summary:
    """One figure (say, p99 of one cell) across runs."""

    n: int
    median: float
    cv: float | None
    min: float
    max: float
    values: tuple[float, ...]

    @property
    def spread(self) -> float | None:
        """The CV in the figure's own unit (CV x |median|): one run's typical
        distance from the median."""
        return None if self.cv is None else self.cv * abs(self.median)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["values"] = list(self.values)
        return d


def summarise(values: Sequence[float]) -> Summary:
    """Median, CV, min and max of one figure's per-run values."""
    data = _checked(values)
    return Summary(
        n=len(data),
        median=median(data),
        cv=cv(data),
        min=min(data),
        max=max(data),
        values=tuple(data),
    )


def noise_band(baseline: Summary, candidate: Summary, k: float = NOISE_K) -> float | None:
    """``k`` x the larger run-to-run spread of the two, in the figure's unit;
    ``None`` when neither side has a CV (one run each)."""
    spreads = [s for s in (baseline.spread, candidate.spread) if s is not None]
    if not spreads:
        return None
    return k * max(spreads)


def within_noise(delta: float, band: float | None) -> bool | None:
    """True when ``|delta|`` is smaller than the noise band; ``None`` when
    the band is unknown (a single run cannot tell noise from signal)."""
    if band is None:
        return None
    return abs(delta) < band


@dataclass(frozen=True)
class Comparison:
    """``candidate`` against ``baseline`` for one figure, medians across runs."""

    baseline: float
    candidate: float
    delta: float  # candidate - baseline
    delta_pct: float | None  # of the baseline; None when the baseline is 0
    band: float | None  # noise band, same unit as the figure
    within_noise: bool | None

    @property
    def verdict(self) -> str:
        """``"~"`` within noise, ``"?"`` unknown, else ``"lower"`` / ``"higher"``."""
        if self.within_noise is None:
            return "?"
        if self.within_noise:
            return "~"
        return "lower" if self.delta < 0 else "higher"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "verdict": self.verdict}


def compare(baseline: Summary, candidate: Summary, k: float = NOISE_K) -> Comparison:
    delta = candidate.median - baseline.median
    band = noise_band(baseline, candidate, k)
    return Comparison(
        baseline=baseline.median,
        candidate=candidate.median,
        delta=delta,
        delta_pct=None if baseline.median == 0 else 100.0 * delta / abs(baseline.median),
        band=band,
        within_noise=within_noise(delta, band),
    )


def describe(values: Sequence[float]) -> dict[str, float]:
    """The per-run figures of a latency sample: count, mean, p50, p90, p99,
    max and population standard deviation. Empty input gives zeros."""
    if len(values) == 0:
        return {
            "count": 0,
            "mean": 0.0,
            "p50": 0.0,
            "p90": 0.0,
            "p99": 0.0,
            "max": 0.0,
            "stddev": 0.0,
        }
    data = sorted(_checked(values))
    return {
        "count": len(data),
        "mean": mean(data),
        "p50": _percentile_sorted(data, 50),
        "p90": _percentile_sorted(data, 90),
        "p99": _percentile_sorted(data, 99),
        "max": data[-1],
        "stddev": stddev(data),
    }


def jain(counts: Sequence[float]) -> float:
    """Jain's fairness index of per-worker counts: 1.0 when every worker got
    the same share, 1/n when one worker got everything."""
    total = sum(counts)
    squares = sum(c * c for c in counts)
    return (total * total) / (len(counts) * squares) if squares else 1.0


def rsd(counts: Sequence[float]) -> float:
    """Relative standard deviation of per-worker counts (0: equal shares)."""
    mean_ = sum(counts) / len(counts) if counts else 0.0
    if not mean_:
        return 0.0
    return math.sqrt(sum((c - mean_) ** 2 for c in counts) / len(counts)) / mean_


def share_figures(counts: Sequence[float]) -> dict[str, float | None]:
    """How evenly workers shared the work, from each worker's count of what
    it completed: Jain's index, the RSD, and the smallest and largest count
    over their mean (both 1.0 when every worker did as much; "every share
    within 1.5 x of the mean" is ``share_min_of_mean >= 1 / 1.5`` and
    ``share_max_of_mean <= 1.5``).

    Everything is ``None`` without a worker, and the two shares of the mean
    are ``None`` when no worker completed anything (no mean to divide by).
    """
    if len(counts) == 0:
        return {"jain": None, "rsd": None, "share_min_of_mean": None, "share_max_of_mean": None}
    mean_ = math.fsum(counts) / len(counts)
    return {
        "jain": jain(counts),
        "rsd": rsd(counts),
        "share_min_of_mean": min(counts) / mean_ if mean_ else None,
        "share_max_of_mean": max(counts) / mean_ if mean_ else None,
    }


def overtakes(arrived: Sequence[float], granted: Sequence[float]) -> list[int]:
    """For each request, how many requests that arrived after it were
    granted before it: 0 for every request of a first-come-first-served
    lock, as many as the whole run for a waiter that a greedy lock left
    behind. ``arrived[i]`` is when request i asked, ``granted[i]`` when
    (or in which place) it got what it asked for; equal arrivals or equal
    grants overtake nobody.

    Counted with a Fenwick tree over the arrival ranks of the requests
    granted so far, in grant order: O(n log n), for a whole run's log."""
    n = len(arrived)
    if len(granted) != n:
        raise ValueError(f"{n} arrivals but {len(granted)} grants")
    ranks = {a: r for r, a in enumerate(sorted(set(arrived)), start=1)}
    tree = [0] * (len(ranks) + 1)
    out = [0] * n
    order = sorted(range(n), key=granted.__getitem__)
    seen = 0
    start = 0
    while start < n:
        end = start  # requests granted at the same moment: none overtakes another
        while end < n and granted[order[end]] == granted[order[start]]:
            end += 1
        for i in order[start:end]:
            r, at_or_before = ranks[arrived[i]], 0
            while r:
                at_or_before += tree[r]
                r -= r & -r
            out[i] = seen - at_or_before
        for i in order[start:end]:
            r = ranks[arrived[i]]
            while r < len(tree):
                tree[r] += 1
                r += r & -r
        seen += end - start
        start = end
    return out


def overtake_figures(arrived: Sequence[float], granted: Sequence[float]) -> dict[str, float]:
    """The worst and the 99th percentile of :func:`overtakes`, and the share
    of requests that anybody arrived later overtook at all."""
    counts = overtakes(arrived, granted)
    if not counts:
        return {"worst_overtakes": 0.0, "p99_overtakes": 0.0, "overtaken_share": 0.0}
    return {
        "worst_overtakes": float(max(counts)),
        "p99_overtakes": percentile([float(c) for c in counts], 99),
        "overtaken_share": sum(1 for c in counts if c) / len(counts),
    }
