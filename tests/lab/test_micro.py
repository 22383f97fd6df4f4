"""bench micro: configuration parsing and a tiny end-to-end run (structure and
invariants only; speed is what the benchmark reports, never what a test asserts)."""

from __future__ import annotations

import argparse
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from litegate_lab import _stats, _writers, micro


def test_parse_setting() -> None:
    assert micro.parse_setting("checkpoints=false, profile=aggressive,readers=3") == {
        "checkpoints": False,
        "profile": "aggressive",
        "readers": 3,
    }
    assert micro.parse_setting("timeout=2.5") == {"timeout": 2.5}
    assert micro.parse_setting("pragma.mmap_size=134217728,pragma.temp_store=FILE") == {
        "pragmas": {"mmap_size": 134217728, "temp_store": "FILE"}
    }
    with pytest.raises(ValueError, match="KEY=VALUE"):
        micro.parse_setting("checkpoints")


def _args(**kw: object) -> argparse.Namespace:
    base: dict[str, object] = {
        "quick": True,
        "runs": 1,
        "noise_k": 2.0,
        "ops": None,
        "compare": None,
        "only": None,
        "tail_inserts": None,
    }
    base.update(kw)
    return argparse.Namespace(**base)


def test_config_from_args() -> None:
    cfg = micro.config_from_args(_args())
    assert cfg.ops == 3_000
    assert cfg.parts == ("latency", "throughput", "tail", "handoff", "processes")
    assert cfg.handoffs == 300
    assert cfg.procs == (2, 4)
    cfg = micro.config_from_args(_args(compare=["checkpoints=true", "checkpoints=false"]))
    assert cfg.parts == ("latency",)
    with pytest.raises(ValueError, match="--ops"):
        micro.config_from_args(_args(ops=5))
    with pytest.raises(ValueError, match="KEY=VALUE"):
        micro.config_from_args(_args(compare=["nonsense", "x=1"]))
    cfg = micro.config_from_args(_args(proc_sides="sqlite3,bounded:64:0.002", procs="3,6"))
    assert (cfg.proc_sides, cfg.procs) == (("sqlite3", "bounded:64:0.002"), (3, 6))
    with pytest.raises(ValueError, match="bounded:K:T"):
        micro.config_from_args(_args(proc_sides="bounded:x"))
    with pytest.raises(ValueError, match="unknown side 'mutex'"):
        micro.config_from_args(_args(proc_sides="mutex"))
    assert micro.config_from_args(_args(procs="1,2")).procs == (1, 2)  # 1: each side alone
    assert micro.config_from_args(_args()).grant_log is False
    assert micro.config_from_args(_args(grant_log=True)).grant_log is True
    with pytest.raises(ValueError, match="at least 1"):
        micro.config_from_args(_args(procs="0"))


