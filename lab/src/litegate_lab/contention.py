"""``litegate bench contention``: seed 000, the busy-handler contention matrix.

A parent process holds SQLite's write lock for S slow queries (about one
second each, 1 ms apart); P child processes x T threads each want ONE fast
write (an INSERT) and start only once the parent holds the lock. How long
after the lock is free does the last of them finish?

Modes (how the children wait):

- ``sqlite-default``: plain ``sqlite3.connect(path, timeout=5)`` with
  Python's implicit (deferred) transactions, as a naive app does: SQLite's
  own busy handler (sleeps 1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100 ms).
- ``constant``, ``backoff``, ``jitter``, ``ceiling``, ``reversed``: plain
  ``sqlite3`` with ``busy_timeout = 0``; ``BEGIN IMMEDIATE`` retried with
  litegate's strategy functions through ``litegate.diagnostics.retry_busy``.
- ``litegate``: ``litegate.connect()`` in every child (one ``Database`` per
  process, shared by its threads), each thread calls ``db.execute()``.
- ``litegate-strict``: the same with ``fair="strict"`` (a direct hand-off
  every grant, the policy before bounded fairness), for comparison.
- ``litegate-combined``: ``litegate.connect(combine=True)`` in every child
  and in the parent: the processes' single-statement writes are committed
  together by one of them, one transaction for what all have queued.

Parents (one table each):

- ``same``: the parent takes the lock the way its children do (as in the
  seed): ``db.write()`` in litegate mode, SQLite's default busy handler in
  ``sqlite-default`` mode, the same strategy in the strategy modes.
- ``foreign``: the parent is a writer outside litegate (plain ``sqlite3``,
  ``BEGIN IMMEDIATE``, SQLite's default busy handler), so litegate's children
  meet SQLite's own lock and use their fallback busy strategy.

The slow query is, by default, a write transaction (``BEGIN IMMEDIATE``, one
INSERT) that sleeps ``--slow-seconds`` (1.0): the lock is held for a known
time and the two cores stay free for the waiters, so the figures measure
waiting, not CPU contention. ``--slow cte`` instead runs a recursive CTE that
counts, calibrated on this machine to take ``--slow-seconds``, inside the
write transaction (closer to the seed, which burns CPU).

Children are started with multiprocessing's ``spawn`` method (clean
interpreters; about 0.3 s for 8 children here, ``fork`` is ~0.1 s: not worth
the risk of forking a process with threads). Every connection is opened
before the start signal, so the figures time the write, not the open. A
child whose writers have finished says so (one small write to a pipe) and
stays idle (no report, no clean-up, no exit) until every child has said so;
only then do the children send their records: on 2 cores, finished children
closing connections and shutting their interpreters down took CPU from the
waiters still queued and added up to ~20 ms to the last finish, and
pickling the records into a ``multiprocessing.Queue`` (which starts a feeder
thread) while others waited took more (measured: docs/results/contention.md). All
modes commit with ``synchronous=NORMAL`` in WAL mode (litegate's default
profile) so that fsync does not blur the comparison of waiting strategies.

Timing uses ``time.monotonic()`` (CLOCK_MONOTONIC: one clock for every
process on Linux). Per cell:

- PARENT: first lock taken -> last lock released (0 when S = 0)
- FASTEST / SLOWEST: shortest / longest child write, each from the start
  signal as its thread saw it to its COMMIT (or its error)
- SCRIPT: first lock taken -> every child has said its writers are done
- DELTA: PARENT - SLOWEST (as in the seed)
- ERRORS: child writes that failed (``database is locked``, timeouts)
- AFTER_RELEASE: last child COMMIT - the parent's last release (S = 0: the
  start signal). Negative: every child got in during the 1 ms gap between
  two slow queries (the parent's second query then waited for them).

No Jain's index: every child thread does exactly one write, so the per-child
counts are equal by design (fewer only where a write failed, which ERRORS
counts); how evenly the waiting was shared shows in FASTEST, SLOWEST and
AFTER_RELEASE, and the order in two more columns (issue 18):

- WORST OVERTAKES: the most writers that started later one writer saw
  commit first (its start against its row's place in the commit order,
  ``_stats.overtakes``; the JSON also has the share overtaken at all). The
  writers start within a few ms of each other, so this measures the order
  the lock served the herd in: 0 in arrival order, up to every writer
  after it for a lock that serves whoever retries at the right moment;
- HAND-OFFS (litegate): the share of the gate's grants across processes
  that a release handed to a head whose budget was spent (the counters the
  gate keeps in its sidecar, shared by the children and a litegate parent;
  the JSON also has ``gate_grants``).

The JSON also has ``after_latest_release_ms``: the largest finish minus the
parent release just before it, i.e. how long the lock stood free before the
last waiter got through, also when the children got in during the gap; and
``first_after_release_ms`` / ``p50_after_release_ms``: the first / median
child COMMIT minus the same last release as AFTER_RELEASE; and
``host_steal_ms``: CPU time the hypervisor took from this (virtual)
machine between the last release and the last child's finish (/proc/stat's
``steal``, in 10 ms ticks): a burst of a few ms with a tick of steal in it
was slowed by the host, not by the lock.

Variants (issue 10): the same experiment run other ways through the public
API. Two axes, each an option of its own:

- ``--slow sleep|cte``: how the parent spends its slow query (above);
- ``--threads-start before|after``: ``before`` (the default, as above) starts
  every child's writer threads before the parent takes the lock, each
  blocked on the start signal; ``after`` starts them only once the child's
  main thread has seen the start signal, one ``Thread.start()`` after
  another, as an app that spawns its workers on demand. In both, every
  connection is opened before the signal; only the threads' start moves.
  A thread's FASTEST / SLOWEST start is then its first instruction.

``--variants`` runs the product of both axes (sleep/before, sleep/after,
cte/before, cte/after; an axis given explicitly stays fixed) in one run, by
default on cell 8/4/1 for litegate and sqlite-default with the parent taking
the lock like its children, and reports per mode one row per variant:
AFTER_RELEASE (median, CV), FASTEST and P50 (after the release), ERRORS and
whether the 5 ms target is met. AFTER_RELEASE is the same figure, from the
same clocks, as in the main table.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import multiprocessing as mp
import multiprocessing.connection as mp_connection
import os
import sqlite3
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import litegate
from litegate import BUSY_STRATEGIES as STRATEGIES
from litegate.diagnostics import retry_busy

from . import _stats
from ._args import csv as _csv
from ._args import positive_float
from ._procs import reap
from ._progress import Progress
from ._report import Column, fmt_ms, fmt_pct, seed_table
from ._writers import gate_counters, gate_shares

NAME = "contention"
HELP = "seed 000: parent holds the write lock, P processes x T threads each want one write"

STRATEGY_MODES = ("constant", "backoff", "jitter", "ceiling", "reversed")
MODES = ("sqlite-default", *STRATEGY_MODES, "litegate", "litegate-strict", "litegate-combined")
# litegate's modes and the write gate's policy each opens its databases with
LITEGATE_MODES: dict[str, bool | str] = {
    "litegate": True,
    "litegate-strict": "strict",
    "litegate-combined": True,
}
COMBINED_MODES = ("litegate-combined",)  # litegate's modes that open with combine=True
PARENTS = ("same", "foreign")
PARENT_TITLES = {
    "same": "parent takes the lock like its children (litegate mode: db.write())",
    "foreign": "parent is a foreign writer (plain sqlite3 BEGIN IMMEDIATE, SQLite's busy handler)",
}
FIGURES = (
    "parent_ms",
    "fastest_ms",
    "slowest_ms",
    "script_ms",
    "delta_ms",
    "errors",
    "after_release_ms",
    "after_latest_release_ms",  # JSON only: see _after_latest_release
    "first_after_release_ms",  # the first child COMMIT - the parent's last release
    "p50_after_release_ms",  # the median child COMMIT - the parent's last release
    "worst_overtakes",  # the most writers that started later one writer saw commit first
    "overtaken_share",  # the share of writers that a later one overtook
    "handoff_share",  # litegate: the gate's grants forced by a head's spent budget
    "gate_grants",  # litegate: the gate's grants across processes (JSON only)
    "host_steal_ms",  # JSON only: CPU time the hypervisor took, release -> all finished
)
# the main table's columns; the rest are in the JSON (and the variant tables)
TABLE_FIGURES = (*FIGURES[:7], "worst_overtakes", "handoff_share")
TARGET_AFTER_RELEASE_MS = 5.0
TARGET_FAST_ONLY_MS = 15.0

_INSERT = "INSERT INTO t(who, at) VALUES (?, ?)"
_CTE = (
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ?) "
    "SELECT count(*) FROM c"
)


@dataclass(frozen=True, order=True)
class Cell:
    slow: int  # first, so cells sort like the seed's first table: by S, then P, then T
    processes: int
    threads: int

    @property
    def key(self) -> str:
        return f"{self.processes}/{self.threads}/{self.slow}"

    @property
    def label(self) -> str:
        n = self.processes + self.threads + self.slow
        return f"{n} ({self.key})"

    @property
    def writers(self) -> int:
        return self.processes * self.threads

    @classmethod
    def parse(cls, text: str) -> Cell:
        try:
            p, t, s = (int(x) for x in text.strip().split("/"))
        except ValueError:
            raise ValueError(f"a cell is P/T/S, e.g. 8/4/1, got {text!r}") from None
        if p < 1 or t < 1 or s < 0:
            raise ValueError(f"need P >= 1, T >= 1, S >= 0, got {text!r}")
        return cls(slow=s, processes=p, threads=t)


FULL_CELLS = tuple(sorted(Cell(s, p, t) for s in (0, 1, 2) for p in (4, 8) for t in (2, 4)))
QUICK_CELLS = (Cell(0, 8, 4), Cell(1, 8, 4))

SLOW_KINDS = ("sleep", "cte")
THREAD_STARTS = ("before", "after")
# --variants defaults: the cell and the two modes issue 10 is about
VARIANT_CELLS = (Cell(1, 8, 4),)
VARIANT_MODES = ("litegate", "sqlite-default")


@dataclass(frozen=True)
class Variant:
    """One way of running the experiment: how the parent spends its slow
    query, and when the children's writer threads start."""

    slow: str = "sleep"  # or "cte"
    threads_start: str = "before"  # or "after" (the start signal)

    @property
    def key(self) -> str:
        return f"{self.slow}/{self.threads_start}"

    @classmethod
    def product(
        cls, slow: Sequence[str] = SLOW_KINDS, threads_start: Sequence[str] = THREAD_STARTS
    ) -> tuple[Variant, ...]:
        """Every combination, slow query first (so the two thread starts of one
        slow query are next to each other in the table)."""
        return tuple(cls(s, t) for s in slow for t in threads_start)


