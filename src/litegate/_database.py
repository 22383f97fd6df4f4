"""``litegate.connect()`` and the :class:`Database` it returns: the sync face
over the engine (``_engine.py``), which holds the writer's lifecycle and the
reader pool for this face and for :mod:`litegate.aio` alike."""

from __future__ import annotations

import math
import os
import sqlite3
import weakref
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, NamedTuple, TypeVar

from . import _interrupts, _maintenance
from ._batch import Request, check_transact_fn
from ._busy import BusyStrategy, get_strategy
from ._closing import CloseHooks
from ._engine import (
    PID,
    Engine,
    Params,
    ProcessState,
    is_read_only,
    read_only_error,
)
from ._errors import ConfigError
from ._fair import Budget
from ._files import check_path
from ._gate import on_fork_in_child
from ._guard import WriterConnection
from ._maintenance import BackupResult, CheckpointResult, OptimizeResult, VacuumResult
from ._profiles import PragmaValue
from ._settings import Fairness, budget_of, resolve_settings
from ._statements import TX
from ._statements import kind as statement_kind

__all__ = ["Database", "Params", "WriteResult", "connect", "engine_of"]

T = TypeVar("T")


class WriteResult(NamedTuple):
    """What ``db.execute()`` / ``db.executemany()`` return, after COMMIT."""

    rowcount: int
    lastrowid: int | None
    rows: list[Any]  # rows of a ``RETURNING`` clause, else []


# After fork() the child gets copies of the parent's connections: see
# _gate.drop_after_fork.
_LIVE: weakref.WeakSet[Database] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    PID[0] = os.getpid()
    for db in list(_LIVE):
        db._engine.forget_parent()


on_fork_in_child(_after_fork_in_child)


def _positive(name: str, value: object, *, integer: bool = False) -> Any:
    ok_type = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, ok_type):
        kind = "a whole number" if integer else "a number of seconds"
        raise ConfigError(f"{name} must be {kind}, got {value!r}")
    if not value > 0 or (isinstance(value, float) and math.isnan(value)):
        raise ConfigError(f"{name} must be greater than zero, got {value!r}")
    return value


def _policy_name(fair: object) -> str:
    if isinstance(fair, Budget):
        return f"bounded({fair.overtakes:g}, {fair.seconds:g} s)"
    return {True: "bounded", False: "unfair", "strict": "strict"}.get(fair, "?")


# Statements db.query() has seen that open no transaction: a memo, so the
# uncontended read checks a repeated statement with one look-up.
_READS: dict[str, bool] = {}


def engine_of(db: Database) -> Engine:
    """The engine under ``db``: what :mod:`litegate.aio` drives."""
    return db._engine


