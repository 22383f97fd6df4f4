"""litegate for asyncio.

```python
db = await litegate.aio.connect("app.db")
rows = await db.query("SELECT ...", params)
await db.execute("INSERT ...", params)   # group-committed across all waiting tasks
async with db.write() as tx:             # the write gate held for the block
    await tx.execute("UPDATE ...")
async with db.read() as rx:              # one read snapshot for the block
    rows = await rx.execute("SELECT ...")
await db.close()
```

SQLite work never runs on the event loop's thread: statements run on a small
thread pool, group commits on litegate's own threads. Waiting does not take a
thread either: a task that waits for the write gate or a read connection sits
in the same FIFO queue as threads do, on an asyncio future.

Cancellation and timeouts:

- a task cancelled (or timed out) while it waits for the gate or a
  connection leaves the queue; whoever is behind it moves up, nobody else is
  disturbed;
- ``await db.execute()`` cancelled while its write still waits in the group
  commit queue: the write is withdrawn and never happens. Cancelled once a
  batch has taken it: the write is committed, or fails, with its batch as a
  whole; cancelling does not undo it;
- ``async with db.write()`` cancelled inside the block: the transaction is
  rolled back, as for any exception.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import sqlite3
import threading
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, TypeVar

from ._batch import Request
from ._database import (
    Database,
    Params,
    WriteResult,
    _is_read_only,
    _read_only,
    check_transact_fn,
)
from ._database import connect as _connect
from ._errors import Closed, NestedWriteError, PoolTimeout, WriteTimeout
from ._fair import CREATE, QUEUED, FairLock, HandoffQueue, QueueClosed
from ._guard import WriterConnection
from ._maintenance import BackupResult, CheckpointResult, OptimizeResult, VacuumResult
from ._time import seconds

__all__ = ["AsyncDatabase", "connect"]

T = TypeVar("T")
_ASYNC_OWNER = -1  # writer_owner while an asyncio task holds the gate (no thread does)


def _set_done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: Any) -> None:
    """loop.call_soon_threadsafe from another thread, tolerating a loop that
    has closed meanwhile (its waiters are gone with it)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(fn, *args)


class _Notifier:
    """Completes one loop's futures from other threads with one wake-up of the
    loop per burst, not one per future: a group commit finishes hundreds of
    writes at once, and each wake-up is a write to the loop's self-pipe."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._ready: deque[asyncio.Future[None]] = deque()
        self._scheduled = False
        self.deadlines = _Deadlines(loop)

    def done(self, fut: asyncio.Future[None]) -> None:  # any thread
        self._ready.append(fut)
        if not self._scheduled:
            self._scheduled = True
            _call_soon(self._loop, self._drain)

    def _drain(self) -> None:  # the loop's thread
        # Reset before draining: a future added after this line schedules
        # another drain or is popped by this one; none is left behind.
        self._scheduled = False
        ready = self._ready
        while ready:
            _set_done(ready.popleft())
        # Once per burst, not once per write: the answered writes leave the
        # deadline lines (a write cancelled or timed out leaves at the next
        # burst or when the timer fires).
        self.deadlines.settle()


# (when, the write's future, its process state, its request): what
# _expire_write needs, kept in the line itself rather than in a callable
# made for every write
_Deadline = tuple[float, "asyncio.Future[None]", Any, Request]


def _expire_write(state: Any, req: Request, fut: asyncio.Future[None], limit: float) -> None:
    """The timeout of an ``execute``: withdraw the write if no batch has
    taken it yet; otherwise its batch's outcome will come, however late."""
    if not fut.done() and state.batcher.cancel(req):
        fut.set_exception(
            WriteTimeout(
                f"no write gate within {limit:g} s: the write was still queued for group "
                "commit; raise timeout= or make write transactions shorter"
            )
        )