def test_tiny_run_end_to_end() -> None:
    cfg = micro.Config(
        ops=100,
        warmup=10,
        runs=2,
        tail_inserts=300,
        durable_writes=2,
        async_writes=1,
        thread_writes=20,
        handoffs=50,
        parts=("latency", "throughput", "tail", "handoff"),
    )
    result = micro.run(cfg)
    assert result["sides"] == ["sqlite3", "litegate"]
    assert len(result["runs"]) == 2
    for run in result["runs"]:
        for side in ("sqlite3", "litegate"):
            for w in micro.WORKLOADS:
                fig = run["latency"][side][w]
                assert fig["count"] == 100
                assert 0 < fig["p50"] <= fig["p90"] <= fig["p99"] <= fig["max"]
        thr = run["throughput"]
        assert thr["durable"]["writes"] == 64
        assert thr["asyncio"]["writes"] == 1000
        assert thr["threads"]["writes"] == 160
        assert thr["threads"]["litegate_per_s"] > 0
        for scenario, threads, each in (("durable", 32, 2), ("threads", 8, 20)):
            t = thr[scenario]
            for side in ("litegate", "baseline"):
                counts = t[f"{side}_counts"]
                assert len(counts) == threads  # one count per thread
                assert max(counts) == each  # frozen when the first thread had done its own
                assert t[f"{side}_jain"] == _stats.jain(counts)
                assert 1 / threads - 1e-12 <= t[f"{side}_jain"] <= 1.0
                assert t[f"{side}_rsd"] == _stats.rsd(counts) >= 0.0
                # the order figures, from the rowids of every write of the run
                assert 0 <= t[f"{side}_worst_overtakes"] <= threads * each - 1
                assert 0.0 <= t[f"{side}_overtaken_share"] <= 1.0
            assert 0.0 <= t["litegate_handoff_share"] <= 1.0
            # strict, the same run: every write there, in the same figures
            assert t["strict_per_s"] > 0
            assert len(t["strict_counts"]) == threads
            assert 0 <= t["strict_worst_overtakes"] <= threads * each - 1
            assert 0.0 <= t["strict_handoff_share"] <= 1.0
        assert "litegate_jain" not in thr["asyncio"]  # tasks, not threads: no counts
    s = result["summary"]["latency"]["point_query"]["p50"]
    assert s["sqlite3"]["n"] == 2
    assert s["compare"]["verdict"] in ("~", "lower", "higher")
    tail = result["tail"]
    assert tail["count"] == 300
    assert len(tail["slowest"]) == 5
    assert tail["sqlite3"]["count"] == 300  # the baseline: the same inserts, same run
    assert 0 < tail["sqlite3"]["p50"] <= tail["sqlite3"]["max"]
    alone = tail["outside_checkpoints"]  # 300 quick inserts: no checkpoint, or one
    assert alone is not None
    assert 0 < alone["count"] <= 300
    assert alone["max"] <= tail["max"]
    text = micro.render(result)
    for w in micro.WORKLOADS:
        assert w in text
    assert "durable" in text
    assert "JAIN lg / base" in text
    assert "WORST OVERTAKES lg / base" in text
    assert 'litegate fair="strict", the same run: durable ' in text
    jain_summary = result["summary"]["throughput"]["threads"]["litegate_jain"]
    assert jain_summary["n"] == 2
    assert 1 / 8 - 1e-12 <= jain_summary["median"] <= 1.0
    assert "asyncio" in text
    assert "single-insert tail" in text
    assert "plain sqlite3, the same inserts in the same run" in text
    for run in result["runs"]:
        hand = run["handoff"]
        assert hand["blocks"] == 100  # 2 processes x 50 write blocks
        assert hand["committed"] == 100  # every block's UPDATE landed
        assert hand["overlaps"] == 0  # never two holders at once
        assert 0 < hand["handoffs"] <= 99
        assert 0 <= hand["p50"] <= hand["p99"] <= hand["max"]
    assert "cross-process hand-off, 2 processes alternating" in text


def test_processes_part_runs_every_side() -> None:
    cfg = micro.Config(parts=("processes",), procs=(2,), proc_seconds=0.3, asker_trials=2)
    result = micro.run(cfg)
    (run,) = result["runs"]
    assert set(run["processes"]) == {f"2/{side}" for side in _writers.SIDES}
    for cell in run["processes"].values():
        assert cell["writes"] == cell["committed"] > 0  # every counted write is in the file
        assert len(cell["counts"]) == 2
        assert 0.5 <= cell["jain"] <= 1.0
        assert 0 < cell["p50_us"] <= cell["p99_us"] <= cell["max_us"]
    for side in ("strict", "bounded", "unfair"):
        assert run["processes"][f"2/{side}"]["grants"] >= 1
    assert set(run["asker"]) == set(micro.ASKER_SIDES)
    for a in run["asker"].values():
        assert 0 <= a["p50_ms"] <= a["max_ms"]
    text = micro.render(result)
    assert "P single-threaded processes" in text
    assert "one process asks for the gate" in text
    assert "targets for bounded" in text


