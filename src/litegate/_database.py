"""``litegate.connect()`` and the :class:`Database` it returns."""

from __future__ import annotations

import functools
import math
import os
import sqlite3
import stat
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from types import TracebackType
from typing import Any, NamedTuple, TypeGuard, TypeVar
from urllib.parse import quote

from . import _maintenance, _profiles
from ._batch import GroupCommit, Request, refusal
from ._busy import BusyStrategy, get_strategy, is_busy, is_busy_error, retry_busy
from ._checkpoint import Checkpointer  # the file's, shared (FileGate)
from ._closing import CloseHooks
from ._combine import Ship
from ._errors import (
    Closed,
    ConfigError,
    NestedWriteError,
    OpenError,
    PoolTimeout,
    ReadOnlyError,
    WriteTimeout,
    sqlite_code,
)
from ._fair import BOUNDED, STRICT, UNFAIR, Budget, HandoffQueue, QueueClosed, QueueTimeout
from ._gate import FileGate, drop_after_fork, on_fork_in_child
from ._guard import (
    BEGIN,
    COMMIT,
    ROLLBACK,
    ReaderConnection,
    ReaderGuard,
    WriterConnection,
    close_connection,
    is_denied,
)
from ._maintenance import BackupResult, CheckpointResult, OptimizeResult, VacuumResult
from ._profiles import PragmaValue
from ._statements import TX
from ._statements import kind as statement_kind
from ._stats import WaitHistogram
from ._time import seconds

Params = Sequence[Any] | Mapping[str, Any]
T = TypeVar("T")

_SQLITE_READONLY = 8
_SQLITE_NOTADB = 26


class WriteResult(NamedTuple):
    """What ``db.execute()`` / ``db.executemany()`` return, after COMMIT."""

    rowcount: int
    lastrowid: int | None
    rows: list[Any]  # rows of a ``RETURNING`` clause, else []


# After fork() the child gets copies of the parent's connections: see
# _gate.drop_after_fork.
_LIVE: weakref.WeakSet[Database] = weakref.WeakSet()


def _blocks_the_loop(what: str) -> NestedWriteError:
    """A sync call on the thread of the event loop whose task holds the gate
    in ``async with db.write()``: it would block the loop, so the block could
    never end."""
    return NestedWriteError(
        f"{what} called on the event loop's thread while a task of that loop is inside "
        "async with db.write() would block the loop, and with it the block it waits for; "
        "use await tx.execute() on the tx the block gave you (or await db.execute() after it)"
    )


# This process's pid, kept by the fork hook: comparing with it is cheaper
# than asking the kernel (os.getpid() is a system call) on every call.
_PID = [os.getpid()]


def _after_fork_in_child() -> None:
    _PID[0] = os.getpid()
    for db in list(_LIVE):
        db._forget_parent_state()


on_fork_in_child(_after_fork_in_child)


def _positive(name: str, value: object, *, integer: bool = False) -> Any:
    ok_type = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, ok_type):
        kind = "a whole number" if integer else "a number of seconds"
        raise ConfigError(f"{name} must be {kind}, got {value!r}")
    if not value > 0 or (isinstance(value, float) and math.isnan(value)):
        raise ConfigError(f"{name} must be greater than zero, got {value!r}")
    return value


Fairness = bool | str | Budget


def budget_of(fair: object) -> Budget:
    """The gate's budget for ``connect(fair=...)``."""
    if isinstance(fair, Budget):
        k, t = fair
        if (
            isinstance(k, bool)
            or not isinstance(k, (int, float))
            or not isinstance(t, (int, float))
            or math.isnan(k)
            or math.isnan(t)
            or k < 0
            or t < 0
        ):
            raise ConfigError(
                f"fair=Bounded(overtakes, seconds) takes two numbers >= 0 (inf: no bound), "
                f"got {fair!r}"
            )
        return Budget(float(k), float(t))
    if fair is True:
        return BOUNDED
    if fair is False:
        return UNFAIR
    if fair == "strict":
        return STRICT
    raise ConfigError(
        f"fair must be True (bounded fairness), 'strict', False or "
        f"litegate.Bounded(overtakes, seconds), got {fair!r}"
    )


def _policy_name(fair: object) -> str:
    if isinstance(fair, Budget):
        return f"bounded({fair.overtakes:g}, {fair.seconds:g} s)"
    return {True: "bounded", False: "unfair", "strict": "strict"}.get(fair, "?")


# Statements db.query() has seen that open no transaction: a memo, so the
# uncontended read checks a repeated statement with one look-up.
_READS: dict[str, bool] = {}
# SQL that db.execute() runs as it is (not refused): a memo, so the lone
# writer's path checks a repeated statement with one dictionary look-up.
_PLAIN: dict[str, bool] = {}


def _errcode(exc: BaseException) -> int:
    return sqlite_code(exc)