class _Deadlines:
    """The timeouts of one loop's queued writes, on one timer rather than one
    per write (a TimerHandle, a heap push and a cancel each).

    The loop's clock only grows, so writes submitted with the same limit
    fall due in the order they came: each limit's writes wait in a FIFO, the
    timer is set for the earliest head, and the writes that have their
    answers are dropped from the heads of their lines as each burst of
    answers arrives (answers come in about the order writes were queued,
    so the lines stay short). Only
    the loop's thread touches this."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lines: dict[float, deque[_Deadline]] = {}  # per limit, in submission order
        self._timer: asyncio.TimerHandle | None = None
        self._at = math.inf  # when the timer fires (inf: not set)

    def add(self, limit: float, fut: asyncio.Future[None], state: Any, req: Request) -> None:
        """Expire write ``req`` (:func:`_expire_write`) ``limit`` seconds from
        now unless ``fut`` is done by then."""
        when = self._loop.time() + limit
        line = self._lines.get(limit)
        if line is None:
            line = self._lines[limit] = deque()
        line.append((when, fut, state, req))
        if when < self._at:
            self._arm(when)

    def settle(self) -> None:
        """Answers came: drop the answered heads of every line."""
        for line in self._lines.values():
            while line and line[0][1].done():
                line.popleft()

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._at = when
        self._timer = self._loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self._timer, self._at = None, math.inf
        now = self._loop.time()
        soonest = math.inf
        for limit in list(self._lines):
            line = self._lines[limit]
            while line and (line[0][1].done() or line[0][0] <= now):
                _when, fut, state, req = line.popleft()
                if not fut.done():
                    _expire_write(state, req, fut, limit)
            if line:
                soonest = min(soonest, line[0][0])
            else:
                del self._lines[limit]
        if soonest < math.inf:
            # (a head not yet due, the loop having run the timer a hair
            # early, simply sets the timer again)
            self._arm(soonest)


async def connect(path: Any, **kwargs: Any) -> AsyncDatabase:
    """Open ``path`` like :func:`litegate.connect` (same arguments), off the loop."""
    loop = asyncio.get_running_loop()
    db = await loop.run_in_executor(None, functools.partial(_connect, path, **kwargs))
    return AsyncDatabase(db)


class AsyncDatabase:
    """The asyncio face of a :class:`litegate.Database` (``.sync`` is that one)."""

    def __init__(self, db: Database) -> None:
        self.sync = db
        self._pool = ThreadPoolExecutor(
            max_workers=db._readers + 2, thread_name_prefix="litegate-aio"
        )
        self._notifiers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Notifier] = (
            weakref.WeakKeyDictionary()
        )
        self._last: _Notifier | None = None  # the last loop's: no look-up per write

    def _notifier(self, loop: asyncio.AbstractEventLoop) -> _Notifier:
        notifier = self._last
        if notifier is not None and notifier._loop is loop:
            return notifier
        notifier = self._notifiers.get(loop)
        if notifier is None:
            notifier = self._notifiers[loop] = _Notifier(loop)
        self._last = notifier
        return notifier

    def __repr__(self) -> str:
        return f"<litegate.aio {self.sync!r}>"

    # -- plumbing -------------------------------------------------------------
    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def _turn(
        self, q: HandoffQueue[Any] | FairLock, limit: float, *how: Any
    ) -> tuple[int, Any]:
        """Wait in ``q``'s line on the loop (no thread): (READY, item) or
        (CREATE, None). ``how``: what a FairLock waiter brings (budget, tag).
        Raises TimeoutError, or QueueClosed."""
        loop = asyncio.get_running_loop()
        holder: list[asyncio.Future[None]] = [loop.create_future()]

        def notify() -> None:  # any thread; a FairLock waiter may be told more than once
            _call_soon(loop, _set_done, holder[0])

        status, item, waiter = q.enqueue(notify, *how)
        if status != QUEUED:
            return status, item
        assert waiter is not None
        line: Any = q  # each queue takes back its own kind of waiter
        deadline = None if math.isinf(limit) else loop.time() + limit
        while True:
            try:
                remaining = None if deadline is None else max(0.0, deadline - loop.time())
                await asyncio.wait_for(holder[0], remaining)
            except BaseException:  # timeout or cancellation: leave the queue
                line.cancel(waiter)
                raise
            holder[0] = loop.create_future()
            status, item = line.claim(waiter)
            if status != QUEUED:
                return status, item

    async def _wait_turn(
        self, q: HandoffQueue[Any] | FairLock, limit: float, write: bool, *how: Any
    ) -> tuple[int, Any]:
        """_turn with litegate's errors: PoolTimeout or WriteTimeout, Closed."""
        try:
            return await self._turn(q, limit, *how)
        except (TimeoutError, asyncio.TimeoutError):  # one class from Python 3.11 on
            if write:
                self.sync._process_state().gate_wait.record_timeout()
                raise WriteTimeout(f"no write gate within {limit:g} s") from None
            raise PoolTimeout(f"no read connection free within {limit:g} s") from None
        except QueueClosed:
            raise Closed(f"database {self.sync.path!r} is closed") from None

    def _limit(self, timeout: float | None) -> float:
        return self.sync.timeout if timeout is None else seconds("timeout", timeout)

    # -- reads ----------------------------------------------------------------
    async def query(
        self, sql: str, params: Params = (), *, timeout: float | None = None
    ) -> list[Any]:
        """Run one read statement on a pooled read-only connection."""
        state = self.sync._process_state()
        status, conn = await self._wait_turn(state.pool, self._limit(timeout), write=False)
        # From here the thread owns the connection and always returns it, even
        # if this task is cancelled meanwhile.
        return await self._run(self._query_in_thread, state, conn if status != CREATE else None,
                               sql, params)  # fmt: skip

    def _query_in_thread(self, state: Any, conn: sqlite3.Connection | None, sql: str,
                         params: Params) -> list[Any]:  # fmt: skip
        if conn is None:
            conn = state.pool.create()
            assert conn is not None
        return self.sync._query_on(state, conn, sql, params)

    def read(self, timeout: float | None = None) -> _AsyncRead:
        """``async with db.read() as rx``: ``await rx.execute(...)`` in one snapshot."""
        return _AsyncRead(self, timeout)

    # -- writes ---------------------------------------------------------------
    async def execute(
        self, sql: str, params: Params = (), *, timeout: float | None = None
    ) -> WriteResult:
        """One write statement, group-committed with every other waiting task
        (and thread); returns after the COMMIT that holds it."""
        result = (await self._submit_request(sql, params, False, timeout)).result
        assert result is not None  # (set when there is no error)
        return WriteResult(*result)

    async def executemany(self, sql: str, seq: Iterable[Params], *,
                          timeout: float | None = None) -> WriteResult:  # fmt: skip
        result = (await self._submit_request(sql, list(seq), True, timeout)).result
        assert result is not None
        return WriteResult(*result)

    async def transact(
        self, fn: Callable[[sqlite3.Connection], T], *, timeout: float | None = None
    ) -> T:
        """``fn(conn)`` as one member of the next group commit (see
        :meth:`litegate.Database.transact`); its value once COMMIT is done.
        ``fn`` runs on a litegate thread, never on the event loop."""
        check_transact_fn(fn)
        req = await self._submit_request("", (), False, timeout, fn)
        value: T = req.value
        return value

    async def _submit_request(
        self,
        sql: str,
        params: Any,
        many: bool,
        timeout: float | None,
        fn: Callable[[sqlite3.Connection], Any] | None = None,
    ) -> Request:
        state = self.sync._process_state()
        if state.writer_block is not None:  # (a task holds the gate: is it this one?)
            _refuse_nested(state, "await db.transact()" if fn else "await db.execute()")
        limit = self._limit(timeout)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        notifier = self._notifier(loop)

        def done(_req: Request) -> None:  # on the group-commit leader's thread
            notifier.done(fut)

        req = Request(sql, params, many, on_done=done, fn=fn)
        try:
            state.batcher.submit(req)
        except RuntimeError:
            raise Closed(f"database {self.sync.path!r} is closed") from None
        # The loop's one deadline timer, not asyncio.wait_for (a task and a
        # future per write) nor a timer per write.
        if not math.isinf(limit):
            notifier.deadlines.add(limit, fut, state, req)  # (answered: the notifier settles it)
        try:
            await fut
        except asyncio.CancelledError:
            state.batcher.cancel(req)  # withdrawn if still queued; else it goes with its batch
            raise
        if req.error is not None:
            raise req.error
        return req

    def write(self, timeout: float | None = None) -> _AsyncWrite:
        """``async with db.write() as tx``: the gate and ``BEGIN IMMEDIATE`` for
        the block; ``await tx.execute(...)``; COMMIT on exit, ROLLBACK on error."""
        return _AsyncWrite(self, timeout)

    # -- maintenance ------------------------------------------------------------
    # Long-running: on the loop's default executor, never in the pool that
    # runs reads and writes.
    async def backup(self, dest: Any, **kwargs: Any) -> BackupResult:
        """:meth:`litegate.Database.backup`, off the loop (``progress`` is
        called on that thread)."""
        return await asyncio.to_thread(self.sync.backup, dest, **kwargs)

    async def vacuum(self, **kwargs: Any) -> VacuumResult:
        """:meth:`litegate.Database.vacuum`, off the loop."""
        return await asyncio.to_thread(self.sync.vacuum, **kwargs)

    async def checkpoint(self, mode: str = "PASSIVE", **kwargs: Any) -> CheckpointResult:
        """:meth:`litegate.Database.checkpoint`, off the loop."""
        return await asyncio.to_thread(self.sync.checkpoint, mode, **kwargs)

    async def optimize(self, **kwargs: Any) -> OptimizeResult:
        """:meth:`litegate.Database.optimize`, off the loop."""
        return await asyncio.to_thread(self.sync.optimize, **kwargs)

    # -- the rest -------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        return self.sync.stats()

    async def close(self) -> None:
        """Close the database (off the loop) and its threads. Safe to call twice."""
        await asyncio.get_running_loop().run_in_executor(None, self.sync.close)
        self._pool.shutdown(wait=False)

    async def __aenter__(self) -> AsyncDatabase:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class _Tx:
    """The connection of an ``async with`` block: statements run off the loop."""

    def __init__(
        self, adb: AsyncDatabase, conn: sqlite3.Connection, block: _AsyncWrite | None = None
    ) -> None:
        self._adb = adb
        self._conn = conn
        self._block = block

    async def execute(self, sql: str, params: Params = ()) -> WriteResult:
        return await self._adb._run(self._exec, sql, params, False)

    async def executemany(self, sql: str, seq: Iterable[Params]) -> WriteResult:
        return await self._adb._run(self._exec, sql, list(seq), True)

    def _exec(self, sql: str, params: Any, many: bool) -> WriteResult:
        block = self._block
        if block is not None:  # (a write block's statements: counted while under way)
            with block.calls_lock:
                block.calls += 1
        try:
            cur = self._conn.executemany(sql, params) if many else self._conn.execute(sql, params)
            return WriteResult(cur.rowcount, cur.lastrowid, cur.fetchall())
        finally:
            if block is not None:
                with block.calls_lock:
                    block.calls -= 1


