"""The engine both faces drive: one Database's state in this process, the
writer's lifecycle (gate, BEGIN IMMEDIATE, COMMIT or ROLLBACK, the lone
writer's path), the reader pool's check-out and check-in, and the errors
they translate.

:class:`~litegate.Database` (the sync face) and :mod:`litegate.aio` (the
asyncio face) call :class:`Engine`'s methods and nothing past them, so a
rule written here holds on both faces. Nothing here knows about event loops:
a face that waits for the in-process gate lock its own way (asyncio, on the
loop) calls :meth:`Engine.finish_gate` for the rest; a write block held by a
task rather than a thread is lent with :meth:`Engine.lend_to_block`.
"""

from __future__ import annotations

import math
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol, TypeGuard, TypeVar
from urllib.parse import quote

from . import _profiles
from ._batch import GroupCommit, Request, autocommit, refusal
from ._busy import BusyStrategy, is_busy, retry_busy
from ._checkpoint import Checkpointer  # the file's, shared (FileGate)
from ._combine import Ship
from ._errors import (
    Closed,
    NestedWriteError,
    OpenError,
    PoolTimeout,
    ReadOnlyError,
    WriteTimeout,
    sqlite_code,
)
from ._fair import Budget, HandoffQueue, QueueClosed, QueueTimeout
from ._gate import FileGate, drop_after_fork
from ._guard import (
    BEGIN,
    COMMIT,
    ROLLBACK,
    ReaderConnection,
    ReaderGuard,
    WriterConnection,
    close_connection,
    is_denied,
    set_synchronous,
)
from ._profiles import PragmaValue
from ._stats import WaitHistogram
from ._time import seconds

Params = Sequence[Any] | Mapping[str, Any]
T = TypeVar("T")

_SQLITE_READONLY = 8
_SQLITE_NOTADB = 26

# This process's pid, kept by the fork hook (the Database module's): comparing
# with it is cheaper than asking the kernel (os.getpid() is a system call) on
# every call.
PID = [os.getpid()]

# SQL that db.execute() runs as it is (not refused): a memo, so the lone
# writer's path checks a repeated statement with one dictionary look-up.
_PLAIN: dict[str, bool] = {}


def _errcode(exc: BaseException) -> int:
    return sqlite_code(exc)


def _blocks_the_loop(what: str) -> NestedWriteError:
    """A sync call on the thread of the event loop whose task holds the gate
    in ``async with db.write()``: it would block the loop, so the block could
    never end."""
    return NestedWriteError(
        f"{what} called on the event loop's thread while a task of that loop is inside "
        "async with db.write() would block the loop, and with it the block it waits for; "
        "use await tx.execute() on the tx the block gave you (or await db.execute() after it)"
    )


class WriteBlock(Protocol):
    """A write block held by an event-loop task rather than a thread (what
    :meth:`Engine.lend_to_block` records): the task, the thread of its loop,
    and how many of its statements are under way on other threads."""

    task: Any
    thread: int
    calls: int