ALL_VARIANTS = Variant.product()


@dataclass(frozen=True)
class Config:
    modes: tuple[str, ...] = MODES
    cells: tuple[Cell, ...] = FULL_CELLS
    parents: tuple[str, ...] = PARENTS
    runs: int = 1
    slow: str = "sleep"  # or "cte"
    threads_start: str = "before"  # or "after"
    # --variants: run each of these instead of the one (slow, threads_start)
    variants: tuple[Variant, ...] = ()
    slow_seconds: float = 1.0
    gap_seconds: float = 0.001
    child_timeout: float = 5.0
    start_method: str = "spawn"
    litegate_busy: str = "constant"
    noise_k: float = _stats.NOISE_K

    @property
    def variant_list(self) -> tuple[Variant, ...]:
        """The variants this configuration runs (one unless --variants)."""
        return self.variants or (Variant(self.slow, self.threads_start),)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["cells"] = [c.key for c in self.cells]
        d["variants"] = [v.key for v in self.variants]
        return d


@dataclass(frozen=True)
class Step:
    """One cell run of the plan."""

    run: int
    variant: Variant
    parent: str
    cell: Cell
    mode: str


def plan(cfg: Config) -> list[Step]:
    """Every cell run in order: run-major (seed 002: run 1 of everything, then
    run 2), then variant, parent and cell; the modes innermost, so that the
    modes compared with each other run next to each other in time."""
    return [
        Step(run, variant, parent, cell, mode)
        for run in range(1, cfg.runs + 1)
        for variant in cfg.variant_list
        for parent in cfg.parents
        for cell in cfg.cells
        for mode in cfg.modes
    ]


# --------------------------------------------------------------------------
# the child processes


