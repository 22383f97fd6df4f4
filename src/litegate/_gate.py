"""The write gate of one database file in one process, shared.

Every writer of a file in this process goes through the same :class:`FileGate`:
an in-process FIFO (:class:`FairLock`) in front of the cross-process ticket
queue (:class:`ProcessLock`). Several ``litegate.Database`` objects on one
file, or the per-thread connections of a Django process, therefore queue in
one line inside the process and take one ticket at a time across processes,
instead of competing like separate processes.

The gate also owns the file's background checkpointer (one per file per
process, started by the first user that wants checkpoints): every commit
through the gate counts towards it, whoever made it.

``FileGate.open(path)`` returns the process's gate for ``path`` (made on
first use) and counts the users; ``close()`` gives one back, and the last
one stops the checkpointer and closes the lock file. After ``fork()`` the
child starts with no gates: the parent's are forgotten, never used (their
locks are the parent's), and the checkpointer's connection copy is closed
if it was idle.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from ._checkpoint import Checkpointer
from ._errors import NestedWriteError, OpenError
from ._fair import CREATE, QUEUED, FairLock, QueueClosed
from ._filelock import ProcessLock

_REGISTRY: dict[str, FileGate] = {}
_REGISTRY_LOCK = threading.Lock()  # guards _REGISTRY and the use counts; no I/O under it


def drop_after_fork(conn: sqlite3.Connection, idle: bool) -> None:
    """In a forked child, let go of a connection copied from the parent.

    It must not be used, and an idle copy must be closed: SQLite keeps
    per-file lock bookkeeping in process memory, and a live copy would make
    the child's own new connections believe they hold locks the kernel never
    gave them. Closing a copy in the child is safe (POSIX locks are not
    inherited, so unlocking touches none of the parent's; the WAL clean-up on
    close needs an exclusive lock the parent's shared lock denies). ``idle``:
    no thread was inside SQLite with it at the fork (it was idle, or it
    belonged to the thread that called fork()). A copy that another thread
    was using may be mid-call with its mutex held forever: closing it would
    hang, so it is parked, never closed.
    """
    if idle:
        try:
            conn.close()
            return
        except sqlite3.Error:
            pass
    _FORK_ORPHANS.append(conn)


def _after_fork_in_child() -> None:
    global _REGISTRY_LOCK
    _REGISTRY_LOCK = threading.Lock()  # the parent's may have been held at the fork
    for gate in list(_REGISTRY.values()):
        gate.plock.forget_after_fork()
        ckpt, gate._ckpt = gate._ckpt, None
        if ckpt is not None and ckpt.conn is not None:
            drop_after_fork(ckpt.conn, idle=not ckpt.busy)
    _REGISTRY.clear()


_FORK_ORPHANS: list[sqlite3.Connection] = []


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class FileGate:
    """One file's write gate in this process. Use :meth:`open`."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lock = FairLock()  # connections of this process, in arrival order
        self.plock = ProcessLock(path + "-litegate")  # processes, in ticket order
        self.owner: int | None = None  # thread ident holding it (for nesting checks)
        self._users = 0
        self._ckpt: Checkpointer | None = None
        self._ckpt_lock = threading.Lock()

    @classmethod
    def open(cls, path: str) -> FileGate:
        """The gate of ``path`` (an absolute path) in this process."""
        with _REGISTRY_LOCK:
            gate = _REGISTRY.get(path)
            if gate is not None:
                gate._users += 1
                return gate
        fresh = cls._new(path)  # opens the lock file: I/O outside the registry lock
        with _REGISTRY_LOCK:
            gate = _REGISTRY.get(path)
            if gate is None:
                gate = _REGISTRY[path] = fresh
                fresh = None  # type: ignore[assignment]
            gate._users += 1
        if fresh is not None:  # another thread made one first: use theirs
            fresh.plock.close()
        return gate

    @classmethod
    def _new(cls, path: str) -> FileGate:
        """A gate on ``path``'s sidecar, or :class:`OpenError` saying what is
        wrong with the sidecar and what to do."""
        sidecar = path + "-litegate"
        try:
            return cls(path)
        except IsADirectoryError:
            raise OpenError(
                f"{sidecar!r} is a directory, not litegate's lock file; move it away (litegate "
                "creates the file itself)"
            ) from None
        except PermissionError as exc:
            raise OpenError(
                f"cannot open litegate's lock file {sidecar!r} for reading and writing ({exc}); "
                "every process that opens the database needs write access to it and to its "
                "directory"
            ) from None
        except OSError as exc:
            if exc.errno in (errno.EINVAL, errno.ENOLCK, errno.EOPNOTSUPP):
                raise OpenError(
                    f"the filesystem of {sidecar!r} does not support open file description "
                    f"locks ({exc}); put the database on a local filesystem (not NFS/SMB)"
                ) from None
            if exc.errno is None:  # ours: the file is not a litegate lock file
                raise OpenError(
                    f"{sidecar!r} is not a litegate lock file ({exc}); if no process uses the "
                    "database, remove it (litegate creates it again)"
                ) from None
            raise OpenError(f"cannot open litegate's lock file {sidecar!r}: {exc}") from None

    def close(self) -> None:
        """Give back one use; the last closes the lock file."""
        with _REGISTRY_LOCK:
            self._users -= 1
            last = self._users <= 0 and _REGISTRY.get(self.path) is self
            if last:
                del _REGISTRY[self.path]
        if last:
            ckpt, self._ckpt = self._ckpt, None
            if ckpt is not None:
                ckpt.stop()
            self.plock.close()

    # -- the file's checkpointer ------------------------------------------------
    def checkpointer(self, *, every_commits: int, restart_frames: int) -> Checkpointer:
        """The file's background checkpointer, started on first call (the
        first caller's thresholds apply)."""
        with self._ckpt_lock:
            if self._ckpt is None:
                self._ckpt = Checkpointer(
                    self._open_checkpoint_conn,
                    self._turn,
                    every_commits=every_commits,
                    restart_frames=restart_frames,
                )
            return self._ckpt

    def committed(self) -> None:
        """A COMMIT went through this gate (cheap; never blocks)."""
        ckpt = self._ckpt
        if ckpt is not None:
            ckpt.committed()

    def _open_checkpoint_conn(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout = 0")  # never wait: skip and retry later
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        return conn

    @contextmanager
    def _turn(self, timeout: float) -> Iterator[bool]:
        """Hold the gate without a transaction (for the checkpointer's
        RESTART, which needs SQLite's write lock on another connection)."""
        if not self.acquire(timeout):
            yield False
            return
        try:
            yield True
        finally:
            self.release()

    def acquire(self, timeout: float | None) -> bool:
        """Take the gate: this process's FIFO, then the cross-process queue.
        False if ``timeout`` seconds passed first. A thread that already
        holds it gets :class:`NestedWriteError` at once (it would wait for
        itself)."""
        me = threading.get_ident()
        if self.owner == me:
            raise NestedWriteError(
                f"this thread already holds the write gate of {self.path!r} (through another "
                "connection or Database on the same file); waiting would wait for itself. "
                "Write through the connection that holds it"
            )
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            if not self.lock.acquire(timeout):
                return False
        except QueueClosed:  # pragma: no cover - the shared lock is never closed
            return False
        try:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self.plock.acquire(remaining):
                self.lock.release()
                return False
        except BaseException:
            self.lock.release()
            raise
        self.owner = me
        return True

    async def acquire_async(self, timeout: float | None) -> bool:
        """:meth:`acquire` for asyncio (the seam ``litegate.sqlalchemy``'s
        asyncio driver waits on). This process's line is waited on the event
        loop, without a thread: a task cancelled (or timed out) while it
        waits leaves the line, and whoever is behind it moves up. The
        cross-process queue, which blocks, is waited on the loop's default
        executor; if the task is cancelled meanwhile, the gate is given back
        as soon as that wait ends. False if ``timeout`` seconds passed first.
        The owner is the loop's thread, so a blocking :meth:`acquire` from
        that thread (which would stall the loop that must release the gate)
        raises :class:`NestedWriteError` instead of hanging."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        q = self.lock.queue
        woken: list[asyncio.Future[None]] = [loop.create_future()]

        def notify() -> None:  # any thread
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(_wake, woken[0])

        try:
            status, _token, waiter = q.enqueue(notify)
        except QueueClosed:  # pragma: no cover - the shared lock is never closed
            return False
        while status == QUEUED:
            assert waiter is not None
            left = None if deadline is None else max(0.0, deadline - loop.time())
            try:
                await asyncio.wait_for(woken[0], left)
            except asyncio.TimeoutError:
                q.cancel(waiter)
                return False
            except BaseException:
                q.cancel(waiter)
                raise
            woken[0] = loop.create_future()
            status, _token = q.claim(waiter)
        if status == CREATE:  # pragma: no cover - the lock's one token exists from the start
            q.create()
        left = None if deadline is None else max(0.0, deadline - loop.time())
        crossing = loop.run_in_executor(None, self.plock.acquire, left)
        try:
            got = await asyncio.shield(crossing)
        except BaseException:  # cancelled: give the gate back once that wait ends

            def settle(f: asyncio.Future[bool]) -> None:
                try:
                    if not f.cancelled() and f.exception() is None and f.result():
                        self.plock.release()
                finally:
                    self.lock.release()

            crossing.add_done_callback(settle)
            raise
        if not got:
            self.lock.release()
            return False
        self.owner = threading.get_ident()
        return True

    def release(self) -> None:
        self.owner = None
        try:
            self.plock.release()
        finally:
            self.lock.release()

    @property
    def held(self) -> bool:
        return self.lock.locked

    @property
    def waiting(self) -> int:
        """Writers of this process queued for the gate (not those of others)."""
        return self.lock.waiting

    def __repr__(self) -> str:
        return (
            f"<FileGate {self.path!r} {'held' if self.held else 'free'} waiting={self.waiting} "
            f"users={self._users}>"
        )
