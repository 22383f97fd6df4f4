"""The cross-process half of the write gate: bounded fairness between
processes, released by the kernel when a holder or waiter dies.

It lives in a sidecar file (``<db>-litegate``) shared by every process that
opens the database with litegate, and is made of open-file-description (OFD)
``fcntl`` locks plus a small table in shared memory (mmap):

- ``GATE``: one lock whose holder holds the gate. Taking it is one
  non-blocking ``F_OFD_SETLK``, releasing it another: the uncontended path is
  two system calls. The kernel drops it when its holder dies.
- A ticket queue for the processes that found the gate taken and sleep.
  ``MUTEX`` (byte 0) guards the ticket counter for microseconds. Ticket ``t``
  owns slot ``t % SLOTS``: a lock its owner holds while it is in the queue,
  and a record (state, arrival time, budget, overtakes, pid). Each sleeper
  waits for its predecessor to leave the queue by taking (and at once
  dropping) the predecessor's slot lock with ``F_OFD_SETLKW``: woken by the
  kernel when that lock goes, by leaving, by timeout or by death. So
  sleepers reach the head of the line in ticket order, and a dead sleeper
  cannot wedge it.
- The head of the line (state HEAD) waits for the gate itself. It sleeps on
  a futex word of the table with a short timeout (it looks at the gate at
  least every HEAD_CHECK_SECONDS, which also sees a dead holder), or without
  futexes in the kernel on the gate lock through a helper thread.

The policy is bounded fairness. A process that finds the gate free may take
it ("barge") past the sleepers unless the head's budget is spent: the head
has been overtaken ``overtakes`` times, or has waited ``seconds`` at the
head (each ticket carries its own budget and its arrival on
CLOCK_MONOTONIC, which all processes share). A release that finds the head's
budget spent hands the gate over: it wakes the head through the futex, and
nobody barges until the head has it. Otherwise a release wakes nobody
(unless its process says it will not ask again soon: ``release(wake=True)``),
so a process that releases and asks again takes the gate back without a
wake-up, and runs many transactions per time slice instead of one (a lock
convoy).
``Budget(0, 0)`` makes every head due at once: strict FIFO by ticket.

OFD locks belong to the open file, not the process: two :class:`ProcessLock`
objects in one process exclude each other like two processes. Only one
thread per :class:`ProcessLock` calls :meth:`acquire` at a time: the
in-process half of the gate (``FileGate``) sees to that.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import mmap
import os
import queue
import stat
import struct
import threading
import time

from . import _futex
from ._fair import BOUNDED, Budget
from ._lockformat import (
    ABANDONED,
    CKPT_RUN,
    CKPT_SEAT,
    DONE,
    GATE,
    H_BARGES,
    H_CKPT_BELL,
    H_CKPT_PID,
    H_GRANTS,
    H_HANDOFFS,
    H_NEXT,
    H_WAKE,
    H_WANT,
    HEAD,
    HEADER,
    HOLDING,
    LITESTREAM,
    MAGIC,
    MUTEX,
    NO_LIMIT,
    OLD_MAGIC,
    SLOT,
    SLOT_LOCK_BASE,
    SLOT_SIZE,
    SLOTS,
    TABLE_SIZE,
    U64,
    W_HEAD,
    W_IDLE,
    WAITING,
    table_problem,
)

# read_counters: also read here by the lab's benchmarks
from ._lockformat import read_counters as read_counters
from ._time import FOREVER, acquire_until

# what ProcessLock.pass_on() found
NOBODY, PASSED, DUE = 0, 1, 2

_SETLK: int = fcntl.F_OFD_SETLK  # type: ignore[attr-defined,unused-ignore]
_SETLKW: int = fcntl.F_OFD_SETLKW  # type: ignore[attr-defined,unused-ignore]
_GETLK: int = fcntl.F_OFD_GETLK  # type: ignore[attr-defined,unused-ignore]


def _flock(kind: int, offset: int) -> bytes:
    return struct.pack("hhqqixxxx", kind, os.SEEK_SET, offset, 1, 0)


_MUTEX_LOCK = _flock(fcntl.F_WRLCK, MUTEX)
_MUTEX_UNLOCK = _flock(fcntl.F_UNLCK, MUTEX)
_GATE_LOCK = _flock(fcntl.F_WRLCK, GATE)
_GATE_UNLOCK = _flock(fcntl.F_UNLCK, GATE)
_SEAT_LOCK = _flock(fcntl.F_WRLCK, CKPT_SEAT)
_SEAT_UNLOCK = _flock(fcntl.F_UNLCK, CKPT_SEAT)
_RUN_LOCK = _flock(fcntl.F_WRLCK, CKPT_RUN)
_RUN_UNLOCK = _flock(fcntl.F_UNLCK, CKPT_RUN)
_LITESTREAM_ASK = _flock(fcntl.F_RDLCK, LITESTREAM)
_LITESTREAM_PROBE = _flock(fcntl.F_WRLCK, LITESTREAM)
_SLOT_LOCK = [_flock(fcntl.F_WRLCK, SLOT_LOCK_BASE + i) for i in range(SLOTS)]
_SLOT_UNLOCK = [_flock(fcntl.F_UNLCK, SLOT_LOCK_BASE + i) for i in range(SLOTS)]
# the whole file: only a lock file nobody uses can be set up anew
_ALL_LOCK = struct.pack("hhqqixxxx", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
_ALL_UNLOCK = struct.pack("hhqqixxxx", fcntl.F_UNLCK, os.SEEK_SET, 0, 0, 0)


# Writes to the shared table go through memoryviews cast to whole words:
# one aligned store per field, which another process never sees half done.
# (struct's pack_into first zeroes the bytes it packs, then fills them in:
# a reader in between saw a head hint of 0, "nobody waits", or a record in
# no state at all, and a strict writer passed a sleeping head.)
def _bump(words: memoryview, offset: int) -> None:
    """Add one to a counter of the table (wrapping: a damaged file's huge
    value must not make every grant fail)."""
    i = offset >> 3
    words[i] = (words[i] + 1) & 0xFFFFFFFFFFFFFFFF


class TooManyWaiters(RuntimeError):
    pass


class _Job:
    """One blocking wait for a lock to be free, run by a helper thread."""

    __slots__ = ("abandoned", "done", "fd", "finished", "lock", "unlock")

    def __init__(self, fd: int, lock: bytes, unlock: bytes) -> None:
        self.fd = fd  # a dup: stays valid even if the lock is closed meanwhile
        self.lock = lock
        self.unlock = unlock
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
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NONBLOCK)  # (a fifo must not block)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError("it is not a regular file") from None
        return fd
    if like is not None:
        try:
            st = os.stat(like)
            os.fchmod(fd, st.st_mode & 0o666)
            if os.geteuid() == 0:
                os.fchown(fd, st.st_uid, st.st_gid)
        except OSError:
            pass  # best effort: the database may not exist yet
    return fd


def _budget_fields(b: Budget) -> tuple[int, int]:
    k = NO_LIMIT if math.isinf(b.overtakes) else min(int(b.overtakes), NO_LIMIT - 1)
    t = NO_LIMIT if math.isinf(b.seconds) else min(int(b.seconds * 1e6), NO_LIMIT - 1)
    return k, t


class ProcessLock:
    # How often a head waiter looks at the gate while it sleeps: the longest
    # a free gate can stay untaken while someone waits (a release whose head
    # is within its budget wakes nobody), and how soon a dead holder is seen.
    HEAD_CHECK_SECONDS = 0.0005

    def __init__(self, path: str, like: str | None = None) -> None:
        self.path = path
        self._fd = _open_like(path, like)
        try:
            self._map = self._map_table()
        except BaseException:
            os.close(self._fd)
            raise
        self._words = memoryview(self._map).cast("Q")  # the table as u64 words
        self._halves = memoryview(self._map).cast("I")  # ... and as u32 words
        self._wake = _futex.Word(self._map, H_WAKE) if _futex.AVAILABLE else None
        self._want = _futex.Word(self._map, H_WANT) if _futex.AVAILABLE else None
        self.idle = False  # we hold the gate with no transaction running (keep_idle_unless_due)
        self._mutex = threading.Lock()  # guards the helper bookkeeping; no I/O under it
        self._ticket = -1  # our ticket while we wait
        self._held = False
        self._closed = False
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        # The helpers' descriptors (dups of ours) not yet closed: a forked
        # child closes its copies (its helper threads did not survive the
        # fork), or they would keep our open file, and every lock we hold on
        # it, alive after our death, for as long as the child lives.
        self._job_fds: set[int] = set()
        self._helpers = 0
        self._idle_helpers = 0
        self._pid = os.getpid()
        self.contended = 0  # acquisitions that had to queue
        self.last_ticket = -1  # the ticket the last grant slept on, -1 if it did not
        self.last_head_ns = 0  # when that ticket became the head of the line
        self.barged = 0  # grants taken past a waiting head
        self.handoffs = 0  # releases that handed the gate to a head

    def _map_table(self) -> mmap.mmap:
        fcntl.fcntl(self._fd, _SETLKW, _MUTEX_LOCK)
        try:
            if os.fstat(self._fd).st_size < TABLE_SIZE:
                os.ftruncate(self._fd, TABLE_SIZE)  # only ever grows; zeros are "no ticket yet"
            table = mmap.mmap(self._fd, TABLE_SIZE)
            magic = table[:8]
            if magic == OLD_MAGIC:
                self._upgrade(table)
            elif magic == b"\0" * 8:
                table[:8] = MAGIC
            elif magic != MAGIC:
                table.close()
                raise OSError(f"its first bytes are {bytes(magic)!r}, not litegate's")
            problem = table_problem(table[:HEADER])
            if problem is not None:
                table.close()
                raise OSError(problem)
            return table
        finally:
            fcntl.fcntl(self._fd, _SETLK, _MUTEX_UNLOCK)

    def _upgrade(self, table: mmap.mmap) -> None:
        """An older litegate's lock file: set it up anew if nobody uses it.
        (We hold its byte 0; a lock on the rest means a live older process.)"""
        rest = struct.pack("hhqqixxxx", fcntl.F_WRLCK, os.SEEK_SET, 1, 0, 0)
        try:
            fcntl.fcntl(self._fd, _SETLK, rest)
        except OSError:
            table.close()
            raise OSError(
                "an older litegate (strict ticket order, lock file format 1) has the database "
                "open; stop its processes or upgrade them, then open it again"
            ) from None
        try:
            table[:] = b"\0" * TABLE_SIZE
            table[:8] = MAGIC
        finally:
            fcntl.fcntl(self._fd, _SETLK, _ALL_UNLOCK)

    def __repr__(self) -> str:
        return f"<ProcessLock {self.path!r} held={self._held} closed={self._closed}>"

    @property
    def held(self) -> bool:
        return self._held

    # -- the shared records ----------------------------------------------------
    def _record(self, t: int) -> tuple[int, int, int, int, int, int, int, int]:
        rec: tuple[int, int, int, int, int, int, int, int] = SLOT.unpack_from(
            self._map, HEADER + (t % SLOTS) * SLOT_SIZE
        )
        return rec

    def _put_record(
        self, t: int, state: int, arrived: int, head_ns: int, k: int, t_us: int
    ) -> None:
        """A new ticket's record, over whatever ticket last used its slot
        (long gone): the ticket number last, so nobody takes it for ``t``
        before the rest is there."""
        w, h = self._words, self._halves
        base = HEADER + (t % SLOTS) * SLOT_SIZE
        q, i = base >> 3, (base + 32) >> 2
        w[q + 1], w[q + 2], w[q + 3] = state, arrived, head_ns
        h[i], h[i + 1], h[i + 2], h[i + 3] = 0, k, t_us, self._pid
        w[q] = t

    def _set_state(self, t: int, state: int) -> None:
        self._words[((HEADER + (t % SLOTS) * SLOT_SIZE) >> 3) + 1] = state

    def _make_head(self, t: int, head_ns: int) -> None:
        """Mark ``t`` the head since ``head_ns``: its clock and count first,
        the state last (a reader sees a WAITING ticket or a whole HEAD one)."""
        base = HEADER + (t % SLOTS) * SLOT_SIZE
        self._words[(base >> 3) + 3] = head_ns
        self._halves[(base + 32) >> 2] = 0
        self._words[(base >> 3) + 1] = HEAD

    def _head(self) -> tuple[int, tuple[int, int, int, int, int, int, int, int]] | None:
        """The ticket and record of the head waiter, if one is waiting.

        ``H_HEAD`` names the last ticket that became the head by itself (each
        head writes it once, before it can get the gate, so it only grows;
        nobody clears it: a hint whose record is no longer HEAD means nobody).
        A sleeper that makes itself the head writes it before its record says
        HEAD, so no one sees that record without the hint that finds it.
        When that head has just taken the gate, it has already marked its
        successor's record HEAD (the successor takes a moment to wake up and
        say so itself): that one is the head meanwhile."""
        h = self._words[W_HEAD]
        if h == 0:
            return None
        t = h - 1
        rec = self._record(t)
        if rec[0] != t:
            return None
        if rec[1] == HEAD:
            return t, rec
        if rec[1] == HOLDING:
            nxt = self._record(t + 1)
            if nxt[0] == t + 1 and nxt[1] == HEAD:
                return t + 1, nxt
        return None

    @staticmethod
    def _due(rec: tuple[int, int, int, int, int, int, int, int], now_ns: int) -> bool:
        """Has this head's budget run out (overtaken k times or waited t)?"""
        _t, _st, _arrived, head_ns, overtaken, k, t_us, _pid = rec
        if k != NO_LIMIT and overtaken >= k:
            return True
        return t_us != NO_LIMIT and now_ns - head_ns >= t_us * 1000

    def head_due(self) -> bool:
        """A head waiter (of another process, while we hold the gate) whose
        budget has run out: the next release must hand the gate over."""
        head = self._head()
        return head is not None and self._due(head[1], time.monotonic_ns())

    def _overtake(self, t: int, overtaken: int) -> None:
        """Count one more overtake against head ``t`` (seen overtaken so
        far ``overtaken`` times; only the gate's holder writes the count)."""
        off = HEADER + (t % SLOTS) * SLOT_SIZE + 32
        self._halves[off >> 2] = (overtaken + 1) & 0xFFFFFFFF
        _bump(self._words, H_BARGES)

    def pass_on(self) -> int:
        """We hold the gate (kept idle, or for our threads) and one of our
        threads wants it for another transaction:

        - NOBODY: nobody of another process waits, so it is ours. A gate
          kept idle stays marked so while its transactions run (a ring
          meanwhile only makes our keeper look, and the release that follows
          sees the waiter and lets go), so a loop of lone transactions
          writes nothing to the shared table;
        - PASSED: it is ours past the head waiter, and that counts against
          the head's budget;
        - DUE: the head's budget is spent; the full path hands it over.

        :meth:`head_due` and the overtake's count in one look at the head,
        for the hot path."""
        if not self._words[W_HEAD]:
            return NOBODY
        head = self._head()
        if head is None:
            return NOBODY
        if self.idle:
            self.busy_again()
        t, rec = head
        if self._due(rec, time.monotonic_ns()):
            return DUE
        self._overtake(t, rec[4])
        return PASSED

    # -- acquire ----------------------------------------------------------------
    def acquire(self, timeout: float | None, budget: Budget = BOUNDED) -> bool:
        """True once held; False if ``timeout`` seconds passed first."""
        if self._closed:
            raise ValueError("ProcessLock is closed")
        if self._try_gate(budget):
            self.last_ticket = -1
            return True
        deadline = math.inf if timeout is None or timeout >= FOREVER else time.monotonic() + timeout
        t = self._take_ticket(budget)
        try:
            if not self._wait_turn(t, deadline):
                self._leave(t, ABANDONED)
                return False
            if not self._wait_gate(t, deadline):
                self._leave(t, ABANDONED)
                return False
            self.last_ticket = t
        except BaseException:  # interrupted: never leave a ticket that blocks others
            if self._held:
                self.release()
            else:  # in case the gate was ours a moment before: a no-op if it was not
                fcntl.fcntl(self._fd, _SETLK, _GATE_UNLOCK)
            self._leave(t, ABANDONED)
            raise
        return True

    def try_now(self, budget: Budget) -> bool:
        """Take the gate only if that needs no wait (see :meth:`_try_gate`);
        never queues."""
        if self._try_gate(budget):
            self.last_ticket = -1
            return True
        return False

    def _try_gate(self, budget: Budget) -> bool:
        """Barge: take a free gate unless a head waits whose budget is spent
        (or we queue strictly and anyone waits). The look before is only a
        shortcut: the decision is made again with the gate held, where no
        other barger can change the head's count meanwhile, so a head is
        never overtaken more than its budget allows."""
        if self._words[W_HEAD]:  # someone may wait: look at their budget
            head = self._head()
            if head is not None and (not budget.barges or self._due(head[1], time.monotonic_ns())):
                return False
        try:
            fcntl.fcntl(self._fd, _SETLK, _GATE_LOCK)
        except OSError:
            return False
        if not self._words[W_HEAD]:  # nobody waits: the common case
            self._held = True
            _bump(self._words, H_GRANTS)
            return True
        head = self._head()
        if head is not None and (not budget.barges or self._due(head[1], time.monotonic_ns())):
            # the budget ran out between the look and the lock: hand over
            fcntl.fcntl(self._fd, _SETLK, _GATE_UNLOCK)
            if self._wake is not None:
                self._wake.bump()
                self._wake.wake(1)
            return False
        self._granted(head)
        return True

    def _granted(
        self, overtook: tuple[int, tuple[int, int, int, int, int, int, int, int]] | None
    ) -> None:
        """We hold the gate: the shared counters (written only by holders).
        ``overtook``: the head waiter we took it past (as :meth:`_head` gave
        it, read with the gate held), whose budget this counts against."""
        self._held = True
        _bump(self._words, H_GRANTS)
        if overtook is not None:
            self.barged += 1
            self._overtake(overtook[0], overtook[1][4])

    def _take_ticket(self, budget: Budget) -> int:
        fd, table = self._fd, self._map
        k, t_us = _budget_fields(budget)
        fcntl.fcntl(fd, _SETLKW, _MUTEX_LOCK)  # held for microseconds by live writers only
        try:
            t = int(U64.unpack_from(table, H_NEXT)[0])
            slot = t % SLOTS
            try:
                fcntl.fcntl(fd, _SETLK, _SLOT_LOCK[slot])
            except OSError:
                raise TooManyWaiters(
                    f"more than {SLOTS} writers are queued on {self.path!r}"
                ) from None
            now = time.monotonic_ns()
            # record first, counter last: a writer killed in between leaves no ticket
            self._put_record(t, WAITING, now, now, k, t_us)
            self._words[H_NEXT >> 3] = t + 1
        finally:
            fcntl.fcntl(fd, _SETLK, _MUTEX_UNLOCK)
        with self._mutex:
            self.contended += 1
        self._ticket = t
        return t

    def _wait_turn(self, t: int, deadline: float) -> bool:
        """Sleep until every ticket before ``t`` has left the queue (got the
        gate, gave up or died): then ``t`` is the head. False on timeout."""
        p = t - 1
        while p >= 0 and p > t - SLOTS:
            rec = self._record(p)
            if rec[0] != p or rec[1] in (HOLDING, DONE):
                break  # it left with the gate: everyone before it had left too
            if rec[1] in (WAITING, HEAD):  # still queued: wait for its slot lock to go
                ps = p % SLOTS
                if not self._wait_free(_SLOT_LOCK[ps], _SLOT_UNLOCK[ps], deadline):
                    return False
                rec = self._record(p)
                if rec[0] != p or rec[1] in (HOLDING, DONE):
                    break
            p -= 1  # it gave up or died in the queue: wait for the one before it
        return True

    def _wait_gate(self, t: int, deadline: float) -> bool:
        """As the head: wait for the gate. False on timeout."""
        slot = t % SLOTS
        rec = self._record(t)
        # The hint first, so that we are seen at the head as soon as our
        # record says HEAD: a process preempted between the two would
        # otherwise be the head by its own record (and clock) while bargers,
        # finding the hint on a ticket gone, saw nobody waiting and
        # overtook it past its budget.
        self._words[W_HEAD] = t + 1
        if rec[1] == HEAD:
            # made the head by its predecessor, which held the gate then and
            # showed us at the head before it let go: our clock runs since then
            self.last_head_ns = rec[3]
        else:
            # The record's clock starts just before it is shown (a head that
            # waits a little longer by it is handed the gate a little sooner);
            # the grant log's starts once it is seen, which the bounds are about.
            self._make_head(t, time.monotonic_ns())
            self.last_head_ns = time.monotonic_ns()
        wake = self._wake
        while True:
            seen = wake.value if wake is not None else 0
            try:
                fcntl.fcntl(self._fd, _SETLK, _GATE_LOCK)
            except OSError:
                pass
            else:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self._words[W_IDLE]:  # its holder keeps it idle: ask for it
                self.ring()
            if wake is not None:
                wake.wait(seen, min(left, self.HEAD_CHECK_SECONDS))
            elif not self._wait_free(_GATE_LOCK, _GATE_UNLOCK, deadline):
                return False
        # Ours: leave the queue, and make our successor the head at once (it
        # will take a moment to wake up, and the head's budget protects it
        # from bargers meanwhile; _head() finds it through our ticket; a head
        # that never comes, because it died or gave up, only makes the next
        # ones queue until a live one is head). The successor is marked before
        # we say HOLDING, so no one sees us gone and nobody at the head.
        # (H_HEAD is left alone: a shared word written by more than one
        # process would need an atomic compare-and-set, which Python lacks.)
        nxt = self._record(t + 1)
        if nxt[0] == t + 1 and nxt[1] == WAITING:
            self._make_head(t + 1, time.monotonic_ns())
        self._set_state(t, HOLDING)
        self._granted(None)
        fcntl.fcntl(self._fd, _SETLK, _SLOT_UNLOCK[slot])  # wakes our successor
        self._ticket = -1
        return True

    def _leave(self, t: int, state: int) -> None:
        """Leave the queue without the gate (timed out or interrupted)."""
        if self._ticket != t:
            return
        slot = t % SLOTS
        if self._record(t)[0] == t:
            self._set_state(t, state)
        fcntl.fcntl(self._fd, _SETLK, _SLOT_UNLOCK[slot])  # wakes our successor
        self._ticket = -1

    def _wait_free(self, lock: bytes, unlock: bytes, deadline: float) -> bool:
        """Wait until ``lock`` is free (its owner released or died), in the
        kernel through a helper thread (``F_OFD_SETLKW`` cannot time out)."""
        try:
            fcntl.fcntl(self._fd, _SETLK, lock)
        except OSError:
            pass
        else:
            fcntl.fcntl(self._fd, _SETLK, unlock)
            return True
        with self._mutex:  # (the dup and its note at once, as fork() sees them)
            job = _Job(os.dup(self._fd), lock, unlock)
            self._job_fds.add(job.fd)
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
            acquire_until(job.done, deadline)
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
                fcntl.fcntl(job.fd, _SETLKW, job.lock)  # sleeps in the kernel
                fcntl.fcntl(job.fd, _SETLK, job.unlock)
            finally:
                with self._mutex:
                    # (both under the mutex, which fork() takes first: a
                    # child finds the descriptor open and in the set, or
                    # closed and out of it)
                    self._job_fds.discard(job.fd)
                    os.close(job.fd)
                    job.finished = True
                    if not job.abandoned:
                        job.done.release()
                    self._idle_helpers += 1

    # -- release ----------------------------------------------------------------
    # -- keeping the gate while idle ----------------------------------------------
    def keep_idle_unless_due(self) -> bool:
        """Keep the gate idle if the doorbell works and nobody waits, or the
        head waiter (of another process) is still within its budget: a
        process that writes again at once then takes it back without a
        system call, as a barger would take a free gate, and its keeper lets
        it go when the head's budget runs out or the process stops writing
        (see ``FileGate._keep``). Not while a head without any budget
        (``fair=False``) waits: nothing would ever make the holder let go."""
        if self._want is None or (self._words[W_HEAD] and self.head_due_in() == 0):
            return False
        if not self.idle:
            self.idle = True
            self._words[W_IDLE] = self._pid
        return True

    def head_due_in(self) -> float | None:
        """Seconds until the head waiter's time budget runs out (0: due now,
        or it has no budget at all); None if nobody waits."""
        head = self._head()
        if head is None:
            return None
        now = time.monotonic_ns()
        if self._due(head[1], now):
            return 0.0
        k, t_us = head[1][5], head[1][6]
        if t_us == NO_LIMIT:
            # without any budget (fair=False) it is owed the gate as soon as
            # it asks, as before keeping for waiters; with only a count, the
            # count (or the holder going cold) decides
            return 0.0 if k == NO_LIMIT else math.inf
        return max(0.0, (head[1][3] + t_us * 1000 - now) / 1e9)

    def busy_again(self) -> None:
        """We take the gate we kept idle back for a transaction."""
        self.idle = False
        self._words[W_IDLE] = 0

    def doorbell(self) -> int:
        return self._want.value if self._want is not None else 0

    def wait_doorbell(self, seen: int, seconds: float) -> None:
        """Sleep until the doorbell rings (or ``seconds`` pass)."""
        if self._want is not None:
            self._want.wait(seen, seconds)

    def ring(self) -> None:
        """Ask a process that keeps the gate idle to let it go (every
        process's keeper wakes; the one that keeps the gate acts)."""
        if self._want is not None:
            self._want.bump()
            self._want.wake(0x7FFFFFFF)

    def release(self, wake: bool = False) -> None:
        """Let the gate go. A head whose budget is spent gets it handed over
        (woken; nobody barges past it meanwhile); otherwise nobody is woken,
        unless ``wake`` (a head rang for it, or this process will not ask
        again soon: see ``FileGate._let_go_ns``)."""
        if not self._held:
            raise RuntimeError("ProcessLock.release() without acquire()")
        self._held = False
        if self.idle:  # whoever saw it kept idle may have rung and wait for us: wake them
            self.busy_again()
            wake = True
        if not self._words[W_HEAD]:  # nobody waits: the common case
            fcntl.fcntl(self._fd, _SETLK, _GATE_UNLOCK)
            return
        head = self._head()
        due = head is not None and self._due(head[1], time.monotonic_ns())
        if due:
            self.handoffs += 1
            _bump(self._words, H_HANDOFFS)
        fcntl.fcntl(self._fd, _SETLK, _GATE_UNLOCK)
        if (due or (wake and head is not None)) and self._wake is not None:
            self._wake.bump()
            self._wake.wake(1)

    def word(self, offset: int) -> int:
        """A u64 field of the table's header (see H_COMBINER_*)."""
        return int(self._words[offset >> 3])

    def set_word(self, offset: int, value: int) -> None:
        self._words[offset >> 3] = value

    def take_role(self, offset: int) -> int:
        """A descriptor of our own on the lock file, holding the lock-only
        byte ``offset`` (a role only one process has, such as COMBINER);
        -1 if another process holds it. Closing the descriptor (or dying)
        gives the role back."""
        fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        try:
            fcntl.fcntl(fd, _SETLK, _flock(fcntl.F_WRLCK, offset))
        except OSError:
            os.close(fd)
            return -1
        return fd

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
        for word in (self._wake, self._want):
            if word is not None:
                word.release()
        self._wake = self._want = None
        self._words.release()  # (an mmap with views on it cannot close)
        self._halves.release()
        self._map.close()
        os.close(self._fd)
        self._fd = -1

    def hold_for_fork(self) -> None:
        """fork() is next: no helper may be between closing its descriptor
        and saying so (see :meth:`forget_after_fork`). Held for microseconds
        at a time, never while waiting."""
        self._mutex.acquire()

    def after_fork_in_parent(self) -> None:
        self._mutex.release()

    def forget_after_fork(self) -> None:
        """In a forked child: drop our copies without touching the locks, which
        (OFD locks being shared with the parent's descriptor) are the parent's.
        The copies of the helpers' descriptors too: the helpers stayed in the
        parent, and a copy left open would keep the parent's locks after the
        parent died (a gate held by a SIGKILLed process, never given back
        while this child lives)."""
        self._closed = True
        self._held = False
        self._mutex = threading.Lock()  # (held for the fork by the parent's thread)
        for fd in self._job_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._job_fds = set()
        for word in (self._wake, self._want):
            if word is not None:
                word.release()
        self._wake = self._want = None
        self._words.release()  # (an mmap with views on it cannot close)
        self._halves.release()
        self._map.close()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class CheckpointSeat:
    """The file's background checkpointer, elected across processes, and
    the lock that keeps litegate's checkpoints one at a time; in the same
    sidecar as the gate (:class:`ProcessLock`, whose descriptor and table
    it uses).

    - The seat: an OFD lock (``CKPT_SEAT``) that one process's checkpointer
      holds for as long as it checkpoints; the kernel drops it when that
      process dies, and another process's checkpointer, looking every
      ``LOOK_SECONDS``, takes it. The holder writes its pid into the table
      (a hint for ``stats()``, ``top`` and ``doctor``: the lock decides).
    - The doorbell, a u32 word of the table that the seated checkpointer
      sleeps on (a futex): each process rings it (bumps it and wakes the
      sleeper) every ``every`` of its commits. Written by committers of any
      process: a bump lost to another process's (no atomic add from Python)
      still changes the word, and the wake-up is a system call of its own.
    - The checkpoint lock (``CKPT_RUN``), held by whoever runs one of
      litegate's checkpoints: the seated checkpointer's rounds and
      ``db.checkpoint()`` / ``db.vacuum()`` of any process. Taken before the
      gate, never while holding it, so a writer never waits for it. OFD locks
      do not exclude each other within one open file, so a thread lock
      orders the threads of this process first.
    - Litestream mode: a process with a Database opened with
      ``checkpoints="litestream"`` holds a read lock on ``LITESTREAM``, so
      the seated checkpointer, wherever it is, knows.
    """

    LOOK_SECONDS = 0.1  # how often a standby looks at the seat
    _W_BELL = H_CKPT_BELL >> 2
    _W_PID = H_CKPT_PID >> 3

    def __init__(self, plock: ProcessLock) -> None:
        self._fd = plock._fd
        self._halves = memoryview(plock._map).cast("I")
        self._pids = memoryview(plock._map).cast("Q")
        self._bell = _futex.Word(plock._map, H_CKPT_BELL) if _futex.AVAILABLE else None
        self._pid = os.getpid()
        self.seated = False
        self._litestream = False
        self._closed = False
        self._run = threading.Lock()  # this process's threads, before the OFD lock

    # -- the seat -------------------------------------------------------------
    def take(self) -> bool:
        """Take the seat if it is free (never waits)."""
        if self.seated or self._closed:
            return self.seated
        try:
            fcntl.fcntl(self._fd, _SETLK, _SEAT_LOCK)
        except OSError:
            return False
        self.seated = True
        self._pids[self._W_PID] = self._pid  # (we hold the seat: the one writer)
        return True

    def leave(self) -> None:
        if not self.seated or self._closed:
            return
        self.seated = False
        if self._pids[self._W_PID] == self._pid:
            self._pids[self._W_PID] = 0
        fcntl.fcntl(self._fd, _SETLK, _SEAT_UNLOCK)

    def holder(self) -> int:
        """The pid of the seated checkpointer's process, 0 if none."""
        if self.seated:
            return self._pid
        if self._closed or not _lock_held(self._fd, _SEAT_LOCK):
            return 0
        return int(self._pids[self._W_PID])

    # -- the doorbell -------------------------------------------------------------
    def bell(self) -> int:
        return int(self._halves[self._W_BELL])

    def ring(self) -> None:
        """Wake the seated checkpointer (a round may be due, or it must stop)."""
        if self._closed:
            return
        b = self._W_BELL
        self._halves[b] = (self._halves[b] + 1) & 0xFFFFFFFF
        if self._bell is not None:
            self._bell.wake(0x7FFFFFFF)

    def wait_bell(self, seen: int, seconds: float) -> None:
        """Sleep until the doorbell rings (or already rang since it read
        ``seen``), at most ``seconds``; without futexes, a short sleep."""
        if self._bell is not None:
            self._bell.wait(seen, seconds)
        else:
            time.sleep(min(seconds, 0.05))

    # -- one checkpoint at a time ----------------------------------------------
    def lock_checkpoints(self, timeout: float | None) -> bool:
        """Take the checkpoint lock within ``timeout`` seconds (None: wait
        as long as it takes). False if the time ran out."""
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        if not acquire_until(self._run, deadline):
            return False
        while True:
            try:
                fcntl.fcntl(self._fd, _SETLK, _RUN_LOCK)
                return True
            except OSError:
                pass
            left = deadline - time.monotonic()
            if left <= 0:
                self._run.release()
                return False
            time.sleep(min(left, 0.0005))  # held for one checkpoint, a few ms

    def unlock_checkpoints(self) -> None:
        fcntl.fcntl(self._fd, _SETLK, _RUN_UNLOCK)
        self._run.release()

    # -- Litestream mode ----------------------------------------------------------
    def ask_litestream(self) -> None:
        """This process opened a Database with ``checkpoints="litestream"``
        (held until the file's gate closes in this process)."""
        if not self._litestream and not self._closed:
            fcntl.fcntl(self._fd, _SETLK, _LITESTREAM_ASK)
            self._litestream = True

    def litestream_asked_elsewhere(self) -> bool:
        return not self._closed and _lock_held(self._fd, _LITESTREAM_PROBE)

    def close(self) -> None:
        """Leave the seat if held and drop the views of the table (before
        the :class:`ProcessLock` closes it)."""
        self.leave()
        self._closed = True
        self._release_views()

    def forget_after_fork(self) -> None:
        """In a forked child: the seat and the locks are the parent's."""
        self.seated = False
        self._closed = True
        self._run = threading.Lock()
        self._release_views()

    def _release_views(self) -> None:
        if self._bell is not None:
            self._bell.release()
            self._bell = None
        self._halves.release()
        self._pids.release()


def _lock_held(fd: int, probe: bytes) -> bool:
    """Whether another open file holds a lock that conflicts with ``probe``
    (F_OFD_GETLK: asks the kernel, takes nothing)."""
    answer = fcntl.fcntl(fd, _GETLK, probe)
    return int(struct.unpack("hhqqixxxx", answer)[0]) != fcntl.F_UNLCK
