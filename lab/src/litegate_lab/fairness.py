"""``litegate bench fairness``: seed 001, connection pool fairness.

N worker threads share a pool of 5 connections. Each loops: check a
connection out (timeout 5 s), hold it 10 ms (``time.sleep(0.01)``), give it
back, until the cell's total number of requests is done. A checkout that
times out counts as a request (a timeout) and the thread goes on.

Pools:

- ``queue``: a ``queue.Queue`` of 5 ``sqlite3`` connections (get/put), the
  usual home-made pool;
- ``sqlalchemy``: SQLAlchemy's ``QueuePool`` (pool_size=5, max_overflow=0,
  timeout=5, creator = ``sqlite3.connect`` on the same file);
- ``litegate``: litegate's reader pool, ``db.read()`` on
  ``litegate.connect(path, readers=5, timeout=5)``;
- ``litegate-unfair``: the same with ``fair=False`` (newcomers may barge).

Every pool is warmed up (all its connections opened) before the clock starts,
and every (pool, N, run) works on a fresh database in a temporary directory.

The wait of a request is the time its checkout took; a timed-out checkout
counts with the time it waited (about 5 s), so a pool cannot look good by
starving some callers. Throughput is successful checkouts per second of the
cell's wall time; its limit is pool size / hold time = 500/s. The actual
hold time (``time.sleep`` overshoots) is recorded as the harness's own
no-op figure: if it moves, the harness moved, not the pool.

Order (issue 18): each checkout's ask and grant times give how many threads
that asked later were served first (``_stats.overtakes``): OVERTAKEN is the
share of checkouts overtaken at all, WORST OVERTAKES the most any one saw.
A pool that serves in arrival order shows 0 but for the moments between a
thread reading the clock and joining the line; timed-out checkouts, never
served, are left out (TIMEOUTS counts them).

The seed ran 100,000 requests per cell: at 500/s that is 200 s per cell,
over an hour for 4 pools x 5 thread counts. The default here is 10,000
requests per cell (about 20 s each, the whole default run about 7 minutes);
``--requests 100000`` reproduces the seed exactly.
"""

from __future__ import annotations

import argparse
import itertools
import os
import queue
import sqlite3
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import litegate

from . import _stats
from ._args import positive_float, whole_numbers
from ._progress import Progress
from ._report import Column, fmt_ms, fmt_pct, seed_table

NAME = "fairness"
HELP = "seed 001: N threads share a pool of 5 connections, each held 10 ms"

POOLS = ("queue", "sqlalchemy", "litegate", "litegate-unfair")
POOL_TITLES = {
    "queue": "queue.Queue",
    "sqlalchemy": "SQLAlchemy QueuePool",
    "litegate": "litegate",
    "litegate-unfair": "litegate fair=False",
}
FULL_THREADS = (5, 10, 25, 50, 100)
QUICK_THREADS = (5, 50)
DEFAULT_REQUESTS = 10_000
QUICK_REQUESTS = 3_000
FIGURES = (
    "p50_ms",
    "p90_ms",
    "p99_ms",
    "max_ms",
    "stddev_ms",
    "timeouts",
    "throughput",
    "pct_of_limit",
    "hold_p50_ms",
    "pct_of_measured_limit",
    "jain",
    "rsd",
    "worst_overtakes",
    "p99_overtakes",
    "overtaken_share",
)
TARGET_THREADS = 50
TARGET_P99_OVER_P50 = 1.2
TARGET_PCT_OF_LIMIT = 97.0


@dataclass(frozen=True)
class Config:
    pools: tuple[str, ...] = POOLS
    threads: tuple[int, ...] = FULL_THREADS
    requests: int = DEFAULT_REQUESTS
    pool_size: int = 5
    hold_seconds: float = 0.010
    timeout: float = 5.0
    runs: int = 1
    noise_k: float = _stats.NOISE_K

    @property
    def limit_per_s(self) -> float:
        return self.pool_size / self.hold_seconds

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "limit_per_s": self.limit_per_s}


class CheckoutTimeout(Exception):
    """The pool gave no connection within the timeout."""


class Pool(Protocol):
    def checkout(self) -> object: ...
    def checkin(self, token: object) -> None: ...
    def close(self) -> None: ...