class StartSignal:
    """Starts every waiting thread of every child process at once.

    The parent holds an exclusive ``flock`` on a file before it starts the
    children; each child thread blocks in a shared ``flock`` on its own
    descriptor; the parent's unlock wakes them all in the kernel. (A
    ``multiprocessing.Event`` wakes its waiters one by one, each
    acknowledging before the next: with 32 waiters on 2 cores that alone
    spread the start over tens of ms.) If the parent dies, the kernel drops
    its lock and the children start rather than hang.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = -1

    def arm(self) -> None:
        """Parent, before starting the children: hold the signal back."""
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def fire(self) -> None:
        """Parent: start everybody (idempotent)."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def waiter(self) -> Callable[[], None]:
        """Child, before the ready barrier: returns ``wait()`` for one thread."""
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)

        def wait() -> None:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH)
            finally:
                os.close(fd)

        return wait


@dataclass(frozen=True)
class ChildSpec:
    mode: str
    path: str
    threads: int
    timeout: float
    litegate_busy: str
    go_path: str
    done_path: str
    threads_start: str = "before"


def _plain(path: str, timeout: float, legacy: bool) -> sqlite3.Connection:
    if legacy:  # a naive app: implicit deferred transactions, SQLite's busy handler
        conn = sqlite3.connect(path, timeout=timeout, check_same_thread=False)
    else:
        conn = sqlite3.connect(path, timeout=0, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA synchronous = NORMAL")
    return conn


def _writer(
    spec: ChildSpec, db: litegate.Database | None, who: str
) -> tuple[Callable[[], int | None], Callable[[], None]]:
    """A ``write()`` for one thread (returns its busy retries when known) and
    its clean-up. Opens the connection now, before the start signal."""
    if spec.mode in LITEGATE_MODES:
        assert db is not None
        database = db

        def write_litegate() -> int | None:
            database.execute(_INSERT, (who, time.monotonic()))
            return None

        return write_litegate, lambda: None

    if spec.mode == "sqlite-default":
        conn = _plain(spec.path, spec.timeout, legacy=True)

        def write_default() -> int | None:
            conn.execute(_INSERT, (who, time.monotonic()))
            conn.commit()
            return None

        return write_default, conn.close

    strategy = STRATEGIES[spec.mode]
    conn = _plain(spec.path, spec.timeout, legacy=False)

    def write_strategy() -> int | None:
        deadline = time.monotonic() + spec.timeout
        retries = retry_busy(lambda: conn.execute("BEGIN IMMEDIATE"), strategy, deadline)
        try:
            conn.execute(_INSERT, (who, time.monotonic()))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return retries

    return write_strategy, conn.close


def child_main(spec: ChildSpec, ready: Barrier, results: Queue[Any], finished: Connection) -> None:
    """Entry point of one child process (importable under ``spawn``).

    When its writers are done the child says so on ``finished`` (one small
    write to a pipe, no thread) and stays idle until every child has; only
    then does it gather its figures and send them on ``results``. Pickling
    the records and starting the queue's feeder thread while other children
    still wait for the lock would take CPU from their writers (2 cores)."""
    pid = os.getpid()
    out: dict[str, Any] = {"pid": pid, "records": [], "setup_error": None}
    db: litegate.Database | None = None
    cleanups: list[Callable[[], None]] = []
    records: list[dict[str, Any]] = []
    lock = threading.Lock()
    reported = said_finished = False
    try:
        wait_until_all_done = StartSignal(spec.done_path).waiter()
        if spec.mode in LITEGATE_MODES:
            db = litegate.connect(
                spec.path,
                timeout=spec.timeout,
                busy=spec.litegate_busy,
                fair=LITEGATE_MODES[spec.mode],
                combine=spec.mode in COMBINED_MODES,
            )
        writers = [_writer(spec, db, f"{pid}:{i}") for i in range(spec.threads)]
        cleanups = [c for _, c in writers]
        signal = StartSignal(spec.go_path)
        before = spec.threads_start == "before"
        # "before": every thread blocks on its own descriptor, so that the one
        # unlock wakes them all at once. "after": only the main thread waits;
        # the threads do not exist until it has seen the signal.
        waits: list[Callable[[], None] | None] = [
            signal.waiter() if before else None for _ in writers
        ]
        main_wait = None if before else signal.waiter()
        local = threading.Barrier(spec.threads + 1)

        def body(
            i: int, write: Callable[[], int | None], wait_for_go: Callable[[], None] | None
        ) -> None:
            if wait_for_go is not None:
                local.wait()
                wait_for_go()
            start = time.monotonic()
            error: str | None = None
            retries: int | None = None
            try:
                retries = write()
            except Exception as exc:  # counted as an ERROR of the cell
                error = f"{type(exc).__name__}: {exc}"
            end = time.monotonic()
            rec = {"thread": i, "start": start, "end": end, "retries": retries, "error": error}
            with lock:
                records.append(rec)

        threads = [
            threading.Thread(target=body, args=(i, w, g), name=f"writer-{i}", daemon=True)
            for i, ((w, _), g) in enumerate(zip(writers, waits, strict=True))
        ]
        if main_wait is None:
            for t in threads:
                t.start()
            local.wait()
            ready.wait()
        else:
            ready.wait()
            main_wait()
            out["go_seen"] = time.monotonic()
            for t in threads:
                t.start()
        for t in threads:
            t.join()
        finished.send(pid)
        said_finished = True
        # Stay idle until every child is done: reporting, closing connections
        # and shutting the interpreter down would take CPU from the writers
        # of the other children that are still waiting (2 cores).
        wait_until_all_done()
        if db is not None:
            stats = db.stats()
            out["busy_retries"] = stats["busy_retries"]
            out["cross_process_waits"] = stats["gate"]["cross_process_waits"]
        out["records"] = sorted(records, key=lambda r: int(r["thread"]))
        results.put(out)
        reported = True
    except BaseException:
        out["setup_error"] = traceback.format_exc(limit=3)
        with contextlib.suppress(Exception):
            ready.abort()
    finally:
        if not said_finished:
            with contextlib.suppress(Exception):
                finished.send(pid)
        if not reported:
            out["records"] = sorted(records, key=lambda r: int(r["thread"]))
            results.put(out)
        for c in cleanups:
            with contextlib.suppress(Exception):
                c()
        if db is not None:
            with contextlib.suppress(Exception):
                db.close()


# --------------------------------------------------------------------------
# the parent


def create_database(path: str) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, who TEXT NOT NULL, at REAL)")
    finally:
        conn.close()


def calibrate_cte(seconds: float) -> int:
    """How far the recursive CTE must count to take ``seconds`` here."""
    conn = sqlite3.connect(":memory:")
    try:
        n = 50_000
        while True:
            t0 = time.perf_counter()
            conn.execute(_CTE, (n,)).fetchone()
            took = time.perf_counter() - t0
            if took >= 0.1 or n >= 1 << 34:
                return max(1, int(n * seconds / took))
            n *= 4
    finally:
        conn.close()


