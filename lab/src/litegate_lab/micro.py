"""``litegate bench micro``: seed 002's micro-benchmarks and write throughput.

Part 1, latency per operation (seed 002's workloads), litegate next to plain
``sqlite3`` on the same machine in the same run, each on a fresh database:

- ``single_insert``: one-row INSERT, its own transaction
  (``db.execute`` / a stdlib connection in autocommit mode);
- ``merge_rounds``: a 100-row ``INSERT OR REPLACE`` batch in one transaction
  (``db.executemany`` / ``BEGIN``; ``executemany``; ``COMMIT``);
- ``noop_execute``: ``UPDATE … WHERE 1 = 0``, a write that changes nothing:
  the regression tell for the write path (seed 002: if a no-op regresses, the
  per-operation cost is real);
- ``noop_select``: ``SELECT … WHERE 1 = 0``, the same tell for reads;
- ``point_query``: one row by primary key (``db.query`` through the pool);
- ``orm_read_write``: an ORM transaction that reads a row and writes it
  back (``with Session(engine) as s, s.begin(): c = s.get(...); c.n += 1``),
  through ``sqlite+litegate`` against SQLAlchemy's stock ``sqlite://``
  driver with the same PRAGMAs (``--compare`` passes ``profile`` and
  ``timeout`` to the dialect; the rest does not apply to it).

p50/p90/p99/max in microseconds. ``--runs N`` gives the median of each
percentile across runs and its coefficient of variation (never trust one
run's p99 or max). ``--compare A B`` runs two litegate configurations instead
(say ``checkpoints=true`` against ``checkpoints=false``, or
``profile=balanced`` against ``profile=aggressive``) and marks every delta
inside the noise band.

Part 2, write throughput, each scenario against its own baseline in the same
run:

- ``durable``: ``synchronous=FULL`` (profile ``conservative``); 32 threads
  calling ``db.execute`` against one transaction per write behind a mutex;
- ``asyncio``: 1,000 tasks awaiting one-row writes through ``litegate.aio``
  against one transaction per write on one connection thread (the aiosqlite
  pattern);
- ``threads``: ``synchronous=NORMAL``, 8 threads calling ``db.execute``
  against 8 threads sharing a mutex and one transaction per write, and
  against one thread alone.

With threads (durable, threads), each side also has Jain's index and the RSD
over the threads' counts of finished writes when the first thread was done
(``_Completions``): how evenly the threads shared the writes. Each write
stores when its thread asked, so the rowids give the order figures too: how
many writes a later one committed before (``_stats.overtakes``; 0 for a
first-come-first-served lock), and for litegate the share of the gate's
grants forced by a head's spent budget (``db.stats()["gate"]``). litegate
runs a second time with ``fair="strict"`` in the same run, for comparison.

Part 3, the single-insert tail: 100,000 inserts in a row with the
background checkpointer on; the slowest ones are matched against what
overlapped them (a Python garbage collection, a checkpoint).

Part 4, the cross-process hand-off: 2 spawned processes each run
``--handoffs`` one-statement ``db.write()`` blocks back to back, so the gate
alternates between them. A hand-off is the time from the last moment one
process is inside its block to the first moment the other is inside its
next one (so it includes the COMMIT, the release, the wake-up across
processes and ``BEGIN IMMEDIATE``); CLOCK_MONOTONIC is shared by the
processes. p50/p99/max in microseconds.

Part 5, processes: P single-threaded processes (P = 2, 4, 8) writing
one-row transactions for a few seconds, plain ``sqlite3`` (busy_timeout), one
OFD lock around ``sqlite3``, and litegate strict, bounded (the default) and
unfair side by side: writes per second, Jain's index over the processes,
p50/p99/max per write, and the gate's share of forced hand-offs (see
``_writers.py``). ``--procs 1`` runs each side alone, the ceiling that
taking turns is measured against. ``--grant-log`` logs every grant of the
litegate sides and checks the fairness bounds on the log (``litegate.diagnostics.check_grants``).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import os
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing, contextmanager, suppress
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import litegate
import litegate.aio

from . import _profile, _writers
from ._args import whole_numbers
from ._procs import reap
from ._progress import Progress
from ._report import Column, combine_grant_logs, fmt_pct, render_grant_logs, seed_table
from ._stats import compare, describe, jain, median, overtake_figures, rsd, summarise

NAME = "micro"
HELP = "seed 002: per-operation latency vs plain sqlite3, write throughput, insert tail"

WORKLOADS = (
    "single_insert",
    "merge_rounds",
    "noop_execute",
    "noop_select",
    "point_query",
    "orm_read_write",
)
FIGURES = ("p50", "p90", "p99", "max")
ROWS = 10_000  # rows in the table the reads and merges work on


@dataclass
class Config:
    ops: int = 20_000  # measured operations per workload and side
    warmup: int = 500
    runs: int = 1
    tail_inserts: int = 100_000
    durable_writes: int = 150  # per thread, 32 threads
    async_writes: int = 20  # per task, 1,000 tasks
    thread_writes: int = 2_500  # per thread, 8 threads
    compare: tuple[str, str] | None = None
    parts: tuple[str, ...] = ("latency", "throughput", "tail", "handoff", "processes")
    handoffs: int = 2_000  # write blocks per process in the hand-off part
    procs: tuple[int, ...] = (2, 4, 8)  # the processes part: how many writers
    proc_seconds: float = 3.0  # ... writing for this long, each side
    proc_sides: tuple[str, ...] = _writers.SIDES
    proc_sync: str = "NORMAL"  # the processes part's synchronous setting
    asker_trials: int = 15  # the processes part: one process asking past two writers
    grant_log: bool = False  # the processes part: log every grant, check the bounds on it
    noise_k: float = 2.0
    extra: dict[str, Any] = field(default_factory=dict)


def parse_setting(text: str) -> dict[str, Any]:
    """``"checkpoints=false,profile=aggressive"`` -> connect() keyword arguments;
    ``pragma.NAME=VALUE`` items go into ``pragmas`` (``pragma.mmap_size=134217728``)."""
    out: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, raw = part.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"expected KEY=VALUE, got {part!r}")
        value: Any = raw.strip()
        low = value.lower()
        if low in ("true", "on", "yes"):
            value = True
        elif low in ("false", "off", "no"):
            value = False
        else:
            try:
                value = int(value)
            except ValueError:
                with suppress(ValueError):
                    value = float(value)
        key = key.strip()
        if key.startswith("pragma."):
            out.setdefault("pragmas", {})[key.removeprefix("pragma.")] = value
        else:
            out[key] = value
    return out


# -- part 1: latency ---------------------------------------------------------


@contextmanager
def fresh_dir() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="litegate-micro-") as d:
        yield d


def _setup(conn_execute: Callable[..., Any]) -> None:
    conn_execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
    conn_execute("CREATE TABLE m(id INTEGER PRIMARY KEY, v TEXT)")


def _timed(fn: Callable[[int], Any], n: int, warmup: int) -> list[float]:
    for i in range(warmup):
        fn(i)
    out = [0.0] * n
    clock = time.perf_counter_ns
    for i in range(n):
        t0 = clock()
        fn(i)
        out[i] = (clock() - t0) / 1000.0  # microseconds
    return out


def _litegate_ops(db: litegate.Database) -> dict[str, Callable[[int], Any]]:
    merge = [(i, f"m{i}") for i in range(100)]
    return {
        "single_insert": lambda i: db.execute("INSERT INTO t(v) VALUES (?)", ("x",)),
        "merge_rounds": lambda i: db.executemany(
            "INSERT OR REPLACE INTO m(id, v) VALUES (?, ?)", merge
        ),
        "noop_execute": lambda i: db.execute("UPDATE t SET v = 'y' WHERE 1 = 0"),
        "noop_select": lambda i: db.query("SELECT v FROM t WHERE 1 = 0"),
        "point_query": lambda i: db.query("SELECT v FROM t WHERE id = ?", (i % ROWS + 1,)),
    }


def _sqlite_ops(conn: sqlite3.Connection) -> dict[str, Callable[[int], Any]]:
    merge = [(i, f"m{i}") for i in range(100)]

    def merge_round(i: int) -> None:
        conn.execute("BEGIN")
        conn.executemany("INSERT OR REPLACE INTO m(id, v) VALUES (?, ?)", merge)
        conn.execute("COMMIT")

    return {
        "single_insert": lambda i: conn.execute("INSERT INTO t(v) VALUES (?)", ("x",)),
        "merge_rounds": merge_round,
        "noop_execute": lambda i: conn.execute("UPDATE t SET v = 'y' WHERE 1 = 0"),
        "noop_select": lambda i: conn.execute("SELECT v FROM t WHERE 1 = 0").fetchall(),
        "point_query": lambda i: conn.execute(
            "SELECT v FROM t WHERE id = ?", (i % ROWS + 1,)
        ).fetchall(),
    }


# litegate's default profile, for the plain sqlite3 side.
_SQLITE_PRAGMAS = (
    "journal_mode = WAL",
    "synchronous = NORMAL",
    "cache_size = -20000",
    "temp_store = MEMORY",
    "foreign_keys = ON",
)


def _open_sqlite(path: str) -> sqlite3.Connection:
    """Plain stdlib, set up like litegate's default profile (WAL, NORMAL)."""
    conn = sqlite3.connect(path, isolation_level=None)
    for pragma in _SQLITE_PRAGMAS:
        conn.execute(f"PRAGMA {pragma}")
    return conn


