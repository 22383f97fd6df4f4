"""``bench queue`` (seed 004) in tiny configurations: every scenario and side
runs for real (spawned processes, fresh databases), and the assertions are
about accounting (every job put is processed exactly once or still queued),
the n/a cells and the report's shape, never about speed."""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing as mp
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from litegate_lab import _stats
from litegate_lab import queue as bench
from litegate_lab.queue import _config, _frames, _render, _run, _sides
from litegate_lab.queue._child import Role, Runner, Spec, _merge
from litegate_lab.queue._config import Combined, Config

from litegate import _grantlog
from litegate.__main__ import main

PNG = b"\x89PNG\r\n\x1a\n"

SEED_SCENARIOS = ("single", "concurrent", "mixed", "stress", "long", "e2e")
"""The scenarios every side runs (frames and the end-to-end-only sides have
tests of their own, below, that keep this module's fixture small)."""
SEED_SIDES = tuple(s for s in _sides.SIDES if s not in _sides.E2E_ONLY_SIDES)
GATED = ("litegate", "litegate-bounded", "litegate-combined")
"""The sides whose processes share litegate's write gate."""

TINY = Config(
    scenarios=SEED_SCENARIOS,
    sides=SEED_SIDES,
    profiles=("balanced",),
    long_profiles=("balanced",),
    e2e_profiles=("balanced",),
    single_puts=40,
    concurrent_total=60,
    concurrent_workers=(2,),
    mixed_seconds=0.3,
    mixed_writers=1,
    mixed_claimers=1,
    stress_workers=(2,),
    stress_seconds=0.3,
    long_seconds=0.4,
    long_sample_s=0.05,
    e2e_jobs=300,
    e2e_producers=2,
    e2e_workers=2,
    e2e_threads=2,
    batch=20,
    cell_timeout=30.0,
)


@pytest.fixture(scope="module")
def result() -> dict[str, Any]:
    return bench.run(TINY)


def _cells(result: dict[str, Any], scenario: str) -> list[dict[str, Any]]:
    return [r for r in result["raw"] if r["scenario"] == scenario and not r["na"]]


def test_every_cell_ran_cleanly_and_accounts_for_every_job(result: dict[str, Any]) -> None:
    real = [r for r in result["raw"] if not r["na"]]
    # 7 sides x (single, concurrent, mixed, stress, long) + e2e: 4 batched + 6 one-job
    assert len(real) == 7 * 5 + 4 + 6
    for r in real:
        a = r["accounting"]
        assert r["setup_errors"] == [], r
        assert a["reports"] == a["processes"], r
        assert a["lost"] == 0, r
        assert a["extra"] == 0, r
        assert a["duplicates"] == 0, r
        assert a["unknown"] == 0, r
        assert a["left_in_queue"] == a["put"] - a["processed"], r


def test_every_side_ran_every_scenario(result: dict[str, Any]) -> None:
    for scenario in ("single", "concurrent", "mixed", "stress", "long"):
        assert {r["side"] for r in _cells(result, scenario)} == set(SEED_SIDES)


def test_fixed_amounts_of_work_are_done_exactly(result: dict[str, Any]) -> None:
    for r in _cells(result, "single"):
        assert r["accounting"]["put"] == 40
        assert r["figures"]["ops"] == 40
        assert r["figures"]["errors"] == 0
    for r in _cells(result, "concurrent"):
        assert r["accounting"]["put"] == 60
        assert r["figures"]["ops"] + r["figures"]["errors"] == 60


def test_e2e_processes_exactly_the_jobs_put(result: dict[str, Any]) -> None:
    cells = _cells(result, "e2e")
    assert {(r["variant"], r["side"]) for r in cells} == {
        ("batched", "bare"),
        ("batched", "litegate"),
        ("batched", "litegate-bounded"),
        ("batched", "litegate-combined"),
        ("one-job", "seed"),
        ("one-job", "litegate"),
        ("one-job", "litegate-bounded"),
        ("one-job", "litegate-combined"),
        ("one-job", "huey"),
        ("one-job", "litequeue"),
    }
    for r in cells:
        a, f = r["accounting"], r["figures"]
        assert a["put"] == a["processed"] == 300, r
        assert a["left_in_queue"] == 0
        assert f["jobs"] == 300
        assert sum(f["shares"]) == 300
        assert len(f["shares"]) == 2  # one share per worker process
        assert not f["timed_out"]
        # how evenly the 2 worker processes shared the jobs, from their shares
        assert f["jain"] == _stats.jain(f["shares"])
        assert 0.5 <= f["jain"] <= 1.0  # 1/n .. 1 for n = 2
        assert f["rsd"] == _stats.rsd(f["shares"]) >= 0.0
        assert f["share_min_of_mean"] == min(f["shares"]) / 150
        assert f["share_max_of_mean"] == max(f["shares"]) / 150


def test_sides_without_a_batch_api_are_na(result: dict[str, Any]) -> None:
    na = {r["side"]: r["na"] for r in result["raw"] if r["na"]}
    assert set(na) == {"seed", "huey", "litequeue"}
    assert all(reason.startswith("n/a: ") for reason in na.values())
    for e in result["summary"]:
        if e["na"]:
            assert e["variant"] == "batched"


