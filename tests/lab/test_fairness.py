"""``bench fairness`` end to end with tiny request counts and hold times.
Assertions are about accounting (every request is a checkout or a timeout),
never about speed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from litegate_lab import fairness
from litegate_lab.fairness import Config


@pytest.fixture(scope="module")
def result() -> dict[str, Any]:
    cfg = Config(threads=(1, 4), requests=40, pool_size=2, hold_seconds=0.001, timeout=10.0)
    return fairness.run(cfg)


def test_every_request_is_accounted_for(result: dict[str, Any]) -> None:
    raw = result["raw"]
    assert {(r["pool"], r["threads"]) for r in raw} == {
        (p, n) for p in fairness.POOLS for n in (1, 4)
    }
    for r in raw:
        assert r["checkouts"] + r["timeouts"] == r["requests"] == 40
        assert len(r["waits_ms"]) == r["checkouts"]
        assert len(r["timeout_waits_ms"]) == r["timeouts"]
        assert len(r["holds_ms"]) == r["checkouts"]
        assert sum(r["per_thread"]["checkouts"]) == r["checkouts"]
        assert len(r["per_thread"]["checkouts"]) == r["threads"]
        assert r["failures"] == []
        assert r["timeouts"] == 0  # a 10 s timeout is never reached here
        f = r["figures"]
        assert 0 <= f["p50_ms"] <= f["p90_ms"] <= f["p99_ms"] <= f["max_ms"]
        assert f["throughput"] > 0
        assert f["hold_p50_ms"] >= 1.0  # time.sleep(0.001) never returns early
        # order: a thread alone is never overtaken; nobody by more than the others
        assert 0 <= f["worst_overtakes"] <= r["checkouts"] - 1
        assert 0.0 <= f["overtaken_share"] <= 1.0
        if r["threads"] == 1:
            assert f["worst_overtakes"] == f["overtaken_share"] == 0


def test_summary_and_targets(result: dict[str, Any]) -> None:
    assert len(result["summary"]) == 8
    assert all(e["requests_accounted"] for e in result["summary"])
    assert result["targets"] == []  # the target is for N = 50, not run here
    assert result["config"]["limit_per_s"] == pytest.approx(2000.0)
    cmps = result["comparisons"]
    assert {c["baseline_name"] for c in cmps} == {"queue", "sqlalchemy", "litegate-unfair"}
    assert {c["figure"] for c in cmps} == {"p99_ms", "throughput"}


def test_render(result: dict[str, Any]) -> None:
    text = fairness.render(result)
    for title in fairness.POOL_TITLES.values():
        assert title in text
    assert re.search(
        r"CHECKOUTS/S\s+\|\s+JAIN\s+\|\s+OVERTAKEN\s+\|\s+WORST OVERTAKES\s+\|\s+% OF LIMIT", text
    )
    assert "OVERTAKEN: checkouts that a thread arriving later got ahead of" in text
    assert "not checked" in text
    for r in result["raw"]:  # how evenly the threads shared the checkouts
        shares = [c + t for c, t in zip(r["per_thread"]["checkouts"],
                                        r["per_thread"]["timeouts"], strict=True)]  # fmt: skip
        assert r["figures"]["jain"] == pytest.approx(
            sum(shares) ** 2 / (len(shares) * sum(x * x for x in shares))
        )


def test_charts(result: dict[str, Any], tmp_path: Path) -> None:
    paths = fairness.charts(result, tmp_path)
    names = sorted(p.name for p in paths)
    assert names == sorted([*(f"fairness-{p}.png" for p in fairness.POOLS), "fairness-p99.png"])
    for p in paths:
        assert p.read_bytes()[:4] == b"\x89PNG"


def test_timeouts_are_counted_and_the_thread_goes_on() -> None:
    # one connection held 60 ms, three threads, 10 ms patience: waiters time out
    cfg = Config(threads=(3,), requests=6, pool_size=1, hold_seconds=0.06, timeout=0.01)
    res = fairness.run(cfg)
    for r in res["raw"]:
        assert r["timeouts"] >= 1, r["pool"]
        assert r["checkouts"] + r["timeouts"] == 6
        assert all(w >= 9.0 for w in r["timeout_waits_ms"])  # waited ~ the timeout
        assert r["failures"] == []


def test_target_check_at_fifty_threads() -> None:
    summary = [
        {
            "pool": "litegate",
            "threads": 50,
            "figures": {
                "timeouts": {"median": 0.0},
                "p50_ms": {"median": 100.0},
                "p99_ms": {"median": 110.0},
                "pct_of_limit": {"median": 96.0},
            },
        }
    ]
    ts = fairness.targets(Config(), summary)
    assert [t["met"] for t in ts] == [True, True, False]


def test_unknown_pool() -> None:
    with pytest.raises(ValueError, match="unknown pool"):
        fairness.make_pool("nope", "/nonexistent", 1, 1.0)