@functools.cache
def _orm_counter() -> Any:
    """The ORM row's model (SQLAlchemy is imported only for this row)."""
    from sqlalchemy import Integer
    from sqlalchemy.orm import DeclarativeBase, mapped_column

    class Base(DeclarativeBase):
        pass

    class Counter(Base):
        __tablename__ = "orm_counter"
        # no annotations: they would be strings here, resolved in the module
        id = mapped_column(Integer, primary_key=True)
        n = mapped_column(Integer, nullable=False)

    return Counter


def _orm_engine(side: str, path: str, settings: dict[str, Any]) -> Any:
    """SQLAlchemy's stock driver set up like ``_open_sqlite``, or
    ``sqlite+litegate`` with the same PRAGMAs (its "default" profile)."""
    from sqlalchemy import create_engine, event

    if side == "sqlite3":
        engine = create_engine(f"sqlite:///{path}")

        @event.listens_for(engine, "connect")
        def pragmas(dbapi_connection: Any, _record: Any) -> None:
            for pragma in _SQLITE_PRAGMAS:
                dbapi_connection.execute(f"PRAGMA {pragma}")

    else:
        args = {k: settings[k] for k in ("profile", "timeout") if k in settings}
        args.setdefault("profile", "default")
        engine = create_engine(f"sqlite+litegate:///{path}", connect_args=args)
    counter = _orm_counter()
    counter.metadata.create_all(engine)
    return engine


def _orm_read_write(engine: Any) -> Callable[[int], None]:
    from sqlalchemy.orm import Session

    counter = _orm_counter()
    with Session(engine) as s, s.begin():
        s.add(counter(id=1, n=0))

    def one(i: int) -> None:
        with Session(engine) as s, s.begin():
            c = s.get(counter, 1)
            assert c is not None
            c.n = c.n + 1

    return one


def _profile_workload(workload: str, path: str) -> tuple[Callable[[int], Any], Callable[[], None]]:
    """One latency workload's litegate call for ``bench micro --profile``, on a
    fresh database at ``path``; the core's checkpointer is off (its thread
    would charge its work to whatever the caller was running). The ORM
    workload goes through the ``sqlite+litegate`` dialect."""
    if workload == "orm_read_write":
        engine = _orm_engine("litegate", path, {})
        return _orm_read_write(engine), engine.dispose
    db = litegate.connect(path, checkpoints=False)
    _setup(db.execute)
    db.executemany("INSERT INTO t(v) VALUES (?)", [("x",)] * ROWS)
    return _litegate_ops(db)[workload], db.close


def run_latency_side(
    side: str, settings: dict[str, Any], cfg: Config
) -> dict[str, dict[str, float]]:
    """One side (``sqlite3`` or a litegate configuration), every workload, on
    a fresh database each."""
    out: dict[str, dict[str, float]] = {}
    for workload in WORKLOADS:
        with fresh_dir() as d:
            path = os.path.join(d, "micro.db")
            if workload == "orm_read_write":
                engine = _orm_engine(side, path, settings)
                try:
                    samples = _timed(_orm_read_write(engine), cfg.ops, cfg.warmup)
                finally:
                    engine.dispose()
            elif side == "sqlite3":
                conn = _open_sqlite(path)
                _setup(conn.execute)
                conn.executemany("INSERT INTO t(v) VALUES (?)", [("x",)] * ROWS)
                samples = _timed(_sqlite_ops(conn)[workload], cfg.ops, cfg.warmup)
                conn.close()
            else:
                db = litegate.connect(path, **settings)
                _setup(db.execute)
                db.executemany("INSERT INTO t(v) VALUES (?)", [("x",)] * ROWS)
                samples = _timed(_litegate_ops(db)[workload], cfg.ops, cfg.warmup)
                db.close()
        out[workload] = describe(samples)
    return out