def test_time_bounded_scenarios(result: dict[str, Any]) -> None:
    for r in _cells(result, "mixed") + _cells(result, "long"):
        a = r["accounting"]
        assert a["put"] > 0
        assert a["processed"] <= a["put"]
        assert r["figures"]["puts"] == a["put"]
    for r in _cells(result, "stress"):
        # every cycle puts one job and claims one: never more claims than puts
        assert 0 < r["figures"]["ops"] <= r["accounting"]["put"]
        # 2 worker processes: Jain's index over their cycles within 1/2 .. 1
        assert 0.5 <= r["figures"]["jain"] <= 1.0
        assert r["figures"]["rsd"] >= 0.0
    for r in _cells(result, "mixed") + _cells(result, "long"):
        # 1 writer and 1 claimer process: each role's shares are trivially equal
        f = r["figures"]
        assert (f["writer_jain"], f["writer_rsd"]) == (1.0, 0.0)
        if f["claims"]:
            assert (f["claimer_jain"], f["claimer_rsd"]) == (1.0, 0.0)
    for r in _cells(result, "single") + _cells(result, "concurrent"):
        assert "jain" not in r["figures"]  # fixed counts per process: nothing to measure
    for r in _cells(result, "long"):
        times = [t for t, _ in r["wal_series"]]
        assert len(times) >= 3
        assert times == sorted(times)
        assert r["figures"]["wal_peak_bytes"] == max(b for _, b in r["wal_series"])


def test_litegate_sees_no_errors(result: dict[str, Any]) -> None:
    for r in result["raw"]:
        if r["side"] in GATED:
            assert r["figures"]["errors"] == 0, r
            assert r["errors_seen"] == {}
            assert len(r["details"]) == r["accounting"]["processes"]  # gate stats per process
    # the targets are reported, never asserted: only that they are there
    names = [t["target"] for t in result["targets"]]
    assert any(n.startswith("litegate: 0 errors") for n in names)
    assert any(n.startswith("e2e batched") for n in names)
    assert "e2e batched (balanced): litegate peak WAL <= 2 x bare batched's" in names
    shares = [t for t in result["targets"] if "worker shares within 1.5x" in t["target"]]
    assert [t["target"].split(":")[0] for t in shares] == [
        "e2e batched (balanced)",
        "e2e one-job (balanced)",
    ]
    assert any(n.startswith("long (balanced)") for n in names)


def test_litegate_cells_have_the_gates_own_figures(result: dict[str, Any]) -> None:
    for r in result["raw"]:
        if r["na"]:
            continue
        f = r["figures"]
        assert "grant_log" not in r  # off unless asked for
        if r["side"] not in GATED:  # no write gate, no gate figures
            assert not {"gate_grants", "handoff_share", "barge_share"} & set(f), r
            continue
        # every cell writes, and a process's first write is a grant across processes
        assert f["gate_grants"] > 0, r
        assert 0.0 <= f["handoff_share"] <= 1.0, r  # a hand-off is a release of a grant
        assert f["barge_share"] >= 0.0, r
    gated = [e for e in result["summary"] if _run.has_gate("sqlite", e["side"]) and not e["na"]]
    assert {e["side"] for e in gated} == {"litegate", "litegate-bounded", "litegate-combined"}
    for e in gated:
        assert e["figures"]["handoff_share"]["n"] == 1
    text = bench.render(result)
    heads = [line for line in text.splitlines() if line.startswith("| ") and "Throughput" in line]
    heads += [line for line in text.splitlines() if line.startswith("| Row ")]
    # in the tables of mixed, stress, long and e2e (not single's and concurrent's)
    assert sum("| Forced hand-offs " in line for line in heads) == 4
    assert "grant log (--grant-log" not in text


def test_grant_log_checks_the_bounds_of_each_litegate_cell() -> None:
    cfg = dataclasses.replace(
        TINY,
        scenarios=("stress", "e2e"),
        sides=("bare", "litegate", "litegate-bounded"),
        e2e_jobs=200,
        grant_log=True,
    )
    caller = _grantlog.active()
    result = bench.run(cfg)
    assert _grantlog.active() is caller  # the caller's own log (if any) is left as it was
    lg = [r for r in result["raw"] if r["side"] in ("litegate", "litegate-bounded")]
    assert {(r["scenario"], r["variant"], r["side"]) for r in lg} == {
        (scenario, variant, side)
        for scenario, variant in (("stress", "2 workers"), ("e2e", "batched"), ("e2e", "one-job"))
        for side in ("litegate", "litegate-bounded")
    }
    for r in result["raw"]:
        if r["side"] not in ("litegate", "litegate-bounded"):
            assert "grant_log" not in r  # no gate, no log
            continue
        checked = r["grant_log"]
        assert r["setup_errors"] == [], r
        assert checked["overlaps"] == checked["out_of_order"] == checked["over_overtakes"] == 0
        # every grant across processes goes through a logged grant of the
        # process's gate (a process's own threads may pass it on unlogged by
        # the counters)
        assert checked["grants"] >= r["figures"]["gate_grants"] > 0
        if r["side"] == "litegate":
            assert checked["overtakes_bound"] in (-1, 0)  # strict's budget, if any head slept
        else:  # bounded's 16 (or strict's 0: the checkpointer's turn waits with a strict budget)
            assert checked["overtakes_bound"] in (-1, 0, 16)
        entry = _run.find(result["summary"], r["scenario"], r["profile"], r["variant"], r["side"])
        assert entry is not None
        assert entry["grant_log"] == checked  # one run: the sums and maxima are its own
    text = bench.render(result)
    assert text.count("grant log (--grant-log") == 2  # after the stress and the e2e tables
    assert "Balanced 2 workers litegate: " in text
    assert "Balanced one-job litegate: " in text
    assert "Balanced one-job litegate-bounded: " in text
    assert "0 two holders at once, 0 out of ticket order, 0 overtaken past the bound" in text


