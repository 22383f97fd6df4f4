"""A cross-process FIFO lock that the kernel releases when its holder dies.

It lives in a sidecar file (``<db>-litegate``) shared by every process that
opens the database with litegate, and is made of open-file-description
(OFD) ``fcntl`` byte-range locks plus a small ticket table in shared memory:

- ``MUTEX`` (byte 0) guards the ticket counter; it is held for a few
  microseconds while a writer takes a ticket, never while anyone waits.
- Ticket ``t`` owns slot ``t % SLOTS``: an OFD lock on one byte that its
  owner holds from taking the ticket until it releases the gate, and a state
  word in the mmap-ed table (WAITING, HOLDING, DONE, ABANDONED).
- The writer with ticket ``t`` waits for ``t - 1`` by taking (and at once
  dropping) ``t - 1``'s slot lock with ``F_OFD_SETLKW``: it sleeps in the
  kernel and is woken exactly when that lock goes, by release, by timeout or
  because the process died (the kernel drops a dead process's locks).
  It then reads ``t - 1``'s state: DONE or HOLDING (died holding) means the
  gate is ours; WAITING (died waiting) or ABANDONED (timed out) means it never
  held the gate, so we go on to wait for ``t - 2``, and so on.

So writers get the gate in ticket order across processes, nobody polls, and a
SIGKILLed holder or waiter cannot wedge the queue. Linux's own lock wake-up is
only nearly FIFO (it wakes a chain of waiters that then race), which is why
the ticket table exists.

OFD locks belong to the open file, not the process: two :class:`ProcessLock`
objects in one process queue against each other like two processes, and
closing some other descriptor of the file never drops them.

``F_OFD_SETLKW`` has no timeout, so a blocking wait runs in a helper thread
(started on first contention, reused after); the caller waits for it on a
``threading.Lock`` with its own deadline and, on timeout, marks its ticket
ABANDONED and leaves. Only one thread per :class:`ProcessLock` calls
:meth:`acquire` at a time: the in-process FairLock in front of it sees to that.
"""

from __future__ import annotations

import fcntl
import math
import mmap
import os
import queue
import struct
import threading
import time

from ._time import FOREVER, acquire_until

SLOTS = 4096
_MAGIC = b"LGTQ0001"
_HEADER = 64  # magic (8) + next ticket (8), padded
_STATE = struct.Struct("<QQ")  # ticket, state
_SIZE = _HEADER + SLOTS * _STATE.size
_MUTEX = 0
_SLOT_LOCK_BASE = 1 << 32  # lock-only offsets past the data; they need no bytes

WAITING, HOLDING, DONE, ABANDONED = 1, 2, 3, 4
_TICKET_LIMIT = 1 << 62  # a counter at or past this was not written by litegate

_SETLK: int = fcntl.F_OFD_SETLK  # type: ignore[attr-defined,unused-ignore]
_SETLKW: int = fcntl.F_OFD_SETLKW  # type: ignore[attr-defined,unused-ignore]


def _flock(kind: int, offset: int) -> bytes:
    return struct.pack("hhqqixxxx", kind, os.SEEK_SET, offset, 1, 0)


_MUTEX_LOCK = _flock(fcntl.F_WRLCK, _MUTEX)
_MUTEX_UNLOCK = _flock(fcntl.F_UNLCK, _MUTEX)
_SLOT_LOCK = [_flock(fcntl.F_WRLCK, _SLOT_LOCK_BASE + i) for i in range(SLOTS)]
_SLOT_UNLOCK = [_flock(fcntl.F_UNLCK, _SLOT_LOCK_BASE + i) for i in range(SLOTS)]


STATE_NAMES = {WAITING: "waiting", HOLDING: "holding", DONE: "done", ABANDONED: "abandoned"}