# -- part 2: throughput --------------------------------------------------------


def _threads(n: int, body: Callable[[int], None]) -> float:
    """Run ``body(k)`` on n threads started together; wall seconds."""
    start = threading.Barrier(n + 1)
    errors: list[BaseException] = []

    def wrap(k: int) -> None:
        start.wait()
        try:
            body(k)
        except BaseException as exc:
            errors.append(exc)

    ts = [threading.Thread(target=wrap, args=(k,)) for k in range(n)]
    for t in ts:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return elapsed


class _Completions:
    """Each thread's count of finished writes, frozen when the first thread
    has done all of its own. Every thread writes a fixed number, so the
    counts at the end are equal whatever happened; while all of them still
    compete, the counts say how evenly they shared the lock (a thread that
    takes it back again and again finishes first, the others far behind)."""

    def __init__(self, threads: int) -> None:
        self.counts = [0] * threads  # thread k alone writes counts[k]
        self.first: list[int] | None = None
        self._lock = threading.Lock()

    def finished(self) -> None:
        with self._lock:
            if self.first is None:
                self.first = list(self.counts)

    def figures(self, side: str) -> dict[str, Any]:
        counts = self.first if self.first is not None else self.counts
        return {
            f"{side}_counts": counts,
            f"{side}_jain": jain(counts),
            f"{side}_rsd": rsd(counts),
        }


# Each write stores when its thread asked (CLOCK_MONOTONIC, ns): the rowids
# then give the commit order, so the order figures need no lock of their own.
INSERT_ASKED = "INSERT INTO w(v) VALUES (?)"


def _mutex_writer(path: str, synchronous: str) -> tuple[sqlite3.Connection, Callable[[int], None]]:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("CREATE TABLE IF NOT EXISTS w(id INTEGER PRIMARY KEY, v INTEGER)")
    lock = threading.Lock()

    def write_one(asked: int) -> None:
        with lock:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(INSERT_ASKED, (asked,))
            conn.execute("COMMIT")

    return conn, write_one


def _count(path: str) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT count(*) FROM w").fetchone()[0])


def _order(path: str, side: str) -> dict[str, float]:
    """How far the commit order strayed from the order the writes were
    asked in (``_stats.overtake_figures``; the rowids are the commit order)."""
    with closing(sqlite3.connect(path)) as conn:
        asked = [int(v) for (v,) in conn.execute("SELECT v FROM w ORDER BY id")]
    figures = overtake_figures(asked, range(len(asked)))
    return {f"{side}_{key}": value for key, value in figures.items()}


def _litegate_threads(
    threads: int, per_thread: int, profile: str, fair: bool | str, side: str
) -> dict[str, Any]:
    """litegate's side of :func:`throughput_threads` with the gate's policy
    ``fair``; figures keyed ``<side>_...``."""
    done = _Completions(threads)
    clock = time.monotonic_ns
    with fresh_dir() as d:
        path = os.path.join(d, "lg.db")
        db = litegate.connect(path, profile=profile, timeout=60, fair=fair)
        db.execute("CREATE TABLE w(id INTEGER PRIMARY KEY, v INTEGER)")

        def lg(k: int) -> None:
            for _ in range(per_thread):
                db.execute(INSERT_ASKED, (clock(),))
                done.counts[k] += 1
            done.finished()

        seconds = _threads(threads, lg)
        stats = db.stats()
        db.close()
        assert _count(path) == threads * per_thread
        order = _order(path, side)
    gate = stats["gate"]
    return {
        f"{side}_seconds": seconds,
        f"{side}_batch_mean": float(stats["writes"]["group_commit"]["mean"]),
        # the gate's grants forced by a head's spent budget, per grant to a
        # group commit's batch (one process: every hand-off is in-process; the
        # checkpointer's few turns count among the hand-offs, not the grants)
        f"{side}_handoff_share": int(gate["handoffs"]) / max(1, int(gate["count"])),
        **done.figures(side),
        **order,
    }


def throughput_threads(
    threads: int, per_thread: int, profile: str, synchronous: str
) -> dict[str, Any]:
    """litegate (``db.execute`` from n threads) against a mutex around one
    transaction per write; writes per second, each on a fresh database, and
    per side the threads' counts of finished writes when the first of them
    was done, with Jain's index and the RSD over them (``_Completions``).
    litegate runs twice: with the default policy (bounded) and, as a
    comparison, ``fair="strict"`` (``strict_...``)."""
    total = threads * per_thread
    lg = _litegate_threads(threads, per_thread, profile, True, "litegate")
    strict = _litegate_threads(threads, per_thread, profile, "strict", "strict")
    mx_done = _Completions(threads)
    clock = time.monotonic_ns
    with fresh_dir() as d:
        path = os.path.join(d, "mutex.db")
        conn, write_one = _mutex_writer(path, synchronous)

        def mx(k: int) -> None:
            for _ in range(per_thread):
                write_one(clock())
                mx_done.counts[k] += 1
            mx_done.finished()

        mx_s = _threads(threads, mx)
        conn.close()
        assert _count(path) == total
        mx_order = _order(path, "baseline")
    lg_s, strict_s = lg.pop("litegate_seconds"), strict.pop("strict_seconds")
    return {
        "writes": total,
        "litegate_per_s": total / lg_s,
        "baseline_per_s": total / mx_s,
        "ratio": mx_s / lg_s,
        "strict_per_s": total / strict_s,
        "strict_ratio": mx_s / strict_s,
        "batch_mean": lg.pop("litegate_batch_mean"),
        **lg,
        **strict,
        **mx_done.figures("baseline"),
        **mx_order,
    }