def test_grant_logs_of_several_runs_add_up() -> None:
    def check(grants: int, worst: int, bound: int) -> dict[str, int]:
        return {"grants": grants, "overlaps": 0, "worst_overtakes": worst, "overtakes_bound": bound}

    raw: list[dict[str, Any]] = [
        {
            "run": n,
            "scenario": "stress",
            "profile": "balanced",
            "side": "litegate",
            "variant": "2 workers",
            "na": None,
            "figures": {"gate_grants": float(grants)},
            "errors_seen": {},
            "setup_errors": [],
            "grant_log": check(grants, worst, bound),
        }
        for n, (grants, worst, bound) in enumerate([(10, 1, 0), (30, 0, -1)], 1)
    ]
    (entry,) = _run.summarise(raw)
    assert entry["grant_log"] == check(40, 1, 0)
    assert entry["figures"]["gate_grants"]["median"] == 20.0


def test_render_uses_the_seeds_tables(result: dict[str, Any]) -> None:
    text = bench.render(result)
    for title in (
        "### Scenario 1: Single Writer Baseline",
        "### Scenario 2: Concurrent Writers (2 Workers)",
        "### Scenario 3: Mixed Workload",
        "### Scenario 4: Stress Test",
        "### Scenario 5: Long-Running",
        "### End to end",
        "| Configuration | Side",
        "Throughput (tasks/sec)",
        "SQLITE_BUSY Errors",
        "Write Throughput",
        "Claim Throughput",
        "n/a: no batch API",
        "no lease/ack: dequeue deletes",
        "Breaking points:",
        "| Worker share min/max | Jain  | RSD",
        "Jain W / C",
        "Targets (litegate",
        "**Balanced**",
    ):
        assert title in text, title
    assert "/60" in text  # BUSY as n/total, like the seed's 12/1000


def test_charts(result: dict[str, Any], tmp_path: Path) -> None:
    paths = bench.charts(result, tmp_path)
    assert sorted(p.name for p in paths) == [
        "queue-stress-balanced.png",
        "queue-throughput.png",
        "queue-wal-balanced.png",
    ]
    for p in paths:
        assert p.read_bytes()[:8] == PNG


def test_runs_give_medians_and_cvs() -> None:
    cfg = Config(
        scenarios=("single",),
        sides=("bare", "litegate"),
        profiles=("balanced",),
        runs=2,
        single_puts=20,
    )
    result = bench.run(cfg)
    assert len(result["raw"]) == 4
    for e in result["summary"]:
        assert e["runs"] == 2
        assert e["figures"]["throughput"]["n"] == 2
        assert e["figures"]["throughput"]["cv"] is not None
    assert "CV tput" in bench.render(result)


# -- pieces -----------------------------------------------------------------------


def test_plan_sizes() -> None:
    cells = _run.plan(Config())
    by = {s: [c for c in cells if c.scenario == s] for s in _config.SCENARIOS}
    assert len(by["single"]) == 3 * 7
    assert len(by["concurrent"]) == 3 * 3 * 7
    assert [len(c.roles) for c in by["concurrent"][::7]][:3] == [2, 4, 8]
    assert sum(r.count for r in by["concurrent"][0].roles) == 4_000
    assert len(by["stress"]) == 3 * 5 * 7
    assert len(by["long"]) == 7  # balanced only by default
    assert {c.seconds for c in by["long"]} == {60.0}
    batched = [c for c in by["e2e"] if c.variant == "batched"]
    assert [c.side for c in batched if c.na is None] == [
        "bare",
        "litegate",
        "litegate-worker",
        "litegate-bounded",
        "litegate-combined",
    ]
    one = [c for c in by["e2e"] if c.variant == "one-job"]
    assert [c.side for c in one] == [
        "seed",
        "litegate",
        "litegate-worker",
        "litegate-bounded",
        "litegate-combined",
        "huey",
        "litequeue",
    ]
    seed, lg, worker, bounded = one[0], one[1], one[2], one[3]
    assert {r.threads for r in seed.roles} == {1}
    assert {r.threads for r in lg.roles} == {r.threads for r in bounded.roles} == {8}
    assert worker.roles == lg.roles  # the same rows; its consumers are its own Worker
    assert sum(r.count for r in lg.roles if r.kind == "produce") == 40_000
    # frames: one process per side that has single-job operations of its own
    assert [c.side for c in by["frames"]] == [s for s in _sides.SIDES if s != "litegate-worker"]
    assert {c.profile for c in by["frames"]} == {"balanced"}  # the e2e rows' profiles
    assert {c.roles for c in by["frames"]} == {(Role("frames", 0, count=400, backlog=3_000),)}
    assert sum(1 for r in lg.roles if r.kind == "consume") == 4