class _ProcessState:
    """Everything a Database owns in one process: rebuilt from scratch in a
    forked child, never shared with the parent."""

    def __init__(self, db: Database) -> None:
        self.gate_wait = WaitHistogram()  # request -> BEGIN IMMEDIATE done
        # This file's gate in this process, shared with every other Database
        # (and Django connection) on it: one line in the process, and this
        # process's turns across processes. Our callers bring our budget.
        self.filegate = FileGate.open(db.path)
        self.budget = db.budget
        self.pool: HandoffQueue[sqlite3.Connection] = HandoffQueue(
            db._readers, db._open_reader, fair=db.fair is not False
        )
        self.writer: WriterConnection | None = None
        # The writer is in use from gate to release; close() closes it when
        # that ends. Guarded by writer_mutex (no I/O under it).
        self.writer_mutex = threading.Lock()
        self.writer_in_use = False
        self.closing = False
        self.gate_open = True  # our use of the FileGate, given back once
        # A Database collected without close(): give the gate its use back,
        # or the gate, its checkpointer and keeper threads would stay for the
        # rest of the process. (Holds the gate only: the state refers to the
        # Database, which must stay collectable.) Detached by a close.
        self.gate_collected = weakref.finalize(db, self.filegate.close_soon)
        self.gate_collected.atexit = False  # (at exit there is nothing left to free)
        self.writer_owner: int | None = None  # thread ident holding the gate
        # The async with db.write() holding the gate (litegate.aio's): its
        # .task, and the .thread that runs its event loop.
        self.writer_block: Any = None
        self.reader_owner: dict[int, int] = {}  # id(conn) -> thread ident, while out
        self.connections: list[sqlite3.Connection] = []  # every connection we opened
        self.writer_pragmas: dict[str, object] = {}
        self.reader_pragmas: dict[str, object] | None = None
        self.batcher = GroupCommit(
            lambda timeout: db._begin_for(
                self,
                threading.get_ident(),
                db.timeout if timeout is None else timeout,
                begin=False,
            )[1],
            lambda conn, commit: db._end(self, conn, commit),
            lambda conn, timeout: db._begin_again(self, conn, timeout),
            db._write_timeout,
            max_batch=db.GROUP_COMMIT_MAX_STATEMENTS,
            max_time=db.GROUP_COMMIT_MAX_SECONDS,
            default_timeout=db.timeout,
        )
        self.ship: Ship | None = None  # combining with other processes (set once open)
        self.checkpointer: Checkpointer | None = None  # started once the writer is open
        self.busy_retries = 0
        self.committed = 0
        self.rolled_back = 0


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
        combine: bool = False,
        litestream: bool = False,
    ) -> None:
        self.path = path
        self.combine = combine
        self.fair = fair
        self.budget = budget_of(fair)
        self.checkpoints = checkpoints
        self._litestream = litestream  # checkpoints="litestream"
        # With litegate's checkpointer, the profile's wal_autocheckpoint (in
        # pages) becomes the number of commits between background checkpoints,
        # and SQLite's own auto-checkpoint (on the commit path) is turned off.
        self._checkpoint_every = int(pragmas.get("wal_autocheckpoint", 1000)) or 1000
        if checkpoints:
            pragmas = {**pragmas, "wal_autocheckpoint": 0}
            pragmas.setdefault("journal_size_limit", 8 * self._checkpoint_every * 4096)
        self.profile = profile
        self.timeout = timeout
        self._readers = readers
        self._pragmas = pragmas
        self._busy_name, self._busy = busy
        self._closed = False
        self._pid = os.getpid()
        self._state_lock = threading.Lock()
        self._state: _ProcessState | None = None
        self._close_hooks = CloseHooks()
        _LIVE.add(self)
        try:
            self._process_state()  # opens the writer now: bad paths fail here
        except BaseException:
            self._closed = True
            self._teardown()
            raise

    # -- per-process state -------------------------------------------------
    def _process_state(self) -> _ProcessState:
        if self._closed:
            raise Closed(f"database {self.path!r} is closed; call litegate.connect() again")
        if self._pid != _PID[0]:  # a forked child that has not used us yet
            self._forget_parent_state()
        state = self._state
        if state is not None:
            return state
        with self._state_lock:
            if self._state is None:
                state = _ProcessState(self)
                self._state = state
                state.writer = self._open_writer(state)
                if self.combine:
                    state.ship = state.batcher.ship = Ship(state.filegate)
                    state.filegate.join_combining(state.batcher)
                if self.checkpoints:  # one per file per process, shared
                    state.checkpointer = state.filegate.checkpointer(
                        every_commits=self._checkpoint_every,
                        restart_frames=4 * self._checkpoint_every,
                        litestream=self._litestream,
                    )
            return self._state

    def _forget_parent_state(self) -> None:
        state, self._state = self._state, None
        self._pid = os.getpid()
        self._state_lock = threading.Lock()  # the parent's may be held forever
        if state is None:
            return
        state.gate_collected.detach()  # the gate is the parent's
        me = threading.get_ident()  # the forking thread keeps its ident in the child
        safe = {id(c) for c in state.pool.idle_snapshot()}
        safe.update(c for c, owner in state.reader_owner.items() if owner == me)
        block = state.writer_block  # an async write block's: idle if no statement is under way
        if state.writer is not None and (
            state.writer_owner in (None, me)
            or (block is not None and block.thread == me and block.calls == 0)
        ):
            safe.add(id(state.writer))
        for conn in state.connections:
            drop_after_fork(conn, idle=id(conn) in safe)

    # -- opening connections ---------------------------------------------
    def _open_writer(self, state: _ProcessState) -> WriterConnection:
        try:
            conn = sqlite3.connect(
                self.path,
                factory=WriterConnection,
                timeout=min(self.timeout, 3600.0),  # while setting up only
                isolation_level=None,
                check_same_thread=False,
                cached_statements=256,
            )
        except sqlite3.Error as exc:
            raise self._open_error(exc) from exc
        try:
            # The profile's busy_timeout applies while setting up (several
            # processes may switch a new file to WAL at once); afterwards the
            # writer never sleeps inside SQLite: the gate orders litegate's
            # writers and the busy strategy handles foreign ones.
            state.writer_pragmas = _profiles.apply(conn, self._pragmas, writer=True)
            conn.execute("PRAGMA busy_timeout = 0")
            state.writer_pragmas["busy_timeout"] = conn.execute("PRAGMA busy_timeout").fetchone()[0]
            wanted = str(self._pragmas.get("journal_mode", "")).lower()
            got = str(state.writer_pragmas.get("journal_mode", "")).lower()
            if wanted and got != wanted:
                raise OpenError(
                    f"could not switch {self.path!r} to journal_mode={wanted} (it is {got!r}); "
                    "is the file or its directory read-only?"
                )
            # from here on, user code cannot end litegate's transactions
            conn.guard_now(state.writer_pragmas)
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            # (sqlite3 decodes SQLite's message, which quotes a damaged schema)
            close_connection(conn)
            raise self._open_error(exc) from exc
        except BaseException:
            close_connection(conn)
            raise
        state.connections.append(conn)
        return conn

    def _open_reader(self) -> sqlite3.Connection:
        state = self._state
        assert state is not None
        uri = "file:" + quote(self.path, safe="/") + "?mode=ro"
        conn = sqlite3.connect(
            uri,
            uri=True,
            isolation_level=None,
            check_same_thread=False,
            cached_statements=256,
            factory=ReaderConnection,
        )
        try:
            in_force = _profiles.apply(conn, {**self._pragmas, "query_only": 1}, writer=False)
            conn.guard_now()
        except UnicodeDecodeError as exc:
            conn.close()
            raise self._open_error(exc) from exc
        except BaseException:
            conn.close()
            raise
        if state.reader_pragmas is None:
            state.reader_pragmas = in_force
        state.connections.append(conn)
        return conn

    def _open_error(self, exc: sqlite3.Error | UnicodeDecodeError) -> OpenError:
        return open_error(self.path, exc)

    # -- writing ----------------------------------------------------------
    def write(self, timeout: float | None = None) -> _WriteBlock:
        """``with db.write() as conn:`` the write connection inside
        ``BEGIN IMMEDIATE``, after a fair wait for the write gate. COMMIT on
        exit, ROLLBACK on an exception. Raises :class:`WriteTimeout`."""
        return _WriteBlock(self, timeout)

    def _begin(
        self, timeout: float | None, *, begin: bool = True
    ) -> tuple[_ProcessState, WriterConnection]:
        state = self._process_state()
        me = threading.get_ident()
        if state.writer_block is not None and state.writer_block.thread == me:
            raise _blocks_the_loop("db.write()" if begin else "maintenance")
        if state.writer_owner == me:
            raise NestedWriteError(
                "this thread already holds the write gate (an enclosing db.write()); waiting "
                "would wait for itself. "
                + (
                    "Run the statement on the connection the enclosing db.write() gave you"
                    if begin
                    else "Maintenance needs the gate with no transaction open: run it "
                    "outside the db.write() block"
                )
            )
        limit = self.timeout if timeout is None else seconds("timeout", timeout)
        return self._begin_for(state, me, limit, begin=begin)

    def _begin_for(
        self, state: _ProcessState, me: int, limit: float, *, begin: bool = True
    ) -> tuple[_ProcessState, WriterConnection]:
        """_begin with a limit already checked (the group-commit leader's).
        ``begin=False``: the gate only, no transaction (maintenance)."""
        start = time.monotonic()
        deadline = start + limit
        wait = None if math.isinf(limit) else limit
        gate = state.filegate
        try:
            got = gate.acquire(wait, state.budget, self)
        except QueueClosed:
            raise Closed(f"database {self.path!r} was closed while waiting to write") from None
        if not got:
            state.gate_wait.record_timeout()
            raise WriteTimeout(
                f"no write gate within {limit:g} s ({gate.waiting} more writers of this "
                "process are queued; a writer of another process may hold it: litegate top "
                "shows who); raise timeout= or make write transactions shorter"
            )
        conn = self._after_gate(state, start, deadline, limit, begin)
        state.writer_owner = me
        return state, conn

    @contextmanager
    def _exclusive(self, timeout: float | None) -> Iterator[WriterConnection]:
        """The write connection with the whole write gate held (this
        process's and the file's) and no transaction open: for what SQLite
        refuses inside a transaction (VACUUM, wal_checkpoint, optimize).
        Everything else that writes waits at the gate meanwhile."""
        state, conn = self._begin(timeout, begin=False)
        conn.guard.own = True  # litegate's own maintenance (VACUUM begins internally)
        try:
            yield conn
        finally:
            conn.guard.own = False
            self._end(state, conn, commit=False)

    def _checkpoint_turn(self, timeout: float | None) -> AbstractContextManager[bool]:
        """litegate's checkpoint lock (its checkpoints run one at a time,
        across processes), for maintenance that checkpoints; taken before
        the gate. Yields False if ``timeout`` (None: the default) ran out."""
        limit = self.timeout if timeout is None else timeout
        return self._process_state().filegate.checkpoint_turn(limit)

    def _after_gate(
        self,
        state: _ProcessState,
        start: float,
        deadline: float,
        limit: float,
        begin: bool = True,
    ) -> WriterConnection:
        """The gate is held: claim the write connection and run BEGIN
        IMMEDIATE. Releases the gate on failure."""
        conn = self._claim_writer(state)
        try:
            if begin:
                self._begin_immediate(state, conn, deadline, limit)
        except BaseException:
            state.gate_wait.record_timeout()
            self._release(state)
            raise
        if state.filegate.waited:  # (the histogram counts a wait that did not block as 0)
            state.gate_wait.record_exclusive(time.monotonic() - start)  # we hold the gate
        else:
            state.gate_wait.immediate += 1
        return conn

    def _gate_from_loop(self, state: _ProcessState, start: float, limit: float) -> WriterConnection:
        """asyncio's second half of taking the gate: the in-process lock was
        claimed on the event loop; take the cross-process gate (which may
        block, so this runs on a thread), then the writer and BEGIN."""
        deadline = start + limit
        left = None if math.isinf(limit) else max(0.0, deadline - time.monotonic())
        if not state.filegate.hold_across_processes(left, state.budget):
            state.gate_wait.record_timeout()
            raise WriteTimeout(
                f"no write gate within {limit:g} s: a writer of another process held it; raise "
                "timeout= or make write transactions shorter"
            )
        return self._after_gate(state, start, deadline, limit)

    def _claim_writer(self, state: _ProcessState) -> WriterConnection:
        """The gate is held: the write connection, marked in use (a close()
        meanwhile leaves it to the release). If the Database is closing, the
        gate goes back and Closed is raised."""
        with state.writer_mutex:
            conn = state.writer
            if conn is not None and not state.closing:
                state.writer_in_use = True
                return conn
        self._release(state)
        raise Closed(f"database {self.path!r} is closed")

    def _release(self, state: _ProcessState) -> None:
        """The write connection is free again and the gate goes back; a
        close() that came meanwhile closes the connection once the gate is
        given back (this Database's other callers see ``closing`` first)."""
        state.writer_owner = None
        state.writer_block = None
        with state.writer_mutex:
            state.writer_in_use = False
            close = state.closing and state.writer is not None
        try:
            state.filegate.release_now()
        finally:
            if close:
                self._close_writer(state)

    def _begin_now(self, state: _ProcessState) -> WriterConnection | None:
        """``_begin`` for a lone writer: the gate if it is free for the taking
        (FileGate.take_now), the writer claimed, BEGIN IMMEDIATE; None (having
        done nothing) when the general path must wait for the gate."""
        if not state.filegate.take_now(state.budget):
            return None
        conn = self._claim_writer(state)
        try:
            try:
                conn.control(BEGIN)
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise
                # a writer outside litegate: the busy strategy, within the timeout
                self._begin_immediate(state, conn, time.monotonic() + self.timeout, self.timeout)
        except BaseException:
            self._release(state)
            raise
        state.writer_owner = threading.get_ident()
        state.gate_wait.immediate += 1
        return conn

    def _begin_immediate(
        self, state: _ProcessState, conn: WriterConnection, deadline: float, limit: float
    ) -> None:
        try:
            conn.control(BEGIN)
            return
        except sqlite3.OperationalError as exc:
            if not is_busy(exc):
                raise

        # A writer that does not use litegate holds SQLite's lock: poll it with
        # the busy strategy. Only the gate holder polls, so at most one
        # process per database does.
        def count_retry() -> None:
            state.busy_retries += 1

        state.busy_retries += 1
        try:
            retry_busy(lambda: conn.control(BEGIN), self._busy, deadline, count_retry)
        except TimeoutError:
            raise WriteTimeout(
                f"SQLite's write lock stayed taken for {limit:g} s by a writer outside litegate "
                f"(busy strategy {self._busy_name!r}); find that writer or raise timeout="
            ) from None

    def _begin_again(
        self, state: _ProcessState, conn: WriterConnection, timeout: float | None = None
    ) -> None:
        """BEGIN IMMEDIATE with the gate held (the group-commit leader's, or
        again after a rollback), within ``timeout`` (None: the default)."""
        limit = self.timeout if timeout is None else timeout
        self._begin_immediate(state, conn, time.monotonic() + limit, limit)

    def _write_timeout(self, limit: float) -> WriteTimeout:
        return WriteTimeout(
            f"no write gate within {limit:g} s: the write was still queued for group commit; "
            "raise timeout= or make write transactions shorter"
        )

    def _end(self, state: _ProcessState, conn: WriterConnection, commit: bool) -> None:
        try:
            if conn.in_transaction:
                if commit:
                    try:
                        conn.control(COMMIT)
                        state.committed += 1
                        state.filegate.committed()
                    except BaseException:
                        if conn.in_transaction:
                            conn.control(ROLLBACK)
                        state.rolled_back += 1
                        raise
                else:
                    conn.control(ROLLBACK)
                    state.rolled_back += 1
            elif commit:  # one autocommit statement: it committed on its own
                state.committed += 1
                state.filegate.committed()
        finally:
            self._release(state)

    def execute(
        self, sql: str, params: Params = (), *, timeout: float | None = None
    ) -> WriteResult:
        """Run one write statement in its own IMMEDIATE transaction; returns
        once COMMIT is done. SQL errors go to this caller only."""
        state = self._state
        if (
            state is not None
            and timeout is None
            and not self._closed  # (a forked child's copy has _state None: the hook saw to it)
            and state.ship is None  # (combining: every write joins the queue, in order)
            and state.filegate.take_now(state.budget)
        ):
            # The lone writer: the gate was free for the taking, so no batch is
            # running (a batch holds the gate) or waiting for it (it would be
            # in line): run the statement now, a batch of one, without a queue.
            # Whoever comes meanwhile leads the next batch.
            return self._execute_now(state, sql, params)
        return self._submit(sql, params, False, timeout)

    def _execute_now(self, state: _ProcessState, sql: str, params: Params) -> WriteResult:
        """``execute`` for the lone writer, the gate held: the statement
        alone in autocommit mode (SQLite's write lock and the commit in one
        step), as group commit runs a batch of one. Anything unusual (a
        refused statement, a writer outside litegate, closing) takes the
        general steps."""
        conn = self._claim_writer(state)
        state.gate_wait.immediate += 1
        try:
            if sql not in _PLAIN:
                refused = refusal(sql)
                if refused is not None:
                    raise refused
                if len(_PLAIN) < 4096:  # statements repeat; a bounded memo is enough
                    _PLAIN[sql] = True
            try:
                cur = conn.execute(sql, params)
            except Exception as exc:
                if not (is_busy_error(exc) and not conn.in_transaction):
                    typed = conn.guard.typed(exc)
                    if typed is exc:
                        raise
                    raise typed from exc
                # A writer outside litegate holds SQLite's lock: wait for it in
                # a transaction, with the busy strategy, as a batch would.
                self._begin_immediate(state, conn, time.monotonic() + self.timeout, self.timeout)
                cur = conn.execute(sql, params)
            result = WriteResult(cur.rowcount, cur.lastrowid, cur.fetchall())
        except BaseException:
            self._end(state, conn, False)  # (rolls back what the busy path began)
            raise
        if conn.in_transaction:  # the busy path: COMMIT
            self._end(state, conn, True)
        else:  # committed on its own: count it, give everything back
            state.committed += 1
            ckpt = state.checkpointer
            if ckpt is not None and result.rowcount:  # (a no-op wrote nothing)
                ckpt.committed()
            with state.writer_mutex:
                state.writer_in_use = False
                closing = state.closing
            state.filegate.release_now()
            if closing:  # close() came meanwhile: the writer closes now
                self._close_writer(state)
        sizes = state.batcher.sizes.counts  # a batch of one
        sizes[1] = sizes.get(1, 0) + 1
        return result

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
        state = self._state
        if state is not None and timeout is None and not self._closed and state.ship is None:
            # The lone writer, as in execute(): the gate was free for the
            # taking, so no batch runs or waits; fn runs in a transaction of
            # its own, with no queue and no wake-up object.
            conn = self._begin_now(state)
            if conn is not None:
                return self._transact_now(state, conn, fn)
        req = self._submit_request(Request("", (), False, fn=fn), timeout, "db.transact()")
        value: T = req.value
        return value

    def _transact_now(
        self, state: _ProcessState, conn: WriterConnection, fn: Callable[[sqlite3.Connection], T]
    ) -> T:
        """``transact`` for the lone writer: the gate held, BEGIN IMMEDIATE
        run; a batch of one member (no SAVEPOINT needed: its failure rolls
        the transaction back)."""
        try:
            value = fn(conn)
            if hasattr(value, "__await__"):
                GroupCommit.refuse_awaitable(value)
        except BaseException as exc:
            self._end(state, conn, False)
            typed = conn.guard.typed(exc)
            if typed is not exc:
                raise typed from exc
            raise
        self._end(state, conn, True)
        sizes = state.batcher.sizes.counts  # a batch of one
        sizes[1] = sizes.get(1, 0) + 1
        return value

    def _submit(self, sql: str, params: Any, many: bool, timeout: float | None) -> WriteResult:
        req = self._submit_request(Request(sql, params, many), timeout, "db.execute()")
        assert req.result is not None
        return WriteResult(*req.result)

    def _submit_request(self, req: Request, timeout: float | None, what: str) -> Request:
        # Group commit: concurrent calls share one transaction, each in its own
        # SAVEPOINT; this returns after the COMMIT that holds our write.
        state = self._process_state()
        me = threading.get_ident()
        if state.writer_owner == me:
            raise NestedWriteError(
                f"{what} inside db.write() in the same thread would wait for itself; "
                "use conn.execute() on the connection db.write() gave you"
            )
        if state.writer_block is not None and state.writer_block.thread == me:
            raise _blocks_the_loop(what)
        limit = self.timeout if timeout is None else seconds("timeout", timeout)
        state.batcher.run(req, limit)
        if req.error is not None:
            raise req.error
        return req

    # -- reading ----------------------------------------------------------
    def read(self, timeout: float | None = None) -> _ReadBlock:
        """``with db.read() as conn:`` a read-only connection from the pool,
        inside one read transaction (one consistent snapshot for the block).
        Raises :class:`PoolTimeout`; a write through it raises
        :class:`ReadOnlyError` and changes nothing."""
        return _ReadBlock(self, timeout)

    def _checkout(self, timeout: float | None) -> tuple[_ProcessState, sqlite3.Connection]:
        state = self._process_state()
        limit = self.timeout if timeout is None else seconds("timeout", timeout)
        try:
            conn = state.pool.get(None if math.isinf(limit) else limit)
        except QueueTimeout:
            raise PoolTimeout(
                f"no read connection free within {limit:g} s ({self._readers} connections, "
                f"{state.pool.waiting} callers waiting); raise readers= or timeout=, or hold "
                "read connections for less time"
            ) from None
        except QueueClosed:
            raise Closed(f"database {self.path!r} was closed while waiting to read") from None
        except sqlite3.Error as exc:
            raise self._open_error(exc) from exc
        state.reader_owner[id(conn)] = threading.get_ident()
        return state, conn

    def _checkin(self, state: _ProcessState, conn: sqlite3.Connection) -> None:
        state.reader_owner.pop(id(conn), None)
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        except sqlite3.Error:
            state.pool.discard(conn)
            self._close_conn(state, conn)
            return
        state.pool.put(conn)

    def query(self, sql: str, params: Params = (), *, timeout: float | None = None) -> list[Any]:
        """Run one read statement on a pooled read-only connection; return all rows."""
        state = self._state
        if state is not None and timeout is None and not self._closed and sql in _READS:
            conn = state.pool.take_idle()
            if conn is not None:
                # The uncontended path: a free connection, a statement that
                # opens no transaction (so nothing to roll back after it), and
                # no owner to note (fork safety: it is back before we return).
                return self._query_on(state, conn, sql, params, quick=True)
        elif sql not in _READS and statement_kind(sql) != TX and len(_READS) < 4096:
            _READS[sql] = True  # (a statement that opens no transaction: the fast path next time)
        state, conn = self._checkout(timeout)
        return self._query_on(state, conn, sql, params)

    def _query_on(
        self,
        state: _ProcessState,
        conn: sqlite3.Connection,
        sql: str,
        params: Params,
        quick: bool = False,
    ) -> list[Any]:
        """Run ``sql`` on a checked-out read connection, then check it back in
        (``quick``: straight back to the pool, for a statement that leaves no
        transaction open and a connection with no owner noted)."""
        try:
            return conn.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as exc:
            if _is_read_only(exc):
                raise _read_only(exc, conn) from exc
            raise
        finally:
            if quick:
                state.pool.put(conn)
            else:
                self._checkin(state, conn)

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
        state = self._process_state()
        try:
            wal = os.path.getsize(self.path + "-wal")
        except OSError:
            wal = 0
        pool = state.pool
        batches = state.batcher.sizes.summary()
        self._refresh_writer_pragmas(state)
        return {
            "path": self.path,
            "pid": os.getpid(),
            "profile": self.profile,
            "timeout_s": self.timeout,
            "busy_strategy": self._busy_name,
            "pragmas": {"writer": dict(state.writer_pragmas), "readers": state.reader_pragmas},
            "gate": {
                **state.gate_wait.summary(),
                "held": state.writer_in_use,
                "waiting": state.filegate.waiting,
                "policy": _policy_name(self.fair),
                "barged": state.filegate.lock.barged + state.filegate.plock.barged,
                "handoffs": state.filegate.lock.handoffs + state.filegate.plock.handoffs,
                "cohort_passes": state.filegate.cohort_passes,
                "cross_process_waits": state.filegate.plock.contended,
            },
            "pool": {
                **pool.histogram.summary(),
                "size": pool.capacity,
                "open": pool.created,
                "in_use": pool.in_use,
                "waiting": pool.waiting,
            },
            "busy_retries": state.busy_retries,
            "writes": {
                "committed": state.committed,
                "rolled_back": state.rolled_back,
                "group_commit": batches,
                "combined": None
                if state.ship is None
                else {
                    **state.filegate.combining_stats(),
                    "shipped_batches": state.ship.shipper.shipped,
                    "settled_at_home": state.ship.shipper.at_home,
                },
            },
            "checkpoints": None if state.checkpointer is None else state.checkpointer.stats(),
            "connections": {"writer": int(state.writer is not None), "readers": pool.created},
            "wal_bytes": wal,
        }

    def _refresh_writer_pragmas(self, state: _ProcessState) -> None:
        """Read the writer's settings back again if anything set a PRAGMA on
        it since it opened (its guard saw one prepared). Needs the gate: the
        write connection is used by one thread at a time."""
        conn = state.writer
        if conn is None or not conn.guard.pragma_set:
            return
        if state.writer_owner == threading.get_ident():
            self._read_pragmas_into(state, conn)
        elif state.writer_owner is None or state.writer_owner > 0:  # not an asyncio task's
            with self._exclusive(None) as held:
                self._read_pragmas_into(state, held)

    @staticmethod
    def _read_pragmas_into(state: _ProcessState, conn: sqlite3.Connection) -> None:
        for name in state.writer_pragmas:
            state.writer_pragmas[name] = conn.execute(f"PRAGMA {name}").fetchone()[0]

    def __repr__(self) -> str:
        state = self._state
        if self._closed or state is None:
            return f"<litegate.Database {self.path!r} {'closed' if self._closed else 'idle'}>"
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
        if self._closed:
            return
        self._closed = True
        try:
            self._teardown()
        finally:
            self._close_hooks.fire()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has been called."""
        return self._closed

    def on_close(self, fn: Callable[[], None]) -> Callable[[], None]:
        """Call ``fn()`` once when this Database closes (at once if it is
        closed), on the closing thread; returns a function that takes it
        back. For what parks callers outside litegate's own lines, so that
        close() wakes them as it wakes the gate's and the pool's waiters."""
        return self._close_hooks.add(fn)

    def _teardown(self) -> None:
        _LIVE.discard(self)
        state = self._state
        if state is None or self._pid != os.getpid():
            return
        if state.ship is not None:
            state.filegate.leave_combining(state.batcher)
            state.ship.close()
        state.batcher.close()
        state.pool.close(on_idle=lambda conn: self._close_conn(state, conn))
        state.filegate.lock.close_waiters(self)  # our callers in line get Closed
        with state.writer_mutex:
            state.closing = True
            busy = state.writer_in_use
        if not busy:  # else the transaction in progress closes it when it ends
            self._close_writer(state)

    def _close_writer(self, state: _ProcessState) -> None:
        with state.writer_mutex:
            conn, state.writer = state.writer, None
            gate_open, state.gate_open = state.gate_open, False
        if gate_open:
            state.gate_collected.detach()  # given back below, once
        try:
            if conn is not None:
                self._close_conn(state, conn)
        finally:
            if gate_open:
                state.filegate.close()

    @staticmethod
    def _close_conn(state: _ProcessState, conn: sqlite3.Connection) -> None:
        try:
            close_connection(conn)
        finally:
            if conn in state.connections:
                state.connections.remove(conn)

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# Plain functions already checked (module-level ones repeat: the queue's
# store functions, in a new partial each call): the check costs more than a
# small write's SQL otherwise.
_SYNC_FUNCTIONS: set[object] = set()


def check_transact_fn(fn: object) -> None:
    """``db.transact(fn)`` runs ``fn(conn)`` synchronously on a litegate thread:
    refuse what could never run there, before it is queued."""
    target = fn.func if isinstance(fn, functools.partial) else fn
    if target in _SYNC_FUNCTIONS:
        return
    import inspect  # (here: a module the core's import need not pay for)

    if inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(
        getattr(target, "__call__", None)  # noqa: B004 - an object with async __call__
    ):
        raise ConfigError(
            f"db.transact() got an async function ({getattr(target, '__name__', target)!r}); "
            "it runs fn synchronously on litegate's thread and cannot await it. Pass a plain "
            "(def) function of the connection; with litegate.aio, await db.transact(fn) with "
            "such a function"
        )
    if not callable(fn):
        raise ConfigError(
            f"db.transact() needs a function of the write connection, got {fn!r}; e.g. "
            "db.transact(lambda conn: conn.execute(...).rowcount)"
        )
    # (module-level functions only, so the set stays a bounded few)
    module_level = inspect.isfunction(target) and target.__qualname__ == target.__name__
    if module_level and len(_SYNC_FUNCTIONS) < 1024:
        _SYNC_FUNCTIONS.add(target)


def _is_read_only(exc: BaseException) -> TypeGuard[sqlite3.DatabaseError]:
    """True for SQLITE_READONLY, or a statement a read connection's guard
    refused: a write (or a setting) was tried on a read connection."""
    return isinstance(exc, sqlite3.DatabaseError) and (
        _errcode(exc) == _SQLITE_READONLY or is_denied(exc)
    )


def _read_only(exc: sqlite3.Error, conn: sqlite3.Connection | None = None) -> ReadOnlyError:
    guard = getattr(conn, "guard", None)
    why = guard.take_denied() if isinstance(guard, ReaderGuard) else None
    if why is not None:
        return ReadOnlyError(f"{why}; nothing was changed")
    return ReadOnlyError(
        f"a read connection cannot write ({exc}); nothing was changed. Send writes through "
        "db.execute() or db.write()"
    )


class _WriteBlock:
    __slots__ = ("_conn", "_db", "_state", "_timeout")
    _conn: WriterConnection

    def __init__(self, db: Database, timeout: float | None) -> None:
        self._db = db
        self._timeout = timeout

    def __enter__(self) -> WriterConnection:
        db = self._db
        state = db._state
        if state is not None and self._timeout is None and not db._closed:
            conn = db._begin_now(state)  # the lone writer: no wait, no clock
            if conn is not None:
                self._state, self._conn = state, conn
                return conn
        self._state, self._conn = db._begin(self._timeout)
        return self._conn

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        conn = self._conn
        self._db._end(self._state, conn, commit=et is None)
        if ev is not None:
            typed = conn.guard.typed(ev)  # a COMMIT or PRAGMA the guard refused
            if typed is not ev:
                raise typed from ev


class _ReadBlock:
    __slots__ = ("_conn", "_db", "_state", "_timeout")

    def __init__(self, db: Database, timeout: float | None) -> None:
        self._db = db
        self._timeout = timeout

    def __enter__(self) -> sqlite3.Connection:
        self._state, self._conn = self._db._checkout(self._timeout)
        try:
            self._conn.execute("BEGIN")
        except BaseException:
            self._db._checkin(self._state, self._conn)
            raise
        return self._conn

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._db._checkin(self._state, self._conn)
        if ev is not None and _is_read_only(ev):
            raise _read_only(ev, self._conn) from ev


def orphan_log(path: str) -> str:
    """Why ``path`` must not be opened (or ""): its database file is gone
    but its write-ahead log (or a rollback journal) is still there, holding
    committed transactions. Opening would create an empty database and
    SQLite would discard the log with it."""
    if os.path.lexists(path):
        return ""
    for suffix, what in (("-wal", "write-ahead log"), ("-journal", "rollback journal")):
        try:
            size = os.path.getsize(path + suffix)
        except OSError:
            continue
        if size > 0:
            return (
                f"{path!r} does not exist, but its {what} {path + suffix!r} ({size} bytes) does: "
                "it holds transactions of a database file that was moved or deleted, and "
                "opening the path would create an empty database and discard them. Put the "
                f"database file back at {path!r} (from where it was moved, or a backup), or, "
                f"if those transactions are not wanted, move {path + suffix!r} away first"
            )
    return ""


def open_error(path: str, exc: sqlite3.Error | UnicodeDecodeError) -> OpenError:
    """SQLite's error opening (or first reading) ``path`` as the typed error
    saying what is wrong and what to do (the core's, Django's and
    SQLAlchemy's)."""
    code = _errcode(exc)
    if code == _SQLITE_NOTADB:
        return OpenError(
            f"{path!r} is not a SQLite database ({exc}); point litegate at a SQLite "
            "file or at a path where it may create a new one"
        )
    if code == _SQLITE_READONLY:
        return OpenError(
            f"{path!r} is read-only for this process ({exc}); litegate needs write "
            "access to the file and to its -wal, -shm and -litegate companions"
        )
    return OpenError(
        f"cannot open {path!r}: {exc}; run litegate doctor {path!r} to see what "
        "is wrong with it, and restore it from a backup if SQLite cannot read it"
    )


def _check_path(path: str) -> None:
    orphan = orphan_log(path)
    if orphan:
        raise OpenError(orphan)
    directory = os.path.dirname(path)
    try:
        is_dir = stat.S_ISDIR(os.stat(directory).st_mode)
    except PermissionError:
        raise OpenError(
            f"directory {directory!r} cannot be reached by this process (permission denied on "
            "it or on a folder above it); give this user access (x permission) to each folder "
            "on the way"
        ) from None
    except OSError:
        is_dir = False
    if not is_dir:
        raise OpenError(
            f"directory {directory!r} does not exist; create it first (litegate creates the "
            "database file, not the folders above it)"
        )
    if os.path.isdir(path):
        raise OpenError(
            f"{path!r} is a directory; pass the path of a database file, "
            f"e.g. {os.path.join(path, 'app.db')!r}"
        )
    if os.path.exists(path) and not os.access(path, os.R_OK | os.W_OK):
        raise OpenError(
            f"{path!r} is read-only for this process; litegate writes to it. Make it writable "
            "for this user (chmod u+w, or g+w and a shared group) or work on a copy"
        )
    try:
        links = os.stat(path).st_nlink
    except OSError:
        links = 1
    if links > 1:
        # Each name would get its own -wal, -shm and gate: two logs for one
        # file corrupt it (SQLite's "How To Corrupt", multiple links).
        raise OpenError(
            f"{path!r} has {links} hard links; SQLite names its -wal and -shm files after the "
            "path, so two names for one database file corrupt it. Keep one name (remove the "
            "other links) and use a symlink if you need a second path"
        )
    companions = [path + s for s in ("", "-wal", "-shm", "-litegate")]
    missing = [os.path.basename(p) for p in companions if not os.path.exists(p)]
    if missing and not os.access(directory, os.W_OK | os.X_OK):
        raise OpenError(
            f"directory {directory!r} is read-only for this process, but WAL mode must create "
            f"{', '.join(missing)} there; make the directory writable or move the database"
        )
    for p in companions[1:]:
        if os.path.exists(p) and not os.access(p, os.R_OK | os.W_OK):
            raise OpenError(
                f"{p!r} is read-only for this process, and every process that opens the "
                "database writes it. Give this user write access to it as to the database "
                f"(e.g. chmod g+w {p!r} with a shared group), or remove it while no process "
                "uses the database: it is created again with the database file's permissions"
            )


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
      ``"aggressive"`` (see the README's profiles table).
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
      transaction, committed by one process at a time (the README's
      "Combined writes across processes"). Statements must mean the same in
      every process: no SQL functions, collations or adapters registered in
      one process only.
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
    resolved = _profiles.resolve(profile, pragmas)
    busy_fn = get_strategy(busy)
    if timeout is None:
        busy_ms = int(resolved.get("busy_timeout", 5000))
        if busy_ms <= 0:
            raise ConfigError(
                "busy_timeout=0 would make every wait for the gate or a read connection fail "
                "at once; give busy_timeout > 0 (milliseconds) or timeout= (seconds)"
            )
        timeout = busy_ms / 1000.0
    timeout = seconds("timeout", timeout)
    # One file, one gate, whatever path names it: a symlink and its target
    # must queue on the same sidecar (SQLite itself follows the link for its
    # -wal and -shm).
    full = os.path.realpath(os.path.abspath(raw))
    _check_path(full)
    return Database(
        full,
        readers=readers,
        profile=profile,
        timeout=timeout,
        pragmas=resolved,
        busy=busy_fn,
        fair=fair,
        checkpoints=bool(checkpoints),
        combine=bool(combine),
        litestream=litestream,
    )