@contextlib.contextmanager
def _parent_lock(
    mode: str, parent: str, path: str
) -> Iterator[Callable[[], contextlib.AbstractContextManager[sqlite3.Connection]]]:
    """Yields a factory of write transactions for the parent."""
    patience = 60.0  # the parent must never be the one that fails
    if parent == "same" and mode in LITEGATE_MODES:
        db = litegate.connect(
            path, timeout=patience, fair=LITEGATE_MODES[mode], combine=mode in COMBINED_MODES
        )
        try:
            yield db.write
        finally:
            db.close()
        return
    strategy_name = mode if parent == "same" and mode in STRATEGY_MODES else None
    conn = sqlite3.connect(
        path,
        timeout=0 if strategy_name else patience,
        isolation_level=None,
        check_same_thread=False,
    )
    conn.execute("PRAGMA synchronous = NORMAL")

    @contextlib.contextmanager
    def tx() -> Iterator[sqlite3.Connection]:
        if strategy_name:
            retry_busy(
                lambda: conn.execute("BEGIN IMMEDIATE"),
                STRATEGIES[strategy_name],
                time.monotonic() + patience,
            )
        else:
            conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    try:
        yield tx
    finally:
        conn.close()


def _slow_work(kind: str, seconds: float, cte_n: int) -> Callable[[sqlite3.Connection], None]:
    if kind == "cte":

        def cte(conn: sqlite3.Connection) -> None:
            conn.execute(_CTE, (cte_n,)).fetchone()

        return cte

    def sleep(conn: sqlite3.Connection) -> None:
        time.sleep(seconds)

    return sleep


def _await_finished(reader: Connection, procs: Sequence[Any], deadline: float) -> None:
    """Until every child has said its writers are done, or has died, or the
    deadline has passed."""
    finished: set[int] = set()
    dead: set[int] = set()
    sentinels = {p.sentinel: p for p in procs}
    while len(finished | dead) < len(procs):
        left = deadline - time.monotonic()
        if left <= 0:
            return
        for ready in mp_connection.wait([reader, *sentinels], timeout=left):
            if ready is reader:
                while reader.poll():
                    finished.add(int(reader.recv()))
            else:
                dead.add(sentinels.pop(ready).pid)


@dataclass
class CellResult:
    run: int
    parent: str
    mode: str
    cell: str
    label: str
    variant: str = Variant().key
    figures: dict[str, float | None] = field(default_factory=dict)
    rows_expected: int = 0
    rows_found: int = 0
    parent_error: str | None = None
    setup_errors: list[str] = field(default_factory=list)
    error_messages: dict[str, int] = field(default_factory=dict)
    releases: list[float] = field(default_factory=list)  # relative to the first lock, s
    children: list[dict[str, Any]] = field(default_factory=list)


def run_cell(
    cfg: Config,
    ctx: BaseContext,
    run: int,
    parent: str,
    mode: str,
    cell: Cell,
    slow_work: Callable[[sqlite3.Connection], None],
    variant: Variant | None = None,
) -> CellResult:
    """One cell on a fresh database in a temporary directory. ``slow_work``
    must match ``variant.slow`` (the default variant: the config's)."""
    variant = variant or Variant(cfg.slow, cfg.threads_start)
    res = CellResult(
        run=run, parent=parent, mode=mode, cell=cell.key, label=cell.label, variant=variant.key
    )
    with tempfile.TemporaryDirectory(prefix="litegate-bench-") as tmp:
        path = os.path.join(tmp, "bench.db")
        create_database(path)
        go = StartSignal(os.path.join(tmp, "go.lock"))
        go.arm()
        done = StartSignal(os.path.join(tmp, "done.lock"))
        done.arm()
        spec = ChildSpec(
            mode,
            path,
            cell.threads,
            cfg.child_timeout,
            cfg.litegate_busy,
            go.path,
            done.path,
            variant.threads_start,
        )
        ready = ctx.Barrier(cell.processes + 1)
        results: Queue[Any] = ctx.Queue()
        finished_r, finished_w = ctx.Pipe(duplex=False)
        procs = [
            ctx.Process(  # type: ignore[attr-defined]
                target=child_main, args=(spec, ready, results, finished_w), daemon=True
            )
            for _ in range(cell.processes)
        ]
        for p in procs:
            p.start()
        t_start = t_release = time.monotonic()
        releases: list[float] = []
        outs: list[dict[str, Any]] = []
        try:
            with _parent_lock(mode, parent, path) as write_tx:
                try:
                    ready.wait(timeout=120)
                except threading.BrokenBarrierError:
                    res.parent_error = "a child failed to start (see setup_errors)"
                if res.parent_error is None:
                    if cell.slow == 0:
                        t_start = t_release = time.monotonic()
                        go.fire()
                    for k in range(cell.slow):
                        if k:
                            time.sleep(cfg.gap_seconds)
                        with write_tx() as conn:
                            if k == 0:
                                t_start = time.monotonic()
                                go.fire()
                            conn.execute(_INSERT, ("parent", time.monotonic()))
                            slow_work(conn)
                        t_release = time.monotonic()
                        releases.append(t_release - t_start)
        except Exception as exc:
            res.parent_error = f"{type(exc).__name__}: {exc}"
        finally:
            go.fire()  # never leave the children blocked
        deadline = time.monotonic() + cfg.child_timeout * 4 + 60
        steal_before = _host_steal_ns()
        _await_finished(finished_r, procs, deadline)
        t_collected = time.monotonic()
        steal_after = _host_steal_ns()
        done.fire()
        for _ in procs:
            try:
                outs.append(results.get(timeout=max(0.1, deadline - time.monotonic())))
            except Exception:
                break
        reap(procs, results, timeout=10)
        finished_r.close()
        finished_w.close()
        res.rows_found = _count_rows(path)
        committed = _commit_order(path)
        # the gate's counters, shared by every process (no sidecar: not litegate)
        gate = gate_shares(None, gate_counters(path)) if mode in LITEGATE_MODES else {}

    records: list[dict[str, Any]] = []
    for out in outs:
        go_seen = out.pop("go_seen", None)
        if go_seen is not None:  # threads started after the signal: when the child saw it
            out["go_seen_ms"] = (float(go_seen) - t_start) * 1e3
        if out.get("setup_error"):
            res.setup_errors.append(str(out["setup_error"]))
        for r in out["records"]:
            records.append({**r, "pid": out["pid"]})
        res.children.append(
            {k: v for k, v in out.items() if k != "records"}
            | {"threads": len(out["records"]), "writes_ok": _ok(out["records"])}
        )
    missing = cell.writers - len(records)
    errors = sum(1 for r in records if r.get("error")) + max(0, missing)
    for r in records:
        if r.get("error"):
            msg = str(r["error"])
            res.error_messages[msg] = res.error_messages.get(msg, 0) + 1
    if missing > 0:
        res.error_messages[f"{missing} writers never reported"] = 1

    res.releases = releases
    res.rows_expected = len(releases) + sum(1 for r in records if not r.get("error"))
    # the raw per-writer figures, relative to the first lock taken (ms)
    for r in records:
        r["start_ms"] = (r.pop("start") - t_start) * 1e3
        r["end_ms"] = (r.pop("end") - t_start) * 1e3
    res.children = [
        {**c, "writers": [r for r in records if r["pid"] == c["pid"]]} for c in res.children
    ]
    parent_ms = (t_release - t_start) * 1e3
    # order: each writer's start against its row's place in the commit order
    placed = [r for r in records if f"{r['pid']}:{r['thread']}" in committed]
    order = _stats.overtake_figures(
        [r["start_ms"] for r in placed], [committed[f"{r['pid']}:{r['thread']}"] for r in placed]
    )
    durations = [r["end_ms"] - r["start_ms"] for r in records]
    last_end = max((r["end_ms"] for r in records), default=None)
    slowest = max(durations, default=None)
    # every finish against the same release as AFTER_RELEASE (whose maximum it is)
    after = [r["end_ms"] - parent_ms for r in records]
    res.figures = {
        "parent_ms": parent_ms,
        "fastest_ms": min(durations, default=None),
        "slowest_ms": slowest,
        "script_ms": (t_collected - t_start) * 1e3,
        "delta_ms": None if slowest is None else parent_ms - slowest,
        "errors": float(errors),
        "after_release_ms": None if last_end is None else last_end - parent_ms,
        "after_latest_release_ms": _after_latest_release(records, releases),
        "first_after_release_ms": min(after, default=None),
        "p50_after_release_ms": _stats.median(after) if after else None,
        "worst_overtakes": order["worst_overtakes"] if placed else None,
        "overtaken_share": order["overtaken_share"] if placed else None,
        "handoff_share": gate.get("handoff_share"),
        "gate_grants": gate.get("gate_grants"),
        "host_steal_ms": (
            None
            if steal_before is None or steal_after is None
            else (steal_after - steal_before) / 1e6
        ),
    }
    return res


