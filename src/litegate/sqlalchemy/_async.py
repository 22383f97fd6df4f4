"""The asyncio driver: ``create_async_engine("sqlite+litegate:///app.db")``
(or ``sqlite+litegate_async://``).

Each connection is a :class:`~litegate.sqlalchemy._dbapi.Connection` (the
same rules as the sync driver) with a thread of its own: every SQLite call
runs there, never on the event loop's thread. Waiting for the write gate
happens on the event loop instead, without a thread
(:meth:`litegate._gate.FileGate.acquire_async`): the driver asks the
connection whether a statement would take the gate, takes it on the loop
first, then runs the statement on the thread. A task cancelled while it
waits leaves the line.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sqlite3
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from sqlalchemy.engine import AdaptedConnection

from .._errors import NestedWriteError
from .._gate import FileGate
from . import _dbapi
from ._compat import await_, in_greenlet
from ._errors import ConfigError, gate_timeout

T = TypeVar("T")

# The connection of each file's gate that an asyncio task holds it through:
# a task that holds it and begins another transaction on the same file gets
# the nested (read-only) fallback instead of waiting for itself.
_HOLDERS: weakref.WeakKeyDictionary[FileGate, _dbapi.Connection] = weakref.WeakKeyDictionary()


def _exec(conn: _dbapi.Connection, sql: str, params: Any, many: bool) -> tuple[Any, ...]:
    cur = conn.cursor()
    try:
        if many:
            cur.executemany(sql, params)
        else:
            cur.execute(sql, () if params is None else params)
        rows = cur.fetchall() if cur.description else []
        return cur.description, rows, cur.rowcount, cur.lastrowid
    finally:
        cur.close()


class AsyncAdaptedCursor:
    """A DBAPI cursor for SQLAlchemy's greenlet: each statement runs on the
    connection's thread and its rows are fetched there, at once."""

    server_side = False
    __slots__ = ("_adapt", "_rows", "arraysize", "description", "lastrowid", "rowcount")

    def __init__(self, adapt: AsyncAdaptedConnection) -> None:
        self._adapt = adapt
        self._rows: deque[Any] = deque()
        self.description: Any = None
        self.rowcount = -1
        self.lastrowid: int | None = None
        self.arraysize = 1

    def execute(self, operation: str, parameters: Any = None) -> None:
        self._adapt._statement(self, operation, parameters, False)

    def executemany(self, operation: str, seq_of_parameters: Any) -> None:
        self._adapt._statement(self, operation, list(seq_of_parameters), True)

    def fetchone(self) -> Any:
        return self._rows.popleft() if self._rows else None

    def fetchmany(self, size: int | None = None) -> list[Any]:
        rows = self._rows
        return [rows.popleft() for _ in range(min(size or self.arraysize, len(rows)))]

    def fetchall(self) -> list[Any]:
        out = list(self._rows)
        self._rows.clear()
        return out

    def __iter__(self) -> Iterator[Any]:
        while self._rows:
            yield self._rows.popleft()

    def close(self) -> None:
        self._rows.clear()

    async def _async_soft_close(self) -> None:
        """SQLAlchemy's asyncio results call this; the rows are already here."""

    def setinputsizes(self, *sizes: Any) -> None:
        pass

    def setoutputsize(self, size: Any, column: Any = None) -> None:
        pass


def _exec_ss(conn: _dbapi.Connection, sql: str, params: Any) -> tuple[Any, ...]:
    cur = conn.cursor()
    cur.execute(sql, () if params is None else params)
    return cur, cur.description, cur.rowcount, cur.lastrowid