def test_the_litegate_sides_open_their_database_with_each_policy(tmp_path: Path) -> None:
    from litegate.queue import Queue

    for name, fair in (("litegate", Queue.FAIR), ("litegate-bounded", True)):
        side = _sides.open_sqlite_side(name, str(tmp_path / f"{name}.db"), "balanced")
        try:
            assert isinstance(side, _sides.LitegateSide)
            assert side.db.fair == fair
            assert side.db.stats()["gate"]["policy"] == (
                "strict" if fair == "strict" else "bounded"
            )
        finally:
            side.close()
    assert Queue.FAIR == "strict"  # (else the two sides are one policy: see Queue.FAIR)
    assert _run.has_gate("sqlite", "litegate-bounded")
    assert not _run.has_gate("postgres", "litegate")
    assert "litegate-bounded" in _sides.BATCH_SIDES
    assert "fair=True" in _sides.side_title("sqlite", "litegate-bounded")


def test_quick_plans_the_bounded_side_in_the_e2e_rows_only() -> None:
    cells = _run.plan(_config.quick(Config()))
    for side in ("litegate-bounded", "litegate-combined"):
        e2e_only = [(c.scenario, c.variant) for c in cells if c.side == side]
        assert e2e_only == [("e2e", "batched"), ("e2e", "one-job")], side
    strict = {c.scenario for c in cells if c.side == "litegate"}
    assert strict == set(_config.SCENARIOS)


def test_quick_plans_the_worker_side_in_the_e2e_rows_only() -> None:
    for cfg in (Config(), _config.quick(Config()), Config(sides=("litegate-worker",))):
        cells = _run.plan(cfg)
        worker = [(c.scenario, c.variant) for c in cells if c.side == "litegate-worker"]
        assert worker == [("e2e", "batched"), ("e2e", "one-job")], cfg
    # frames: in --quick too, but for the bounded side (the end-to-end rows only
    # there; its pages per operation are litegate's, whatever the gate's policy)
    frames = [c.side for c in _run.plan(_config.quick(Config())) if c.scenario == "frames"]
    assert frames == ["bare", "seed", "litegate", "huey", "litequeue"]


# -- WAL frames per operation ---------------------------------------------------------


def test_the_wal_header_counts_the_pages_each_transaction_writes(tmp_path: Path) -> None:
    path = str(tmp_path / "t.db")
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        assert _frames.read_header(path) is None  # not in WAL mode: no -shm
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA wal_autocheckpoint=0")  # restarts only where this test says
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, a, b, c, d)")
        for column in "abc":
            conn.execute(f"CREATE INDEX t_{column} ON t ({column})")

        def frames(sql: str) -> int:
            before = _frames.read_header(path)
            conn.execute(sql)
            after = _frames.read_header(path)
            assert before is not None
            assert after is not None
            return _frames.appended(before, after)

        # a row in one small table and its three indexes: a page of each
        assert [frames(f"INSERT INTO t (a, b, c) VALUES ({k}, {k}, {k})") for k in range(5)] == [
            4
        ] * 5
        assert frames("UPDATE t SET a = -1 WHERE id = 1") == 2  # the row, one index
        assert frames("UPDATE t SET d = 'x' WHERE id = 1") == 1  # the row only
        assert frames("SELECT * FROM t") == 0
        # A checkpoint copies the log back; the next writer starts it again
        # from the beginning (a new salt, mxFrame from 0): its frames count.
        last = _frames.read_header(path)
        assert conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()[0] == 0
        assert frames("DELETE FROM t WHERE id = 2") == 4
        now = _frames.read_header(path)
        assert last is not None
        assert now is not None
        assert (now.salt != last.salt, now.frames) == (True, 4)
    finally:
        conn.close()


def _measure_frames(tmp_path: Path, side: str, ops: int, backlog: int) -> dict[str, Any]:
    """The frames role of ``side`` in this process: what its child reports."""
    path = str(tmp_path / f"{side}.db")
    _sides.create_sqlite(side, path, "balanced")
    opened = _sides.open_sqlite_side(side, path, "balanced")
    try:
        role = Role("frames", 0, count=ops, backlog=backlog)
        out = _merge(
            [Runner(Spec(side, path, "balanced", role, 60.0), opened.client(), 0, None).run()]
        )
    finally:
        opened.close()
    assert out["errors"] == 0, out["messages"]
    assert len(out["put"]) == backlog + ops
    assert sorted(out["done"]) == sorted(out["put"])[:ops]  # the oldest, claimed and acked
    assert _sides.remaining_sqlite(side, path, "balanced") == backlog
    return out