class _AsyncBlock:
    def __init__(self, adb: AsyncDatabase, timeout: float | None) -> None:
        self._adb = adb
        self._timeout = timeout


class _AsyncWrite(_AsyncBlock):
    async def __aenter__(self) -> _Tx:
        adb, db = self._adb, self._adb.sync
        state = db._process_state()
        _refuse_nested(state, "async with db.write()")
        limit = adb._limit(self._timeout)
        loop = asyncio.get_running_loop()
        start = time.monotonic()
        await adb._wait_turn(state.filegate.lock, limit, True, state.budget, db)
        # The in-process gate is ours; the cross-process gate and BEGIN
        # IMMEDIATE may block, so they run on a thread.
        work = loop.run_in_executor(adb._pool, db._gate_from_loop, state, start, limit)

        def give_back(conn: WriterConnection) -> None:  # cancelled meanwhile
            adb._pool.submit(db._end, state, conn, False)

        conn = await _finish_even_if_cancelled(work, give_back)
        state.writer_owner = _ASYNC_OWNER
        self.task = asyncio.current_task()
        self.thread = threading.get_ident()
        # Statements of the block under way on the pool's threads: a fork()
        # on the loop's thread while none is may close the child's copy of
        # the writer (see Database._forget_parent_state).
        self.calls = 0
        self.calls_lock = threading.Lock()
        state.writer_block = self
        self._state, self._conn = state, conn
        return _Tx(adb, conn, self)

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None,
                        tb: TracebackType | None) -> None:  # fmt: skip
        conn = self._conn
        end = self._adb._run(self._adb.sync._end, self._state, conn, et is None)
        await _finish_even_if_cancelled(end)
        if ev is not None:
            typed = conn.guard.typed(ev)  # a COMMIT or PRAGMA the guard refused, as the sync face
            if typed is not ev:
                raise typed from ev