class _QueuePool:
    def __init__(self, path: str, size: int, timeout: float) -> None:
        self._timeout = timeout
        self._q: queue.Queue[sqlite3.Connection] = queue.Queue()
        self._all = [sqlite3.connect(path, check_same_thread=False) for _ in range(size)]
        for conn in self._all:
            self._q.put(conn)

    def checkout(self) -> object:
        try:
            return self._q.get(timeout=self._timeout)
        except queue.Empty:
            raise CheckoutTimeout from None

    def checkin(self, token: object) -> None:
        assert isinstance(token, sqlite3.Connection)
        self._q.put(token)

    def close(self) -> None:
        for conn in self._all:
            conn.close()


class _SQLAlchemyPool:
    def __init__(self, path: str, size: int, timeout: float) -> None:
        from sqlalchemy.exc import TimeoutError as SATimeoutError
        from sqlalchemy.pool import QueuePool

        def creator() -> Any:
            return sqlite3.connect(path, check_same_thread=False)

        self._timeout_error = SATimeoutError
        self._pool = QueuePool(creator, pool_size=size, max_overflow=0, timeout=timeout)

    def checkout(self) -> object:
        try:
            return self._pool.connect()
        except self._timeout_error:
            raise CheckoutTimeout from None

    def checkin(self, token: object) -> None:
        token.close()  # type: ignore[attr-defined]

    def close(self) -> None:
        self._pool.dispose()


class _LitegatePool:
    def __init__(self, path: str, size: int, timeout: float, fair: bool) -> None:
        self._db = litegate.connect(path, readers=size, timeout=timeout, fair=fair)

    def checkout(self) -> object:
        block = self._db.read()
        try:
            block.__enter__()
        except litegate.PoolTimeout:
            raise CheckoutTimeout from None
        return block

    def checkin(self, token: object) -> None:
        token.__exit__(None, None, None)  # type: ignore[attr-defined]

    def close(self) -> None:
        self._db.close()


def make_pool(name: str, path: str, size: int, timeout: float) -> Pool:
    if name == "queue":
        return _QueuePool(path, size, timeout)
    if name == "sqlalchemy":
        return _SQLAlchemyPool(path, size, timeout)
    if name == "litegate":
        return _LitegatePool(path, size, timeout, fair=True)
    if name == "litegate-unfair":
        return _LitegatePool(path, size, timeout, fair=False)
    raise ValueError(f"unknown pool {name!r}; pick one of {', '.join(POOLS)}")


def create_database(path: str) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
        conn.execute("INSERT INTO t(v) VALUES ('x')")
    finally:
        conn.close()


@dataclass
class _Worker:
    waits: list[float]  # successful checkouts, seconds
    timeout_waits: list[float]
    holds: list[float]
    done: int = 0
    # when each successful checkout asked and when it got its connection
    asked: list[float] = field(default_factory=list)
    got: list[float] = field(default_factory=list)


def run_cell(
    cfg: Config, pool_name: str, n_threads: int, progress: Progress | None = None
) -> dict[str, Any]:
    """One (pool, N) on a fresh database: raw waits and the run's figures."""
    with tempfile.TemporaryDirectory(prefix="litegate-bench-") as tmp:
        path = os.path.join(tmp, "bench.db")
        create_database(path)
        pool = make_pool(pool_name, path, cfg.pool_size, cfg.timeout)
        try:
            warm = [pool.checkout() for _ in range(cfg.pool_size)]
            for token in warm:
                pool.checkin(token)
            return _drive(cfg, pool, pool_name, n_threads, progress)
        finally:
            pool.close()