def test_frames_of_the_bare_queue_are_one_page_per_operation(tmp_path: Path) -> None:
    # One table, no index, a few dozen small rows: every row fits in its one
    # leaf page, so an insert, an update (claim) and a delete (ack) each
    # write exactly that page.
    out = _measure_frames(tmp_path, "bare", ops=20, backlog=10)
    assert {op: list(v) for op, v in out["frames"].items()} == {
        "put": [1] * 20,
        "claim": [1] * 20,
        "ack": [1] * 20,
    }
    assert out["restarts"] == {}


def test_frames_of_litegates_queue_are_its_three_pages(tmp_path: Path) -> None:
    # Schema 4 on a small queue (no page splits): a put writes the job's
    # row, its ready entry and the counts row; a claim the ready entry, the
    # leased row and the counts; an ack the leased row, the job's row and
    # the counts: three pages each.
    out = _measure_frames(tmp_path, "litegate", ops=15, backlog=5)
    assert {op: list(v) for op, v in out["frames"].items()} == {
        "put": [3] * 15,
        "claim": [3] * 15,
        "ack": [3] * 15,
    }


def test_every_side_has_its_frames_but_what_it_cannot_do(tmp_path: Path) -> None:
    for side in ("seed", "huey", "litequeue", "litegate-bounded"):
        out = _measure_frames(tmp_path, side, ops=10, backlog=20)
        na = _sides.FRAMES_NA.get(side, {})
        assert set(out["frames"]) == set(_frames.OPS)
        for op in _frames.OPS:
            frames = list(out["frames"][op])
            if op in na:
                assert frames == []  # done, not measured
                continue
            assert len(frames) == 10, (side, op)
            assert min(frames) >= 1, (side, op)  # every one of them writes
        f = _run.frame_figures(side, [out])
        assert {k for k in f if k.endswith("_frames")} == {
            f"{op}_frames" for op in _frames.OPS if op not in na
        }
    assert _sides.FRAMES_NA == {"huey": {"ack": "n/a: no ack (dequeue deleted the task)"}}


def test_frame_figures() -> None:
    outs = [{"frames": {"put": [3, 3, 5, 3], "claim": [2, 2]}, "restarts": {"put": 1}}]
    f = _run.frame_figures("huey", outs)
    assert f["put_frames"] == 3.5
    assert (f["put_frames_p50"], f["put_frames_max"], f["put_measured"]) == (3.0, 5.0, 4.0)
    assert (f["put_restarts"], f["claim_restarts"]) == (1.0, 0.0)
    assert f["claim_frames"] == 2.0
    assert "ack_frames" not in f
    assert "ack_measured" not in f
    assert f["frames_hist"] == {"put": {"3": 3, "5": 1}, "claim": {"2": 2}}


# -- litegate's own Worker in the end-to-end rows ------------------------------------


def test_the_worker_side_runs_every_job_once_and_drains(tmp_path: Path) -> None:
    path = str(tmp_path / "w.db")
    _sides.create_sqlite("litegate-worker", path, "balanced")
    for threads, batch, jobs in ((1, 50, 1_000), (4, 1, 400)):
        side = _sides.open_sqlite_side("litegate-worker", path, "balanced")
        assert isinstance(side, _sides.LitegateWorkerSide)
        assert side.own_worker
        producers_done = mp.get_context("spawn").Event()
        first = threads * 1_000_000
        client = side.client()

        def produce(client: _sides.Client, first: int, jobs: int, done: Any) -> None:
            for k in range(first, first + jobs, 50):
                client.put_many([_sides.payload(j) for j in range(k, k + 50)])
                time.sleep(0.001)  # the worker starts on an empty queue and waits for work
            done.set()

        ran: list[int] = []
        producer = threading.Thread(target=produce, args=(client, first, jobs, producers_done))
        producer.start()
        try:
            late = side.work(threads, batch, 60.0, producers_done, ran.append)
        finally:
            producer.join()
        try:
            assert late is False
            assert sorted(ran) == list(range(first, first + jobs))  # each once
            counts = side.queue.counts()
            assert (counts["ready"], counts["scheduled"], counts["leased"]) == (0, 0, 0)
            (stats,) = side.worker_stats
            assert stats["processed"] == stats["acked"] == jobs
            assert stats["errors"] == stats["lease_lost"] == stats["abandoned"] == 0
            assert side.work_errors() == {}
            assert side.details()["worker"] == [stats]
        finally:
            side.close()
    assert _sides.worker_shape(1, 100) == (1, 99)
    assert _sides.worker_shape(8, 1) == (8, 0)


def test_the_worker_side_stops_at_the_cells_deadline(tmp_path: Path) -> None:
    path = str(tmp_path / "w.db")
    _sides.create_sqlite("litegate-worker", path, "balanced")
    side = _sides.open_sqlite_side("litegate-worker", path, "balanced")
    try:
        side.client().put_many([_sides.payload(k) for k in range(10)])
        never = mp.get_context("spawn").Event()  # the producers never finish
        ran: list[int] = []
        t0 = time.monotonic()
        assert side.work(2, 1, 0.5, never, ran.append) is True
        assert time.monotonic() - t0 < 20  # stopped at the deadline, not by the queue
        assert sorted(ran) == list(range(10))
    finally:
        side.close()