def _host_steal_ns() -> int | None:
    """CPU time the hypervisor has taken from this virtual machine's CPUs
    so far (``steal`` in /proc/stat, summed over CPUs; in clock ticks of
    10 ms, so a few ms of steal in a burst shows as 0 or 10 ms); None where
    the system does not say."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = f.readline().split()
        return int(fields[8]) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _after_latest_release(
    records: Sequence[dict[str, Any]], releases: Sequence[float]
) -> float | None:
    """The largest ``finish - the parent's latest release before it`` (ms):
    how long the lock stood free before the last waiter got through, also
    when children got in during the gap between two slow queries."""
    worst: float | None = None
    marks = [0.0, *(r * 1e3 for r in releases)]
    for r in records:
        end = float(r["end_ms"])
        since = end - max((m for m in marks if m <= end), default=0.0)
        worst = since if worst is None else max(worst, since)
    return worst


def _ok(records: Sequence[dict[str, Any]]) -> int:
    return sum(1 for r in records if not r.get("error"))


def _commit_order(path: str) -> dict[str, int]:
    """Each child writer's place in the commit order (its row's rowid)."""
    conn = sqlite3.connect(path, timeout=30)
    try:
        rows = conn.execute("SELECT who, rowid FROM t WHERE who != 'parent' ORDER BY rowid")
        return {str(who): int(rowid) for who, rowid in rows}
    finally:
        conn.close()


def _count_rows(path: str) -> int:
    conn = sqlite3.connect(path, timeout=30)
    try:
        (n,) = conn.execute("SELECT count(*) FROM t").fetchone()
        return int(n)
    finally:
        conn.close()


# --------------------------------------------------------------------------
# the experiment


def run(cfg: Config, progress: Progress | None = None) -> dict[str, Any]:
    progress = progress or Progress(0)
    ctx = mp.get_context(cfg.start_method)
    started = time.time()
    t0 = time.monotonic()
    kinds = tuple(dict.fromkeys(v.slow for v in cfg.variant_list))
    cte_n = calibrate_cte(cfg.slow_seconds) if "cte" in kinds else 0
    slow_work = {kind: _slow_work(kind, cfg.slow_seconds, cte_n) for kind in kinds}
    raw: list[CellResult] = []
    steps = plan(cfg)
    progress.total = len(steps)
    for st in steps:
        what = f"{st.variant.key} " if cfg.variants else ""
        progress.describe(f"run {st.run}/{cfg.runs} {what}{st.parent} {st.mode} {st.cell.label}")
        raw.append(
            run_cell(
                cfg,
                ctx,
                st.run,
                st.parent,
                st.mode,
                st.cell,
                slow_work[st.variant.slow],
                st.variant,
            )
        )
        progress.advance()
    result: dict[str, Any] = {
        "experiment": NAME,
        "started_at": started,
        "elapsed_s": time.monotonic() - t0,
        "config": cfg.to_json(),
        "slow_query": {
            "kind": ",".join(kinds),
            "seconds": cfg.slow_seconds,
            "cte_count_to": cte_n if "cte" in kinds else None,
        },
        "raw": [asdict(r) for r in raw],
    }
    result["summary"] = summarise(cfg, raw)
    result["comparisons"] = comparisons(cfg, result["summary"])
    result["targets"] = targets(cfg, result["summary"])
    return result


def summarise(cfg: Config, raw: Sequence[CellResult]) -> list[dict[str, Any]]:
    """Median and CV of every figure across runs, per (variant, parent, mode,
    cell)."""
    out = []
    for variant in cfg.variant_list:
        for parent in cfg.parents:
            for mode in cfg.modes:
                for cell in cfg.cells:
                    key = (variant.key, parent, mode, cell.key)
                    mine = [r for r in raw if (r.variant, r.parent, r.mode, r.cell) == key]
                    figures: dict[str, Any] = {}
                    for name in FIGURES:
                        vals = [v for r in mine if (v := r.figures.get(name)) is not None]
                        figures[name] = _stats.summarise(vals).to_json() if vals else None
                    lost = sum(max(0, r.rows_expected - r.rows_found) for r in mine)
                    out.append(
                        {
                            "variant": variant.key,
                            "slow_query": variant.slow,
                            "threads_start": variant.threads_start,
                            "parent": parent,
                            "mode": mode,
                            "cell": cell.key,
                            "label": cell.label,
                            "slow": cell.slow,
                            "writers": cell.writers,
                            "runs": len(mine),
                            "rows_lost": lost,
                            "parent_errors": [r.parent_error for r in mine if r.parent_error],
                            "figures": figures,
                        }
                    )
    return out


def _summary_of(entry: dict[str, Any], figure: str) -> _stats.Summary | None:
    s = entry["figures"].get(figure)
    if s is None:
        return None
    return _stats.Summary(
        n=s["n"],
        median=s["median"],
        cv=s["cv"],
        min=s["min"],
        max=s["max"],
        values=tuple(s["values"]),
    )


def comparisons(cfg: Config, summary: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """AFTER_RELEASE of litegate against every other mode, per variant and
    cell."""
    out: list[dict[str, Any]] = []
    if "litegate" not in cfg.modes:
        return out
    index = {(e["variant"], e["parent"], e["mode"], e["cell"]): e for e in summary}
    for variant in cfg.variant_list:
        for parent in cfg.parents:
            for cell in cfg.cells:
                lg = index.get((variant.key, parent, "litegate", cell.key))
                cand = _summary_of(lg, "after_release_ms") if lg else None
                for mode in cfg.modes:
                    if mode == "litegate":
                        continue
                    e = index.get((variant.key, parent, mode, cell.key))
                    base = _summary_of(e, "after_release_ms") if e else None
                    if base is None or cand is None:
                        continue
                    cmp = _stats.compare(base, cand, cfg.noise_k)
                    out.append(
                        {
                            "variant": variant.key,
                            "parent": parent,
                            "cell": cell.key,
                            "figure": "after_release_ms",
                            "baseline_name": mode,
                            "candidate_name": "litegate",
                            **cmp.to_json(),
                        }
                    )
    return out


def _median(entry: dict[str, Any], figure: str) -> float | None:
    s = entry["figures"].get(figure)
    return None if s is None else float(s["median"])


def _where(entry: dict[str, Any], several_variants: bool) -> str:
    """How a target names a cell: with its variant when there are several."""
    return f"{entry['variant']} {entry['cell']}" if several_variants else str(entry["cell"])


def _after_release_target(
    parent: str, name: str, cells: Sequence[dict[str, Any]], limit: float, several: bool
) -> dict[str, Any]:
    values = {_where(e, several): _median(e, "after_release_ms") for e in cells}
    misses = {k: v for k, v in values.items() if v is None or v > limit}
    return {
        "parent": parent,
        "target": name,
        "limit_ms": limit,
        "values_ms": values,
        "met": not misses,
        "misses": misses,
    }


def targets(cfg: Config, summary: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The performance targets of the design brief, checked on the medians
    (reported, never asserted). With several variants each target covers
    every variant (issue 10: met in every variant) and names its misses by
    variant and cell."""
    out: list[dict[str, Any]] = []
    several = len(cfg.variant_list) > 1
    every = " in every variant" if several else ""
    for parent in cfg.parents:
        mine = [e for e in summary if e["parent"] == parent and e["mode"] == "litegate"]
        if not mine:
            continue
        slow_cells = [e for e in mine if e["slow"] > 0]
        fast_cells = [e for e in mine if e["slow"] == 0]
        if slow_cells:
            out.append(
                _after_release_target(
                    parent,
                    f"slowest child <= parent release + 5 ms (cells with slow queries){every}",
                    slow_cells,
                    TARGET_AFTER_RELEASE_MS,
                    several,
                )
            )
        if fast_cells:
            out.append(
                _after_release_target(
                    parent,
                    f"fast-only cells: slowest child <= 15 ms after the start{every}",
                    fast_cells,
                    TARGET_FAST_ONLY_MS,
                    several,
                )
            )
        misses: dict[str, float] = {}
        for e in mine:
            where = _where(e, several)
            errors = _median(e, "errors") or 0.0
            if errors > 0:
                misses[f"{where} errors"] = errors
            if e["rows_lost"]:
                misses[f"{where} rows lost"] = float(e["rows_lost"])
        out.append(
            {
                "parent": parent,
                "target": "0 errors and no lost writes",
                "met": not misses,
                "misses": misses,
            }
        )
    return out