def _processes_part(**kw: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The processes part alone, plain sqlite3 and bounded, one run: (the
    result, its run)."""
    cfg = micro.Config(
        parts=("processes",), proc_sides=("sqlite3", "bounded"), asker_trials=1, **kw
    )
    result = micro.run(cfg)
    (run,) = result["runs"]
    return result, run


def test_one_process_is_each_sides_ceiling_and_not_a_target() -> None:
    result, run = _processes_part(procs=(1,), proc_seconds=0.2)
    assert set(run["processes"]) == {"1/sqlite3", "1/bounded"}
    for cell in run["processes"].values():
        assert cell["writes"] == cell["committed"] > 0
        assert cell["counts"] == [cell["writes"]]
        assert cell["jain"] == 1.0
    # alone, nobody waits: no grant is forced and nothing is taken past anyone
    assert run["processes"]["1/bounded"]["handoff_share"] == 0.0
    assert run["processes"]["1/bounded"]["barge_share"] == 0.0
    text = micro.render(result)
    assert "max <= 25 ms: no bounded run with P >= 2" in text


def test_grant_log_checks_the_bounds_of_each_litegate_side() -> None:
    result, run = _processes_part(procs=(2,), proc_seconds=0.3, grant_log=True)
    assert "grant_log" not in run["processes"]["2/sqlite3"]  # no gate, no log
    cell = run["processes"]["2/bounded"]
    checked = cell["grant_log"]
    assert checked["grants"] >= cell["writes"]  # (+ any checkpointer turn)
    assert checked["overlaps"] == checked["out_of_order"] == checked["over_overtakes"] == 0
    assert checked["overtakes_bound"] in (-1, 16)  # the default budget's count, if any head slept
    assert result["summary"]["grant_log"]["2/bounded"]["grants"] == checked["grants"]
    text = micro.render(result)
    assert "grant log (--grant-log" in text
    assert "P=2 bounded: " in text
    assert "0 two holders at once" in text


def test_profile_counts_opcodes_per_call_and_names_the_functions() -> None:
    cfg = micro.config_from_args(_args(profile=True, ops=200))
    assert cfg.parts == ("profile",)
    result = micro.run(cfg)
    prof = result["profile"]
    assert set(prof) == set(micro.WORKLOADS)
    for p in prof.values():
        assert p["opcodes_per_call"] > 0
        assert abs(sum(p["opcodes"].values()) - p["opcodes_per_call"]) < 1e-6
        assert any("execute" in site or "query" in site for site in p["time"])
    assert any(site.startswith("_database.py:") for site in prof["noop_execute"]["opcodes"])
    assert "opcodes per call" in micro.render(result)


def test_jain_and_rsd() -> None:
    assert _stats.jain([5, 5, 5, 5]) == 1.0
    assert _stats.jain([10, 0, 0, 0]) == 0.25
    assert _stats.rsd([5, 5]) == 0.0
    assert abs(_stats.rsd([1, 3]) - 0.5) < 1e-12


def test_compare_mode_runs_two_configurations() -> None:
    cfg = micro.Config(
        ops=100, warmup=10, compare=("checkpoints=true", "checkpoints=false"), parts=("latency",)
    )
    result = micro.run(cfg)
    assert result["sides"] == ["A: checkpoints=true", "B: checkpoints=false"]
    assert "throughput" not in result["summary"]
    assert "B/A p50" in micro.render(result)


def test_the_commit_order_is_read_from_the_rowids(tmp_path: Path) -> None:
    path = str(tmp_path / "order.db")
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE w(id INTEGER PRIMARY KEY, v INTEGER)")
        # asked at 10, 20, 30, 40; committed 30, 10, 40, 20: the write asked
        # at 20 saw two later ones commit first, the one asked at 10 one
        conn.executemany(micro.INSERT_ASKED, [(30,), (10,), (40,), (20,)])
        conn.commit()
    assert micro._order(path, "x") == {
        "x_worst_overtakes": 2.0,
        "x_p99_overtakes": pytest.approx(1.97),
        "x_overtaken_share": 0.5,
    }
