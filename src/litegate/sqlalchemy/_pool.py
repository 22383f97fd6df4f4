"""The fair pool ``sqlite+litegate`` uses by default for file databases.

SQLAlchemy's ``QueuePool`` lets a thread that just returned a connection
take it back ahead of the threads already waiting (SQLAlchemy issue 7679),
which gives the threads that wait a long tail. :class:`FairQueuePool` keeps
``QueuePool``'s interface and sizing (``pool_size``, ``max_overflow``,
``timeout``, ``use_lifo``, ``status()`` …) and changes who gets a
connection: the right to hold one is a permit handed out by litegate's
:class:`~litegate._fair.HandoffQueue`, in strict arrival order, straight
from the thread (or asyncio task) that gives one back to the one that has
waited longest; nobody barges. The idle connections themselves wait in a
deque (FIFO, or LIFO with ``use_lifo=True``), at most ``pool_size`` of them,
as in ``QueuePool``.

Open connections never exceed ``pool_size + max_overflow``: a permit holder
takes an idle connection if there is one and opens a new one only when none
is idle, and there are that many permits.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections import deque
from typing import Any

from sqlalchemy import exc
from sqlalchemy.pool import AsyncAdaptedQueuePool, ConnectionPoolEntry, Pool, QueuePool

from .._fair import CREATE, HandoffQueue, QueueTimeout, wait_turn
from ._compat import await_, in_greenlet

# Every pool of this process, for the fork hook.
_POOLS: weakref.WeakSet[FairQueuePool] = weakref.WeakSet()


def _permit() -> bool:
    return True


class _Line:
    """``QueuePool._pool``'s counterpart (same ``maxsize``, ``use_lifo``,
    ``queue``, ``qsize()``, ``empty()``), fair: ``permits`` is the line."""

    def __init__(self, maxsize: int, max_overflow: int, use_lifo: bool) -> None:
        self.maxsize = maxsize
        self.use_lifo = use_lifo
        self.queue: deque[ConnectionPoolEntry] = deque()  # idle connections
        unlimited = maxsize == 0 or max_overflow < 0
        self.permits: HandoffQueue[bool] = HandoffQueue(
            sys.maxsize if unlimited else maxsize + max_overflow, _permit
        )

    def qsize(self) -> int:
        return len(self.queue)

    def empty(self) -> bool:
        return not self.queue


class FairQueuePool(QueuePool):
    """``QueuePool`` with first-come, first-served hand-off. Same arguments
    as ``QueuePool``; the default ``poolclass`` of ``sqlite+litegate`` for
    file databases (pass ``poolclass=`` to use another)."""

    def __init__(
        self,
        creator: Any,
        pool_size: int = 5,
        max_overflow: int = 10,
        timeout: float | None = 30.0,
        use_lifo: bool = False,
        **kw: Any,
    ) -> None:
        Pool.__init__(self, creator, **kw)
        self._max_overflow = -1 if pool_size == 0 else max_overflow
        self._timeout = timeout  # type: ignore[assignment]  # None: wait forever
        self._pool = _Line(pool_size, self._max_overflow, use_lifo)  # type: ignore[assignment]
        # Guards the idle deque and _open; no I/O under it. Reentrant, as
        # SQLAlchemy's own queue: a connection abandoned by its user comes
        # back from a garbage-collector callback, on whatever thread, maybe
        # one that is inside this lock.
        self._overflow_lock = threading.RLock()  # type: ignore[assignment]
        self._open = 0  # connections of this pool, checked out or idle
        self._mine: weakref.WeakSet[ConnectionPoolEntry] = weakref.WeakSet()
        _POOLS.add(self)

    @property
    def _overflow(self) -> int:  # QueuePool's count, which its status methods read
        return self._open - self._pool.maxsize

    @_overflow.setter
    def _overflow(self, value: int) -> None:
        self._open = value + self._pool.maxsize

    def _do_get(self) -> ConnectionPoolEntry:
        line: _Line = self._pool  # type: ignore[assignment]
        try:
            if self._is_asyncio and in_greenlet():
                _wait_on_loop(line.permits, self._timeout)
            else:
                line.permits.get(self._timeout)
        except QueueTimeout:
            raise exc.TimeoutError(
                f"{type(self).__name__} limit of size {self.size()} overflow "
                f"{self._max_overflow} reached, connection timed out, timeout "
                f"{self._timeout:0.2f} ({line.permits.waiting} more waiting, first come, "
                "first served); raise pool_size, max_overflow or pool_timeout, or hold "
                "connections for shorter",
                code="3o7r",
            ) from None
        with self._overflow_lock:
            if line.queue:
                return line.queue.pop() if line.use_lifo else line.queue.popleft()
            self._open += 1
        try:
            record = self._create_connection()
        except BaseException:
            with self._overflow_lock:
                self._open -= 1
            line.permits.put(True)
            raise
        self._mine.add(record)
        return record

    def _do_return_conn(self, record: ConnectionPoolEntry) -> None:
        if record not in self._mine:  # a forked child's copy of the parent's
            record.close()
            return
        line: _Line = self._pool  # type: ignore[assignment]
        with self._overflow_lock:
            keep = not line.maxsize or len(line.queue) < line.maxsize
            if keep:
                line.queue.append(record)
            else:
                self._open -= 1
        try:
            if not keep:
                record.close()
        finally:
            line.permits.put(True)  # to the longest waiter, if any

    def dispose(self) -> None:
        line: _Line = self._pool  # type: ignore[assignment]
        with self._overflow_lock:
            idle = list(line.queue)
            line.queue.clear()
            self._open -= len(idle)
        for record in idle:
            record.close()
        self.logger.info("Pool disposed. %s", self.status())

    def waiting(self) -> int:
        """Callers (threads or tasks) waiting for a connection now."""
        return self._pool.permits.waiting  # type: ignore[attr-defined, no-any-return]

    def _litegate_forget_parent(self) -> set[int]:
        """In a forked child: start empty (the parent's connections are the
        parent's) and say which of them were idle here at the fork."""
        line: _Line = self._pool  # type: ignore[assignment]
        idle = {id(_driver(rec.dbapi_connection)) for rec in line.queue}
        self._pool = _Line(line.maxsize, self._max_overflow, line.use_lifo)  # type: ignore[assignment]
        self._overflow_lock = threading.RLock()  # type: ignore[assignment]
        self._open = 0
        self._mine = weakref.WeakSet()
        return idle


class AsyncFairQueuePool(FairQueuePool, AsyncAdaptedQueuePool):
    """:class:`FairQueuePool` for asyncio engines: a task waits for a
    connection on the event loop (never blocking it) and leaves the line if
    it is cancelled. The default pool of ``sqlite+litegate`` under
    ``create_async_engine`` for file databases."""


def _driver(dbapi_connection: Any) -> Any:
    return getattr(dbapi_connection, "driver_connection", dbapi_connection)


def _wait_on_loop(permits: HandoffQueue[bool], timeout: float | None) -> None:
    """``permits.get(timeout)`` from SQLAlchemy's greenlet, waiting on the
    event loop instead of blocking it. Cancelled: leaves the line."""
    status, _ = await_(wait_turn(permits, timeout))
    if status == CREATE:
        permits.create()


def idle_after_fork() -> set[int]:
    """Called in a forked child (by the connections' fork hook): resets every
    pool and returns the ids of the connections that were idle in one."""
    idle: set[int] = set()
    for pool in list(_POOLS):
        idle |= pool._litegate_forget_parent()
    return idle