def throughput_single(writes: int, synchronous: str) -> float:
    """One thread, one transaction per write, no lock: the raw rate."""
    with fresh_dir() as d:
        path = os.path.join(d, "single.db")
        conn, write_one = _mutex_writer(path, synchronous)
        clock = time.monotonic_ns
        t0 = time.perf_counter()
        for _ in range(writes):
            write_one(clock())  # (as the threads do: the same statement, the same clock read)
        elapsed = time.perf_counter() - t0
        conn.close()
    return writes / elapsed


def throughput_asyncio(tasks: int, per_task: int) -> dict[str, float]:
    """1,000 tasks: litegate.aio against one connection thread, one
    transaction per write (how aiosqlite runs every statement)."""
    total = tasks * per_task

    async def with_litegate(path: str) -> float:
        db = await litegate.aio.connect(path, timeout=120)
        await db.execute("CREATE TABLE w(id INTEGER PRIMARY KEY, v TEXT)")

        async def task() -> None:
            for _ in range(per_task):
                await db.execute("INSERT INTO w(v) VALUES ('x')")

        t0 = time.perf_counter()
        await asyncio.gather(*(task() for _ in range(tasks)))
        elapsed = time.perf_counter() - t0
        await db.close()
        return elapsed

    async def with_one_thread(path: str) -> float:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("CREATE TABLE w(id INTEGER PRIMARY KEY, v TEXT)")
        thread = ThreadPoolExecutor(max_workers=1)
        loop = asyncio.get_running_loop()

        def write_one() -> None:
            conn.execute("INSERT INTO w(v) VALUES ('x')")  # autocommit: one transaction

        async def task() -> None:
            for _ in range(per_task):
                await loop.run_in_executor(thread, write_one)

        t0 = time.perf_counter()
        await asyncio.gather(*(task() for _ in range(tasks)))
        elapsed = time.perf_counter() - t0
        thread.shutdown()
        conn.close()
        return elapsed

    with fresh_dir() as d:
        lg_s = asyncio.run(with_litegate(os.path.join(d, "lg.db")))
        assert _count(os.path.join(d, "lg.db")) == total
    with fresh_dir() as d:
        base_s = asyncio.run(with_one_thread(os.path.join(d, "one.db")))
        assert _count(os.path.join(d, "one.db")) == total
    return {
        "writes": total,
        "litegate_per_s": total / lg_s,
        "baseline_per_s": total / base_s,
        "ratio": base_s / lg_s,
    }


# -- part 3: the insert tail -------------------------------------------------------


def _tail_table(execute: Callable[[str], Any], warmup: int) -> None:
    execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
    for _ in range(warmup):
        execute("INSERT INTO t(v) VALUES ('x')")


def _timed_inserts(execute: Callable[[str], Any], n: int) -> tuple[list[float], list[float]]:
    """``n`` single-row inserts in a row: each one's start and seconds."""
    starts = [0.0] * n
    lat = [0.0] * n
    clock = time.perf_counter
    for i in range(n):
        t0 = clock()
        execute("INSERT INTO t(v) VALUES ('x')")
        starts[i] = t0
        lat[i] = clock() - t0
    return starts, lat


