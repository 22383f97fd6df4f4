"""The write gate of one database file in one process, shared.

Every writer of a file in this process goes through the same :class:`FileGate`:
an in-process FIFO (:class:`FairLock`) in front of the cross-process ticket
queue (:class:`ProcessLock`). Several ``litegate.Database`` objects on one
file, or the per-thread connections of a Django process, therefore queue in
one line inside the process and take one ticket at a time across processes,
instead of competing like separate processes.

The gate also owns this process's checkpointer thread for the file
(started by the first user that wants checkpoints) and the file's
:class:`CheckpointSeat`: of the processes using the file, one checkpointer
at a time holds the seat and checkpoints; every commit through the gate, in
any process, counts towards its next round.

``FileGate.open(path)`` returns the process's gate for ``path`` (made on
first use) and counts the users; ``close()`` gives one back, and the last
one stops the checkpointer and closes the lock file. After ``fork()`` the
child starts with no gates: the parent's are forgotten, never used (their
locks are the parent's), and the checkpointer's connection copy is closed
if it was idle.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import sqlite3
import struct
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from . import _grantlog
from ._checkpoint import Checkpointer
from ._combine import RESIGNED_S, Combiner
from ._errors import NestedWriteError, OpenError
from ._fair import BOUNDED, STRICT, Budget, FairLock, QueueClosed, QueueTimeout, wait_turn
from ._filelock import DUE, PASSED, CheckpointSeat, ProcessLock
from ._guard import close_connection
from ._lockformat import BUSY, COMBINER, H_COMBINER_BUSY, H_COMBINER_NONCE, H_COMBINER_PID

if TYPE_CHECKING:
    import asyncio

    from ._batch import GroupCommit

_REGISTRY: dict[str, FileGate] = {}
_REGISTRY_LOCK = threading.Lock()  # guards _REGISTRY and the use counts; no I/O under it


def drop_after_fork(conn: sqlite3.Connection, idle: bool) -> None:
    """In a forked child, let go of a connection copied from the parent.

    It must not be used, and an idle copy must be closed: SQLite keeps
    per-file lock bookkeeping in process memory, and a live copy would make
    the child's own new connections believe they hold locks the kernel never
    gave them (a copy inside a write transaction: that the file's write lock
    is taken, forever). Closing a copy in the child is safe (POSIX locks are
    not inherited, so unlocking touches none of the parent's; the WAL
    clean-up on close needs an exclusive lock the parent's shared lock
    denies), with one exception, see :func:`_rollback_is_harmless`: a copy
    of a transaction that has already written pages to the WAL is parked.
    ``idle``: no thread was inside SQLite with it at the fork (it was idle,
    or it belonged to the thread that called fork()). A copy that another
    thread was using may be mid-call with its mutex held forever: closing it
    would hang, so it is parked, never closed.
    """
    if idle and _rollback_is_harmless(conn):
        try:
            close_connection(conn)
            return
        except sqlite3.Error:
            pass
    _FORK_ORPHANS.append(conn)


def _rollback_is_harmless(conn: sqlite3.Connection) -> bool:
    """May the child close this copy? Closing one inside a transaction rolls
    it back, and in WAL mode a rollback resets the shared wal-index to the
    last commit, erasing the index entries of frames written after it: the
    parent's own transaction, still running, loses the pages it has already
    written to the WAL (a transaction bigger than the page cache spills
    them), and its COMMIT then makes the file corrupt. So a copy inside a
    transaction is closed only when each of its files is in WAL mode and
    that reset cannot erase anything (:func:`_index_reset_is_harmless`; the
    forking thread's write transaction, if any, is paused until the child
    is done: see :func:`_before_fork`). A file whose copy cannot be closed
    is noted: the child cannot write to it (:attr:`FileGate.fork_blocked`)."""
    try:
        if not conn.in_transaction:
            return True
        files = [row[2] for row in sqlite3.Cursor(conn).execute("PRAGMA database_list") if row[2]]
    except sqlite3.Error:
        return False
    blocked = [f for f in files if not _index_reset_is_harmless(f)]
    _FORK_BLOCKED.update(os.path.realpath(f) for f in blocked)
    return not blocked


def _index_reset_is_harmless(path: str) -> bool:
    """``path`` is in WAL mode, and a rollback's reset of its wal-index
    erases nothing: nothing is committed in the current WAL (SQLite's reset
    then leaves the index alone), or the WAL holds no frame written after
    the last commit. Read with plain file reads, in the child only: closing
    a file descriptor drops every POSIX lock of the process on that file,
    and the child holds none (the parent does)."""
    try:
        with open(path, "rb") as f:
            header = f.read(100)
        with open(path + "-shm", "rb") as f:
            index = f.read(96)
    except OSError:
        return False
    # the database header's read and write versions: 2 is WAL
    if len(header) < 100 or header[18:20] != b"\x02\x02":
        return False
    # the wal-index header, twice (native byte order): both copies equal once written
    if len(index) < 96 or index[:48] != index[48:96] or not index[12]:
        return False
    size, last = struct.unpack_from("=HI", index, 14)
    if last == 0:
        return True
    page = (size & 0xFE00) + ((size & 1) << 16)
    salt = index[32:40]
    try:
        with open(path + "-wal", "rb") as f:
            f.seek(32 + last * (24 + page))  # the frame after the last committed one
            frame = f.read(24)
    except OSError:
        return False
    # a frame of the current WAL carries its salt: one there was written after the commit
    return len(frame) < 24 or frame[8:16] != salt


# How long fork() waits for another thread's write transaction to end, and
# how long the parent waits for the child to let go of its copies.
FORK_WAIT_SECONDS = 5.0
_HELD_FOR_FORK: list[FileGate] = []
_CALLS_HELD_FOR_FORK: list[Checkpointer] = []
_PLOCKS_HELD_FOR_FORK: list[ProcessLock] = []
# Files a copy of a transaction could not be closed on (in a forked child).
_FORK_BLOCKED: set[str] = set()
# Per forking thread: the pipe its child signals on once its copies are closed.
_FORK_SIGNAL: dict[int, tuple[int, int]] = {}
# The modules' own after-fork hooks (see on_fork_in_child).
_CHILD_HOOKS: list[Callable[[], None]] = []


def on_fork_in_child(hook: Callable[[], None]) -> None:
    """Run ``hook`` in every forked child: after the gates are forgotten and
    before the parent may go on. Each module that keeps connections lets go
    of its copies there (with :func:`drop_after_fork`)."""
    _CHILD_HOOKS.append(hook)


def _before_fork() -> None:
    """Let no write transaction of another thread straddle a fork().

    A child gets a copy of every connection, and SQLite keeps its per-file
    lock bookkeeping in process memory: the copy of a write connection in the
    middle of a transaction would make the child believe, forever, that the
    file's write lock is taken (no write could ever succeed in the child, not
    even with plain sqlite3). So fork() takes every file's in-process gate
    first, as a writer would, waiting up to FORK_WAIT_SECONDS for a running
    transaction to end; the parent gives the gates back right after the fork,
    and in the child the copies are idle and can be closed.

    A gate the forking thread holds itself (fork() inside db.write(), or
    inside a SQLAlchemy or Django transaction) is left alone: the child
    closes its copy of that transaction (rolling it back, in the child's
    memory). For that rollback to see the WAL as the fork left it, the
    parent's forking thread waits, after the fork, until the child has let
    go of its copies (a pipe; a child that execs or exits closes it too),
    at most FORK_WAIT_SECONDS."""
    with _REGISTRY_LOCK:
        gates = list(_REGISTRY.values())
    # litegate's own threads first: none may be inside SQLite at the fork
    for gate in gates:
        ckpt = gate._ckpt
        if ckpt is not None and ckpt.calls.acquire(timeout=FORK_WAIT_SECONDS):
            _CALLS_HELD_FOR_FORK.append(ckpt)
    me = threading.get_ident()
    for gate in gates:
        if gate.owner == me:
            if me not in _FORK_SIGNAL:
                with contextlib.suppress(OSError):  # no pipe: the parent does not wait
                    _FORK_SIGNAL[me] = os.pipe()
            continue
        try:
            if gate.lock.acquire(FORK_WAIT_SECONDS):
                _HELD_FOR_FORK.append(gate)
        except QueueClosed:  # pragma: no cover - the shared lock is never closed
            pass
    # last, for microseconds: no helper of the cross-process queue between
    # closing its descriptor and saying so (the child closes its copies)
    for gate in gates:
        gate.plock.hold_for_fork()
        _PLOCKS_HELD_FOR_FORK.append(gate.plock)


def _after_fork_in_parent() -> None:
    plocks = list(_PLOCKS_HELD_FOR_FORK)
    _PLOCKS_HELD_FOR_FORK.clear()
    for plock in plocks:
        plock.after_fork_in_parent()
    held = list(_HELD_FOR_FORK)
    _HELD_FOR_FORK.clear()
    for gate in held:
        gate.lock.release()
    calling = list(_CALLS_HELD_FOR_FORK)
    _CALLS_HELD_FOR_FORK.clear()
    for ckpt in calling:
        ckpt.calls.release()
    signal = _FORK_SIGNAL.pop(threading.get_ident(), None)
    if signal is not None:
        r, w = signal
        os.close(w)  # the child's copy is the last: its close or exit ends the wait too
        try:
            if select.select([r], [], [], FORK_WAIT_SECONDS)[0]:
                os.read(r, 1)
        finally:
            os.close(r)


def _after_fork_in_child() -> None:
    global _REGISTRY_LOCK
    _REGISTRY_LOCK = threading.Lock()  # the parent's may have been held at the fork
    _HELD_FOR_FORK.clear()
    _PLOCKS_HELD_FOR_FORK.clear()  # (forget_after_fork makes each its own mutex)
    _CALLS_HELD_FOR_FORK.clear()  # (the checkpointers are the parent's: dropped below)
    _FORK_BLOCKED.clear()
    try:
        for gate in list(_REGISTRY.values()):
            gate.seat.forget_after_fork()
            gate.plock.forget_after_fork()
            gate._forget_combiner_after_fork()
            ckpt, gate._ckpt = gate._ckpt, None
            if ckpt is not None:
                for conn in (ckpt.conn, ckpt.pin):
                    if conn is not None:
                        drop_after_fork(conn, idle=not ckpt.busy)
        _REGISTRY.clear()
        for hook in list(_CHILD_HOOKS):
            try:
                hook()
            except Exception:  # pragma: no cover - each hook lets go of its own copies
                traceback.print_exc()
    finally:
        me = threading.get_ident()
        for tid, (r, w) in list(_FORK_SIGNAL.items()):
            with contextlib.suppress(OSError):
                os.close(r)
                if tid == me:
                    os.write(w, b".")
                os.close(w)
        _FORK_SIGNAL.clear()


_FORK_ORPHANS: list[sqlite3.Connection] = []


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_fork,
        after_in_parent=_after_fork_in_parent,
        after_in_child=_after_fork_in_child,
    )


class FileGate:
    """One file's write gate in this process. Use :meth:`open`."""

    def __init__(self, path: str) -> None:
        self.path = path
        # this process's threads and tasks, bounded fairness (each caller
        # brings its Database's budget)
        self.lock = FairLock(BOUNDED, on_vacant=self._vacant)
        # processes: a new sidecar gets the database's permissions
        self.plock = ProcessLock(path + "-litegate", like=path)
        self.seat = CheckpointSeat(self.plock)  # the file's one checkpointer, and its lock
        self.owner: int | None = None  # thread ident holding it (for nesting checks)
        # This process holds the cross-process gate. It keeps it while its own
        # threads pass the in-process lock among themselves (a cohort), until
        # another process's head waiter is due or nobody here wants it.
        self._cohort = False
        self._users = 0
        self._ckpt: Checkpointer | None = None
        self._ckpt_lock = threading.Lock()
        self._grant: tuple[int, int, bool, int, int, Budget] | None = None  # for the grant log
        self._ticket = -1
        # Keeping the gate while idle: a process that writes again within
        # HOT_GAP_NS of its last release ("hot") keeps the cross-process gate
        # when nobody waits, or while the head waiter of another process is
        # within its budget, and takes it back without a system call; its
        # keeper thread lets go when the head's budget runs out or when the
        # process has not written for HOT_GAP_NS while someone waits.
        self._released_ns = 0
        self._kept_ns = 0  # when the gate was last kept idle
        self._hot = False
        # A release that keeps nothing wakes the head waiter of another
        # process only if this process is cold: it had not let the gate go
        # for WARM_NS before it took it. A warm one is likely a writer in a
        # loop that asks again at once and takes the gate back past a head
        # within its budget (a wake-up would start a lock convoy); a cold
        # one (a burst's one write, a request now and then) will not, and
        # without the wake-up the gate would stay free until the head looks
        # again (up to ProcessLock.HEAD_CHECK_SECONDS per hand-over).
        self._let_go_ns = -(1 << 62)
        self._warm = False
        self._keeper: threading.Thread | None = None
        self._closing = False
        self.cohort_passes = 0  # grants that kept the cross-process gate (no system call)
        # A forked child whose copy of the parent's write transaction on this
        # file could not be closed (see _rollback_is_harmless): SQLite's
        # write lock stays taken in this process, so no write can succeed.
        self.fork_blocked = path in _FORK_BLOCKED  # (open() resolved the path)
        self.waited = False  # the last acquire() slept in a line (read by its grantee)
        # Combining other processes' writes (see _combine.py): the group
        # commits of this process's Databases opened with combine=True, the
        # descriptor holding the COMBINER role, and the server while we hold it.
        self._combine_lock = threading.Lock()  # guards the three; the server starts outside it
        self._combining: list[GroupCommit] = []
        self._resigned_until = 0.0  # (monotonic) no combiner role before then
        self.resignations = 0  # combiner roles given up for stalled turns
        self._role_fd = -1
        self._combiner: Combiner | None = None

    @classmethod
    def open(cls, path: str) -> FileGate:
        """The gate of ``path`` in this process. One file has one gate
        whatever path names it: symlinks are resolved first."""
        path = os.path.realpath(path)
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
            fresh.seat.close()
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
        except FileNotFoundError:  # it exists as a name: a symlink to nothing
            raise OpenError(
                f"{sidecar!r} is a symlink to a file that does not exist, not litegate's lock "
                f"file; remove it (rm {sidecar!r}; litegate creates the file itself)"
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
                    f"{sidecar!r} is not a litegate lock file ({exc}); if no process "
                    f"uses the database, remove it (rm {sidecar!r}; litegate creates it again)"
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
            self._stop_combining()
            ckpt, self._ckpt = self._ckpt, None
            if ckpt is not None:
                ckpt.stop()
            self._closing = True
            keeper = self._keeper
            # A keeper not started yet (ident None) sees _closing when it starts
            # and stops at once: nothing to wake or wait for.
            if keeper is not None and keeper.ident is not None:
                self.plock.ring()  # wakes the keeper, which sees _closing and stops
                keeper.join(5)
            self.seat.close()
            self.plock.close()

    def close_soon(self) -> None:
        """:meth:`close` from any context, a garbage-collector callback
        included: on a short thread of its own, so that it never waits, on
        the collecting thread, for a lock that thread may hold."""
        closer = threading.Thread(target=self.close, name="litegate-gate-close", daemon=True)
        with contextlib.suppress(RuntimeError):  # the interpreter is shutting down: moot
            closer.start()

    # -- combining other processes' writes (_combine.py) -------------------------
    def join_combining(self, batcher: GroupCommit) -> None:
        """A Database of this process combines writes: it may serve as the
        combiner's group commit; take the role now if nobody has it."""
        with self._combine_lock:
            self._combining.append(batcher)
        self.try_combine()

    def leave_combining(self, batcher: GroupCommit) -> None:
        """That Database closes: if its group commit served the combiner,
        stop serving (another process, or this one's next Database, takes
        the role)."""
        with self._combine_lock:
            if batcher in self._combining:
                self._combining.remove(batcher)
            serving = self._combiner is not None and self._combiner.batcher is batcher
        if serving:
            self._stop_combining()
            self.try_combine()

    @property
    def combiner(self) -> Combiner | None:
        """The combiner's server, if this process combines."""
        return self._combiner

    def combiner_nonce(self) -> int | None:
        """The socket name of the combiner if another process combines; None
        if this one does, or nobody has published one."""
        if self._combiner is not None:
            return None
        nonce = self.plock.word(H_COMBINER_NONCE)
        return nonce or None

    def combiner_pid(self) -> int | None:
        """The combining process's pid, as it published it (None: nobody)."""
        return self.plock.word(H_COMBINER_PID) or None

    def combiner_quiet_ns(self) -> int:
        """How long the combiner (of any process) has had no batch in line
        and no turn running, in ns (0 while it has; its own thread says so
        in the sidecar's table)."""
        word = self.plock.word(H_COMBINER_BUSY)
        if word == BUSY:
            return 0
        return max(0, time.monotonic_ns() - word) if word else 1 << 62

    def _show_combiner_busy(self, busy: bool) -> None:
        self.plock.set_word(H_COMBINER_BUSY, BUSY if busy else time.monotonic_ns())

    def try_combine(self) -> bool:
        """Take the combiner role if no process holds it, and serve; True if
        this process combines (now or already)."""
        with self._combine_lock:
            if self._combiner is not None:
                return True
            if not self._combining or self._closing or time.monotonic() < self._resigned_until:
                return False
            fd = self.plock.take_role(COMBINER)
            if fd < 0:
                return False
            batcher = self._combining[0]
            try:
                combiner = Combiner(batcher, self._show_combiner_busy, self._resign_combiner)
            except BaseException:
                os.close(fd)
                raise
            self._role_fd, self._combiner = fd, combiner
            self.plock.set_word(H_COMBINER_PID, os.getpid())
            self.plock.set_word(H_COMBINER_NONCE, combiner.nonce)
        return True

    def _resign_combiner(self) -> None:
        """On the combiner's thread: give the role up (its turns stall in
        this process); this process takes it again no sooner than
        ``RESIGNED_S`` (its writes ship to the next combiner, or run here)."""
        self._resigned_until = time.monotonic() + RESIGNED_S
        self.resignations += 1
        self._stop_combining()

    def _stop_combining(self) -> None:
        with self._combine_lock:
            combiner, self._combiner = self._combiner, None
            fd, self._role_fd = self._role_fd, -1
            if combiner is not None and self.plock.word(H_COMBINER_NONCE) == combiner.nonce:
                self.plock.set_word(H_COMBINER_NONCE, 0)
                self.plock.set_word(H_COMBINER_PID, 0)
                self.plock.set_word(H_COMBINER_BUSY, 0)
        if combiner is not None:
            combiner.stop()
        if fd >= 0:
            os.close(fd)  # the role goes

    def _forget_combiner_after_fork(self) -> None:
        """In a forked child: the role and the server are the parent's (the
        descriptor's lock is shared with the parent's copy: closing our copy
        leaves it held; the server thread did not survive the fork)."""
        if self._role_fd >= 0:
            os.close(self._role_fd)
        self._role_fd, self._combiner, self._combining = -1, None, []

    def combining_stats(self) -> dict[str, object]:
        combiner = self._combiner
        return {
            "combiner_pid": self.plock.word(H_COMBINER_PID) or None,
            "this_process_combines": combiner is not None,
            "served_batches": 0 if combiner is None else combiner.served,
            "served_statements": 0 if combiner is None else combiner.statements,
            "turns": 0 if combiner is None else combiner.turns,
            "resigned": self.resignations,
        }

    # -- the file's checkpointer ------------------------------------------------
    def checkpointer(
        self, *, every_commits: int, restart_frames: int, litestream: bool = False
    ) -> Checkpointer:
        """This process's checkpointer thread for the file, started on first
        call (the first caller's thresholds apply); it checkpoints while it
        holds the file's seat. ``litestream``: this caller asks for
        Litestream mode (the seated checkpointer, in whatever process, then
        leaves restarting the log to Litestream)."""
        with self._ckpt_lock:
            if self._ckpt is None:
                self._ckpt = Checkpointer(
                    self.path,
                    self._open_checkpoint_conn,
                    self._turn,
                    self.seat,
                    every_commits=every_commits,
                    restart_frames=restart_frames,
                )
            if litestream:
                self.seat.ask_litestream()
                self._ckpt.litestream_asked = True
            return self._ckpt

    @contextmanager
    def checkpoint_turn(self, timeout: float | None) -> Iterator[bool]:
        """The checkpoint lock, for a checkpoint made through the gate
        (``db.checkpoint()``, ``db.vacuum()``): litegate's checkpoints run
        one at a time, across processes. Take it before the gate (a writer
        never waits for it). Yields False if ``timeout`` seconds passed."""
        if not self.seat.lock_checkpoints(timeout):
            yield False
            return
        try:
            yield True
        finally:
            self.seat.unlock_checkpoints()

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
        RESTART, which needs SQLite's write lock on another connection).
        The turn waits in line (a strict budget): it never takes the gate
        past this process's sleepers nor, across processes, past a head
        waiting in the ticket line, so a fair="strict" file keeps its order;
        once at the head the next release hands the gate to it (a due
        restart keeps the WAL bounded). The one exception is a process's
        cohort: when this process already holds the gate across processes
        and another process's head is still within its budget, the turn is
        passed the gate as any thread of the process would be."""
        if self.fork_blocked or not self.acquire(timeout, STRICT):
            yield False
            return
        try:
            yield True
        finally:
            self.release()

    def acquire(
        self, timeout: float | None, budget: Budget | None = None, tag: object = None
    ) -> bool:
        """Take the gate: this process's line, then (unless this process
        already holds it) the cross-process one. False if ``timeout`` seconds
        passed first. A thread that already holds it gets
        :class:`NestedWriteError` at once (it would wait for itself)."""
        me = threading.get_ident()
        if self.owner == me:
            raise NestedWriteError(
                f"this thread already holds the write gate of {self.path!r} (through another "
                "connection or Database on the same file); waiting would wait for itself. "
                "Write through the connection that holds it"
            )
        logging = _grantlog.active() is not None
        arrive = time.monotonic_ns() if logging else 0
        t0 = time.monotonic() if timeout is not None else 0.0
        b = BOUNDED if budget is None else budget
        lock = self.lock
        if not lock.acquire(timeout, b, tag):
            return False
        queued = lock.last_queued
        self.waited = queued  # (and below: whether it queued across processes)
        left = timeout  # the time left for the cross-process part
        if queued and timeout is not None:
            left = max(0.0, timeout - (time.monotonic() - t0))
        if not self.hold_across_processes(left, b):
            return False
        if self._ticket >= 0:
            self.waited = True
        self.owner = me
        if logging:
            self._note_grant(arrive, queued, b)
        return True

    def hold_across_processes(self, timeout: float | None, budget: Budget) -> bool:
        """The in-process lock is ours: take the cross-process gate too,
        unless this process holds it already. On failure (timeout, error)
        the in-process lock is given back."""
        if self.fork_blocked:
            self.lock.release()
            raise NestedWriteError(
                f"this process was forked while the forking thread was inside a write "
                f"transaction on {self.path!r} that had already written pages to the WAL; "
                "closing the child's copy of it would undo those pages under the parent, so "
                "the copy keeps SQLite's write lock in this process and no write here can "
                "succeed. Fork before that transaction or after it ends, or start the child "
                "with the spawn method"
            )
        try:
            if self._cohort:
                plock = self.plock
                if plock.idle:
                    plock.busy_again()
                if plock.pass_on() != DUE:  # (a head of another process passed over is counted)
                    self.cohort_passes += 1
                    self._ticket = -1
                    return True
                # another process's head became due since the release that
                # kept the gate for us: hand it over and queue like anyone
                self._cohort = False
                self.plock.release()
            if not self.plock.acquire(timeout, budget):
                self.lock.release()
                return False
        except BaseException:
            self.lock.release()
            raise
        self._cohort = True
        self._ticket = self.plock.last_ticket
        self._took(budget)
        return True

    def _took(self, budget: Budget) -> None:
        """This process took the cross-process gate: how it will let go."""
        now = time.monotonic_ns()
        # hot: this process asks again soon after it lets go (a loop of writes);
        # only a policy that lets a running writer take the gate keeps it idle
        self._hot = budget.barges and now - self._released_ns < self.HOT_GAP_NS
        self._warm = now - self._let_go_ns < self.WARM_NS

    def take_now(self, budget: Budget) -> bool:
        """The gate, only if taking it needs no wait (nobody of this process
        waits, and this process holds the cross-process gate or can take it
        at once): the lone writer's path, with no clock read and no queue.
        False leaves everything as it was. Not while the grant log is on."""
        if _grantlog._LOG is not None or self.fork_blocked or not self.lock.try_acquire():
            return False
        plock = self.plock
        if self._cohort:
            # ours already: nobody else waits (the common case), or the head
            # waiter of another process is within its budget (counted)
            got = plock.pass_on()
            if not got:  # NOBODY: the common case
                self.owner = threading.get_ident()
                return True
            if got == PASSED:
                self.cohort_passes += 1
                self.owner = threading.get_ident()
                return True
        elif plock.try_now(budget):
            self._cohort = True
            self._took(budget)
            self.owner = threading.get_ident()
            return True
        self.lock.release()  # (a cohort whose head is due: the full path hands over)
        return False

    def release_now(self) -> None:
        """:meth:`release`, with the common case first: nobody waits here or
        elsewhere and this process is hot, so the gate stays kept idle."""
        self.owner = None
        if self._hot and self._grant is None and not self.lock._waiters and self._keep_idle():
            self.lock.release(False)
        else:
            self.release()

    def _note_grant(self, arrive: int, queued: bool, budget: Budget) -> None:
        if _grantlog.active() is not None:
            head = self.plock.last_head_ns if self._ticket >= 0 else 0
            self._grant = (arrive, time.monotonic_ns(), queued, self._ticket, head, budget)

    async def acquire_async(self, timeout: float | None, budget: Budget | None = None) -> bool:
        """:meth:`acquire` for asyncio (the seam ``litegate.sqlalchemy``'s
        asyncio driver waits on). This process's line is waited on the event
        loop, without a thread: a task cancelled (or timed out) while it
        waits leaves the line, and whoever is behind it moves up. The
        cross-process queue, which blocks, is waited on the loop's default
        executor; if the task is cancelled meanwhile, the gate is given back
        as soon as that wait ends. False if ``timeout`` seconds passed first.
        The owner is the loop's thread, so a blocking :meth:`acquire` from
        that thread (which would stall the loop that must release the gate)
        raises :class:`NestedWriteError` instead of hanging. ``budget``: the
        policy's, as for :meth:`acquire` (bounded by default)."""
        import asyncio  # (here: importing asyncio costs every user of the core)

        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        b = BOUNDED if budget is None else budget
        arrive = time.monotonic_ns() if _grantlog.active() is not None else 0
        try:
            await wait_turn(self.lock, timeout, b)
        except QueueTimeout:
            return False
        except QueueClosed:  # pragma: no cover - the shared lock is never closed
            return False
        queued = self.lock.last_queued  # (read by the grantee, before any release)
        left = None if deadline is None else max(0.0, deadline - loop.time())
        # (on failure hold_across_processes gives the in-process lock back itself)
        crossing = loop.run_in_executor(None, self.hold_across_processes, left, b)
        try:
            got = await asyncio.shield(crossing)
        except BaseException:  # cancelled: give the gate back once that wait ends

            def settle(f: asyncio.Future[bool]) -> None:
                if not f.cancelled() and f.exception() is None and f.result():
                    self.release()

            crossing.add_done_callback(settle)
            raise
        if not got:
            return False
        self.owner = threading.get_ident()
        if arrive:
            self._note_grant(arrive, queued, b)
        return True

    def release(self) -> None:
        """Give the gate back. The cross-process gate stays with this process
        while another of its threads waits for it and no other process's
        head waiter is due; otherwise it goes now."""
        self.owner = None
        if self._grant is not None:
            arrive, granted, queued, ticket, head, b = self._grant
            self._grant = None
            _grantlog.record(
                arrive,
                granted,
                time.monotonic_ns(),
                queued,
                ticket,
                head,
                b.overtakes,
                b.seconds,
                self.path,
            )
        lock = self.lock
        plock = self.plock
        kept_for_waiters = False
        try:
            if lock._waiters:
                if plock.head_due():  # another process's head is due: hand over
                    self._cohort = False
                    self._let_go_ns = time.monotonic_ns()
                    plock.release()
                else:
                    kept_for_waiters = True  # for our own next waiter (a cohort)
            # kept idle: ours again without a system call, until the keeper lets go
            elif not (self._hot and self._keep_idle()):
                self._cohort = False
                self._released_ns = self._let_go_ns = time.monotonic_ns()
                plock.release(wake=not self._warm)
        finally:
            # (if the waiters we kept it for leave, on_vacant lets it go)
            lock.release(kept_for_waiters)

    def _vacant(self) -> None:
        """The in-process lock was left free with nobody waiting (the last
        waiter gave up): if this process still holds the cross-process gate
        for a cohort that is gone (not kept idle on purpose), let it go."""
        if self._cohort and not self.plock.idle and self.lock.try_acquire():
            try:
                if self._cohort and not self.plock.idle:
                    self._cohort = False
                    self._let_go_ns = time.monotonic_ns()
                    self.plock.release(wake=not self._warm)
            finally:
                self.lock.release()

    # Between a release and this process's next request for the gate, at most
    # this long for the process to count as hot (and keep the gate idle).
    HOT_GAP_NS = 500_000
    # A process that let the cross-process gate go this recently before it
    # took it is warm (see _let_go_ns): its plain releases wake nobody.
    WARM_NS = 10_000_000
    # The keeper's next look when it must let go but a transaction of ours runs.
    BUSY_LOOK_SECONDS = 0.0001

    def _keep_idle(self) -> bool:
        """Keep the cross-process gate idle if the policy allows it now (see
        ``ProcessLock.keep_idle_unless_due``), with the keeper running."""
        if not self.plock.keep_idle_unless_due():
            return False
        self._kept_ns = time.monotonic_ns()
        if self._keeper is None:
            self._start_keeper()
        return True

    def _start_keeper(self) -> None:
        self._keeper = threading.Thread(
            target=self._keep, name=f"litegate-keeper:{self.path}", daemon=True
        )
        self._keeper.start()

    def _keep(self) -> None:
        """The keeper: while this process keeps the gate idle, wait for the
        doorbell (another process's waiter rings it); while someone waits,
        let the gate go (handing it to the head) once the head's budget has
        run out or this process has not taken the gate back for HOT_GAP_NS,
        unless one of our threads is using it (its release decides then)."""
        plock = self.plock
        while not self._closing:
            seen = plock.doorbell()
            sleep = 1.0
            if plock.idle:
                left = self._keep_left()
                if left is not None:
                    if left > 0:
                        sleep = left
                    elif self._let_go_idle():
                        continue
                    else:  # a transaction of ours runs: look again in a moment
                        sleep = self.BUSY_LOOK_SECONDS
            plock.wait_doorbell(seen, sleep)

    def _keep_left(self) -> float | None:
        """Seconds the gate kept idle may stay so while another process
        waits (0: let go now); None if nobody waits."""
        due_in = self.plock.head_due_in()
        if due_in is None:
            return None
        cold_in = (self._kept_ns + self.HOT_GAP_NS - time.monotonic_ns()) / 1e9
        return min(due_in, cold_in)

    def _let_go_idle(self) -> bool:
        """False if one of our threads has the gate (its release decides)."""
        if not self.lock.try_acquire():
            return False
        try:
            if self._cohort and self.plock.idle:
                self._cohort = False
                self._hot = False
                self._let_go_ns = time.monotonic_ns()
                self.plock.release(wake=True)
        finally:
            self.lock.release()
        return True

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