class _AsyncRead(_AsyncBlock):
    async def __aenter__(self) -> _Tx:
        adb, db = self._adb, self._adb.sync
        state = db._process_state()
        status, conn = await adb._wait_turn(state.pool, adb._limit(self._timeout), write=False)
        work = adb._run(self._open, state, conn if status != CREATE else None)
        self._state, self._conn = state, await _finish_even_if_cancelled(work, self._giveback)
        return _Tx(adb, self._conn)

    def _open(self, state: Any, conn: sqlite3.Connection | None) -> sqlite3.Connection:
        if conn is None:
            conn = state.pool.create()
            assert conn is not None
        conn.execute("BEGIN")
        return conn

    def _giveback(self, conn: sqlite3.Connection) -> None:
        self._adb._pool.submit(self._adb.sync._checkin, self._adb.sync._process_state(), conn)

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None,
                        tb: TracebackType | None) -> None:  # fmt: skip
        await _finish_even_if_cancelled(
            self._adb._run(self._adb.sync._checkin, self._state, self._conn)
        )
        if ev is not None and _is_read_only(ev):
            raise _read_only(ev, self._conn) from ev


def _refuse_nested(state: Any, what: str) -> None:
    """A write that the task inside ``async with db.write()`` awaits (its own
    call, or a task it awaits: ``wait_for`` before Python 3.12, ``gather``,
    ``await task``) would wait for the block that waits for it: refuse at
    once, as the sync face does. Other tasks wait for the block as usual."""
    block = state.writer_block
    if block is None:
        return
    me = asyncio.current_task()
    if block.task is me or (me is not None and _awaits(block.task, me)):
        raise NestedWriteError(
            f"{what} inside async with db.write(), in the same task or a task it awaits, "
            "would wait for itself; use await tx.execute() on the tx the enclosing block "
            "gave you"
        )