def run_tail(n: int, warmup: int) -> dict[str, Any]:
    """``n`` single inserts in a row, checkpointer on; the slowest matched
    against garbage collections and checkpoints that overlapped them. Then
    the baseline in the same run: the same inserts on plain ``sqlite3`` set
    up alike, whose checkpoints run inside the commit that crosses
    ``wal_autocheckpoint`` (what litegate moves off the commit path)."""
    gcs: list[tuple[float, float]] = []
    gc_start: list[float] = [0.0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            gc_start[0] = time.perf_counter()
        else:
            gcs.append((gc_start[0], time.perf_counter() - gc_start[0]))

    with fresh_dir() as d:
        db = litegate.connect(os.path.join(d, "tail.db"))
        _tail_table(db.execute, warmup)
        gc.callbacks.append(on_gc)
        try:
            starts, lat = _timed_inserts(db.execute, n)
        finally:
            gc.callbacks.remove(on_gc)
        state = db._process_state()
        events = list(state.checkpointer.events) if state.checkpointer else []
        ckpt = db.stats()["checkpoints"]
        db.close()
    with fresh_dir() as d, closing(_open_sqlite(os.path.join(d, "tail.db"))) as conn:
        _tail_table(conn.execute, warmup)
        _, plain = _timed_inserts(conn.execute, n)

    def overlaps(t0: float, dur: float) -> list[str]:
        t1 = t0 + dur
        found = [f"gc {d * 1e3:.2f} ms" for s, d in gcs if s < t1 and s + d > t0]
        found += [
            f"{kind} checkpoint {d * 1e3:.2f} ms" for kind, s, d in events if s < t1 and s + d > t0
        ]
        return found or ["nothing recorded (scheduler, page cache, Python)"]

    # The inserts that overlapped no checkpoint: what the commit path alone
    # gives. (Spans sorted by start: if the first one left that ends after
    # the insert starts begins after it ends, so do all the later ones.)
    spans = sorted((s, s + dur) for _, s, dur in events)
    outside = []
    k = 0
    for i in range(n):
        t0, t1 = starts[i], starts[i] + lat[i]
        while k < len(spans) and spans[k][1] <= t0:
            k += 1
        if k == len(spans) or spans[k][0] >= t1:
            outside.append(lat[i] * 1e6)
    slowest = sorted(range(n), key=lat.__getitem__, reverse=True)[:5]
    us = [x * 1e6 for x in lat]
    return {
        **describe(us),
        "slowest": [{"us": us[i], "made_of": overlaps(starts[i], lat[i])} for i in slowest],
        "gc_count": len(gcs),
        "checkpoints": ckpt,
        "outside_checkpoints": describe(outside) if outside else None,
        "sqlite3": describe([x * 1e6 for x in plain]),
    }


# -- the experiment --------------------------------------------------------------------


def _handoff_child(path: str, n: int, barrier: Any, out: Any) -> None:
    db = litegate.connect(path, readers=1, timeout=120)
    stamps: list[tuple[float, float]] = []
    clock = time.perf_counter  # CLOCK_MONOTONIC: one clock for every process
    barrier.wait(60)
    for _ in range(n):
        with db.write() as conn:
            first = clock()
            conn.execute("UPDATE h SET n = n + 1")
            last = clock()
        stamps.append((first, last))
    out.put((os.getpid(), stamps))
    db.close()


def run_handoff(n: int) -> dict[str, Any]:
    """Part 4: 2 processes alternating the gate; hand-off latencies (us)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    with fresh_dir() as d:
        path = os.path.join(d, "handoff.db")
        with litegate.connect(path) as db:
            db.execute("CREATE TABLE h (n INTEGER)")
            db.execute("INSERT INTO h VALUES (0)")
        barrier, out = ctx.Barrier(2), ctx.Queue()
        procs = [ctx.Process(target=_handoff_child, args=(path, n, barrier, out)) for _ in range(2)]
        for p in procs:
            p.start()
        got = [out.get(timeout=300) for _ in procs]
        reap(procs, out, timeout=60)
        with closing(sqlite3.connect(path)) as conn:
            total = int(conn.execute("SELECT n FROM h").fetchone()[0])
    blocks = sorted((first, last, pid) for pid, stamps in got for first, last in stamps)
    gaps = [(b[0] - a[1]) * 1e6 for a, b in pairwise(blocks) if a[2] != b[2]]
    overlaps = sum(1 for a, b in pairwise(blocks) if b[0] < a[1])
    figures = describe(gaps)  # zeros if there were none
    return {
        "handoffs": len(gaps),
        "blocks": len(blocks),
        "committed": total,
        "overlaps": overlaps,  # blocks that began before the previous one ended: must be 0
        **{k: figures[k] for k in ("p50", "p90", "p99", "max")},
    }


def run(cfg: Config, progress: Progress | None = None) -> dict[str, Any]:
    progress = progress or Progress(0)
    sides: list[tuple[str, dict[str, Any]]]
    if cfg.compare:
        sides = [
            (f"A: {cfg.compare[0]}", parse_setting(cfg.compare[0])),
            (f"B: {cfg.compare[1]}", parse_setting(cfg.compare[1])),
        ]
    else:
        sides = [("sqlite3", {}), ("litegate", {})]
    steps = 0
    if "latency" in cfg.parts:
        steps += cfg.runs * len(sides)
    if "throughput" in cfg.parts:
        steps += cfg.runs * 3
    if "tail" in cfg.parts:
        steps += 1
    if "handoff" in cfg.parts:
        steps += cfg.runs
    if "processes" in cfg.parts:
        steps += cfg.runs * (len(cfg.procs) * len(cfg.proc_sides) + len(ASKER_SIDES))
    if "profile" in cfg.parts:
        steps += 1
    progress.total = float(steps)
    runs: list[dict[str, Any]] = []
    for run_no in range(1, cfg.runs + 1):
        one: dict[str, Any] = {}
        if "latency" in cfg.parts:
            one["latency"] = {}
            for name, settings in sides:  # interleaved per run: drift hits both sides
                progress.describe(f"run {run_no}/{cfg.runs}: latency, {name}")
                one["latency"][name] = run_latency_side(
                    "sqlite3" if name == "sqlite3" else "litegate", settings, cfg
                )
                progress.advance()
        if "throughput" in cfg.parts:
            one["throughput"] = {}
            progress.describe(f"run {run_no}/{cfg.runs}: durable, 32 threads")
            one["throughput"]["durable"] = throughput_threads(
                32, cfg.durable_writes, "conservative", "FULL"
            )
            progress.advance()
            progress.describe(f"run {run_no}/{cfg.runs}: asyncio, 1,000 tasks")
            one["throughput"]["asyncio"] = throughput_asyncio(1000, cfg.async_writes)
            progress.advance()
            progress.describe(f"run {run_no}/{cfg.runs}: 8 threads, synchronous=NORMAL")
            t = throughput_threads(8, cfg.thread_writes, "default", "NORMAL")
            t["single_thread_per_s"] = throughput_single(8 * cfg.thread_writes, "NORMAL")
            t["vs_single"] = t["litegate_per_s"] / t["single_thread_per_s"]
            one["throughput"]["threads"] = t
            progress.advance()
        if "handoff" in cfg.parts:
            progress.describe(f"run {run_no}/{cfg.runs}: cross-process hand-off, 2 processes")
            one["handoff"] = run_handoff(cfg.handoffs)
            progress.advance()
        if "processes" in cfg.parts:
            one["processes"] = {}
            for procs in cfg.procs:
                for side in cfg.proc_sides:  # interleaved per run: drift hits every side
                    progress.describe(f"run {run_no}/{cfg.runs}: {procs} processes writing, {side}")
                    one["processes"][f"{procs}/{side}"] = _writers.run_side(
                        side, procs, cfg.proc_seconds, grant_log=cfg.grant_log, sync=cfg.proc_sync
                    )
                    progress.advance()
            one["asker"] = {}
            for side in ASKER_SIDES:
                progress.describe(
                    f"run {run_no}/{cfg.runs}: one process asks past two writers, {side}"
                )
                one["asker"][side] = _writers.run_asker(side, cfg.asker_trials)
                progress.advance()
        runs.append(one)
    result: dict[str, Any] = {
        "experiment": NAME,
        "config": asdict(cfg),
        "runs": runs,
        "sides": [n for n, _ in sides],
    }
    if "profile" in cfg.parts:
        progress.describe("profile: opcodes and cProfile per workload")
        result["profile"] = _profile.run(_profile_workload, WORKLOADS, cfg.ops)
        progress.advance()
    if "tail" in cfg.parts:
        progress.describe(f"single-insert tail, {cfg.tail_inserts:,} inserts")
        result["tail"] = run_tail(cfg.tail_inserts, cfg.warmup)
        progress.advance()
    result["summary"] = summarise_runs(result, cfg.noise_k)
    return result


def summarise_runs(result: dict[str, Any], k: float) -> dict[str, Any]:
    runs = result["runs"]
    out: dict[str, Any] = {}
    if runs and "latency" in runs[0]:
        lat: dict[str, Any] = {}
        a, b = result["sides"]
        for w in WORKLOADS:
            lat[w] = {}
            for fig in FIGURES:
                sa = summarise([r["latency"][a][w][fig] for r in runs])
                sb = summarise([r["latency"][b][w][fig] for r in runs])
                lat[w][fig] = {
                    a: sa.to_json(),
                    b: sb.to_json(),
                    "compare": compare(sa, sb, k).to_json(),
                }
        out["latency"] = lat
    if runs and "throughput" in runs[0]:
        thr: dict[str, Any] = {}
        for scenario in runs[0]["throughput"]:
            keys = [
                key for key, v in runs[0]["throughput"][scenario].items() if isinstance(v, float)
            ]
            thr[scenario] = {
                key: summarise([r["throughput"][scenario][key] for r in runs]).to_json()
                for key in keys
            }
        out["throughput"] = thr
    if runs and "processes" in runs[0]:
        out["asker"] = {
            side: {
                key: summarise([r["asker"][side][key] for r in runs]).to_json()
                for key in ("p50_ms", "max_ms")
            }
            for side in runs[0].get("asker", {})
        }
        out["processes"] = {
            cell: {
                key: summarise([r["processes"][cell][key] for r in runs]).to_json()
                for key, v in runs[0]["processes"][cell].items()
                if isinstance(v, float)
            }
            for cell in runs[0]["processes"]
        }
        logs = {
            cell: [r["processes"][cell]["grant_log"] for r in runs]
            for cell in runs[0]["processes"]
            if "grant_log" in runs[0]["processes"][cell]
        }
        if logs:  # over the runs: counts add up, the worst figures are the worst of any run
            out["grant_log"] = {cell: combine_grant_logs(checks) for cell, checks in logs.items()}
    return out


ASKER_SIDES = ("ofd-lock", "strict", "bounded", "unfair")

TARGETS = {
    "durable": ("ratio", 3.0, ">= 3 x the mutex"),
    "asyncio": ("ratio", 10.0, ">= 10 x one connection thread"),
    "threads": ("ratio", 1.0, ">= the mutex (and >= 0.8 x one thread)"),
}


def render(result: dict[str, Any]) -> str:
    cfg = result["config"]
    runs = int(cfg["runs"])
    parts: list[str] = []
    what = f"median of {runs} runs" if runs > 1 else "one run"
    summary = result["summary"]
    if "latency" in summary:
        a, b = result["sides"]
        cols = [Column("WORKLOAD", "left"), Column("SIDE", "left")]
        cols += [Column(f"{f.upper()} us") for f in FIGURES]
        if runs > 1:
            cols += [Column("CV p50"), Column("CV p99")]
        cols.append(Column(f"{'B/A' if cfg['compare'] else 'litegate/sqlite3'} p50"))
        groups = []
        for w in WORKLOADS:
            rows = []
            for side in (a, b):
                s = summary["latency"][w]
                row = [w, side] + [f"{s[f][side]['median']:.1f}" for f in FIGURES]
                if runs > 1:
                    row += [fmt_pct(s["p50"][side]["cv"]), fmt_pct(s["p99"][side]["cv"])]
                if side == b:
                    c = s["p50"]["compare"]
                    ratio = c["candidate"] / c["baseline"] if c["baseline"] else float("nan")
                    flag = {"~": " (within noise)", "?": ""}.get(c["verdict"], "")
                    row.append(f"{ratio:.2f}x{flag}")
                else:
                    row.append("")
                rows.append(row)
            groups.append(rows)
        parts.append(f"-- latency per operation, microseconds ({what}; {cfg['ops']:,} ops each)")
        parts.append(seed_table(cols, groups))
        if runs > 1:
            notes = []
            for w in WORKLOADS:
                for f in ("p99", "max"):
                    c = summary["latency"][w][f]["compare"]
                    if c["verdict"] == "~":
                        notes.append(f"{w} {f}")
            if notes:
                parts.append(
                    "within noise (|delta| < {} x CV): {}".format(cfg["noise_k"], ", ".join(notes))
                )
    if "throughput" in summary:
        cols = [
            Column("SCENARIO", "left"),
            Column("LITEGATE /s"),
            Column("BASELINE /s"),
            Column("RATIO"),
            Column("JAIN lg / base"),
            Column("RSD lg / base"),
            Column("OVERTAKEN lg / base"),
            Column("WORST OVERTAKES lg / base"),
            Column("HAND-OFFS lg"),
            Column("TARGET", "left"),
        ]
        if runs > 1:
            cols.append(Column("CV ratio"))
        rows = []
        for scenario, (key, goal, text) in TARGETS.items():
            s = summary["throughput"][scenario]
            ratio = s[key]["median"]
            row = [
                scenario,
                f"{s['litegate_per_s']['median']:,.0f}",
                f"{s['baseline_per_s']['median']:,.0f}",
                f"{ratio:.2f}x",
                _thread_shares(s, "jain"),
                _thread_shares(s, "rsd"),
                _thread_shares(s, "overtaken_share"),
                _thread_shares(s, "worst_overtakes"),
                fmt_pct(s["litegate_handoff_share"]["median"])
                if "litegate_handoff_share" in s
                else "-",
                f"{text}: {'met' if ratio >= goal else 'MISSED'}",
            ]
            if runs > 1:
                row.append(fmt_pct(s[key]["cv"]))
            rows.append(row)
        t = summary["throughput"]["threads"]
        single = t["single_thread_per_s"]["median"]
        vs = t["vs_single"]["median"]
        parts.append("")
        parts.append(f"-- write throughput, each against its baseline in the same run ({what})")
        parts.append(seed_table(cols, [rows]))
        parts.append(
            f"threads: one thread alone {single:,.0f}/s; litegate with 8 threads is "
            f"{vs:.2f}x of that (target >= 0.8x: {'met' if vs >= 0.8 else 'MISSED'}); "
            "durable: synchronous=FULL, 32 threads; asyncio: 1,000 tasks; JAIN / RSD: "
            "over the threads' finished writes when the first thread was done (litegate / "
            "the baseline; 1.000 / 0% = equal shares); OVERTAKEN / WORST OVERTAKES: writes "
            "that a write asked later committed before, and the most later writes one write "
            "saw commit first (0 / 0 = arrival order); HAND-OFFS: litegate's grants of the "
            "gate forced by a head's spent budget"
        )
        strict = [
            f"{scenario} {sc['strict_per_s']['median']:,.0f}/s "
            f"({sc['strict_ratio']['median']:.2f}x the mutex; worst overtakes "
            f"{sc['strict_worst_overtakes']['median']:,.0f}, hand-offs "
            f"{fmt_pct(sc['strict_handoff_share']['median'])})"
            for scenario in ("durable", "threads")
            if "strict_per_s" in (sc := summary["throughput"][scenario])
        ]
        if strict:  # (a result file from before strict was measured has none)
            parts.append('litegate fair="strict", the same run: ' + "; ".join(strict))
    if "tail" in result:
        tail = result["tail"]
        parts.append("")
        parts.append(
            f"-- single-insert tail: {tail['count']:,} inserts, checkpointer on: p50 "
            f"{tail['p50']:.1f} us, p99 {tail['p99']:.1f} us (target <= 40: "
            f"{'met' if tail['p99'] <= 40 else 'MISSED'}), max {tail['max'] / 1000:.2f} ms "
            f"(target <= 1 ms: {'met' if tail['max'] <= 1000 else 'MISSED'})"
        )
        plain = tail.get("sqlite3")
        if plain:  # (a result file from before the baseline was measured has none)
            parts.append(
                f"   plain sqlite3, the same inserts in the same run (its checkpoints inside "
                f"the commit): p50 {plain['p50']:.1f} us, p99 {plain['p99']:.1f} us, max "
                f"{plain['max'] / 1000:.2f} ms; litegate/sqlite3: p99 "
                f"{tail['p99'] / plain['p99']:.2f}x, max {tail['max'] / plain['max']:.2f}x"
            )
        alone = tail.get("outside_checkpoints")
        if alone:
            parts.append(
                f"   litegate's {alone['count']:,} inserts that overlapped no checkpoint: p50 "
                f"{alone['p50']:.1f} us, p99 {alone['p99']:.1f} us, max "
                f"{alone['max'] / 1000:.2f} ms"
            )
        for s in tail["slowest"]:
            parts.append(f"   {s['us'] / 1000:7.2f} ms  overlapped: {'; '.join(s['made_of'])}")
    hand = [r["handoff"] for r in result["runs"] if "handoff" in r]
    if hand:
        med = {f: median([h[f] for h in hand]) for f in ("p50", "p99", "max")}
        parts.append("")
        parts.append(
            f"-- cross-process hand-off, 2 processes alternating ({what}; "
            f"{sum(h['handoffs'] for h in hand):,} hand-offs): p50 {med['p50']:.0f} us "
            f"(target <= 50: {'met' if med['p50'] <= 50 else 'MISSED'}), p99 "
            f"{med['p99']:.0f} us (target <= 500: {'met' if med['p99'] <= 500 else 'MISSED'}), "
            f"max {med['max'] / 1000:.2f} ms; overlapping blocks: "
            f"{sum(h['overlaps'] for h in hand)} (must be 0)"
        )
    if "processes" in summary:
        parts.append("")
        sync = str(result.get("config", {}).get("proc_sync", "NORMAL"))
        parts.append(
            _render_processes(summary["processes"], what, runs, summary.get("asker"), sync)
        )
        if "grant_log" in summary:
            parts.append(_render_grant_logs(summary["grant_log"]))
    if "profile" in result:
        parts.append("")
        parts.append(_profile.render(result["profile"]))
    return "\n".join(parts)


def _thread_shares(s: dict[str, Any], figure: str) -> str:
    """``litegate / baseline`` Jain (or RSD) of a threads scenario's row;
    ``-`` for a row without per-thread counts (asyncio's tasks)."""
    lg, base = s.get(f"litegate_{figure}"), s.get(f"baseline_{figure}")
    if lg is None or base is None:
        return "-"
    if figure == "jain":
        return f"{lg['median']:.3f} / {base['median']:.3f}"
    if figure == "worst_overtakes":
        return f"{lg['median']:,.0f} / {base['median']:,.0f}"
    return f"{fmt_pct(lg['median'])} / {fmt_pct(base['median'])}"


# Combined writes across processes, against plain sqlite3 in the same run.
COMBINED_TARGETS: dict[str, dict[int, float]] = {
    "NORMAL": {2: 0.8, 4: 0.8, 8: 1.0},
    "FULL": {4: 1.5, 8: 2.5},
}


def _render_processes(
    cells: dict[str, Any],
    what: str,
    runs: int,
    asker: dict[str, Any] | None = None,
    sync: str = "NORMAL",
) -> str:
    cols = [
        Column("P"),
        Column("SIDE", "left"),
        Column("WRITES/s"),
        Column("vs sqlite3"),
        Column("JAIN"),
        Column("RSD"),
        Column("P50 ms"),
        Column("P99 ms"),
        Column("MAX ms"),
        Column("HAND-OFFS"),
    ]
    if runs > 1:
        cols.append(Column("CV w/s"))
    groups = []
    verdicts: list[str] = []
    combined: list[str] = []
    for procs in sorted({int(c.split("/")[0]) for c in cells}):
        rows = []
        base = cells.get(f"{procs}/sqlite3", {}).get("per_s", {}).get("median", 0.0)
        for cell, s in cells.items():
            if int(cell.split("/")[0]) != procs:
                continue
            side = cell.split("/", 1)[1]
            per_s = s["per_s"]["median"]
            ratio = per_s / base if base else float("nan")
            share = s.get("handoff_share", {}).get("median")
            row = [
                str(procs),
                side,
                f"{per_s:,.0f}",
                f"{ratio:.2f}x",
                f"{s['jain']['median']:.3f}",
                fmt_pct(s["rsd"]["median"]),
                f"{s['p50_us']['median'] / 1000:.2f}",
                f"{s['p99_us']['median'] / 1000:.2f}",
                f"{s['max_us']['median'] / 1000:.1f}",
                "-" if share is None else fmt_pct(share),
            ]
            if runs > 1:
                row.append(fmt_pct(s["per_s"]["cv"]))
            rows.append(row)
            if side in ("combined", "shipped") and procs >= 2:
                want = COMBINED_TARGETS[sync].get(procs)
                if want is not None:
                    ok = (
                        ratio >= want
                        and s["jain"]["median"] >= 0.98
                        and s["max_us"]["median"] <= 25_000
                    )
                    combined.append(f"{side} P={procs}: {ratio:.2f}x {'met' if ok else 'MISSED'}")
            if side == "bounded" and procs >= 2:  # (the target is for processes taking turns)
                ok = (
                    ratio >= 0.9
                    and s["jain"]["median"] >= 0.98
                    and s["p99_us"]["median"] <= 5000
                    and s["max_us"]["median"] <= 25_000
                )
                verdicts.append(f"P={procs}: {'met' if ok else 'MISSED'}")
        groups.append(rows)
    head = (
        f"-- P single-threaded processes, one-row write transactions, synchronous={sync} "
        f"({what}); HAND-OFFS: share of cross-process grants forced by a head's spent budget"
    )
    foot = (
        "targets for bounded (P >= 2): >= 0.9x sqlite3, Jain >= 0.98, p99 <= 5 ms, "
        "max <= 25 ms: " + (", ".join(verdicts) or "no bounded run with P >= 2")
    )
    if combined:
        wants = ", ".join(f"P={p} >= {x}x" for p, x in COMBINED_TARGETS[sync].items())
        foot += (
            f"\ntargets for combined and shipped ({sync}: {wants}; Jain >= 0.98, max <= 25 ms): "
            + ", ".join(combined)
        )
    lines = [head, seed_table(cols, groups), foot]
    if asker:
        lines.append(
            "one process asks for the gate while two others write back to back (200 us "
            "transactions), its wait p50 / max: "
            + "; ".join(
                f"{side} {s['p50_ms']['median']:.2f} / {s['max_ms']['median']:.1f} ms"
                for side, s in asker.items()
            )
            + " (target for bounded: max <= T + 1 ms = 3 ms)"
        )
    return "\n".join(lines)


def _render_grant_logs(logs: dict[str, dict[str, int]]) -> str:
    """The bounds checked on each litegate side's grant log (``--grant-log``),
    a line per ``P/side`` cell."""
    return render_grant_logs(
        {f"P={cell.split('/', 1)[0]} {cell.split('/', 1)[1]}": c for cell, c in logs.items()}
    )


def charts(result: dict[str, Any], out: Path) -> list[Path]:
    if "latency" not in result["summary"]:
        return []
    from ._charts import Bar, grouped_bars

    a, b = result["sides"]
    panels = []
    for fig in ("p50", "p99"):
        series = {}
        for side in (a, b):
            bars = []
            for w in WORKLOADS:
                s = result["summary"]["latency"][w][fig][side]
                bars.append(Bar(s["median"], s["min"], s["max"]))
            series[side] = bars
        panels.append((f"{fig} per operation", list(WORKLOADS), series))
    return [
        grouped_bars(
            out / "micro-latency.png",
            title="litegate bench micro (seed 002)",
            panels=panels,
            ylabel="microseconds",
        )
    ]


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("micro options")
    g.add_argument(
        "--ops",
        type=int,
        default=None,
        metavar="N",
        help="measured operations per workload and side (default 20,000; quick 3,000)",
    )
    g.add_argument(
        "--compare",
        nargs=2,
        metavar=("A", "B"),
        default=None,
        help="A/B of two litegate configurations instead of litegate vs sqlite3, "
        "e.g. --compare checkpoints=true checkpoints=false; pragma.NAME=VALUE sets one "
        "PRAGMA (--compare profile=default profile=default,pragma.mmap_size=134217728)",
    )
    g.add_argument(
        "--only",
        choices=("latency", "throughput", "tail", "handoff", "processes", "profile"),
        action="append",
        help="run only this part (repeatable)",
    )
    g.add_argument(
        "--profile",
        action="store_true",
        help="where each workload's call goes: Python opcodes per function (exact) and "
        "cProfile's time per function (same as --only profile)",
    )
    g.add_argument(
        "--tail-inserts",
        type=int,
        default=None,
        metavar="N",
        help="inserts in the tail measurement (default 100,000; quick 20,000)",
    )
    g.add_argument(
        "--proc-sides",
        default=None,
        metavar="LIST",
        help="the processes part's sides, comma-separated (default "
        f"{','.join(_writers.SIDES)}); bounded:K:T tries a budget, e.g. bounded:64:0.002",
    )
    g.add_argument(
        "--grant-log",
        action="store_true",
        help="the processes part: log every grant of the litegate sides and check the bounds on "
        "the log (two holders at once, ticket order, overtakes against the budget, the gate "
        "free while a head waited); logging slows the gate, so those writes/s are not "
        "comparable with a run without it",
    )
    g.add_argument(
        "--proc-sync",
        default=None,
        choices=("NORMAL", "FULL"),
        help="the processes part's synchronous setting (default NORMAL; FULL: every commit an "
        "fsync, where combining writes across processes pays most)",
    )
    g.add_argument(
        "--procs",
        default=None,
        metavar="LIST",
        help="the processes part's writer counts, comma-separated (default 2,4,8); 1 "
        "measures each side alone, the ceiling that taking turns is measured against",
    )


def config_from_args(args: argparse.Namespace) -> Config:
    quick = bool(args.quick)
    cfg = Config(runs=args.runs, noise_k=args.noise_k)
    if quick:
        cfg.ops, cfg.tail_inserts = 3_000, 20_000
        cfg.durable_writes, cfg.async_writes, cfg.thread_writes = 40, 5, 600
        cfg.handoffs = 300
        cfg.procs, cfg.proc_seconds, cfg.asker_trials = (2, 4), 1.0, 5
    if args.ops is not None:
        if args.ops < 100:
            raise ValueError("--ops must be at least 100")
        cfg.ops = args.ops
    if args.tail_inserts is not None:
        if args.tail_inserts < 100:
            raise ValueError("--tail-inserts must be at least 100")
        cfg.tail_inserts = args.tail_inserts
    if getattr(args, "proc_sync", None):
        cfg.proc_sync = args.proc_sync
    if getattr(args, "proc_sides", None):
        sides = tuple(x.strip() for x in args.proc_sides.split(",") if x.strip())
        for side in sides:
            _writers.check_side(side)
        cfg.proc_sides = sides
    cfg.grant_log = bool(getattr(args, "grant_log", False))
    if getattr(args, "procs", None):
        try:
            # 1 is the lone process: each side's ceiling, with nobody to take turns with
            cfg.procs = whole_numbers(1)(args.procs)
        except argparse.ArgumentTypeError as exc:
            raise ValueError(f"--procs: {exc}, e.g. --procs 2,4,8") from None
    if args.compare:
        for side in args.compare:
            parse_setting(side)  # fail early on a malformed setting
        cfg.compare = (args.compare[0], args.compare[1])
        cfg.parts = ("latency",)
    only = list(args.only or [])
    if getattr(args, "profile", False):
        only.append("profile")
    if only:
        cfg.parts = tuple(dict.fromkeys(only))
        if cfg.compare and cfg.parts != ("latency",):
            raise ValueError("--compare measures latency only; drop --only or pick latency")
    return cfg