class AsyncAdaptedSSCursor(AsyncAdaptedCursor):
    """A server-side cursor (``AsyncConnection.stream()``, ``yield_per``):
    rows are fetched on the connection's thread as they are asked for."""

    server_side = True
    __slots__ = ("_cursor",)

    def __init__(self, adapt: AsyncAdaptedConnection) -> None:
        super().__init__(adapt)
        self._cursor: Any = None  # the sqlite3 cursor, used on the connection's thread

    def execute(self, operation: str, parameters: Any = None) -> None:
        self._adapt._statement(self, operation, parameters, False)

    def executemany(self, operation: str, seq_of_parameters: Any) -> None:
        raise NotImplementedError("executemany() on a server-side cursor")

    def fetchone(self) -> Any:
        return self._adapt._run(self._cursor.fetchone)

    def fetchmany(self, size: int | None = None) -> list[Any]:
        rows: list[Any] = self._adapt._run(self._cursor.fetchmany, size or self.arraysize)
        return rows

    def fetchall(self) -> list[Any]:
        rows: list[Any] = self._adapt._run(self._cursor.fetchall)
        return rows

    def __iter__(self) -> Iterator[Any]:
        while (row := self.fetchone()) is not None:
            yield row

    def close(self) -> None:
        cur, self._cursor = self._cursor, None
        if cur is not None:
            self._adapt._run(cur.close)