def test_frames_and_the_worker_side_in_a_run() -> None:
    cfg = dataclasses.replace(
        TINY,
        scenarios=("e2e", "frames"),
        sides=("bare", "litegate-worker"),
        e2e_jobs=200,
        frames_ops=20,
        frames_backlog=10,
    )
    result = bench.run(cfg)
    got = {(r["scenario"], r["variant"], r["side"]) for r in result["raw"]}
    assert got == {
        ("e2e", "batched", "bare"),
        ("e2e", "batched", "litegate-worker"),
        ("e2e", "one-job", "litegate-worker"),
        ("frames", "single-job", "bare"),  # litegate-worker: the litegate side's client
    }
    for r in result["raw"]:
        a, f = r["accounting"], r["figures"]
        assert r["setup_errors"] == [], r
        assert a["lost"] == a["extra"] == a["duplicates"] == a["unknown"] == 0, r
        assert f["errors"] == 0, r
        if r["scenario"] == "frames":
            assert (a["put"], a["processed"], a["left_in_queue"]) == (30, 20, 10)
            assert f["frames_hist"] == {op: {"1": 20} for op in _frames.OPS}  # see above
            assert [f[f"{op}_frames"] for op in _frames.OPS] == [1.0, 1.0, 1.0]
            continue
        assert a["put"] == a["processed"] == 200, r
        assert a["left_in_queue"] == 0
        assert sum(f["shares"]) == 200
        assert len(f["shares"]) == 2
        if r["side"] == "litegate-worker":
            # each worker process's own Worker ran (and acked) its share, once
            workers = [d["worker"] for d in r["details"] if d.get("worker")]
            assert sorted(w[0]["acked"] for w in workers) == sorted(f["shares"])
            assert f["gate_grants"] > 0  # litegate's gate figures, as its other sides
            # every job was put and settled in some commit: fewer than one
            # each in batches, and the workers' share of them is a part
            assert 0 < f["worker_commits_per_job"] < f["commits_per_job"]
            if r["variant"] == "batched":
                assert f["commits_per_job"] < 1
        else:
            assert "commits_per_job" not in f  # no litegate Database to count them
    text = bench.render(json.loads(json.dumps(result)))
    frames = text.split("### WAL frames per operation: 20 single-job puts")[1]
    assert "| bare " in frames
    assert "1.00 (median 1, max 1)" in frames
    e2e = text.split("### End to end")[1].split("###")[0]
    assert "| litegate-worker (batches of 20; Worker concurrency 1, prefetch 19)" in e2e
    assert "| litegate-worker (2 threads/process; Worker concurrency 2, prefetch 0)" in e2e
    assert "litegate-worker: the litegate side's producers" in e2e
    assert "| Commits/job all / workers |" in e2e
    assert "(end-to-end rows only)" in text
    names = [t["target"] for t in result["targets"]]
    assert "e2e batched (balanced): litegate-worker >= 0.9 x bare batched" in names
    assert any(n.startswith("litegate: 0 errors") for n in names)
    assert Config.from_json(json.loads(json.dumps(result["config"]))) == cfg


def test_an_e2e_only_side_runs_and_is_reported_in_the_e2e_rows() -> None:
    cfg = dataclasses.replace(
        TINY,
        scenarios=("single", "e2e"),
        sides=("seed", "litegate", "litegate-bounded"),
        e2e_only_sides=("litegate-bounded",),
        single_puts=20,
        e2e_jobs=200,
    )
    result = bench.run(cfg)
    assert {r["side"] for r in _cells(result, "single")} == {"seed", "litegate"}
    bounded = [r for r in result["raw"] if r["side"] == "litegate-bounded"]
    assert [(r["scenario"], r["variant"]) for r in bounded] == [
        ("e2e", "batched"),
        ("e2e", "one-job"),
    ]
    for r in bounded:
        a, f = r["accounting"], r["figures"]
        assert r["setup_errors"] == [], r
        assert a["put"] == a["processed"] == 200, r
        assert a["left_in_queue"] == 0, r
        assert a["lost"] == a["extra"] == a["duplicates"] == a["unknown"] == 0, r
        assert f["errors"] == 0, r
        assert f["gate_grants"] > 0, r  # the write gate's figures, as litegate's cells have
        assert 0.0 <= f["handoff_share"] <= 1.0, r
    assert Config.from_json(json.loads(json.dumps(result["config"]))) == cfg
    text = bench.render(result)
    assert "litegate-bounded = litegate.queue, fair=True" in text
    assert "(end-to-end rows only)" in text
    single = text.split("### Scenario 1")[1].split("###")[0]
    assert "litegate-bounded" not in single
    e2e = text.split("### End to end")[1]
    assert "| litegate-bounded (batches of 20)" in e2e
    assert "| litegate-bounded (2 threads/process)" in e2e


def test_the_bounded_side_is_sqlite_only() -> None:
    # litegate on PostgreSQL has no write gate: no policy to set
    with pytest.raises(ValueError, match="litegate-bounded do not run on postgres"):
        Config(backend="postgres", sides=("litegate", "litegate-bounded"))
    # a run on both backends: PostgreSQL's part takes litegate only
    split = _config._sides_for(("sqlite", "postgres"), ("litegate", "litegate-bounded"))
    assert split == {"sqlite": ("litegate", "litegate-bounded"), "postgres": ("litegate",)}
    with pytest.raises(ValueError, match="no side that runs on postgres"):
        _config._sides_for(("sqlite", "postgres"), ("bare", "litegate-bounded"))