def _drive(
    cfg: Config, pool: Pool, pool_name: str, n_threads: int, progress: Progress | None
) -> dict[str, Any]:
    tickets = itertools.count()
    total = cfg.requests
    hold = cfg.hold_seconds
    workers = [_Worker([], [], []) for _ in range(n_threads)]
    start = threading.Barrier(n_threads + 1)
    failures: list[BaseException] = []
    clock = time.monotonic
    sleep = time.sleep

    def loop(w: _Worker) -> None:
        start.wait()
        try:
            while next(tickets) < total:
                t0 = clock()
                try:
                    token = pool.checkout()
                except CheckoutTimeout:
                    w.timeout_waits.append(clock() - t0)
                    w.done += 1
                    continue
                t1 = clock()
                w.waits.append(t1 - t0)
                w.asked.append(t0)
                w.got.append(t1)
                try:
                    sleep(hold)
                    w.holds.append(clock() - t1)
                finally:
                    pool.checkin(token)
                w.done += 1
        except BaseException as exc:  # reported, and the accounting shows it
            failures.append(exc)

    threads = [
        threading.Thread(target=loop, args=(w,), name=f"fair-{i}", daemon=True)
        for i, w in enumerate(workers)
    ]
    for t in threads:
        t.start()
    base = progress.done if progress else 0.0
    start.wait()
    t_start = clock()
    for t in threads:
        while t.is_alive():
            t.join(0.25)
            if progress is not None:
                progress.set_done(base + sum(w.done for w in workers))
    elapsed = clock() - t_start

    waits = [x for w in workers for x in w.waits]
    tw = [x for w in workers for x in w.timeout_waits]
    holds = [x for w in workers for x in w.holds]
    every_wait_ms = [x * 1e3 for x in waits + tw]
    d = _stats.describe(every_wait_ms)
    ok = len(waits)
    hold_p50 = _stats.median(holds) if holds else 0.0
    throughput = ok / elapsed if elapsed > 0 else 0.0
    figures = {
        "p50_ms": d["p50"],
        "p90_ms": d["p90"],
        "p99_ms": d["p99"],
        "max_ms": d["max"],
        "stddev_ms": d["stddev"],
        "mean_ms": d["mean"],
        "timeouts": float(len(tw)),
        "throughput": throughput,
        "pct_of_limit": 100.0 * throughput / cfg.limit_per_s,
        "hold_p50_ms": hold_p50 * 1e3,
        # how evenly the threads shared the checkouts (Jain: 1.0 = equal shares)
        "jain": _stats.jain([len(w.waits) + len(w.timeout_waits) for w in workers]),
        "rsd": _stats.rsd([len(w.waits) + len(w.timeout_waits) for w in workers]),
        # later arrivals served first (0 for a first-come-first-served pool;
        # timed-out checkouts, never served, are not in it)
        **_stats.overtake_figures(
            [x for w in workers for x in w.asked], [x for w in workers for x in w.got]
        ),
        # against the limit the harness allows: pool size / the hold it really got
        "pct_of_measured_limit": (
            100.0 * throughput * hold_p50 / cfg.pool_size if hold_p50 > 0 else 0.0
        ),
    }
    return {
        "pool": pool_name,
        "threads": n_threads,
        "requests": total,
        "checkouts": ok,
        "timeouts": len(tw),
        "elapsed_s": elapsed,
        "figures": figures,
        "per_thread": {
            "checkouts": [len(w.waits) for w in workers],
            "timeouts": [len(w.timeout_waits) for w in workers],
        },
        "threads_with_timeouts": sum(1 for w in workers if w.timeout_waits),
        "failures": [f"{type(e).__name__}: {e}" for e in failures],
        # every raw figure, rounded to the microsecond
        "waits_ms": [round(x * 1e3, 3) for x in waits],
        "timeout_waits_ms": [round(x * 1e3, 3) for x in tw],
        "holds_ms": [round(x * 1e3, 3) for x in holds],
    }


def run(cfg: Config, progress: Progress | None = None) -> dict[str, Any]:
    progress = progress or Progress(0)
    progress.total = float(cfg.runs * len(cfg.pools) * len(cfg.threads) * cfg.requests)
    started = time.time()
    t0 = time.monotonic()
    raw: list[dict[str, Any]] = []
    for run_no in range(1, cfg.runs + 1):
        for n in cfg.threads:
            for pool_name in cfg.pools:
                progress.describe(f"run {run_no}/{cfg.runs} {POOL_TITLES[pool_name]} N={n}")
                cell = run_cell(cfg, pool_name, n, progress)
                raw.append({"run": run_no, **cell})
    result: dict[str, Any] = {
        "experiment": NAME,
        "started_at": started,
        "elapsed_s": time.monotonic() - t0,
        "config": cfg.to_json(),
        "raw": raw,
    }
    result["summary"] = summarise(cfg, raw)
    result["comparisons"] = comparisons(cfg, result["summary"])
    result["targets"] = targets(cfg, result["summary"])
    return result