def read_queue(path: str) -> tuple[int, list[tuple[int, int, str]]] | None:
    """The ticket table of lock file ``path``, read without taking part:
    no lock taken, nothing written (for ``litegate doctor`` / ``top``).
    Returns (next ticket, [(ticket, slot, state name)] of the live tickets,
    oldest first), None if the file is not a litegate lock file; OSError
    if it cannot be read."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        table = os.pread(fd, _SIZE, 0)
    finally:
        os.close(fd)
    if table[:8] != _MAGIC or len(table) < _SIZE:
        return None
    nxt = int(struct.unpack_from("<Q", table, 8)[0])
    live = []
    for t in range(max(0, nxt - SLOTS), nxt):
        slot = t % SLOTS
        tk, st = _STATE.unpack_from(table, _HEADER + slot * _STATE.size)
        if tk == t and st in STATE_NAMES:
            live.append((t, slot, STATE_NAMES[st]))
    return nxt, live


def slot_of_lock(offset: int) -> int | None:
    """The slot whose lock sits at byte ``offset`` of a lock file (as
    /proc shows locks), None for the ticket-counter mutex."""
    return offset - _SLOT_LOCK_BASE if _SLOT_LOCK_BASE <= offset < _SLOT_LOCK_BASE + SLOTS else None


class TooManyWaiters(RuntimeError):
    pass


class _Job:
    """One blocking wait for a slot lock, run by a helper thread."""

    __slots__ = ("abandoned", "done", "fd", "finished", "slot")

    def __init__(self, fd: int, slot: int) -> None:
        self.fd = fd  # a dup: stays valid even if the lock is closed meanwhile
        self.slot = slot
        self.done = threading.Lock()
        self.done.acquire()
        self.finished = False
        self.abandoned = False


def _open_like(path: str, like: str | None) -> int:
    """Open (or create) the lock file. A new one gets the permissions of the
    file ``like`` (the database), as SQLite does for its -wal and -shm: a
    group-writable database gets a group-writable sidecar, so every user who
    may write the database may queue for it; as root, also its owner."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        return os.open(path, os.O_RDWR | os.O_CLOEXEC)
    if like is not None:
        try:
            st = os.stat(like)
            os.fchmod(fd, st.st_mode & 0o666)
            if os.geteuid() == 0:
                os.fchown(fd, st.st_uid, st.st_gid)
        except OSError:
            pass  # best effort: the database may not exist yet
    return fd