# --------------------------------------------------------------------------
# output

COLUMNS = (
    Column("MODE", "center"),
    Column("CONTENTION", "left"),
    Column("PARENT"),
    Column("FASTEST"),
    Column("SLOWEST"),
    Column("SCRIPT"),
    Column("DELTA"),
    Column("ERRORS"),
    Column("AFTER_RELEASE"),
    Column("WORST OVERTAKES"),
    Column("HAND-OFFS"),
)


VARIANT_COLUMNS = (
    Column("VARIANT", "left"),
    Column("CONTENTION", "left"),
    Column("AFTER_RELEASE"),
    Column("CV"),
    Column("FASTEST"),
    Column("P50"),
    Column("ERRORS"),
    Column("TARGET", "center"),
)


def _several_variants(cfg: dict[str, Any]) -> bool:
    """A --variants run (its JSON config lists the variants)."""
    return len(cfg.get("variants") or ()) > 1


def render(result: dict[str, Any]) -> str:
    cfg = result["config"]
    runs = int(cfg["runs"])
    summary: list[dict[str, Any]] = result["summary"]
    parts: list[str] = []
    slow = result["slow_query"]
    what = f"median of {runs} runs" if runs > 1 else "one run"
    if cfg.get("variants"):
        parts.extend(_variant_report(result))
    else:
        parts.append(
            f"contention (seed 000): {what}; times in ms; slow query = "
            f"{slow['kind']} {slow['seconds']:g} s; children started with "
            f"{cfg['start_method']}, their threads {cfg.get('threads_start', 'before')} "
            "the start signal"
        )
        for parent in cfg["parents"]:
            entries = [e for e in summary if e["parent"] == parent]
            parts.append("")
            parts.append(f"== {PARENT_TITLES.get(parent, parent)}")
            parts.append(_table(entries, cfg["modes"], cv=False))
            if runs > 1:
                parts.append("")
                parts.append(f"-- coefficient of variation across {runs} runs (seed 002)")
                parts.append(_table(entries, cfg["modes"], cv=True))
            parts.extend(_comparison_lines(result, parent))
            errs = sorted({m for e in entries for m in e["parent_errors"]})
            if errs:
                parts.append("parent errors: " + "; ".join(errs))
    parts.extend(_error_lines(result))
    parts.append("")
    parts.extend(target_lines(result))
    return "\n".join(parts)