def test_execute_with_retry_is_the_seeds() -> None:
    class Locked:
        calls = 0

        def execute(self, sql: str, params: Any = ()) -> Any:
            self.calls += 1
            raise sqlite3.OperationalError("database is locked")

    conn: Any = Locked()
    counter = _sides.RetryCounter()
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        _sides.execute_with_retry(conn, "INSERT", counter=counter)
    assert conn.calls == 3  # 3 tries, 0.1 s then 0.2 s apart
    assert counter.busy == 3

    class Broken:
        def execute(self, sql: str, params: Any = ()) -> Any:
            raise sqlite3.OperationalError("no such table: x")

    other: Any = Broken()
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        _sides.execute_with_retry(other, "SELECT", counter=counter)
    assert counter.busy == 3  # not a BUSY error: not retried, not counted


def test_a_process_that_dies_before_the_start_is_noticed_at_once() -> None:
    ctx = mp.get_context("spawn")
    ready = ctx.Barrier(2)
    dead = ctx.Process(target=time.sleep, args=(0,))
    dead.start()
    dead.join()
    t0 = time.monotonic()
    assert not _run._start_together(ready, [dead])
    assert time.monotonic() - t0 < 10  # not the two minutes a missing process may take
    assert ready.broken


def test_wal_bounded() -> None:
    mib = 1024 * 1024
    growing = [[float(t), t * mib] for t in range(10)]
    cycling = [[float(t), (t % 3) * mib] for t in range(10)]
    assert not _run.wal_bounded(growing)[0]
    assert _run.wal_bounded(cycling)[0]
    assert _run.wal_bounded([])[0]


def _e2e_entry(shares: list[list[int]]) -> dict[str, Any]:
    """A summary entry of an end-to-end row whose runs had these shares."""
    runs = [
        {**_run._shares(s), "share_min": float(min(s)), "share_max": float(max(s))} for s in shares
    ]
    figures = {
        k: _stats.summarise([v for r in runs if (v := r[k]) is not None]).to_json() for k in runs[0]
    }
    return {"na": None, "figures": figures}


def test_share_target() -> None:
    # runs of 90 / 110 and 100 / 100: medians 0.95x .. 1.05x the mean, Jain 0.995
    even = _run.share_target(_e2e_entry([[90, 110], [100, 100]]), "e2e batched (balanced)")
    assert even["target"] == (
        "e2e batched (balanced): litegate worker shares within 1.5x of the mean, Jain >= 0.95"
    )
    assert even["met"]
    assert even["detail"] == (
        "95 to 105 jobs per worker process (0.95x to 1.05x the mean), Jain 0.995, RSD 5.0%"
    )
    # 68 / 132: both within 1.5x of the mean 100, but Jain 1 / (1 + 0.32^2) = 0.907
    spread = _run.share_target(_e2e_entry([[68, 132]]), "x")
    assert spread["value"] == pytest.approx(1 / (1 + 0.32**2))
    assert not spread["met"]
    # one of 10 processes at 0.6x of the mean: Jain 0.983 is met, the share is not
    lagging = _run.share_target(_e2e_entry([[60] + [104] * 5 + [105] * 4]), "x")
    assert lagging["value"] == pytest.approx(0.98251, abs=1e-5)
    assert not lagging["met"]
    # on the limit: 150 is exactly 1.5x the mean 100, Jain 0.976
    assert _run.share_target(_e2e_entry([[150] + [95] * 10]), "x")["met"]
    # no worker process reported: nothing to meet the target with
    nobody = _run.share_target({"na": None, "figures": {}}, "x")
    assert not nobody["met"]
    assert nobody["detail"] == "no worker process reported a job"


def test_md_table() -> None:
    text = _render.md_table(["A", "Bee"], [["1", "2"], ["333", ""]])
    assert text.splitlines() == [
        "| A   | Bee |",
        "|-----|-----|",
        "| 1   | 2   |",
        "| 333 |     |",
    ]
    with pytest.raises(ValueError, match="2 columns"):
        _render.md_table(["A", "B"], [["1"]])


def _args(**kw: Any) -> argparse.Namespace:
    base: dict[str, Any] = {"quick": False, "runs": 1, "noise_k": 2.0}
    base.update(kw)
    return argparse.Namespace(**base)


def parse_any(argv: list[str]) -> Config | Combined:
    """``litegate bench queue``'s options as its CLI parses them (shared by
    the PostgreSQL and both-backend bench tests)."""
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--noise-k", type=float, default=2.0)
    bench.add_arguments(p)
    cfg = bench.config_from_args(p.parse_args(argv))
    assert not isinstance(cfg, bench.ScaleConfig)
    return cfg


def _parsed(argv: list[str]) -> Config:
    cfg = parse_any(argv)
    assert isinstance(cfg, Config)  # one backend (several: a Combined)
    return cfg