def summarise(cfg: Config, raw: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for n in cfg.threads:
        for pool_name in cfg.pools:
            mine = [r for r in raw if r["pool"] == pool_name and r["threads"] == n]
            if not mine:
                continue
            figures = {
                name: _stats.summarise([r["figures"][name] for r in mine]).to_json()
                for name in FIGURES
            }
            out.append(
                {
                    "pool": pool_name,
                    "threads": n,
                    "runs": len(mine),
                    "figures": figures,
                    "requests_accounted": all(
                        r["checkouts"] + r["timeouts"] == r["requests"] for r in mine
                    ),
                    "failures": sorted({f for r in mine for f in r["failures"]}),
                }
            )
    return out


def _summary(entry: dict[str, Any], fig: str) -> _stats.Summary:
    s = entry["figures"][fig]
    return _stats.Summary(s["n"], s["median"], s["cv"], s["min"], s["max"], tuple(s["values"]))


def comparisons(cfg: Config, summary: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """litegate against every other pool, per N, on p99 and throughput."""
    out: list[dict[str, Any]] = []
    index = {(e["pool"], e["threads"]): e for e in summary}
    for n in cfg.threads:
        lg = index.get(("litegate", n))
        if lg is None:
            continue
        for pool_name in cfg.pools:
            e = index.get((pool_name, n))
            if pool_name == "litegate" or e is None:
                continue
            for fig in ("p99_ms", "throughput"):
                cmp = _stats.compare(_summary(e, fig), _summary(lg, fig), cfg.noise_k)
                out.append(
                    {
                        "threads": n,
                        "figure": fig,
                        "baseline_name": pool_name,
                        "candidate_name": "litegate",
                        **cmp.to_json(),
                    }
                )
    return out


def targets(cfg: Config, summary: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The design brief's pool target at 50 threads (reported, not asserted)."""
    e = next(
        (x for x in summary if x["pool"] == "litegate" and x["threads"] == TARGET_THREADS), None
    )
    if e is None:
        return []
    med = {k: float(v["median"]) for k, v in e["figures"].items()}
    ratio = med["p99_ms"] / med["p50_ms"] if med["p50_ms"] > 0 else float("inf")
    return [
        {"target": "0 timeouts", "value": med["timeouts"], "met": med["timeouts"] == 0},
        {
            "target": f"p99 <= {TARGET_P99_OVER_P50} x p50",
            "value": ratio,
            "met": ratio <= TARGET_P99_OVER_P50,
        },
        {
            "target": f">= {TARGET_PCT_OF_LIMIT:g} % of the {cfg.limit_per_s:g}/s limit",
            "value": med["pct_of_limit"],
            "met": med["pct_of_limit"] >= TARGET_PCT_OF_LIMIT,
        },
    ]


# --------------------------------------------------------------------------
# output

COLUMNS = (
    Column("POOL", "left"),
    Column("THREADS"),
    Column("P50"),
    Column("P90"),
    Column("P99"),
    Column("MAX"),
    Column("STDDEV"),
    Column("TIMEOUTS"),
    Column("CHECKOUTS/S"),
    Column("JAIN"),
    Column("OVERTAKEN"),
    Column("WORST OVERTAKES"),
    Column("% OF LIMIT"),
)
_SHOWN = (
    "p50_ms", "p90_ms", "p99_ms", "max_ms", "stddev_ms", "timeouts", "throughput", "jain",
    "overtaken_share", "worst_overtakes",
)  # fmt: skip


def _row(e: dict[str, Any], *, cv: bool) -> list[str]:
    row = [POOL_TITLES.get(e["pool"], e["pool"]), str(e["threads"])]
    for fig in (*_SHOWN, "pct_of_limit"):
        s = e["figures"][fig]
        if cv:
            row.append(fmt_pct(s["cv"]))
        elif fig in ("timeouts", "throughput", "worst_overtakes"):
            row.append(fmt_ms(s["median"]))
        elif fig == "overtaken_share":
            row.append(fmt_pct(s["median"]))
        elif fig == "jain":
            row.append(f"{s['median']:.3f}")
        else:
            row.append(fmt_ms(s["median"], 1))
    return row


def render(result: dict[str, Any]) -> str:
    cfg = result["config"]
    runs = int(cfg["runs"])
    summary: list[dict[str, Any]] = result["summary"]
    what = f"median of {runs} runs" if runs > 1 else "one run"
    hold_ms = cfg["hold_seconds"] * 1e3
    parts = [
        f"fairness (seed 001): {what}; {cfg['requests']:,} requests per cell, pool of "
        f"{cfg['pool_size']}, hold {hold_ms:g} ms, checkout timeout {cfg['timeout']:g} s; "
        f"waits in ms (timed-out checkouts included); limit {cfg['limit_per_s']:g} checkouts/s",
        "",
    ]
    groups = [[_row(e, cv=False) for e in summary if e["threads"] == n] for n in cfg["threads"]]
    parts.append(seed_table(COLUMNS, groups))
    parts.append(
        "OVERTAKEN: checkouts that a thread arriving later got ahead of; WORST OVERTAKES: "
        "the most later arrivals one checkout saw served first (a first-come-first-served "
        "pool: 0, but for a thread that read the clock and was preempted before it joined "
        "the line)"
    )
    if runs > 1:
        parts.append("")
        parts.append(f"-- coefficient of variation across {runs} runs (seed 002)")
        cv_groups = [
            [_row(e, cv=True) for e in summary if e["threads"] == n] for n in cfg["threads"]
        ]
        parts.append(seed_table(COLUMNS, cv_groups))
        parts.extend(_comparison_lines(result))
    holds = [e["figures"]["hold_p50_ms"]["median"] for e in summary]
    if holds:
        parts.append("")
        parts.append(
            f"harness no-op tell: the {hold_ms:g} ms hold actually took "
            f"{min(holds):.3f}..{max(holds):.3f} ms (median per cell)"
        )
    bad = [e for e in summary if not e["requests_accounted"] or e["failures"]]
    for e in bad:
        parts.append(
            f"WARNING {e['pool']} N={e['threads']}: requests not all accounted for "
            f"or worker failures: {e['failures']}"
        )
    parts.append("")
    parts.extend(target_lines(result))
    return "\n".join(parts)


def _comparison_lines(result: dict[str, Any]) -> list[str]:
    cmps = result["comparisons"]
    if not cmps:
        return []
    k = result["config"]["noise_k"]
    ns = list(dict.fromkeys(c["threads"] for c in cmps))
    lines = [""]
    for fig, unit in (("p99_ms", "ms"), ("throughput", "checkouts/s")):
        pools = list(dict.fromkeys(c["baseline_name"] for c in cmps if c["figure"] == fig))
        rows = []
        for pool_name in pools:
            row = [POOL_TITLES.get(pool_name, pool_name)]
            for n in ns:
                c = next(
                    (
                        c
                        for c in cmps
                        if (c["figure"], c["baseline_name"], c["threads"]) == (fig, pool_name, n)
                    ),
                    None,
                )
                row.append(
                    "-" if c is None else f"{c['delta']:+.1f}" + ("~" if c["within_noise"] else "")
                )
            rows.append(row)
        cols = [Column("POOL", "left"), *(Column(f"N={n}") for n in ns)]
        lines.append(f"-- {fig}: litegate minus POOL ({unit}; ~ = within noise, {k:g} x CV)")
        lines.append(seed_table(cols, [rows]))
        lines.append("")
    return lines[:-1]


def target_lines(result: dict[str, Any]) -> list[str]:
    ts = result["targets"]
    if not ts:
        return [f"targets: not checked (they are for N={TARGET_THREADS}, which did not run)"]
    lines = [f"targets (litegate, N={TARGET_THREADS}, medians; reported, not asserted):"]
    for t in ts:
        lines.append(f"  [{'met ' if t['met'] else 'MISS'}] {t['target']}: {t['value']:.2f}")
    return lines


def charts(result: dict[str, Any], out: Path) -> list[Path]:
    from ._charts import HistPanel, histograms, lines

    cfg = result["config"]
    paths = []
    for pool_name in cfg["pools"]:
        panels = []
        for n in cfg["threads"]:
            raws = [r for r in result["raw"] if r["pool"] == pool_name and r["threads"] == n]
            e = next(
                (x for x in result["summary"] if x["pool"] == pool_name and x["threads"] == n),
                None,
            )
            if not raws or e is None:
                continue
            vals = [v for r in raws for v in r["waits_ms"] + r["timeout_waits_ms"]]
            f = e["figures"]
            panels.append(
                HistPanel(
                    label=f"{n} threads",
                    values=vals,
                    marks={"p50": f["p50_ms"]["median"], "p99": f["p99_ms"]["median"]},
                    note=f"timeouts {f['timeouts']['median']:.0f}, "
                    f"{f['pct_of_limit']['median']:.1f} % of limit",
                )
            )
        if panels:
            paths.append(
                histograms(
                    out / f"fairness-{pool_name}.png",
                    title=f"seed 001: checkout wait, {POOL_TITLES[pool_name]} "
                    f"(pool {cfg['pool_size']}, hold {cfg['hold_seconds'] * 1e3:g} ms)",
                    panels=panels,
                    xlabel="wait for a connection (ms)",
                )
            )
    series: dict[str, list[float]] = {}
    for pool_name in cfg["pools"]:
        ys = []
        for n in cfg["threads"]:
            e = next(
                (x for x in result["summary"] if x["pool"] == pool_name and x["threads"] == n),
                None,
            )
            ys.append(float("nan") if e is None else e["figures"]["p99_ms"]["median"])
        series[POOL_TITLES[pool_name]] = ys
    if series and cfg["threads"]:
        paths.append(
            lines(
                out / "fairness-p99.png",
                title="seed 001: p99 checkout wait by thread count",
                x=[float(n) for n in cfg["threads"]],
                series=series,
                xlabel="threads",
                ylabel="p99 wait, ms (symlog)",
            )
        )
    return paths


# --------------------------------------------------------------------------
# command line


def _pools(text: str) -> tuple[str, ...]:
    items = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [x for x in items if x not in POOLS]
    if bad or not items:
        raise argparse.ArgumentTypeError(f"pick from {', '.join(POOLS)}, got {text!r}")
    return items


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--pools",
        type=_pools,
        default=POOLS,
        metavar="LIST",
        help=f"comma-separated pools (default: all: {','.join(POOLS)})",
    )
    p.add_argument(
        "--threads",
        type=whole_numbers(),
        default=None,
        metavar="N,...",
        help="worker thread counts (default 5,10,25,50,100; --quick: 5,50)",
    )
    p.add_argument(
        "--requests",
        type=int,
        default=None,
        metavar="N",
        help=f"requests per (pool, threads) cell (default {DEFAULT_REQUESTS:,}: about 20 s a "
        f"cell, the whole default run about 7 minutes; --quick: {QUICK_REQUESTS:,}; the seed "
        "used 100,000, i.e. 200 s a cell)",
    )
    p.add_argument(
        "--pool-size", type=int, default=5, metavar="N", help="connections in the pool (5)"
    )
    p.add_argument(
        "--hold-ms",
        type=positive_float,
        default=10.0,
        metavar="MS",
        help="how long each request holds its connection (10)",
    )
    p.add_argument(
        "--timeout",
        type=positive_float,
        default=5.0,
        metavar="S",
        help="checkout timeout in seconds (5)",
    )


def config_from_args(args: argparse.Namespace) -> Config:
    requests = args.requests
    if requests is None:
        requests = QUICK_REQUESTS if args.quick else DEFAULT_REQUESTS
    threads = args.threads
    if threads is None:
        threads = QUICK_THREADS if args.quick else FULL_THREADS
    if requests < 1 or args.pool_size < 1 or args.hold_ms <= 0 or args.timeout <= 0:
        raise ValueError("--requests and --pool-size must be >= 1, --hold-ms and --timeout > 0")
    return Config(
        pools=tuple(args.pools),
        threads=tuple(threads),
        requests=requests,
        pool_size=args.pool_size,
        hold_seconds=args.hold_ms / 1e3,
        timeout=args.timeout,
        runs=args.runs,
        noise_k=args.noise_k,
    )