class ProcessState:
    """Everything an Engine owns in one process: rebuilt from scratch in a
    forked child, never shared with the parent."""

    def __init__(self, engine: Engine, owner: object) -> None:
        self.gate_wait = WaitHistogram()  # request -> BEGIN IMMEDIATE done
        # This file's gate in this process, shared with every other Database
        # (and Django connection) on it: one line in the process, and this
        # process's turns across processes. Our callers bring our budget.
        self.filegate = FileGate.open(engine.path)
        self.budget = engine.budget
        self.pool: HandoffQueue[sqlite3.Connection] = HandoffQueue(
            engine.readers, engine.open_reader, fair=engine.fair is not False
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
        # engine, whose Database must stay collectable.) Detached by a close.
        self.gate_collected = weakref.finalize(owner, self.filegate.close_soon)
        self.gate_collected.atexit = False  # (at exit there is nothing left to free)
        self.writer_owner: int | None = None  # thread ident holding the gate
        # An event-loop task's write block holding the gate (no thread owns it then).
        self.writer_block: WriteBlock | None = None
        self.reader_owner: dict[int, int] = {}  # id(conn) -> thread ident, while out
        self.connections: list[sqlite3.Connection] = []  # every connection we opened
        self.writer_pragmas: dict[str, object] = {}
        # The writer's PRAGMA synchronous (0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA),
        # read once it is open (the guard keeps it from changing).
        self.sync_level = 0
        self.reader_pragmas: dict[str, object] | None = None
        self.batcher = GroupCommit(
            _BatchWriter(engine, self),
            max_batch=engine.max_batch,
            max_time=engine.max_time,
            default_timeout=engine.timeout,
        )
        self.ship: Ship | None = None  # combining with other processes (set once open)
        self.checkpointer: Checkpointer | None = None  # started once the writer is open
        self.busy_retries = 0
        self.committed = 0
        self.rolled_back = 0


class _BatchWriter:
    """What group commit needs of the writer (``_batch.Writer``), for one
    process's state."""

    __slots__ = ("_engine", "_state")

    def __init__(self, engine: Engine, state: ProcessState) -> None:
        self._engine = engine
        self._state = state

    def begin(self, timeout: float | None) -> WriterConnection:
        engine = self._engine
        limit = engine.timeout if timeout is None else timeout
        return engine.begin_for(self._state, threading.get_ident(), limit, begin=False)

    def begin_again(self, conn: WriterConnection, timeout: float | None) -> None:
        self._engine.begin_again(self._state, conn, timeout)

    def end(self, conn: WriterConnection, commit: bool, resync: int | None = None) -> None:
        self._engine.end(self._state, conn, commit, resync=resync)

    def timeout_error(self, limit: float) -> WriteTimeout:
        self._state.gate_wait.record_timeout()  # (a write that gave up waiting, on either face)
        return self._engine.write_timeout(limit)

    def sync_level(self) -> int:
        return self._state.sync_level

    def raise_sync(self, conn: WriterConnection, level: int) -> int | None:
        own = self._state.sync_level
        if level <= own:
            return None
        conn.control(set_synchronous(level))
        return own


class Engine:
    """One Database's engine: its settings, and its state in this process."""

    def __init__(
        self,
        path: str,
        *,
        owner: object,
        readers: int,
        timeout: float,
        pragmas: dict[str, PragmaValue],
        busy: tuple[str, BusyStrategy],
        fair: object,
        budget: Budget,
        checkpoints: bool,
        checkpoint_every: int,
        combine: bool,
        litestream: bool,
        max_batch: int,
        max_time: float,
    ) -> None:
        self.path = path
        self.readers = readers
        self.timeout = timeout
        self.pragmas = pragmas
        self.busy_name, self._busy = busy
        self.fair = fair
        self.budget = budget
        self.checkpoints = checkpoints
        self._checkpoint_every = checkpoint_every
        self.combine = combine
        self._litestream = litestream  # checkpoints="litestream"
        self.max_batch = max_batch
        self.max_time = max_time
        self._owner = weakref.ref(owner)  # the Database: its collection frees the gate
        self.closed = False
        self._pid = os.getpid()
        self._state_lock = threading.Lock()
        # This process's state once opened (None in a forked child until used):
        # the fast paths read it without a call.
        self.current: ProcessState | None = None

    # -- the state in this process ----------------------------------------------
    def state(self) -> ProcessState:
        """This process's state, opened (the writer with it) on first use;
        :class:`Closed` once closed."""
        if self.closed:
            raise Closed(f"database {self.path!r} is closed; call litegate.connect() again")
        if self._pid != PID[0]:  # a forked child that has not used us yet
            self.forget_parent()
        state = self.current
        if state is not None:
            return state
        with self._state_lock:
            if self.current is None:
                owner = self._owner()
                if owner is None:  # pragma: no cover - the caller holds its Database
                    raise Closed(f"database {self.path!r} is closed")
                state = ProcessState(self, owner)
                self.current = state
                state.writer = self._open_writer(state)
                if self.combine:
                    state.ship = state.batcher.ship = Ship(state.filegate, state.sync_level)
                    state.filegate.join_combining(state.batcher)
                if self.checkpoints:  # one per file per process, shared
                    state.checkpointer = state.filegate.checkpointer(
                        every_commits=self._checkpoint_every,
                        restart_frames=4 * self._checkpoint_every,
                        litestream=self._litestream,
                    )
            return self.current

    def forget_parent(self) -> None:
        """In a forked child: drop the parent's state (its connections closed
        only where no thread of the parent could have been using them)."""
        state, self.current = self.current, None
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
            (block is None and state.writer_owner in (None, me))
            or (block is not None and block.thread == me and block.calls == 0)
        ):
            safe.add(id(state.writer))
        for conn in state.connections:
            drop_after_fork(conn, idle=id(conn) in safe)

    # -- opening connections ---------------------------------------------------
    def _open_writer(self, state: ProcessState) -> WriterConnection:
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
            raise open_error(self.path, exc) from exc
        try:
            # The profile's busy_timeout applies while setting up (several
            # processes may switch a new file to WAL at once); afterwards the
            # writer never sleeps inside SQLite: the gate orders litegate's
            # writers and the busy strategy handles foreign ones.
            state.writer_pragmas = _profiles.apply(conn, self.pragmas, writer=True)
            conn.execute("PRAGMA busy_timeout = 0")
            state.writer_pragmas["busy_timeout"] = conn.execute("PRAGMA busy_timeout").fetchone()[0]
            state.sync_level = int(conn.execute("PRAGMA synchronous").fetchone()[0])
            wanted = str(self.pragmas.get("journal_mode", "")).lower()
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
            raise open_error(self.path, exc) from exc
        except BaseException:
            close_connection(conn)
            raise
        state.connections.append(conn)
        return conn

    def open_reader(self) -> sqlite3.Connection:
        """A new read-only connection (the pool's factory)."""
        state = self.current
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
            in_force = _profiles.apply(conn, {**self.pragmas, "query_only": 1}, writer=False)
            conn.guard_now()
        except UnicodeDecodeError as exc:
            conn.close()
            raise open_error(self.path, exc) from exc
        except BaseException:
            conn.close()
            raise
        if state.reader_pragmas is None:
            state.reader_pragmas = in_force
        state.connections.append(conn)
        return conn

    # -- the errors both faces raise ----------------------------------------------
    def limit(self, timeout: float | None) -> float:
        """A caller's ``timeout=`` (None: the Database's), checked."""
        return self.timeout if timeout is None else seconds("timeout", timeout)

    def gate_timeout(self, state: ProcessState, limit: float) -> WriteTimeout:
        """No write gate within ``limit``: counted, and said with what to do."""
        state.gate_wait.record_timeout()
        return WriteTimeout(
            f"no write gate within {limit:g} s ({state.filegate.waiting} more writers of this "
            "process are queued; a writer of another process may hold it: litegate top "
            "shows who); raise timeout= or make write transactions shorter"
        )

    def pool_timeout(self, state: ProcessState, limit: float) -> PoolTimeout:
        return PoolTimeout(
            f"no read connection free within {limit:g} s ({self.readers} connections, "
            f"{state.pool.waiting} callers waiting); raise readers= or timeout=, or hold "
            "read connections for less time"
        )

    def closed_while(self, what: str) -> Closed:
        return Closed(f"database {self.path!r} was closed while waiting to {what}")

    def write_timeout(self, limit: float) -> WriteTimeout:
        """A write still queued for group commit when its timeout passed."""
        return WriteTimeout(
            f"no write gate within {limit:g} s: the write was still queued for group commit; "
            "raise timeout= or make write transactions shorter"
        )

    def refuse_nested(self, state: ProcessState, what: str, *, maintenance: bool = False) -> int:
        """The calling thread's ident, unless it already holds the gate (a
        write would wait for itself) or runs the event loop whose task holds
        it (it would block that loop): then NestedWriteError."""
        me = threading.get_ident()
        block = state.writer_block
        if block is not None and block.thread == me:
            raise _blocks_the_loop(what)
        if state.writer_owner == me:
            if what == "db.write()" or maintenance:
                raise NestedWriteError(
                    "this thread already holds the write gate (an enclosing db.write()); "
                    "waiting would wait for itself. "
                    + (
                        "Maintenance needs the gate with no transaction open: run it "
                        "outside the db.write() block"
                        if maintenance
                        else "Run the statement on the connection the enclosing db.write() gave you"
                    )
                )
            raise NestedWriteError(
                f"{what} inside db.write() in the same thread would wait for itself; "
                "use conn.execute() on the connection db.write() gave you"
            )
        return me

    # -- the writer: taking the gate and beginning -----------------------------------
    def begin(
        self, timeout: float | None, *, begin: bool = True
    ) -> tuple[ProcessState, WriterConnection]:
        """The gate, the writer and (``begin``) BEGIN IMMEDIATE, for the
        calling thread. ``begin=False``: the gate only (maintenance)."""
        state = self.state()
        me = self.refuse_nested(
            state, "db.write()" if begin else "maintenance", maintenance=not begin
        )
        return state, self.begin_for(state, me, self.limit(timeout), begin=begin)

    def begin_for(
        self, state: ProcessState, me: int, limit: float, *, begin: bool = True
    ) -> WriterConnection:
        """:meth:`begin` with a limit already checked (the group-commit
        leader's)."""
        start = time.monotonic()
        wait = None if math.isinf(limit) else limit
        gate = state.filegate
        try:
            got = gate.acquire(wait, state.budget, self)
        except QueueClosed:
            raise self.closed_while("write") from None
        if not got:
            raise self.gate_timeout(state, limit)
        conn = self._after_gate(state, start, limit, begin)
        state.writer_owner = me
        return conn

    def finish_gate(self, state: ProcessState, start: float, limit: float) -> WriterConnection:
        """The in-process gate lock is the caller's (taken at ``start``,
        waited for by a face in its own way, as asyncio does on its loop):
        take the cross-process gate (which may block), the writer and BEGIN
        IMMEDIATE. Gives everything back on failure."""
        left = None if math.isinf(limit) else max(0.0, start + limit - time.monotonic())
        if not state.filegate.hold_across_processes(left, state.budget):
            raise self.gate_timeout(state, limit)
        return self._after_gate(state, start, limit, True)

    def lend_to_block(self, state: ProcessState, block: WriteBlock) -> None:
        """The writer, taken by :meth:`finish_gate`, now belongs to ``block``
        until :meth:`end`. So does the gate, as its owner: the block's loop
        thread (finish_gate took it on a pool thread). A fork() on that
        thread then treats the block as its own (the parent waits for the
        child to let go of its copy, instead of waiting FORK_WAIT_SECONDS for
        a gate it holds itself, then racing the child to COMMIT), and a
        blocking write from it through another Database on the file raises
        NestedWriteError at once instead of waiting for the block it stalls."""
        state.writer_block = block
        state.filegate.owner = block.thread

    def _after_gate(
        self, state: ProcessState, start: float, limit: float, begin: bool
    ) -> WriterConnection:
        """The gate is held: claim the write connection and run BEGIN
        IMMEDIATE. Releases the gate on failure."""
        conn = self.claim_writer(state)
        if begin:
            try:
                self._begin_or_release(state, conn, limit, start + limit)
            except BaseException:
                state.gate_wait.record_timeout()
                raise
        if state.filegate.waited:  # (the histogram counts a wait that did not block as 0)
            state.gate_wait.record_exclusive(time.monotonic() - start)  # we hold the gate
        else:
            state.gate_wait.immediate += 1
        return conn

    def begin_now(self, state: ProcessState) -> WriterConnection | None:
        """:meth:`begin` for a lone writer: the gate if it is free for the
        taking (FileGate.take_now), the writer, BEGIN IMMEDIATE; None (having
        done nothing) when the general path must wait for the gate."""
        if not state.filegate.take_now(state.budget):
            return None
        conn = self.claim_writer(state)
        self._begin_or_release(state, conn, self.timeout)
        state.writer_owner = threading.get_ident()
        state.gate_wait.immediate += 1
        return conn

    def _begin_or_release(
        self,
        state: ProcessState,
        conn: WriterConnection,
        limit: float,
        deadline: float | None = None,
    ) -> None:
        """BEGIN IMMEDIATE on the claimed writer; on failure the gate goes back."""
        try:
            self.begin_immediate(state, conn, limit, deadline)
        except BaseException:
            self.release(state)
            raise

    def claim_writer(self, state: ProcessState) -> WriterConnection:
        """The gate is held: the write connection, marked in use (a close()
        meanwhile leaves it to the release). If the Database is closing, the
        gate goes back and Closed is raised."""
        with state.writer_mutex:
            conn = state.writer
            if conn is not None and not state.closing:
                state.writer_in_use = True
                return conn
        self.release(state)
        raise Closed(f"database {self.path!r} is closed")

    def begin_immediate(
        self,
        state: ProcessState,
        conn: WriterConnection,
        limit: float,
        deadline: float | None = None,
    ) -> None:
        """BEGIN IMMEDIATE, the gate held. A writer outside litegate holding
        SQLite's lock is polled with the busy strategy until ``deadline``
        (None: ``limit`` from now)."""
        try:
            conn.control(BEGIN)
            return
        except sqlite3.OperationalError as exc:
            if not is_busy(exc):
                raise
        if deadline is None:
            deadline = time.monotonic() + limit

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
                f"(busy strategy {self.busy_name!r}); find that writer or raise timeout="
            ) from None

    def begin_again(
        self, state: ProcessState, conn: WriterConnection, timeout: float | None = None
    ) -> None:
        """BEGIN IMMEDIATE with the gate held (the group-commit leader's, or
        again after a rollback), within ``timeout`` (None: the default)."""
        self.begin_immediate(state, conn, self.timeout if timeout is None else timeout)

    # -- the writer: ending ---------------------------------------------------------
    def end(
        self,
        state: ProcessState,
        conn: WriterConnection,
        commit: bool,
        wrote: bool = True,
        resync: int | None = None,
    ) -> None:
        """COMMIT (``commit``) or ROLLBACK the open transaction, or count an
        autocommit statement that committed on its own (``wrote``: it changed
        something, so the checkpointer hears of it); then release.
        ``resync``: the transaction ran with another ``synchronous`` (a
        combiner's turn for a process that asks for more, ``GroupCommit.
        in_turn``); the writer gets this level back before the gate goes
        (and with it the writer)."""
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
                if wrote:
                    state.filegate.committed()
        finally:
            try:
                if resync is not None:
                    conn.control(set_synchronous(resync))
            finally:
                self.release(state)

    def release(self, state: ProcessState) -> None:
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
                self.close_writer(state)

    @contextmanager
    def exclusive(self, timeout: float | None) -> Iterator[WriterConnection]:
        """The write connection with the whole write gate held (this
        process's and the file's) and no transaction open: for what SQLite
        refuses inside a transaction (VACUUM, wal_checkpoint, optimize).
        Everything else that writes waits at the gate meanwhile."""
        state, conn = self.begin(timeout, begin=False)
        conn.guard.own = True  # litegate's own maintenance (VACUUM begins internally)
        try:
            yield conn
        finally:
            conn.guard.own = False
            self.end(state, conn, commit=False)

    def checkpoint_turn(self, timeout: float | None) -> AbstractContextManager[bool]:
        """litegate's checkpoint lock (its checkpoints run one at a time,
        across processes), for maintenance that checkpoints; taken before
        the gate. Yields False if ``timeout`` (None: the default) ran out."""
        limit = self.timeout if timeout is None else timeout
        return self.state().filegate.checkpoint_turn(limit)

    # -- the lone writer: the general path's steps, without a queue ---------------------
    def execute_now(
        self, state: ProcessState, sql: str, params: Params
    ) -> tuple[int, int | None, list[Any]]:
        """``execute`` for the lone writer, the gate held: a batch of one, as
        group commit runs it (:func:`_batch.autocommit`), without a queue."""
        conn = self.claim_writer(state)
        state.gate_wait.immediate += 1
        try:
            if sql not in _PLAIN:
                refused = refusal(sql)
                if refused is not None:
                    raise refused
                if len(_PLAIN) < 4096:  # statements repeat; a bounded memo is enough
                    _PLAIN[sql] = True
            result = autocommit(conn, sql, params)
            if result is None:
                # A writer outside litegate holds SQLite's lock: wait for it in
                # a transaction, with the busy strategy, as a batch would.
                self.begin_immediate(state, conn, self.timeout)
                cur = conn.execute(sql, params)
                result = (cur.rowcount, cur.lastrowid, cur.fetchall())
        except BaseException:
            self.end(state, conn, False)  # (rolls back what the busy path began)
            raise
        self.end(state, conn, True, wrote=result[0] != 0)  # (a no-op wrote nothing)
        state.batcher.sizes.record(1)
        return result

    def transact_now(
        self, state: ProcessState, conn: WriterConnection, fn: Callable[[sqlite3.Connection], T]
    ) -> T:
        """``transact`` for the lone writer: the gate held, BEGIN IMMEDIATE
        run; a batch of one member (no SAVEPOINT needed: its failure rolls
        the transaction back)."""
        try:
            value = fn(conn)
            if hasattr(value, "__await__"):
                GroupCommit.refuse_awaitable(value)
        except BaseException as exc:
            self.end(state, conn, False)
            typed = conn.guard.typed(exc)
            if typed is not exc:
                raise typed from exc
            raise
        self.end(state, conn, True)
        state.batcher.sizes.record(1)
        return value

    def submit(self, req: Request, timeout: float | None, what: str) -> Request:
        """Group commit: concurrent calls share one transaction, each in its
        own SAVEPOINT; returns after the COMMIT that holds ``req``."""
        state = self.state()
        self.refuse_nested(state, what)
        state.batcher.run(req, self.limit(timeout))
        if req.error is not None:
            raise req.error
        return req

    # -- readers ------------------------------------------------------------------------
    def checkout(self, timeout: float | None) -> tuple[ProcessState, sqlite3.Connection]:
        """A read connection for the calling thread, in the pool's line."""
        state = self.state()
        limit = self.limit(timeout)
        try:
            conn = state.pool.get(None if math.isinf(limit) else limit)
        except QueueTimeout:
            raise self.pool_timeout(state, limit) from None
        except QueueClosed:
            raise self.closed_while("read") from None
        except sqlite3.Error as exc:
            raise open_error(self.path, exc) from exc
        state.reader_owner[id(conn)] = threading.get_ident()
        return state, conn

    def open_reserved(self, state: ProcessState) -> sqlite3.Connection:
        """Open a read connection for pool capacity reserved to the caller (a
        wait that ended in CREATE); on failure the capacity is passed on."""
        try:
            return state.pool.create()
        except sqlite3.Error as exc:
            raise open_error(self.path, exc) from exc

    def checkin(self, state: ProcessState, conn: sqlite3.Connection) -> None:
        """A read connection back to the pool (its transaction rolled back;
        a connection that cannot be is closed and its place passed on)."""
        state.reader_owner.pop(id(conn), None)
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        except sqlite3.Error:
            state.pool.discard(conn)
            close_conn(state, conn)
            return
        state.pool.put(conn)

    def query_on(
        self,
        state: ProcessState,
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
            if is_read_only(exc):
                raise read_only_error(exc, conn) from exc
            raise
        finally:
            if quick:
                state.pool.put(conn)
            else:
                self.checkin(state, conn)

    # -- introspection --------------------------------------------------------------
    def refresh_writer_pragmas(self, state: ProcessState) -> None:
        """Read the writer's settings back again if anything set a PRAGMA on
        it since it opened (its guard saw one prepared). Needs the gate: the
        write connection is used by one thread at a time."""
        conn = state.writer
        if conn is None or not conn.guard.pragma_set:
            return
        if state.writer_owner == threading.get_ident():
            _read_pragmas_into(state, conn)
        elif state.writer_block is None:  # (a task's block: its statements use the writer)
            with self.exclusive(None) as held:
                _read_pragmas_into(state, held)

    def stats(self, profile: str, policy: str) -> dict[str, Any]:
        """Waits, retries, connections, PRAGMAs in force and WAL size
        (:meth:`litegate.Database.stats`)."""
        state = self.state()
        try:
            wal = os.path.getsize(self.path + "-wal")
        except OSError:
            wal = 0
        pool = state.pool
        batches = state.batcher.sizes.summary()
        self.refresh_writer_pragmas(state)
        return {
            "path": self.path,
            "pid": os.getpid(),
            "profile": profile,
            "timeout_s": self.timeout,
            "busy_strategy": self.busy_name,
            "pragmas": {"writer": dict(state.writer_pragmas), "readers": state.reader_pragmas},
            "gate": {
                **state.gate_wait.summary(),
                "held": state.writer_in_use,
                "waiting": state.filegate.waiting,
                "policy": policy,
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
                    "unanswered": state.ship.unanswered,
                },
            },
            "checkpoints": None if state.checkpointer is None else state.checkpointer.stats(),
            "connections": {"writer": int(state.writer is not None), "readers": pool.created},
            "wal_bytes": wal,
        }

    # -- closing ----------------------------------------------------------------------
    def teardown(self) -> None:
        """Close this process's state: waiters get Closed, idle connections
        close now, the writer when its transaction in progress ends."""
        state = self.current
        if state is None or self._pid != os.getpid():
            return
        if state.ship is not None:
            state.filegate.leave_combining(state.batcher)
            state.ship.close()
        state.batcher.close()
        state.pool.close(on_idle=lambda conn: close_conn(state, conn))
        state.filegate.lock.close_waiters(self)  # our callers in line get Closed
        with state.writer_mutex:
            state.closing = True
            busy = state.writer_in_use
        if not busy:  # else the transaction in progress closes it when it ends
            self.close_writer(state)

    def close_writer(self, state: ProcessState) -> None:
        with state.writer_mutex:
            conn, state.writer = state.writer, None
            gate_open, state.gate_open = state.gate_open, False
        if gate_open:
            state.gate_collected.detach()  # given back below, once
        try:
            if conn is not None:
                close_conn(state, conn)
        finally:
            if gate_open:
                state.filegate.close()


