"""The parent side of ``bench queue``: which cells to run, how one cell runs
(fresh database, processes started together, WAL or database size sampled),
and what its figures are; then the medians across runs and the target
checks."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from typing import Any
from urllib.parse import urlsplit

from litegate import diagnostics

from .. import _stats
from .._procs import reap
from .._progress import Progress
from .._report import combine_grant_logs, fmt_pct
from .._writers import gate_counters, gate_shares
from ._backends import create, remaining
from ._child import Role, Spec, child_main
from ._config import Combined, Config
from ._frames import OPS
from ._pg import DbSizeSampler, PgCells
from ._sampler import Sampler
from ._sides import BATCH_SIDES, E2E_ONLY_SIDES, FRAMES_NA, LITEGATE_FAIR, NO_BATCH

NAME = "queue"
QS = (50.0, 95.0, 99.0)


@dataclass(frozen=True)
class Cell:
    scenario: str
    profile: str
    side: str
    variant: str  # "1 writer", "4 workers", "2W+2C", "batched", "one-job", "single-job"
    roles: tuple[Role, ...] = ()
    seconds: float = 0.0  # time-bounded roles: how long they run
    limit_s: float = 60.0  # the bound for every role
    na: str | None = None  # why this side cannot run this cell
    backend: str = "sqlite"

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.scenario, self.profile, self.variant, self.side)


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def size_keys(backend: str) -> tuple[str, str, str]:
    """The figures of a cell's storage size (peak, final) and the raw key of
    its course: the ``-wal`` file on SQLite, the database on PostgreSQL."""
    if backend == "postgres":
        return "db_peak_bytes", "db_final_bytes", "size_series"
    return "wal_peak_bytes", "wal_final_bytes", "wal_series"


def plan(cfg: Config | Combined) -> list[Cell]:
    """Every cell of one run, scenario by scenario; the sides interleaved
    within each (profile, variant) so that drift hits them all alike. A
    combined run: each backend's cells in turn (SQLite's first)."""
    if isinstance(cfg, Combined):
        return [cell for part in cfg.parts for cell in plan(part)]
    cells: list[Cell] = []
    slack = 30.0

    def add(
        scenario: str,
        profile: str,
        variant: str,
        roles: Sequence[Role],
        seconds: float = 0.0,
        sides: Sequence[str] | None = None,
        na: dict[str, str] | None = None,
    ) -> None:
        limit = seconds + slack if seconds else cfg.cell_timeout
        for side in sides if sides is not None else cfg.sides:
            if scenario != "e2e" and (side in cfg.e2e_only_sides or side in E2E_ONLY_SIDES):
                continue
            reason = (na or {}).get(side)
            cells.append(
                Cell(
                    scenario,
                    profile,
                    side,
                    variant,
                    tuple(roles),
                    seconds,
                    limit,
                    reason,
                    backend=cfg.backend,
                )
            )

    for scenario in cfg.scenarios:
        if scenario == "single":
            for prof in cfg.profiles:
                add(scenario, prof, "1 writer", [Role("put", 0, count=cfg.single_puts)])
        elif scenario == "concurrent":
            for prof in cfg.profiles:
                for n in cfg.concurrent_workers:
                    roles = [
                        Role("put", i, count=c)
                        for i, c in enumerate(_split(cfg.concurrent_total, n))
                    ]
                    add(scenario, prof, f"{n} workers", roles)
        elif scenario in ("mixed", "long"):
            secs = cfg.mixed_seconds if scenario == "mixed" else cfg.long_seconds
            w, c = cfg.mixed_writers, cfg.mixed_claimers
            roles = [Role("put", i, seconds=secs) for i in range(w)]
            roles += [Role("claim", w + i, seconds=secs) for i in range(c)]
            for prof in cfg.profiles if scenario == "mixed" else cfg.long_profiles:
                add(scenario, prof, f"{w}W+{c}C", roles, secs)
        elif scenario == "stress":
            for prof in cfg.profiles:
                for n in cfg.stress_workers:
                    roles = [Role("cycle", i, seconds=cfg.stress_seconds) for i in range(n)]
                    add(scenario, prof, f"{n} workers", roles, cfg.stress_seconds)
        elif scenario == "e2e" and cfg.backend == "postgres":
            _plan_pg_e2e(cfg, add)
        elif scenario == "e2e":
            p, w = cfg.e2e_producers, cfg.e2e_workers
            jobs = _split(cfg.e2e_jobs, p)
            for prof in cfg.e2e_profiles:
                batched = [Role("produce", i, count=jobs[i], batch=cfg.batch) for i in range(p)]
                batched += [Role("consume", p + i, batch=cfg.batch) for i in range(w)]
                add(
                    scenario,
                    prof,
                    "batched",
                    batched,
                    na={s: r for s, r in NO_BATCH.items() if s not in BATCH_SIDES},
                )
                for side in cfg.sides:
                    if side == "bare":
                        continue  # the bare queue is the batched baseline only
                    t = cfg.seed_threads if side == "seed" else cfg.e2e_threads
                    one = [Role("produce", i, count=jobs[i], threads=t) for i in range(p)]
                    one += [Role("consume", p + i, threads=t) for i in range(w)]
                    add(scenario, prof, "one-job", one, sides=[side])
        elif scenario == "frames":
            # under the end-to-end rows' profiles: the frames explain those rows
            role = Role("frames", 0, count=cfg.frames_ops, backlog=cfg.frames_backlog)
            for prof in cfg.e2e_profiles:
                add(scenario, prof, "single-job", [role])
        else:  # pragma: no cover - the parser only lets known names through
            raise ValueError(f"unknown scenario {scenario!r}")
    return cells


def _plan_pg_e2e(cfg: Config, add: Any) -> None:
    """The end-to-end rows on PostgreSQL: every side does both (each peer has
    a batch put), the sides interleaved within each row. litegate claims and
    acks as on SQLite; the peers consume with their own worker loop:
    procrastinate's runs ``e2e_threads`` jobs at a time and fetches one per
    query whatever the row; pgqueuer's fetches ``batch`` per query (1 in the
    one-job row)."""
    p, w = cfg.e2e_producers, cfg.e2e_workers
    jobs = _split(cfg.e2e_jobs, p)
    for prof in cfg.e2e_profiles:
        for variant in ("batched", "one-job"):
            batched = variant == "batched"
            batch, threads = (cfg.batch, 1) if batched else (1, cfg.e2e_threads)
            for side in cfg.sides:
                workers = cfg.e2e_threads if side == "procrastinate" else threads
                roles = [
                    Role("produce", i, count=jobs[i], batch=batch, threads=threads)
                    for i in range(p)
                ]
                roles += [Role("consume", p + i, batch=batch, threads=workers) for i in range(w)]
                add("e2e", prof, variant, roles, sides=[side])


@contextlib.contextmanager
def _storage(cfg: Config, pg: PgCells | None) -> Iterator[str]:
    """Where a cell's queue lives: a file in a fresh temporary directory, or
    a fresh database on the server (dropped afterwards)."""
    if cfg.backend == "postgres":
        assert pg is not None
        name, url = pg.fresh()
        try:
            yield url
        finally:
            pg.drop(name)
    else:
        with tempfile.TemporaryDirectory(prefix="litegate-bench-queue-") as tmp:
            yield os.path.join(tmp, "queue.db")


class WalSampler(Sampler):
    """Samples the size of the ``-wal`` file on a thread of the parent."""

    NAME = "wal-sampler"

    def __init__(self, path: str, interval: float) -> None:
        super().__init__(interval)
        self.path = path + "-wal"

    def size(self) -> int:
        try:
            return os.path.getsize(self.path)
        except OSError:
            return 0


def has_gate(backend: str, side: str) -> bool:
    """Whether the side's processes share litegate's write gate (and its
    sidecar's counters): litegate's sides on SQLite only (either policy)."""
    return backend == "sqlite" and side in LITEGATE_FAIR


def _pcts(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "p99": None, "max": None}
    p = _stats.percentiles(values, QS)
    return {"p50": p[50.0], "p95": p[95.0], "p99": p[99.0], "max": max(values)}


def _window(outs: Sequence[dict[str, Any]]) -> float:
    starts = [float(o["start"]) for o in outs if o.get("start")]
    ends = [float(o["end"]) for o in outs if o.get("end")]
    if not starts or not ends:
        return 0.0
    return max(ends) - min(starts)


def _rate(n: float, seconds: float) -> float:
    return n / seconds if seconds > 0 else 0.0


def run_cell(
    cfg: Config, ctx: BaseContext, run: int, cell: Cell, pg: PgCells | None = None
) -> dict[str, Any]:
    """One cell on a fresh database: a file in a temporary directory, or on
    PostgreSQL a database of its own on ``pg``'s server."""
    rec: dict[str, Any] = {
        "run": run,
        "scenario": cell.scenario,
        "profile": cell.profile,
        "side": cell.side,
        "variant": cell.variant,
        "na": cell.na,
        "figures": {},
        "errors_seen": {},
        "setup_errors": [],
    }
    if cell.na:
        return rec
    interval = cfg.long_sample_s if cell.scenario == "long" else 0.05
    if cfg.backend == "postgres":
        interval = max(interval, 0.1)  # a query each time, not a stat(): less often
    peak_key, final_key, series_key = size_keys(cfg.backend)
    outs: list[dict[str, Any]] = []
    gate = has_gate(cfg.backend, cell.side)
    logged = gate and cfg.grant_log
    counted: dict[str, float] = {}
    checked: dict[str, int] | None = None
    with _storage(cfg, pg) as path:
        create(cell.side, path, cell.profile, backend=cfg.backend)
        before = gate_counters(path) if gate else None
        folder = os.path.join(os.path.dirname(path), "grants")
        ready = ctx.Barrier(len(cell.roles) + 1)
        results: Queue[Any] = ctx.Queue()
        producers_done = ctx.Event()
        all_done = ctx.Event()
        n_producers = sum(1 for r in cell.roles if r.kind == "produce")
        procs = [
            ctx.Process(  # type: ignore[attr-defined]
                target=child_main,
                args=(
                    Spec(cell.side, path, cell.profile, role, cell.limit_s, cfg.backend),
                    ready,
                    results,
                    producers_done,
                    all_done,
                ),
                daemon=True,
            )
            for role in cell.roles
        ]
        # (the children inherit the log through the environment)
        with diagnostics.grant_log(folder) if logged else contextlib.nullcontext():
            for p in procs:
                p.start()
        sampler: Sampler = (
            DbSizeSampler(path, interval)
            if cfg.backend == "postgres"
            else WalSampler(path, interval)
        )
        try:
            if not _start_together(ready, procs):
                rec["setup_errors"].append("a worker process failed to start")
            sampler.start()
            deadline = time.monotonic() + cell.limit_s + 30
            producers_seen = 0
            while len(outs) < len(procs):
                try:
                    out = results.get(timeout=0.5)
                except queue.Empty:
                    if time.monotonic() > deadline or not any(p.is_alive() for p in procs):
                        rec["setup_errors"].append(
                            f"{len(procs) - len(outs)} processes never reported (exit codes "
                            f"{[p.exitcode for p in procs]})"
                        )
                        break
                    continue
                outs.append(out)
                if out["role"] == "produce":
                    producers_seen += 1
                    if producers_seen == n_producers:
                        producers_done.set()
                if out.get("error"):
                    producers_done.set()  # a failed producer never finishes: let workers stop
            sampler.stop()  # before the processes close their connections (which may
            size_final = sampler.size()  # checkpoint and remove the -wal file)
        finally:
            sampler.close()
        all_done.set()
        reap(procs, results, timeout=15)
        if gate:  # (before counting what is left, which opens the queue again)
            counted = gate_shares(before, gate_counters(path))
        if logged:
            checked = diagnostics.check_grants(diagnostics.read_grants(folder))
        try:
            left = remaining(cell.side, path, cell.profile, backend=cfg.backend)
        except Exception as exc:
            left = -1
            rec["setup_errors"].append(f"counting what is left: {type(exc).__name__}: {exc}")
    for o in outs:
        if o.get("error"):
            rec["setup_errors"].append(str(o["error"]))
        for m, n in o.get("messages", {}).items():
            rec["errors_seen"][m] = rec["errors_seen"].get(m, 0) + n
    good = [o for o in outs if not o.get("error")]
    details = [o["details"] for o in good if o.get("details")]
    if details:
        rec["details"] = details
    rec["figures"] = figures(cell, good)
    rec["figures"][peak_key] = float(sampler.peak)
    rec["figures"][final_key] = float(size_final)
    rec["figures"].update(counted)
    if checked is not None:
        rec["grant_log"] = checked
    rec["accounting"] = accounting(good, left, expected_procs=len(procs))
    if cell.scenario == "long":
        rec[series_key] = [[round(t, 3), b] for t, b in sampler.samples]
    return rec


def _start_together(ready: Barrier, procs: Sequence[BaseProcess]) -> bool:
    """Wait until every process is at the start barrier, then cross it with
    them. False (and the barrier broken, so they report and stop) if one of
    them died first or they were not all there within two minutes."""
    give_up = time.monotonic() + 120
    while ready.n_waiting < len(procs):
        if time.monotonic() > give_up or any(p.exitcode is not None for p in procs):
            ready.abort()
            return False
        time.sleep(0.01)
    try:
        ready.wait(timeout=30)
    except threading.BrokenBarrierError:
        return False
    return True


def _shares(counts: Sequence[int], prefix: str = "") -> dict[str, float | None]:
    """Jain's index, the RSD and the smallest / largest count over the mean
    of per-process counts (see ``_stats.share_figures``), keys prefixed."""
    return {prefix + k: v for k, v in _stats.share_figures(counts).items()}


def figures(cell: Cell, outs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The cell's figures from its processes' reports."""
    f: dict[str, Any] = {}
    errors = sum(int(o["errors"]) for o in outs)
    busy = sum(int(o["busy"]) + int(o.get("busy_handled", 0)) for o in outs)
    f["errors"] = float(errors)
    f["busy"] = float(busy)
    if cell.scenario in ("single", "concurrent"):
        # No Jain's index here: each process puts a fixed share of the
        # total (_split), so the per-process counts are equal by design;
        # how evenly they got the lock shows in the latencies, not the counts.
        lat = [x for o in outs for x in o["latencies_ms"]]
        ops = sum(int(o["ops"]) for o in outs)
        f["ops"] = float(ops)
        f["throughput"] = _rate(ops, _window(outs))
        f.update(_pcts(lat))
        f["error_rate_pct"] = 100.0 * errors / (ops + errors) if ops + errors else 0.0
    elif cell.scenario in ("mixed", "long"):
        writers = [o for o in outs if o["role"] == "put"]
        claimers = [o for o in outs if o["role"] == "claim"]
        puts = sum(len(o["put"]) for o in writers)
        claims = sum(len(o["done"]) for o in claimers)
        f["puts"] = float(puts)
        f["claims"] = float(claims)
        f["write_throughput"] = _rate(puts, _window(writers))
        f["claim_throughput"] = _rate(claims, _window(claimers))
        f.update(_pcts([x for o in claimers for x in o["claim_ms"]]))
        put_lat = _pcts([x for o in writers for x in o["latencies_ms"]])
        f.update({f"put_{k}": v for k, v in put_lat.items()})
        f["empty_claims"] = float(sum(int(o["empty_claims"]) for o in claimers))
        # both roles run for a time, not a count: how evenly the writers
        # shared the puts, and the claimers the jobs
        f.update(_shares([len(o["put"]) for o in writers], prefix="writer_"))
        f.update(_shares([len(o["done"]) for o in claimers], prefix="claimer_"))
    elif cell.scenario == "stress":
        cycles = sum(int(o["ops"]) for o in outs)
        f["ops"] = float(cycles)
        f["throughput"] = _rate(cycles, _window(outs))
        f.update(_shares([int(o["ops"]) for o in outs]))  # cycles per process
        f.update(_pcts([x for o in outs for x in o["latencies_ms"]]))
        f["empty_claims"] = float(sum(int(o["empty_claims"]) for o in outs))
    elif cell.scenario == "e2e":
        producers = [o for o in outs if o["role"] == "produce"]
        workers = [o for o in outs if o["role"] == "consume"]
        done = sum(len(o["done"]) for o in workers)
        f["jobs"] = float(done)
        f["throughput"] = _rate(done, _window(outs))
        f["produce_throughput"] = _rate(sum(len(o["put"]) for o in producers), _window(producers))
        f.update(_pcts([x for o in workers for x in o["claim_ms"]]))
        put_lat = _pcts([x for o in producers for x in o["latencies_ms"]])
        f.update({f"put_{k}": v for k, v in put_lat.items()})
        shares = [len(o["done"]) for o in workers]
        threads = [n for o in workers for n in o["per_thread_done"]]
        f["share_min"] = float(min(shares, default=0))
        f["share_max"] = float(max(shares, default=0))
        f["thread_share_min"] = float(min(threads, default=0))
        f["thread_share_max"] = float(max(threads, default=0))
        f["shares"] = shares
        f.update(_shares(shares))
        f["empty_claims"] = float(sum(int(o["empty_claims"]) for o in workers))
        f["timed_out"] = any(o["timed_out"] for o in outs)
        if done and all("committed" in o.get("details", {}) for o in outs):
            # litegate's sides: write transactions committed (a group commit
            # is one), per job, by every process and by the workers alone
            f["commits_per_job"] = sum(int(o["details"]["committed"]) for o in outs) / done
            f["worker_commits_per_job"] = (
                sum(int(o["details"]["committed"]) for o in workers) / done
            )
    elif cell.scenario == "frames":
        f.update(frame_figures(cell.side, outs))
        f["timed_out"] = any(o["timed_out"] for o in outs)
    return f


def frame_figures(side: str, outs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per operation: the mean, median and largest number of WAL frames one
    operation appended, how many were measured and how many saw the log
    restart; and the histogram (frames: operations) for the JSON. An
    operation the side cannot do (``FRAMES_NA``) has none."""
    f: dict[str, Any] = {}
    hist: dict[str, dict[str, int]] = {}
    for op in OPS:
        if op in FRAMES_NA.get(side, {}):
            continue
        vals = [int(x) for o in outs for x in o.get("frames", {}).get(op, ())]
        f[f"{op}_measured"] = float(len(vals))
        f[f"{op}_restarts"] = float(sum(int(o.get("restarts", {}).get(op, 0)) for o in outs))
        if not vals:
            continue
        f[f"{op}_frames"] = _stats.mean(vals)
        f[f"{op}_frames_p50"] = _stats.median(vals)
        f[f"{op}_frames_max"] = float(max(vals))
        counts: dict[str, int] = {}
        for v in sorted(vals):
            counts[str(v)] = counts.get(str(v), 0) + 1
        hist[op] = counts
    f["frames_hist"] = hist
    return f


def accounting(outs: Sequence[dict[str, Any]], left: int, *, expected_procs: int) -> dict[str, Any]:
    """Every job put is either processed exactly once or still in the queue."""
    put = {k for o in outs for k in o["put"]}
    done = [k for o in outs for k in o["done"]]
    done_set = set(done)
    processed = len(done_set & put)
    balance = len(put) - processed - left if left >= 0 else None
    return {
        "put": len(put),
        "processed": len(done),
        "duplicates": len(done) - len(done_set),
        "unknown": len(done_set - put),
        "left_in_queue": left,
        "lost": None if balance is None else max(0, balance),
        "extra": None if balance is None else max(0, -balance),
        "reports": len(outs),
        "processes": expected_procs,
    }


# --------------------------------------------------------------------------
# across runs


NUMERIC_SKIP = frozenset({"shares", "timed_out", "frames_hist"})


def summarise(raw: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median, CV, min and max of every figure across runs, per cell."""
    keys = list(dict.fromkeys((r["scenario"], r["profile"], r["variant"], r["side"]) for r in raw))
    out = []
    for key in keys:
        mine = [r for r in raw if (r["scenario"], r["profile"], r["variant"], r["side"]) == key]
        first = mine[0]
        figs: dict[str, Any] = {}
        names = list(dict.fromkeys(n for r in mine for n in r["figures"]))
        for name in names:
            if name in NUMERIC_SKIP:
                continue
            vals = [v for r in mine if isinstance(v := r["figures"].get(name), (int, float))]
            figs[name] = _stats.summarise(vals).to_json() if vals else None
        acct = [r["accounting"] for r in mine if "accounting" in r]
        errors_seen: dict[str, int] = {}
        for r in mine:
            for m, n in r["errors_seen"].items():
                errors_seen[m] = errors_seen.get(m, 0) + n
        logs = [r["grant_log"] for r in mine if "grant_log" in r]
        out.append(
            {
                "scenario": key[0],
                "profile": key[1],
                "variant": key[2],
                "side": key[3],
                "na": first["na"],
                "runs": len(mine),
                "figures": figs,
                "lost": sum(int(a["lost"] or 0) for a in acct),
                "extra": sum(int(a["extra"] or 0) for a in acct),
                "duplicates": sum(int(a["duplicates"]) for a in acct),
                "unknown": sum(int(a["unknown"]) for a in acct),
                "uncounted": sum(1 for a in acct if a["lost"] is None),
                "timed_out": any(bool(r["figures"].get("timed_out")) for r in mine),
                "shares": [r["figures"].get("shares") for r in mine],
                "setup_errors": sorted({e for r in mine for e in r["setup_errors"]}),
                "errors_seen": errors_seen,
            }
        )
        if logs:  # over the runs: counts add up, the worst figures are the worst of any run
            out[-1]["grant_log"] = combine_grant_logs(logs)
    return out


def median_of(entry: dict[str, Any] | None, figure: str) -> float | None:
    if entry is None:
        return None
    s = entry["figures"].get(figure)
    return None if s is None else float(s["median"])


def find(
    summary: Sequence[dict[str, Any]], scenario: str, profile: str, variant: str, side: str
) -> dict[str, Any] | None:
    for e in summary:
        if (e["scenario"], e["profile"], e["variant"], e["side"]) == (
            scenario,
            profile,
            variant,
            side,
        ):
            return e
    return None


# --------------------------------------------------------------------------
# targets (reported, never asserted)

BATCHED_RATIO = 0.9
ONE_JOB_RATIO = 1.5
SHARE_OF_MEAN = 1.5  # issue 18: every worker's share within 1.5 x of the mean ...
JAIN_MIN = 0.95  # ... and Jain's index over the worker processes >= 0.95
CLAIM_P95_MS = 2.0
FRAMES_PER_OP = 3.0  # WAL frames (pages written) per single-job put, claim and ack
WAL_RATIO = 2.0  # issue 32: peak WAL in e2e batched <= 2 x the bare queue's
MIB = 1024 * 1024
JUDGED = ("litegate", "litegate-worker")
"""The sides the end-to-end and clean-run targets are reported for: the
queue driven by the harness's claim/ack loop, and by its own Worker."""


def wal_bounded(series: Sequence[Sequence[float]]) -> tuple[bool, float, float]:
    """Did the WAL stop growing? The peak of the second half of the run
    against the peak of the first half (+1 MiB of slack): a WAL that keeps
    growing fails, one that cycles through checkpoints passes."""
    if not series:
        return True, 0.0, 0.0
    end = series[-1][0]
    first = max((b for t, b in series if t <= end / 2), default=0.0)
    second = max((b for t, b in series if t > end / 2), default=0.0)
    return second <= 1.5 * first + MIB, float(first), float(second)


PG_BATCHED_JOBS_S = 15_000.0
PG_ONE_JOB_JOBS_S = 3_000.0
PG_PEER_RATIO = 1.0


def pg_targets(cfg: Config, result: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 11's targets on PostgreSQL (the server on this machine): the
    end-to-end rows in jobs/s, and litegate against each peer in the same
    run; then the clean-run line."""
    summary: list[dict[str, Any]] = result["summary"]
    out: list[dict[str, Any]] = []
    shape = f"{cfg.e2e_producers} producer + {cfg.e2e_workers} worker processes"
    for prof in cfg.e2e_profiles if "e2e" in cfg.scenarios else ():
        for variant, floor in (("batched", PG_BATCHED_JOBS_S), ("one-job", PG_ONE_JOB_JOBS_S)):
            lg = median_of(find(summary, "e2e", prof, variant, "litegate"), "throughput")
            if lg is None:
                continue
            out.append(
                {
                    "target": f"e2e {variant}: litegate >= {floor:,.0f} jobs/s ({shape})",
                    "value": lg,
                    "limit": floor,
                    "met": lg >= floor,
                    "detail": f"{lg:,.0f} jobs/s",
                }
            )
            for peer in ("pgqueuer", "procrastinate"):
                other = median_of(find(summary, "e2e", prof, variant, peer), "throughput")
                if not other:
                    continue
                out.append(
                    {
                        "target": f"e2e {variant}: litegate >= {PG_PEER_RATIO:g} x {peer}",
                        "value": lg / other,
                        "limit": PG_PEER_RATIO,
                        "met": lg / other >= PG_PEER_RATIO,
                        "detail": f"{lg:,.0f} vs {other:,.0f} jobs/s = {lg / other:.2f}x",
                    }
                )
    out.append(clean_target(summary, "lock conflicts"))
    return out


def share_target(e: dict[str, Any], label: str, side: str = "litegate") -> dict[str, Any]:
    """Issue 18's fairness target for one end-to-end row: every worker
    process's share of the jobs within 1.5 x of the mean (from mean / 1.5
    to 1.5 x mean) and Jain's index >= 0.95 (medians across runs)."""
    jain = median_of(e, "jain")
    lo, hi = median_of(e, "share_min_of_mean"), median_of(e, "share_max_of_mean")
    jobs_lo, jobs_hi = median_of(e, "share_min"), median_of(e, "share_max")
    rsd = median_of(e, "rsd")
    met = (
        jain is not None
        and lo is not None
        and hi is not None
        and jain >= JAIN_MIN
        and hi <= SHARE_OF_MEAN
        and lo * SHARE_OF_MEAN >= 1.0
    )
    if jain is None or lo is None or hi is None:
        detail = "no worker process reported a job"
    else:
        detail = (
            f"{jobs_lo or 0:,.0f} to {jobs_hi or 0:,.0f} jobs per worker process "
            f"({lo:.2f}x to {hi:.2f}x the mean), Jain {jain:.3f}, RSD {fmt_pct(rsd)}"
        )
    return {
        "target": f"{label}: {side} worker shares within {SHARE_OF_MEAN:g}x of the mean, "
        f"Jain >= {JAIN_MIN:g}",
        "value": jain,
        "limit": JAIN_MIN,
        "met": met,
        "detail": detail,
    }


def clean_target(summary: Sequence[dict[str, Any]], busy: str) -> dict[str, Any]:
    """litegate's cells: no error, no contention error, every job accounted for."""
    bad = {}
    for e in summary:
        if e["side"] not in JUDGED or e["na"]:
            continue
        label = f"{e['scenario']} {e['profile']} {e['variant']}"
        if e["side"] != "litegate":
            label += f" {e['side']}"
        errs, n_busy = median_of(e, "errors") or 0.0, median_of(e, "busy") or 0.0
        worst_errs = e["figures"]["errors"]["max"] if e["figures"].get("errors") else 0
        worst_busy = e["figures"]["busy"]["max"] if e["figures"].get("busy") else 0
        problems = []
        if worst_errs or worst_busy or errs or n_busy:
            problems.append(f"{worst_errs:.0f} errors, {worst_busy:.0f} {busy}")
        if e["lost"] or e["duplicates"] or e["unknown"] or e["extra"] or e["uncounted"]:
            problems.append(
                f"lost {e['lost']}, duplicates {e['duplicates']}, unknown {e['unknown']}, "
                f"extra {e['extra']}"
            )
        if e["setup_errors"]:
            problems.append("setup error")
        if e["timed_out"]:
            problems.append("timed out")
        if problems:
            bad[label] = "; ".join(problems)
    return {
        "target": f"litegate: 0 errors and 0 {busy} in every scenario and profile, "
        "no job lost or run twice",
        "value": len(bad),
        "limit": 0,
        "met": not bad,
        "detail": "; ".join(f"{k}: {v}" for k, v in list(bad.items())[:6]) or "all clean",
    }


def e2e_targets(summary: Sequence[dict[str, Any]], prof: str, side: str) -> list[dict[str, Any]]:
    """The end-to-end targets of one litegate side: batched against the bare
    queue, one-job against the seed's approach, and its worker shares."""
    out: list[dict[str, Any]] = []
    lg = median_of(find(summary, "e2e", prof, "batched", side), "throughput")
    bare = median_of(find(summary, "e2e", prof, "batched", "bare"), "throughput")
    if lg is not None and bare:
        out.append(
            {
                "target": f"e2e batched ({prof}): {side} >= {BATCHED_RATIO} x bare batched",
                "value": lg / bare,
                "limit": BATCHED_RATIO,
                "met": lg / bare >= BATCHED_RATIO,
                "detail": f"{lg:,.0f} vs {bare:,.0f} jobs/s = {lg / bare:.2f}x",
            }
        )
    peak = median_of(find(summary, "e2e", prof, "batched", side), "wal_peak_bytes")
    bare_peak = median_of(find(summary, "e2e", prof, "batched", "bare"), "wal_peak_bytes")
    if peak is not None and bare_peak:
        ratio = peak / bare_peak
        out.append(
            {
                "target": f"e2e batched ({prof}): {side} peak WAL <= {WAL_RATIO:g} x "
                "bare batched's",
                "value": ratio,
                "limit": WAL_RATIO,
                "met": ratio <= WAL_RATIO,
                "detail": f"{peak / MIB:.1f} vs {bare_peak / MIB:.1f} MiB = {ratio:.2f}x",
            }
        )
    lg1 = median_of(find(summary, "e2e", prof, "one-job", side), "throughput")
    seed = median_of(find(summary, "e2e", prof, "one-job", "seed"), "throughput")
    if lg1 is not None and seed:
        out.append(
            {
                "target": f"e2e one-job ({prof}): {side} >= {ONE_JOB_RATIO} x the seed's approach",
                "value": lg1 / seed,
                "limit": ONE_JOB_RATIO,
                "met": lg1 / seed >= ONE_JOB_RATIO,
                "detail": f"{lg1:,.0f} vs {seed:,.0f} jobs/s = {lg1 / seed:.2f}x",
            }
        )
    for variant in ("batched", "one-job"):
        e = find(summary, "e2e", prof, variant, side)
        if e is not None and not e["na"]:
            out.append(share_target(e, f"e2e {variant} ({prof})", side))
    return out


def frames_target(e: dict[str, Any] | None, prof: str) -> dict[str, Any] | None:
    """litegate's WAL frames per single-job put, claim and ack (means,
    medians across runs), each against FRAMES_PER_OP."""
    if e is None or e["na"]:
        return None
    means = {op: median_of(e, f"{op}_frames") for op in OPS}
    if any(v is None for v in means.values()):
        return None
    worst = max(v for v in means.values() if v is not None)
    return {
        "target": f"frames ({prof}): litegate <= {FRAMES_PER_OP:g} WAL frames per single-job "
        "put, claim and ack",
        "value": worst,
        "limit": FRAMES_PER_OP,
        "met": worst <= FRAMES_PER_OP,
        "detail": ", ".join(f"{op} {v:.2f}" for op, v in means.items() if v is not None),
    }


def targets(cfg: Config, result: dict[str, Any]) -> list[dict[str, Any]]:
    summary: list[dict[str, Any]] = result["summary"]
    out: list[dict[str, Any]] = []
    if not set(JUDGED) & set(cfg.sides):
        return out
    if cfg.backend == "postgres":
        return pg_targets(cfg, result)
    for prof in cfg.e2e_profiles if "e2e" in cfg.scenarios else ():
        for side in (s for s in JUDGED if s in cfg.sides):
            out += e2e_targets(summary, prof, side)
    for prof in cfg.e2e_profiles if "frames" in cfg.scenarios else ():
        t = frames_target(find(summary, "frames", prof, "single-job", "litegate"), prof)
        if t is not None:
            out.append(t)
    out.append(clean_target(summary, "BUSY"))
    for prof in cfg.profiles if "mixed" in cfg.scenarios else ():
        m = find(summary, "mixed", prof, f"{cfg.mixed_writers}W+{cfg.mixed_claimers}C", "litegate")
        p95 = median_of(m, "p95")
        if m is not None:
            out.append(
                {
                    "target": f"mixed ({prof}): litegate claim p95 <= {CLAIM_P95_MS:g} ms",
                    "value": p95,
                    "limit": CLAIM_P95_MS,
                    "met": p95 is not None and p95 <= CLAIM_P95_MS,
                    "detail": "-" if p95 is None else f"p95 {p95:.2f} ms",
                }
            )
    for prof in cfg.long_profiles if "long" in cfg.scenarios else ():
        series = [
            r.get("wal_series") or []
            for r in result["raw"]
            if (r["scenario"], r["profile"], r["side"]) == ("long", prof, "litegate")
        ]
        if not series:
            continue
        checks = [wal_bounded(s) for s in series]
        lr = find(summary, "long", prof, f"{cfg.mixed_writers}W+{cfg.mixed_claimers}C", "litegate")
        peak = median_of(lr, "wal_peak_bytes") or 0.0
        out.append(
            {
                "target": f"long ({prof}): litegate WAL bounded (second-half peak <= 1.5 x "
                "first-half peak + 1 MiB)",
                "value": peak,
                "limit": None,
                "met": all(c[0] for c in checks),
                "detail": f"peak {peak / MIB:.1f} MiB; halves "
                + ", ".join(f"{a / MIB:.1f} -> {b / MIB:.1f} MiB" for _, a, b in checks),
            }
        )
    return out


# --------------------------------------------------------------------------
# the experiment


def run(cfg: Config | Combined, progress: Progress | None = None) -> dict[str, Any]:
    progress = progress or Progress(0)
    parts = cfg.parts if isinstance(cfg, Combined) else (cfg,)
    progress.total = float(sum(len(plan(part)) * part.runs for part in parts))
    if isinstance(cfg, Combined):
        return run_combined(cfg, progress)
    return run_part(cfg, progress)


def run_part(cfg: Config, progress: Progress, label: str = "") -> dict[str, Any]:
    """Every run of one backend's cells (``label`` goes before each cell's
    progress line)."""
    ctx = mp.get_context(cfg.start_method)
    cells = plan(cfg)
    started = time.time()
    t0 = time.monotonic()
    raw: list[dict[str, Any]] = []
    server: dict[str, Any] | None = None
    with contextlib.ExitStack() as stack:
        pg: PgCells | None = None
        if cfg.backend == "postgres":
            progress.describe(
                label + ("starting PostgreSQL" if cfg.pg_url is None else "connecting")
            )
            pg = stack.enter_context(PgCells(cfg.pg_url, fsync=cfg.pg_fsync))
            server = pg.info()
        for run_no in range(1, cfg.runs + 1):
            for cell in cells:
                progress.describe(
                    f"{label}run {run_no}/{cfg.runs} {cell.scenario} {cell.profile} "
                    f"{cell.variant} {cell.side}"
                )
                raw.append(run_cell(cfg, ctx, run_no, cell, pg))
                progress.advance()
    result: dict[str, Any] = {
        "experiment": NAME,
        "backend": cfg.backend,
        "started_at": started,
        "elapsed_s": time.monotonic() - t0,
        "config": cfg.to_json(),
        "raw": raw,
    }
    if server is not None:
        result["server"] = server
    result["summary"] = summarise(raw)
    result["targets"] = targets(cfg, result)
    return result


def _failed_part(cfg: Config, exc: Exception) -> dict[str, Any]:
    """What is left of a backend's part that raised: the error, and empty
    figures, so the other backend's results are still reported and saved."""
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    secret = urlsplit(cfg.pg_url).password if cfg.pg_url else None
    if secret:  # never a password in the results
        text, tb = text.replace(secret, "***"), tb.replace(secret, "***")
    return {
        "experiment": NAME,
        "backend": cfg.backend,
        "config": cfg.to_json(),
        "error": text,
        "traceback": tb,
        "raw": [],
        "summary": [],
        "targets": [],
    }


def run_combined(cfg: Combined, progress: Progress) -> dict[str, Any]:
    """Each backend's part in turn, SQLite's first, into one result whose
    ``results`` holds each backend's as ``run_part`` returns it."""
    started = time.time()
    t0 = time.monotonic()
    results: dict[str, dict[str, Any]] = {}
    for part in cfg.parts:
        done = progress.done
        try:
            results[part.backend] = run_part(part, progress, label=f"{part.backend}: ")
        except Exception as exc:
            # A full SQLite matrix takes a quarter of an hour: a PostgreSQL
            # server that fails to start afterwards must not throw it away.
            results[part.backend] = _failed_part(part, exc)
            progress.set_done(done + len(plan(part)) * part.runs)
    result: dict[str, Any] = {
        "experiment": NAME,
        "backend": ",".join(cfg.backends),
        "backends": list(cfg.backends),
        "started_at": started,
        "elapsed_s": time.monotonic() - t0,
        "config": cfg.to_json(),
        "results": results,
    }
    result["at_a_glance"] = at_a_glance(result)
    return result


def at_a_glance(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The end-to-end jobs/s of every side on every backend of a combined
    run (medians), litegate first in each row: the figures its report's
    summary lines show."""
    out: list[dict[str, Any]] = []
    for backend, part in result["results"].items():
        cfg = part["config"]
        sides = list(cfg["sides"])
        order = ["litegate"] * ("litegate" in sides) + [s for s in sides if s != "litegate"]
        for prof in cfg["e2e_profiles"] if "e2e" in cfg["scenarios"] else ():
            for variant in ("batched", "one-job"):
                for side in order:
                    e = find(part["summary"], "e2e", prof, variant, side)
                    if e is None or e["na"]:
                        continue
                    out.append(
                        {
                            "backend": backend,
                            "profile": prof,
                            "variant": variant,
                            "side": side,
                            "jobs_per_s": median_of(e, "throughput"),
                            "clean": not (
                                e["lost"]
                                or e["duplicates"]
                                or e["unknown"]
                                or e["extra"]
                                or e["setup_errors"]
                                or e["timed_out"]
                                or median_of(e, "errors")
                            ),
                        }
                    )
    return out