class Database:
    """One SQLite file shared fairly by the threads of this process and by
    every other process that opens it with litegate. Create with
    :func:`litegate.connect`."""

    # Group commit bounds: a batch stops taking members at this many
    # statements or after this long executing them (see _batch.py).
    GROUP_COMMIT_MAX_STATEMENTS = 256
    GROUP_COMMIT_MAX_SECONDS = 0.010

    def __init__(
        self,
        path: str,
        *,
        readers: int,
        profile: str,
        timeout: float,
        pragmas: dict[str, PragmaValue],
        busy: tuple[str, BusyStrategy],
        fair: Fairness = True,
        checkpoints: bool = True,
        checkpoint_every: int = 1000,
        combine: bool = False,
        litestream: bool = False,
    ) -> None:
        self.path = path
        self.combine = combine
        self.fair = fair
        self.budget = budget_of(fair)
        self.checkpoints = checkpoints
        self.profile = profile
        self.timeout = timeout
        self._engine = Engine(
            path,
            owner=self,
            readers=readers,
            timeout=timeout,
            pragmas=pragmas,
            busy=busy,
            fair=fair,
            budget=self.budget,
            checkpoints=checkpoints,
            checkpoint_every=checkpoint_every,
            combine=combine,
            litestream=litestream,
            max_batch=self.GROUP_COMMIT_MAX_STATEMENTS,
            max_time=self.GROUP_COMMIT_MAX_SECONDS,
        )
        self._close_hooks = CloseHooks()
        _LIVE.add(self)
        try:
            self._engine.state()  # opens the writer now: bad paths fail here
        except BaseException:
            self._engine.closed = True
            self._teardown()
            raise

    def _process_state(self) -> ProcessState:
        return self._engine.state()

    # -- writing ----------------------------------------------------------
    def write(self, timeout: float | None = None) -> _WriteBlock:
        """``with db.write() as conn:`` the write connection inside
        ``BEGIN IMMEDIATE``, after a fair wait for the write gate. COMMIT on
        exit, ROLLBACK on an exception. Raises :class:`WriteTimeout`."""
        return _WriteBlock(self._engine, timeout)

    def _exclusive(self, timeout: float | None) -> AbstractContextManager[WriterConnection]:
        """The write connection with the whole write gate held and no
        transaction open (maintenance: see Engine.exclusive)."""
        return self._engine.exclusive(timeout)

    def _checkpoint_turn(self, timeout: float | None) -> AbstractContextManager[bool]:
        return self._engine.checkpoint_turn(timeout)

    def execute(
        self, sql: str, params: Params = (), *, timeout: float | None = None
    ) -> WriteResult:
        """Run one write statement in its own IMMEDIATE transaction; returns
        once COMMIT is done. SQL errors go to this caller only."""
        engine = self._engine
        state = engine.current
        # (a forked child's copy has no state: the hook saw to it)
        if state is not None and not engine.closed:
            ship = state.ship
            if (
                timeout is None
                # (combining: here only while shipping would gain nothing, see
                # Ship.here; else the write ships)
                and (ship is None or ship.here(lone=True))
                and state.filegate.take_now(state.budget)
            ):
                # The lone writer: the gate was free for the taking, so no batch is
                # running (a batch holds the gate) or waiting for it (it would be
                # in line): run the statement now, a batch of one, without a queue.
                # Whoever comes meanwhile leads the next batch.
                return WriteResult(*engine.execute_now(state, sql, params))
            if ship is not None and not ship.here(lone=False):
                # A client process's lone thread: it ships at once, no queue.
                engine.refuse_nested(state, "db.execute()")
                done = ship.one(state.batcher, sql, params, engine.limit(timeout))
                if done is not None:
                    return WriteResult(*done)
        return self._submit(sql, params, False, timeout)

    def executemany(
        self, sql: str, seq: Iterable[Params], *, timeout: float | None = None
    ) -> WriteResult:
        """``execute`` for every parameter set in ``seq``, in one transaction."""
        return self._submit(sql, seq, True, timeout)

    def transact(self, fn: Callable[[sqlite3.Connection], T], *, timeout: float | None = None) -> T:
        """Run ``fn(conn)`` on the write connection as one member of the next
        group commit, and return its value once that COMMIT is done.

        ``fn`` may run several statements; they share one SAVEPOINT, so an
        exception from ``fn`` undoes only its own work and reaches only this
        caller. ``fn`` runs on whichever thread leads the batch, must not
        BEGIN, COMMIT or ROLLBACK, and should be short: the other members of
        the batch wait for it. Do the slow parts (encoding, decoding) before
        and after. If SQLite drops the whole transaction (disk full), ``fn``
        may be run again in a fresh one, so it must not depend on having run
        only once outside the database.
        """
        check_transact_fn(fn)
        engine = self._engine
        state = engine.current
        if (
            state is not None
            and timeout is None
            and not engine.closed
            and (state.ship is None or state.ship.here(lone=True))
        ):
            # The lone writer, as in execute(): the gate was free for the
            # taking, so no batch runs or waits; fn runs in a transaction of
            # its own, with no queue and no wake-up object.
            conn = engine.begin_now(state)
            if conn is not None:
                return engine.transact_now(state, conn, fn)
        req = engine.submit(Request("", (), False, fn=fn), timeout, "db.transact()")
        value: T = req.value
        return value

    def _submit(self, sql: str, params: Any, many: bool, timeout: float | None) -> WriteResult:
        req = self._engine.submit(Request(sql, params, many), timeout, "db.execute()")
        assert req.result is not None
        return WriteResult(*req.result)

    # -- reading ----------------------------------------------------------
    def read(self, timeout: float | None = None) -> _ReadBlock:
        """``with db.read() as conn:`` a read-only connection from the pool,
        inside one read transaction (one consistent snapshot for the block).
        Raises :class:`PoolTimeout`; a write through it raises
        :class:`ReadOnlyError` and changes nothing."""
        return _ReadBlock(self._engine, timeout)

    def query(self, sql: str, params: Params = (), *, timeout: float | None = None) -> list[Any]:
        """Run one read statement on a pooled read-only connection; return all rows."""
        engine = self._engine
        state = engine.current
        if state is not None and timeout is None and not engine.closed and sql in _READS:
            conn = state.pool.take_idle()
            if conn is not None:
                # The uncontended path: a free connection, a statement that
                # opens no transaction (so nothing to roll back after it), and
                # no owner to note (fork safety: it is back before we return).
                return engine.query_on(state, conn, sql, params, quick=True)
        elif sql not in _READS and statement_kind(sql) != TX and len(_READS) < 4096:
            _READS[sql] = True  # (a statement that opens no transaction: the fast path next time)
        state, conn = engine.checkout(timeout)
        return engine.query_on(state, conn, sql, params)

    # -- maintenance ----------------------------------------------------------
    def backup(
        self,
        dest: str | os.PathLike[str],
        *,
        pages: int = 1024,
        progress: Callable[[int, int], None] | None = None,
        overwrite: bool = False,
    ) -> BackupResult:
        """An online, consistent copy at ``dest`` (one snapshot; writers go
        on). ``progress(pages_copied, pages_total)`` after each ``pages``."""
        return _maintenance.backup(self, dest, pages=pages, progress=progress, overwrite=overwrite)

    def vacuum(
        self,
        *,
        into: str | os.PathLike[str] | None = None,
        overwrite: bool = False,
        timeout: float | None = None,
    ) -> VacuumResult:
        """``VACUUM`` with the write gate held (writers wait, readers go on);
        ``into=``: ``VACUUM INTO`` a new compact file, no gate needed."""
        return _maintenance.vacuum(self, into=into, overwrite=overwrite, timeout=timeout)

    def checkpoint(
        self, mode: str = "PASSIVE", *, timeout: float | None = None
    ) -> CheckpointResult:
        """``PRAGMA wal_checkpoint(mode)`` with the write gate held; ``mode``
        is PASSIVE, FULL, RESTART or TRUNCATE."""
        return _maintenance.checkpoint(self, mode, timeout=timeout)

    def optimize(self, *, timeout: float | None = None) -> OptimizeResult:
        """``PRAGMA optimize`` with the write gate held."""
        return _maintenance.optimize(self, timeout=timeout)

    # -- introspection ------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Waits, retries, connections, PRAGMAs in force and WAL size."""
        return self._engine.stats(self.profile, _policy_name(self.fair))

    def __repr__(self) -> str:
        state = self._engine.current
        if self.closed or state is None:
            return f"<litegate.Database {self.path!r} {'closed' if self.closed else 'idle'}>"
        return (
            f"<litegate.Database {self.path!r} gate={'held' if state.writer_in_use else 'free'} "
            f"writers_waiting={state.filegate.waiting} readers={state.pool.in_use}/"
            f"{state.pool.capacity} readers_waiting={state.pool.waiting}>"
        )

    # -- closing ----------------------------------------------------------
    def close(self) -> None:
        """Close every connection. Callers waiting in a queue get
        :class:`Closed`; a transaction in progress finishes first and its
        connection closes when it is handed back. Safe to call twice."""
        if self._engine.closed:
            return
        self._engine.closed = True
        try:
            self._teardown()
        finally:
            self._close_hooks.fire()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has been called."""
        return self._engine.closed

    def on_close(self, fn: Callable[[], None]) -> Callable[[], None]:
        """Call ``fn()`` once when this Database closes (at once if it is
        closed), on the closing thread; returns a function that takes it
        back. For what parks callers outside litegate's own lines, so that
        close() wakes them as it wakes the gate's and the pool's waiters."""
        return self._close_hooks.add(fn)

    def _teardown(self) -> None:
        _LIVE.discard(self)
        self._engine.teardown()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _WriteBlock:
    __slots__ = ("_conn", "_engine", "_state", "_timeout")
    _conn: WriterConnection

    def __init__(self, engine: Engine, timeout: float | None) -> None:
        self._engine = engine
        self._timeout = timeout

    def __enter__(self) -> WriterConnection:
        engine = self._engine
        state = engine.current
        if state is not None and self._timeout is None and not engine.closed:
            conn = engine.begin_now(state)  # the lone writer: no wait, no clock
            if conn is not None:
                self._state, self._conn = state, conn
                return conn
        self._state, self._conn = engine.begin(self._timeout)
        return self._conn

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        conn = self._conn
        self._engine.end(self._state, conn, commit=et is None)
        if ev is not None:
            typed = conn.guard.typed(ev)  # a COMMIT or PRAGMA the guard refused
            if typed is not ev:
                raise typed from ev


class _ReadBlock:
    __slots__ = ("_conn", "_engine", "_state", "_timeout")

    def __init__(self, engine: Engine, timeout: float | None) -> None:
        self._engine = engine
        self._timeout = timeout

    def __enter__(self) -> sqlite3.Connection:
        self._state, self._conn = self._engine.checkout(self._timeout)
        try:
            self._conn.execute("BEGIN")
        except BaseException:
            self._engine.checkin(self._state, self._conn)
            raise
        return self._conn

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._engine.checkin(self._state, self._conn)
        if ev is not None and is_read_only(ev):
            raise read_only_error(ev, self._conn) from ev


def connect(
    path: str | os.PathLike[str],
    *,
    readers: int = 4,
    profile: str = "default",
    timeout: float | None = None,
    pragmas: Mapping[str, PragmaValue | None] | None = None,
    busy: str | BusyStrategy = "constant",
    fair: Fairness = True,
    checkpoints: bool | str = True,
    combine: bool = False,
) -> Database:
    """Open (or create) the SQLite file at ``path`` for fair concurrent use.

    - ``readers``: size of the read-only connection pool (opened lazily).
    - ``profile``: ``"default"``, ``"conservative"``, ``"balanced"`` or
      ``"aggressive"`` (see docs/profiles.md).
    - ``timeout``: seconds a caller may wait for the write gate or a read
      connection; default: the profile's ``busy_timeout``.
    - ``pragmas``: PRAGMAs that override the profile's (None removes one).
    - ``busy``: strategy against writers that bypass litegate, by name
      (``constant``, ``backoff``, ``jitter``, ``ceiling``, ``reversed``,
      ``sqlite-default``) or a function of the retry count returning seconds.
    - ``fair``: the write gate's policy. True (bounded fairness, the
      default): sleepers in arrival order, a running writer may take a free
      gate, and a head waiter gets it handed over once overtaken 16 times or
      after 2 ms; ``litegate.Bounded(overtakes, seconds)`` sets those two.
      ``"strict"``: strict FIFO with direct hand-off for every transaction.
      False: unbounded barging. The reader pool is strict FIFO unless
      ``fair=False``.
    - ``combine``: combine this process's single-statement writes
      (``execute``, ``executemany``) with other processes' into one
      transaction, committed by one process at a time (docs/how-it-works.md,
      "Combined writes across processes"). A lone one-row write is combined
      only from a process whose commits sync (``synchronous`` FULL or
      EXTRA); under NORMAL it takes its turn at the gate, which measured
      faster. Statements must mean the same in every process: no SQL
      functions, collations or adapters registered in one process only.
    - ``checkpoints``: run WAL checkpoints on a background thread, one per
      file across processes (the default) instead of inside the COMMIT that
      crosses SQLite's auto-checkpoint threshold; ``"litestream"``: the
      same, for a file that Litestream replicates (litegate never restarts
      the log, which is Litestream's to do).
    """
    raw = os.fspath(path)
    if not isinstance(raw, str):
        raise ConfigError(f"path must be a str or os.PathLike[str], got {type(raw).__name__}")
    if raw in ("", ":memory:") or raw.startswith("file:"):
        raise ConfigError(
            f"litegate needs a database file shared by connections, not {raw!r}; pass a "
            "filesystem path (a temporary file works for tests)"
        )
    readers = _positive("readers", readers, integer=True)
    litestream = checkpoints == "litestream"
    if isinstance(checkpoints, str) and not litestream:
        raise ConfigError(f'checkpoints must be True, False or "litestream", got {checkpoints!r}')
    budget_of(fair)  # a bad policy fails here, before anything is opened
    settings = resolve_settings(profile, pragmas, timeout, checkpoints=bool(checkpoints))
    busy_fn = get_strategy(busy)
    # One file, one gate, whatever path names it: a symlink and its target
    # must queue on the same sidecar (SQLite itself follows the link for its
    # -wal and -shm).
    full = os.path.realpath(os.path.abspath(raw))
    check_path(full)
    _interrupts.install()  # Ctrl-C never lands inside the gate's bookkeeping
    return Database(
        full,
        readers=readers,
        profile=profile,
        timeout=settings.timeout,
        pragmas=settings.pragmas,
        busy=busy_fn,
        fair=fair,
        checkpoints=bool(checkpoints),
        checkpoint_every=settings.every,
        combine=bool(combine),
        litestream=litestream,
    )