def _read_pragmas_into(state: ProcessState, conn: sqlite3.Connection) -> None:
    for name in state.writer_pragmas:
        state.writer_pragmas[name] = conn.execute(f"PRAGMA {name}").fetchone()[0]


def close_conn(state: ProcessState, conn: sqlite3.Connection) -> None:
    try:
        close_connection(conn)
    finally:
        if conn in state.connections:
            state.connections.remove(conn)


def is_read_only(exc: BaseException) -> TypeGuard[sqlite3.DatabaseError]:
    """True for SQLITE_READONLY, or a statement a read connection's guard
    refused: a write (or a setting) was tried on a read connection."""
    return isinstance(exc, sqlite3.DatabaseError) and (
        _errcode(exc) == _SQLITE_READONLY or is_denied(exc)
    )


def read_only_error(exc: sqlite3.Error, conn: sqlite3.Connection | None = None) -> ReadOnlyError:
    """A write tried on a read connection, said as both faces say it."""
    guard = getattr(conn, "guard", None)
    why = guard.take_denied() if isinstance(guard, ReaderGuard) else None
    if why is not None:
        return ReadOnlyError(f"{why}; nothing was changed")
    return ReadOnlyError(
        f"a read connection cannot write ({exc}); nothing was changed. Send writes through "
        "db.execute() or db.write()"
    )


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