def _variant_report(result: dict[str, Any]) -> list[str]:
    """--variants: per parent, one table per mode, one row per variant (and
    cell). The seed's other columns of every variant are in the JSON."""
    cfg = result["config"]
    runs = int(cfg["runs"])
    what = f"median of {runs} runs" if runs > 1 else "one run"
    parts = [
        f"contention (seed 000), {len(cfg['variants'])} variants: {what}; times in ms; "
        f"children started with {cfg['start_method']}",
        f"  slow query {result['slow_query']['seconds']:g} s: sleep = the parent sleeps, "
        "cte = a CPU-bound recursive CTE",
        "  threads: before = the children's threads wait on the start signal before the "
        "parent takes the lock; after = started once it arrives (connections open before, "
        "in both)",
        "  AFTER_RELEASE = the slowest child's COMMIT - the parent's last release (as in the "
        "main table); FASTEST / P50 = the first / median child COMMIT - the same release",
        f"  TARGET: AFTER_RELEASE <= {TARGET_AFTER_RELEASE_MS:g} ms "
        f"(fast-only cells: <= {TARGET_FAST_ONLY_MS:g} ms after the start)",
    ]
    for parent in cfg["parents"]:
        entries = [e for e in result["summary"] if e["parent"] == parent]
        for mode in cfg["modes"]:
            parts.append("")
            parts.append(f"== {mode}; {PARENT_TITLES.get(parent, parent)}")
            parts.append(_variant_table([e for e in entries if e["mode"] == mode], cfg))
        parts.extend(_comparison_lines(result, parent))
        errs = sorted({m for e in entries for m in e["parent_errors"]})
        if errs:
            parts.append("parent errors: " + "; ".join(errs))
    return parts


def _target_met(entry: dict[str, Any]) -> bool | None:
    """Whether this cell's median meets the AFTER_RELEASE target that applies
    to it (None: no figure)."""
    value = _median(entry, "after_release_ms")
    if value is None:
        return None
    limit = TARGET_AFTER_RELEASE_MS if entry["slow"] > 0 else TARGET_FAST_ONLY_MS
    return value <= limit


def _variant_table(entries: list[dict[str, Any]], cfg: dict[str, Any]) -> str:
    groups: list[list[list[str]]] = []
    for cell in cfg["cells"]:  # a blank line between cells, variants in run order
        rows: list[list[str]] = []
        for variant in cfg["variants"]:
            e = next((x for x in entries if (x["variant"], x["cell"]) == (variant, cell)), None)
            if e is None:
                continue
            figs = e["figures"]
            after = figs.get("after_release_ms")
            met = _target_met(e)
            rows.append(
                [
                    variant,
                    e["label"],
                    "-" if after is None else fmt_ms(after["median"], 1),
                    "-" if after is None else fmt_pct(after["cv"]),
                    fmt_ms(_median(e, "first_after_release_ms"), 1),
                    fmt_ms(_median(e, "p50_after_release_ms"), 1),
                    fmt_ms(_median(e, "errors")),
                    "-" if met is None else ("met" if met else "MISS"),
                ]
            )
        groups.append(rows)
    return seed_table(VARIANT_COLUMNS, groups)


def _table(entries: list[dict[str, Any]], modes: Sequence[str], *, cv: bool) -> str:
    groups: list[list[list[str]]] = []
    for mode in modes:
        rows: list[list[str]] = []
        for e in entries:
            if e["mode"] != mode:
                continue
            row = [mode, e["label"]]
            for fig in TABLE_FIGURES:
                s = e["figures"].get(fig)
                if s is None:
                    row.append("-")
                elif cv:
                    row.append(fmt_pct(s["cv"]))
                elif fig == "handoff_share":
                    row.append(fmt_pct(s["median"]))
                else:
                    row.append(fmt_ms(s["median"], 1 if fig == "after_release_ms" else 0))
            rows.append(row)
        groups.append(rows)
    return seed_table(COLUMNS, groups)


def _comparison_lines(result: dict[str, Any], parent: str) -> list[str]:
    cmps = [c for c in result["comparisons"] if c["parent"] == parent]
    if not cmps or int(result["config"]["runs"]) < 2:
        return []
    # one column per (variant, cell), named by what differs between the columns
    where = list(dict.fromkeys((c.get("variant", ""), c["cell"]) for c in cmps))
    several = _several_variants(result["config"])
    one_cell = len({cell for _, cell in where}) == 1
    titles = [(v if one_cell else f"{v} {cell}") if several else cell for v, cell in where]
    modes = list(dict.fromkeys(c["baseline_name"] for c in cmps))
    k = result["config"]["noise_k"]
    cols = [Column("MODE", "center"), *(Column(t) for t in titles)]
    rows = []
    for mode in modes:
        row = [mode]
        for w in where:
            c = next(
                (
                    c
                    for c in cmps
                    if (c["baseline_name"], c.get("variant", ""), c["cell"]) == (mode, *w)
                ),
                None,
            )
            if c is None:
                row.append("-")
            else:
                row.append(f"{c['delta']:+.1f}" + ("~" if c["within_noise"] else ""))
        rows.append(row)
    return [
        "",
        f"-- AFTER_RELEASE, litegate minus MODE (ms; negative: litegate sooner; "
        f"~ = within noise, {k:g} x CV)",
        seed_table(cols, [rows]),
    ]


def _error_lines(result: dict[str, Any]) -> list[str]:
    msgs: dict[str, int] = {}
    setup: set[str] = set()
    for r in result["raw"]:
        for m, n in r["error_messages"].items():
            key = f"{r['mode']}: {m}"
            msgs[key] = msgs.get(key, 0) + n
        setup.update(r["setup_errors"])
    lines = []
    if msgs:
        lines.append("")
        lines.append("errors seen (mode: message x count):")
        lines.extend(f"  {m} x {n}" for m, n in sorted(msgs.items(), key=lambda kv: -kv[1])[:12])
    if setup:
        lines.append("child setup errors:")
        lines.extend("  " + s.strip().splitlines()[-1] for s in sorted(setup)[:5])
    return lines


