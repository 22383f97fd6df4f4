"""Wait-time histograms with bounded memory, for ``Database.stats()``."""

from __future__ import annotations

import math
import threading

# 16 buckets per power of two: a reported percentile is within ~2.2 % of the
# true value, and a year of waits still fits in a few hundred counters.
_SUB = 16


def nearest_rank(q: float, n: int) -> int:
    """The rank (1..n) of the ``q``-th percentile (0..100) of ``n`` sorted
    values: the nearest-rank rule, the one every percentile litegate
    reports uses."""
    return min(n, max(1, math.ceil(q / 100.0 * n)))


class WaitHistogram:
    """Counts waits by duration. ``record`` is cheap and thread-safe.

    Waits that did not block at all are only counted (``immediate``); they
    take part in the percentiles as zero.
    """

    __slots__ = ("_buckets", "_lock", "count", "immediate", "max", "timeouts", "total")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buckets: dict[int, int] = {}
        self.count = 0
        self.immediate = 0
        self.timeouts = 0
        self.max = 0.0
        self.total = 0.0

    def record_immediate(self) -> None:
        # A plain int increment: losing one under a rare race costs nothing
        # that matters and keeps the uncontended path free of a lock.
        self.immediate += 1

    def record(self, seconds: float) -> None:
        with self._lock:
            self.record_exclusive(seconds)

    def record_exclusive(self, seconds: float) -> None:
        """``record`` for a caller that already excludes every other recorder
        (the write gate's holder): same result, no lock."""
        us = seconds * 1e6
        idx = -1 if us < 1.0 else int(math.log2(us) * _SUB)
        self._buckets[idx] = self._buckets.get(idx, 0) + 1
        self.count += 1
        self.total += seconds
        if seconds > self.max:
            self.max = seconds

    def record_timeout(self) -> None:
        with self._lock:
            self.timeouts += 1

    def percentile(self, q: float) -> float:
        """The ``q``-th percentile (0..100) in seconds, immediate waits as zero."""
        with self._lock:
            buckets = sorted(self._buckets.items())
            n_immediate = self.immediate
            n = self.count + n_immediate
            biggest = self.max
        if n == 0:
            return 0.0
        rank = nearest_rank(q, n)
        if rank <= n_immediate:
            return 0.0
        seen = n_immediate
        for idx, c in buckets:
            seen += c
            if seen >= rank:
                if idx < 0:
                    return 0.0
                # middle of the bucket, never above the largest wait seen
                return min(2 ** ((idx + 0.5) / _SUB) / 1e6, biggest)
        return biggest

    def summary(self) -> dict[str, float | int]:
        """count, immediate, timeouts, and p50/p99/max in milliseconds."""
        return {
            "count": self.count + self.immediate,
            "immediate": self.immediate,
            "timeouts": self.timeouts,
            "p50_ms": round(self.percentile(50) * 1e3, 3),
            "p99_ms": round(self.percentile(99) * 1e3, 3),
            "max_ms": round(self.max * 1e3, 3),
        }