def _awaits(holder: asyncio.Task[Any] | None, task: asyncio.Task[Any]) -> bool:
    """Is ``holder`` (suspended) waiting, directly or through tasks it awaits,
    for ``task`` to finish? asyncio keeps no public record of who awaits
    what: this follows the awaited future (``_fut_waiter``) down through
    tasks and gather's children, and sees wait_for's private waiter among
    ``task``'s done callbacks. What it cannot see waits for the block, as
    before, until its timeout."""
    awaited: set[int] = set()
    todo: list[Any] = [getattr(holder, "_fut_waiter", None)]
    while todo and len(awaited) < 64:
        fut = todo.pop()
        if fut is None or id(fut) in awaited:
            continue
        if fut is task:
            return True
        awaited.add(id(fut))
        todo.append(getattr(fut, "_fut_waiter", None))  # a task: what it awaits
        todo.extend(getattr(fut, "_children", None) or ())  # gather's
    for callback, _ctx in getattr(task, "_callbacks", None) or ():
        if isinstance(callback, functools.partial) and any(id(a) in awaited for a in callback.args):
            return True  # wait_for: the task's end releases a waiter the holder awaits
    return False


async def _finish_even_if_cancelled(
    work: Awaitable[T], on_abandoned: Callable[[T], None] | None = None
) -> T:
    """Await ``work`` to the end even if this task is cancelled meanwhile (the
    thread finishes regardless; its result is cleaned up by ``on_abandoned``)."""
    fut = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        if on_abandoned is not None:
            cb = on_abandoned
            fut.add_done_callback(
                lambda f: cb(f.result()) if not f.cancelled() and f.exception() is None else None
            )
        raise