def target_lines(result: dict[str, Any]) -> list[str]:
    lines = ["targets (litegate mode, medians; reported, not asserted):"]
    for t in result["targets"]:
        status = "met " if t["met"] else "MISS"
        detail = ""
        if "values_ms" in t:
            worst = max((v for v in t["values_ms"].values() if v is not None), default=None)
            detail = f" worst {worst:.1f} ms" if worst is not None else ""
        if t["misses"]:
            shown = ", ".join(
                f"{k}: {'-' if v is None else f'{v:.1f}'}" for k, v in list(t["misses"].items())[:6]
            )
            detail += f" (misses {shown})"
        lines.append(f"  [{status}] parent {t['parent']}: {t['target']}{detail}")
    return lines


def charts(result: dict[str, Any], out: Path) -> list[Path]:
    from ._charts import Bar, grouped_bars

    cfg = result["config"]
    several = _several_variants(cfg)
    panels = []
    for parent in cfg["parents"]:
        entries = [e for e in result["summary"] if e["parent"] == parent]
        # one group of bars per (variant, cell), in the summary's order
        where = list(dict.fromkeys((e.get("variant", ""), e["label"]) for e in entries))
        one_cell = len({label for _, label in where}) == 1
        labels = [(v if one_cell else f"{v}\n{label}") if several else label for v, label in where]
        series: dict[str, list[Bar]] = {}
        for mode in cfg["modes"]:
            bars = []
            for w in where:
                e = next(
                    x
                    for x in entries
                    if (x["mode"], x.get("variant", ""), x["label"]) == (mode, *w)
                )
                s = e["figures"].get("after_release_ms")
                bars.append(
                    Bar(0.0, 0.0, 0.0) if s is None else Bar(s["median"], s["min"], s["max"])
                )
            series[mode] = bars
        panels.append((PARENT_TITLES.get(parent, parent), labels, series))
    if not panels:
        return []
    runs = int(cfg["runs"])
    path = grouped_bars(
        out / "contention-after-release.png",
        title=(
            "seed 000: slowest child finish minus the parent's lock release (ms)"
            + (", variants of the scenario" if several else "")
            + (f", median of {runs} runs, bars min..max" if runs > 1 else ", one run")
        ),
        panels=panels,
        ylabel="after release, ms (symlog)",
        target=TARGET_AFTER_RELEASE_MS,
        target_label="target 5 ms",
    )
    return [path]


# --------------------------------------------------------------------------
# command line


def _cells(text: str) -> tuple[Cell, ...]:
    try:
        cells = tuple(Cell.parse(x) for x in text.split(",") if x.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not cells:
        raise argparse.ArgumentTypeError("no cells given")
    return cells


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--modes",
        type=_csv(MODES),
        default=None,
        metavar="LIST",
        help=f"comma-separated modes (default: all: {','.join(MODES)}; --variants: "
        f"{','.join(VARIANT_MODES)})",
    )
    p.add_argument(
        "--cells",
        type=_cells,
        default=None,
        metavar="P/T/S,...",
        help="cells to run, e.g. 8/4/0,8/4/1 (default: P in 4,8 x T in 2,4 x S in 0,1,2; "
        "--quick: 8/4/0,8/4/1; --variants: 8/4/1)",
    )
    parent = p.add_mutually_exclusive_group()
    parent.add_argument(
        "--parent",
        choices=("same", "foreign", "both"),
        default=None,
        help="how the parent holds the lock: like its children, as a foreign writer (plain "
        "sqlite3), or both, one table each (default: both; --variants: same, the public API)",
    )
    parent.add_argument(
        "--foreign-parent",
        dest="parent",
        action="store_const",
        const="foreign",
        help="only the foreign-writer table (same as --parent foreign)",
    )
    p.add_argument(
        "--slow",
        choices=SLOW_KINDS,
        default=None,
        help="the slow query: a write transaction that sleeps (default) or a recursive CTE "
        "that counts, calibrated to --slow-seconds",
    )
    p.add_argument(
        "--threads-start",
        choices=THREAD_STARTS,
        default=None,
        help="when the children's writer threads start: before the parent takes the lock, "
        "each waiting on the start signal (default), or only once the signal arrives "
        "(connections are opened before it either way)",
    )
    p.add_argument(
        "--variants",
        action="store_true",
        help="run every variant of the scenario in one run: --slow sleep,cte x "
        "--threads-start before,after (an axis given explicitly stays fixed); one table per "
        "mode, one row per variant",
    )
    p.add_argument(
        "--slow-seconds",
        type=positive_float,
        default=1.0,
        metavar="S",
        help="how long one slow query holds the lock (default 1.0)",
    )
    p.add_argument(
        "--child-timeout",
        type=positive_float,
        default=5.0,
        metavar="S",
        help="each child write gives up after this many seconds (default 5)",
    )
    p.add_argument(
        "--litegate-busy",
        choices=sorted(STRATEGIES),
        default="constant",
        help="litegate's fallback busy strategy against a foreign writer (default constant)",
    )
    p.add_argument(
        "--start-method",
        choices=("spawn", "forkserver", "fork"),
        default="spawn",
        help="how child processes start (default spawn: clean interpreters)",
    )


def config_from_args(args: argparse.Namespace) -> Config:
    variants: tuple[Variant, ...] = ()
    if args.variants:
        variants = Variant.product(
            (args.slow,) if args.slow else SLOW_KINDS,
            (args.threads_start,) if args.threads_start else THREAD_STARTS,
        )
    cells = args.cells
    if cells is None:
        # --variants is about one cell; --quick does not shrink it further
        # (8 cell runs of about 2 s with the default modes)
        cells = VARIANT_CELLS if variants else QUICK_CELLS if args.quick else FULL_CELLS
    modes = args.modes or (VARIANT_MODES if variants else MODES)
    parent = args.parent or ("same" if variants else "both")
    parents = PARENTS if parent == "both" else (parent,)
    if args.slow_seconds <= 0 or args.child_timeout <= 0:
        raise ValueError("--slow-seconds and --child-timeout must be positive")
    return Config(
        modes=tuple(modes),
        cells=tuple(cells),
        parents=parents,
        runs=args.runs,
        slow=args.slow or "sleep",
        threads_start=args.threads_start or "before",
        variants=variants,
        slow_seconds=args.slow_seconds,
        child_timeout=args.child_timeout,
        start_method=args.start_method,
        litegate_busy=args.litegate_busy,
        noise_k=args.noise_k,
    )