class ProcessLock:
    def __init__(self, path: str, like: str | None = None) -> None:
        self.path = path
        self._fd = _open_like(path, like)
        try:
            self._map = self._map_table()
        except BaseException:
            os.close(self._fd)
            raise
        self._mutex = threading.Lock()  # guards the fields below; no I/O under it
        self._ticket = -1  # our ticket while we hold or wait
        self._held = False
        self._closed = False
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._helpers = 0
        self._idle_helpers = 0
        self.contended = 0  # acquisitions that had to sleep

    def _map_table(self) -> mmap.mmap:
        fcntl.fcntl(self._fd, _SETLKW, _MUTEX_LOCK)
        try:
            if os.fstat(self._fd).st_size < _SIZE:
                os.ftruncate(self._fd, _SIZE)  # only ever grows; zeros are "no ticket yet"
            table = mmap.mmap(self._fd, _SIZE)
            magic = table[:8]
            if magic == b"\0" * 8:
                table[:8] = _MAGIC
            elif magic != _MAGIC:
                table.close()
                raise OSError(f"its first bytes are {bytes(magic)!r}, not litegate's")
            nxt = int(struct.unpack_from("<Q", table, 8)[0])
            if nxt >= _TICKET_LIMIT:  # no writer takes 2**62 tickets: a damaged file
                table.close()
                raise OSError(f"its ticket counter reads {nxt}, which litegate never writes")
            return table
        finally:
            fcntl.fcntl(self._fd, _SETLK, _MUTEX_UNLOCK)

    def __repr__(self) -> str:
        return f"<ProcessLock {self.path!r} held={self._held} closed={self._closed}>"

    @property
    def held(self) -> bool:
        return self._held

    # -- acquire ------------------------------------------------------------
    def acquire(self, timeout: float | None) -> bool:
        """True once held; False if ``timeout`` seconds passed first."""
        if self._closed:
            raise ValueError("ProcessLock is closed")
        deadline = None if timeout is None or timeout >= FOREVER else time.monotonic() + timeout
        t = self._take_ticket()
        try:
            return self._wait_turn(t, deadline)
        except BaseException:  # interrupted: never leave a ticket that blocks others
            self._finish(t, ABANDONED)
            raise

    def _wait_turn(self, t: int, deadline: float | None) -> bool:
        table, state = self._map, _STATE
        p = t - 1
        while p >= 0 and p > t - SLOTS:
            ps = p % SLOTS
            tk, st = state.unpack_from(table, _HEADER + ps * 16)
            if tk == p and st == DONE:
                break
            if tk == p and st != ABANDONED:  # WAITING or HOLDING: wait for it to let go
                if st == HOLDING and self._spin_until_done(p, ps):
                    break
                if not self._wait_free(ps, deadline):
                    self._finish(t, ABANDONED)
                    return False
                tk, st = state.unpack_from(table, _HEADER + ps * 16)
                if tk == p and st in (HOLDING, DONE):  # HOLDING here: it died holding
                    break
            p -= 1  # it never held the gate: wait for the one before it
        state.pack_into(table, _HEADER + (t % SLOTS) * 16, t, HOLDING)
        self._held = True
        return True

    # How long a waiter whose predecessor holds the gate watches for its
    # release before it sleeps in the kernel. A transaction often ends within
    # this; waking through the kernel costs two thread wake-ups (the helper
    # thread, then the caller), each of which may wait for a CPU and the GIL.
    SPIN_SECONDS = 0.0002

    def _spin_until_done(self, p: int, slot: int) -> bool:
        """Watch ticket ``p``'s state word for DONE for up to SPIN_SECONDS,
        yielding the CPU between looks (the holder may need it). False: still
        held (or its holder died): wait in the kernel, which also sees deaths.
        A slot taken over by a later ticket means ``p`` let go long ago."""
        table, state, off = self._map, _STATE, _HEADER + slot * 16
        end = time.monotonic() + self.SPIN_SECONDS
        yield_ = os.sched_yield
        while True:
            tk, st = state.unpack_from(table, off)
            if tk != p or st == DONE:
                return True
            if time.monotonic() > end:
                return False
            yield_()

    def _take_ticket(self) -> int:
        fd, table = self._fd, self._map
        fcntl.fcntl(fd, _SETLKW, _MUTEX_LOCK)  # held for microseconds by live writers only
        try:
            t = int(struct.unpack_from("<Q", table, 8)[0])
            slot = t % SLOTS
            try:
                fcntl.fcntl(fd, _SETLK, _SLOT_LOCK[slot])
            except OSError:
                raise TooManyWaiters(
                    f"more than {SLOTS} writers are queued on {self.path!r}"
                ) from None
            # state first, counter last: a writer killed in between leaves no ticket
            _STATE.pack_into(table, _HEADER + slot * 16, t, WAITING)
            struct.pack_into("<Q", table, 8, t + 1)
        finally:
            fcntl.fcntl(fd, _SETLK, _MUTEX_UNLOCK)
        self._ticket = t
        return t

    def _wait_free(self, slot: int, deadline: float | None) -> bool:
        """Wait until ``slot``'s lock is free (its owner released or died)."""
        try:
            fcntl.fcntl(self._fd, _SETLK, _SLOT_LOCK[slot])
        except OSError:
            pass
        else:
            fcntl.fcntl(self._fd, _SETLK, _SLOT_UNLOCK[slot])
            return True
        job = _Job(os.dup(self._fd), slot)
        with self._mutex:
            self.contended += 1
            start_helper = self._idle_helpers == 0
            if start_helper:
                self._helpers += 1
            else:
                self._idle_helpers -= 1
        if start_helper:
            threading.Thread(
                target=self._helper_loop, name=f"litegate-lock:{self.path}", daemon=True
            ).start()
        self._jobs.put(job)
        try:
            acquire_until(job.done, math.inf if deadline is None else deadline)
        except BaseException:
            with self._mutex:
                job.abandoned = True
            raise
        with self._mutex:
            if job.finished:
                return True
            job.abandoned = True
            return False

    def _helper_loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                fcntl.fcntl(job.fd, _SETLKW, _SLOT_LOCK[job.slot])  # sleeps in the kernel
                fcntl.fcntl(job.fd, _SETLK, _SLOT_UNLOCK[job.slot])
            finally:
                os.close(job.fd)
                with self._mutex:
                    job.finished = True
                    if not job.abandoned:
                        job.done.release()
                    self._idle_helpers += 1

    # -- release --------------------------------------------------------------
    def _finish(self, t: int, state: int) -> None:
        slot = t % SLOTS
        _STATE.pack_into(self._map, _HEADER + slot * 16, t, state)
        fcntl.fcntl(self._fd, _SETLK, _SLOT_UNLOCK[slot])  # wakes our successor
        self._ticket = -1

    def release(self) -> None:
        if not self._held:
            raise RuntimeError("ProcessLock.release() without acquire()")
        self._held = False
        self._finish(self._ticket, DONE)

    def close(self) -> None:
        """Release if held, stop the helpers, close the file. Safe to call twice."""
        if self._closed:
            return
        if self._held:
            self.release()
        self._closed = True
        with self._mutex:
            helpers = self._helpers
        for _ in range(helpers):
            self._jobs.put(None)  # busy helpers see it after their job ends
        self._map.close()
        os.close(self._fd)
        self._fd = -1

    def forget_after_fork(self) -> None:
        """In a forked child: drop our copies without touching the locks, which
        (OFD locks being shared with the parent's descriptor) are the parent's."""
        self._closed = True
        self._held = False
        self._map.close()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