def _counted(conn: _dbapi.Connection, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on the connection's thread, counted as a call under way
    (a fork meanwhile leaves the child's copy parked, not closed)."""
    conn.litegate_calls += 1
    try:
        return fn(*args)
    finally:
        conn.litegate_calls -= 1


class AsyncAdaptedConnection(AdaptedConnection):
    """The DBAPI connection SQLAlchemy's asyncio engine sees."""

    __slots__ = ("_conn", "_thread", "dbapi")

    def __init__(self, dbapi: Any, conn: _dbapi.Connection, thread: ThreadPoolExecutor) -> None:
        self.dbapi = dbapi
        self._connection = conn  # type: ignore[assignment]  # SQLAlchemy's name for it
        self._conn = conn  # the same, typed
        self._thread = thread
        conn.litegate_own_thread = True

    def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on this connection's thread; the greenlet waits on
        the loop. Cancelled meanwhile: the call still finishes there, before
        anything else runs on this connection (one thread, in order)."""
        return await_(asyncio.wrap_future(self._submit(fn, *args)))

    def _submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        conn = self._conn
        if conn._lg_forked:  # the parent's, in a forked child: its thread is not here
            raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
        try:
            return self._thread.submit(_counted, conn, fn, *args)
        except RuntimeError:  # the thread was shut down: closed
            # pysqlite's words, which SQLAlchemy takes for a lost connection
            raise sqlite3.ProgrammingError("Cannot operate on a closed database.") from None

    # -- statements --------------------------------------------------------------
    def cursor(self, server_side: bool = False) -> AsyncAdaptedCursor:
        return AsyncAdaptedSSCursor(self) if server_side else AsyncAdaptedCursor(self)

    def execute(self, operation: str, parameters: Any = None) -> AsyncAdaptedCursor:
        cursor = self.cursor()
        cursor.execute(operation, parameters)
        return cursor

    def _statement(self, cur: AsyncAdaptedCursor, sql: str, params: Any, many: bool) -> None:
        conn = self._conn
        if conn.litegate_wants_gate(sql):
            self._take_gate(sql)
        if isinstance(cur, AsyncAdaptedSSCursor):
            cur._cursor, desc, rowcount, lastrowid = self._run(_exec_ss, conn, sql, params)
        else:
            desc, rows, rowcount, lastrowid = self._run(_exec, conn, sql, params, many)
            cur._rows = deque(rows)
        cur.description = desc
        cur.rowcount = rowcount
        cur.lastrowid = lastrowid

    def _take_gate(self, sql: str) -> None:
        conn = self._conn
        gate = conn.litegate_gate
        assert gate is not None
        task = asyncio.current_task()
        holder = _HOLDERS.get(gate)
        if (
            holder is not None
            and holder is not conn
            and holder.litegate_held
            and task is not None
            and holder.litegate_task is task
        ):
            if conn.litegate_pending:  # a new transaction: a read-only snapshot
                conn.litegate_nested = True
                return
            raise NestedWriteError(
                f"this asyncio task already holds the write gate of {gate.path!r} through "
                "another connection; waiting would wait for itself. Write through the "
                "connection that holds it, or end its transaction first"
            )
        if not await_(gate.acquire_async(conn.litegate_timeout, conn.litegate_budget)):
            raise gate_timeout(sql, _dbapi.timeout_message(gate, conn.litegate_timeout))
        conn.litegate_held = True
        conn.litegate_task = task
        _HOLDERS[gate] = conn

    # -- transactions ------------------------------------------------------------
    def litegate_begin(self) -> None:
        self._conn.litegate_begin()  # no I/O: flags only

    def commit(self) -> None:
        self._run(self._conn.commit)

    def rollback(self) -> None:
        self._run(self._conn.rollback)

    @property
    def in_transaction(self) -> bool:
        return self._conn.in_transaction

    @property
    def litegate_read_only(self) -> bool:
        return self._conn.litegate_read_only

    def litegate_set_read_only(self, value: bool) -> None:
        self._run(self._conn.litegate_set_read_only, value)

    @property
    def isolation_level(self) -> str | None:
        return self._conn.isolation_level

    @isolation_level.setter
    def isolation_level(self, value: str | None) -> None:
        # None commits an open transaction: on the thread, like all I/O.
        self._run(setattr, self._conn, "isolation_level", value)

    def create_function(self, *args: Any, **kwargs: Any) -> None:
        self._run(functools.partial(self._conn.create_function, *args, **kwargs))

    # -- the end -------------------------------------------------------------------
    def close(self) -> None:
        """Close on the connection's thread (the gate goes with it, there).
        Outside SQLAlchemy's greenlet (a pool disposed from sync code, or
        garbage collection) this thread waits for it instead of the loop."""
        conn = self._conn
        if conn._lg_forked:  # the parent's, in a forked child
            return
        try:
            closing = self._thread.submit(_counted, conn, conn.close)
        except RuntimeError:  # closed already
            return
        try:
            if in_greenlet():
                await_(asyncio.wrap_future(closing))
            else:
                closing.result()
        finally:
            self._thread.shutdown(wait=False)

    def terminate(self) -> None:
        """SQLAlchemy's last resort (invalidation, garbage collection): the
        connection's thread closes it after whatever it is doing (never half
        way through a statement); outside the greenlet (garbage collection)
        nothing waits for that, as this thread may hold a lock it needs."""
        if in_greenlet():
            self.close()
            return
        if self._conn._lg_forked:
            return
        with contextlib.suppress(RuntimeError):  # closed already
            self._thread.submit(_counted, self._conn, self._conn.close)
        self._thread.shutdown(wait=False)


class AsyncDBAPI(_dbapi.DBAPI):
    """The DBAPI module of the asyncio driver: ``sqlite3``'s names, and a
    ``connect()`` that opens the connection on its own thread."""

    def connect(self, *args: Any, **kwargs: Any) -> AsyncAdaptedConnection:
        thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="litegate-sqlalchemy")
        creator = kwargs.pop("async_creator_fn", None)
        if creator is not None:  # create_async_engine(async_creator=...)
            try:
                made = await_(creator(*args, **kwargs))
            except BaseException:
                thread.shutdown(wait=False)
                raise
            if not isinstance(made, _dbapi.Connection):
                thread.shutdown(wait=False)
                raise ConfigError(
                    "async_creator must return a connection made by litegate.sqlalchemy.connect() "
                    f"(for example: await asyncio.to_thread(connect, path)), not {made!r}"
                )
            return AsyncAdaptedConnection(self, made, thread)
        work = thread.submit(functools.partial(_dbapi.connect, *args, **kwargs))
        try:
            conn = await_(asyncio.wrap_future(work))
        except BaseException:  # cancelled: close it there once it is open
            work.add_done_callback(_close_opened)
            thread.shutdown(wait=False)
            raise
        return AsyncAdaptedConnection(self, conn, thread)


def _close_opened(work: Future[_dbapi.Connection]) -> None:
    if not work.cancelled() and work.exception() is None:
        work.result().close()