def test_config_from_args() -> None:
    cfg = _parsed([])
    assert cfg == Config()
    quick = _parsed(["--quick"])
    assert quick.profiles == ("balanced",)
    assert quick.mixed_seconds == 2.0
    assert quick.long_seconds == 5.0
    cfg = _parsed(["--seconds", "7", "--scenarios", "mixed,long", "--sides", "seed,litegate"])
    assert (cfg.mixed_seconds, cfg.long_seconds) == (7.0, 7.0)
    assert cfg.scenarios == ("mixed", "long")
    assert cfg.sides == ("seed", "litegate")
    assert _parsed(["--sides", "litegate-bounded"]).sides == ("litegate-bounded",)
    # both policies and the combined writes in the default sides; --quick runs
    # bounded and combined in the e2e rows only
    assert {"litegate", "litegate-bounded", "litegate-combined"} <= set(Config().sides)
    assert Config().e2e_only_sides == ()
    assert (quick.sides, quick.e2e_only_sides) == (
        Config().sides,
        ("litegate-bounded", "litegate-combined"),
    )
    named = _parsed(["--quick", "--sides", "litegate,litegate-bounded"])
    assert named.e2e_only_sides == ()  # sides asked for by name run every scenario
    cfg = _parsed(["--seconds", "7", "--long-seconds", "30", "--profiles", "aggressive"])
    assert (cfg.mixed_seconds, cfg.long_seconds, cfg.profiles) == (7.0, 30.0, ("aggressive",))
    assert cfg.grant_log is False
    assert _parsed(["--grant-log"]).grant_log is True
    assert _parsed(["--grant-log", "--quick"]).grant_log is True


def test_frames_options_and_backends() -> None:
    cfg = _parsed(["--scenarios", "frames", "--frames-ops", "50", "--frames-backlog", "100"])
    assert (cfg.scenarios, cfg.frames_ops, cfg.frames_backlog) == (("frames",), 50, 100)
    assert (Config().frames_ops, Config().frames_backlog) == (400, 3_000)
    assert _parsed(["--quick"]).frames_ops == 300
    assert "frames" in Config().scenarios
    assert "frames" in _parsed(["--quick"]).scenarios
    # the WAL index is SQLite's: a PostgreSQL part leaves the scenario out ...
    assert "frames" not in Config(backend="postgres").scenarios
    assert Config(backend="postgres", scenarios=("frames", "e2e")).scenarios == ("e2e",)
    # ... and refuses a run of nothing else
    with pytest.raises(ValueError, match="the WAL frames are SQLite's"):
        Config(backend="postgres", scenarios=("frames",))


def test_grant_log_is_for_sqlite_and_the_seeds_scenarios() -> None:
    with pytest.raises(ValueError, match="--grant-log logs the grants of litegate's write gate"):
        parse_any(["--grant-log", "--backend", "postgres"])
    with pytest.raises(ValueError, match="--grant-log is for the seed's scenarios"):
        bench.config_from_args(_args(scale=True, grant_log=True))
    with pytest.raises(ValueError, match="postgres has no such gate"):
        Config(backend="postgres", grant_log=True)


def test_missing_peer_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_config, "PEER_MODULES", {"huey": "no_such_module_zz"})
    with pytest.raises(ValueError, match=r"pip install litegate-lab") as info:
        _parsed(["--sides", "bare,huey"])
    assert "--sides bare" in str(info.value)
    assert _parsed(["--sides", "bare,litegate"]).sides == ("bare", "litegate")


# -- the command line ------------------------------------------------------------------


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "bench", "queue", "--scenarios", "single", "--sides", "seed,litegate",
        "--profiles", "conservative,aggressive", "--single-puts", "30", "--out", str(tmp_path),
    ]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "### Scenario 1: Single Writer Baseline (30 task insertions" in printed
    assert "Conservative" in printed
    assert "Aggressive" in printed
    data = json.loads((tmp_path / "queue.json").read_text())
    assert data["experiment"] == "queue"
    assert data["config"]["profiles"] == ["conservative", "aggressive"]
    assert {(r["profile"], r["side"]) for r in data["raw"]} == {
        (p, s) for p in ("conservative", "aggressive") for s in ("seed", "litegate")
    }
    assert all(r["accounting"]["put"] == 30 for r in data["raw"])
    assert (tmp_path / "report.txt").read_text().startswith("# queue (seed 004)")
    assert (tmp_path / "queue-throughput.png").read_bytes()[:8] == PNG


@pytest.mark.parametrize(
    "argv",
    [
        ["bench", "queue", "--scenarios", "nope"],
        ["bench", "queue", "--sides", "redis"],
        ["bench", "queue", "--profiles", "default"],
        ["bench", "queue", "--stress-workers", "0"],
        ["bench", "queue", "--seconds", "-1"],
    ],
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert "usage:" in capsys.readouterr().err


def test_missing_peer_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(_config, "PEER_MODULES", {"litequeue": "no_such_module_zz"})
    assert main(["bench", "queue", "--quick"]) == 2
    err = capsys.readouterr().err
    assert "pip install litegate-lab" in err
    assert "litequeue" in err
