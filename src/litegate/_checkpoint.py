"""Checkpoints off the commit path, by one checkpointer per database file.

SQLite's own auto-checkpoint runs inside the COMMIT that crosses the
threshold, so that one commit pays for copying the whole WAL back into the
database (a single insert that usually takes microseconds takes tens of
milliseconds then). litegate turns it off on
every connection and runs checkpoints on a background thread instead.

**One per file, across processes.** Every process that opens the file
starts a :class:`Checkpointer` thread, but only the one holding the file's
seat (an OFD lock in the sidecar, :class:`~litegate._filelock.CheckpointSeat`)
checkpoints; the others look at the seat every ``LOOK_SECONDS`` and one of
them takes it when its holder closes the file or dies. Each process counts
its own commits through litegate (a plain integer) and rings
a doorbell in the sidecar (a futex word) every ``every_commits`` of them (the
profile's ``wal_autocheckpoint``); the seated checkpointer sleeps on it and
runs a round when it rings, when the log has grown by ``every_commits``
frames since its last round (it looks at the WAL index every 10 ms while the
log grows, every 100 ms otherwise: SQLite's threshold counts pages, and a
commit can write hundreds), and at
least once a second, when the WAL index shows committed frames it has not
copied (any process's, litegate's or not).

**No checkpoint of litegate's runs while a commit restarts the WAL** (SQLite's
"WAL-reset bug", 3.7.0 through 3.51.2: a checkpoint that starts on a fully
copied log while a writer restarts the log can corrupt the database). A
writer restarts the log only when its transaction began on a fully copied
log (its read lock is slot 0) and it can lock every other WAL read-mark
slot, that is when no reader uses the log (wal.c, ``walRestartLog``); only
a checkpoint makes the log fully copied. So a checkpoint call without the
write gate runs only (1) with litegate's checkpoint lock held (litegate's
checkpoints run one at a time, across processes), (2) once the WAL index
shows committed frames not yet copied: from then on no writer can restart
the log until a checkpoint has copied them all, and by (1) the only one of
litegate's that can is this call; and (3) inside a read transaction of the
checkpointer's own on a second connection (the pin), begun after (2): it
began on a log not fully copied, so it holds a slot from 1 up, and once the
call has copied everything it keeps every writer from restarting the log
until it ends, after the call. Every other checkpoint call (the RESTART
turns below, ``db.checkpoint()``, ``db.vacuum()``) holds the write gate: no
litegate commit runs meanwhile. On a SQLite with the fix (3.51.3, 3.50.7,
3.44.6 and later) the pin is left out. docs/how-it-works.md quotes
the source.

A round:

- a PASSIVE checkpoint (pinned): it copies what it can without blocking any
  reader or writer;
- when the log has grown past ``restart_at`` frames (under continuous writes a
  PASSIVE never quite catches up: frames keep arriving while it runs, and a
  live snapshot pins the newest ones), a few more PASSIVE rounds without the
  gate until little is left, then a short turn holding litegate's write gate
  (fair, like any writer's): with no new frames coming, a last PASSIVE
  catches up completely and a RESTART checkpoint makes the next writer start
  the log from the beginning of the file again. RESTART, not TRUNCATE: with
  everything copied it costs ~0.05 ms, where shrinking a 16 MB file to zero
  costs ~5 ms (measured here), all of it while writers wait.
  Readers that start after the catch-up read the database file, not the log,
  so the ones still on the old log drain within one read's time: RESTART is
  retried while they do, for at most the current patience (5 ms at first),
  then given up until the next round. Each round that gives up doubles the
  patience (up to 100 ms) and a success resets it, so the wait adapts to the
  longest read transaction in use. That pause, once per ``restart_at``
  frames and about as long as the longest read, is the price writers pay for
  a WAL that stays bounded while readers never stop (SQLite's "checkpoint
  starvation" otherwise lets it grow without limit);
- ``restart_at`` adapts to what turns cost: it starts at ``every_commits``
  (the WAL about as long as SQLite's own auto-checkpoint keeps it), doubles
  after a turn that had to wait for a reader (or gave up), up to
  ``restart_frames`` (4 x ``every_commits``), and halves after one that did
  not. Measured here (docs/guarantees.md has the command): the queue's WAL
  peaked at 1.1-1.7 x plain sqlite3's against 3.4-3.6 x with a fixed 4 x,
  at the same rate; beside readers of 1-20 ms it stays at 4 x (their
  turns wait), where a fixed 1 x cost the writers 10-20 %;
- fewer turns while a reader outlasts them: once two turns in a row have
  given up with the patience at its cap, the next one waits HOLD_OFF
  seconds (doubling after each such turn, up to HOLD_OFF_MAX), or until a
  PASSIVE round copies past the frame it stopped at (that reader has
  ended), instead of stopping every writer for the whole patience once a
  round against a reader that will not end (a report, a backup,
  Litestream);
- under Litestream (``checkpoints="litestream"``, or its tables or
  ``.<name>-litestream`` folder on the file) no turn at all: restarting the
  log is Litestream's to do (a restart it did not make costs it a new
  snapshot), and its own read transaction stops every RESTART anyway.

So the WAL file stays at about its high-water mark, bounded by
``restart_frames`` (``restart_at`` while no reader makes turns wait) plus
what arrives during one round; ``journal_size_limit``
(twice that) makes SQLite trim it after an unusual overshoot.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sqlite3
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from ._busy import is_busy_error
from ._filelock import CheckpointSeat
from ._stats import WaitHistogram

# The SQLite releases with the WAL-reset fix: 3.51.3 and later, and the
# backports on the 3.50 and 3.44 lines.
_FIXED = ((3, 51, 3), (3, 50, 7), (3, 44, 6))
# A statement that starts a read transaction (it reads the schema page).
_PIN = "SELECT 1 FROM sqlite_master LIMIT 1"
_MASK = 0xFFFFFFFF


def wal_reset_fixed(version: str = sqlite3.sqlite_version) -> bool:
    """Whether this SQLite has the fix for the WAL-reset bug."""
    try:
        v = (*(int(x) for x in version.split(".")[:3]), 0, 0, 0)[:3]
    except ValueError:
        return False
    return v >= _FIXED[0] or any(v[:2] == f[:2] and v >= f for f in _FIXED[1:])


class WalIndexView:
    """A read-only view of SQLite's WAL index header (the ``-shm`` file),
    mapped through the descriptor SQLite itself has open in this process:
    closing any descriptor of that file, a copy included, would drop every
    lock this process's SQLite connections hold on it (POSIX locks), so
    nothing here opens, copies or closes one (Python's ``mmap`` keeps a copy
    and closes it; the mapping is made through libc instead). The mapping
    outlives nothing: :meth:`close` it before the connection that keeps the
    file open closes."""

    _SIZE = 4096
    _HDR = struct.Struct("=12I")  # WalIndexHdr as u32 words (wal.c)

    def __init__(self, addr: int) -> None:
        self._addr = addr
        self._words = (ctypes.c_uint32 * 34).from_address(addr)

    @classmethod
    def open(cls, shm_path: str) -> WalIndexView | None:
        """The view, or None if this process has no descriptor on the file
        (not in WAL mode, or not open yet) or it cannot be mapped."""
        fd = _fd_of(shm_path)
        if fd is None or _LIBC is None:
            return None
        try:
            if os.fstat(fd).st_size < cls._SIZE:
                return None
        except OSError:
            return None
        addr = _LIBC.mmap(None, cls._SIZE, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr is None or addr == ctypes.c_void_p(-1).value:
            return None
        return cls(int(addr))

    def state(self) -> tuple[int, int] | None:
        """(nBackfill, mxFrame): frames copied back and frames committed to
        the log, read in that order; None if the header was being written
        (SQLite's own test: its two copies agree and the checksum holds)."""
        backfilled = int(self._words[24])  # (one aligned load; SQLite stores it atomically)
        for _ in range(10):
            raw = ctypes.string_at(self._addr, 96)
            first, second = raw[:48], raw[48:]
            if first == second and raw[12] and _checksum_ok(self._HDR.unpack(first)):
                return backfilled, self._HDR.unpack(first)[4]
        return None

    def close(self) -> None:
        if self._addr and _LIBC is not None:
            del self._words
            _LIBC.munmap(ctypes.c_void_p(self._addr), self._SIZE)
            self._addr = 0


def _checksum_ok(w: tuple[int, ...]) -> bool:
    """wal.c's walChecksumBytes over the header's first 40 bytes, native order."""
    s1 = s2 = 0
    for i in range(0, 10, 2):
        s1 = (s1 + w[i] + s2) & _MASK
        s2 = (s2 + w[i + 1] + s1) & _MASK
    return (s1, s2) == (w[10], w[11])


def _fd_of(path: str) -> int | None:
    """A descriptor this process has open on ``path``'s file, if any."""
    try:
        st = os.stat(path)
        names = os.listdir("/proc/self/fd")
    except OSError:
        return None
    for name in names:
        try:
            fst = os.stat(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if (fst.st_dev, fst.st_ino) == (st.st_dev, st.st_ino):
            return int(name)
    return None


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [
            ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
            ctypes.c_long,
        ]  # fmt: skip
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _libc()


def litestream_markers(path: str, conn: sqlite3.Connection | None = None) -> bool:
    """Whether Litestream has been set up on ``path``: its folder beside the
    file (``.<name>-litestream``) or its tables in it."""
    folder, name = os.path.split(path)
    if os.path.isdir(os.path.join(folder, f".{name}-litestream")):
        return True
    if conn is None:
        return False
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' "
        "AND name IN ('_litestream_seq', '_litestream_lock') LIMIT 1"
    ).fetchone()
    return row is not None


class Checkpointer:
    IDLE_WAKE_SECONDS = 1.0
    WATCH_SECONDS = 0.01  # how often the log is looked at while it grows...
    WATCH_LINGER = 1.0  # ... and for this long after it last grew
    IDLE_LOOK_SECONDS = 0.1  # ... and otherwise (a burst after a quiet spell)
    RESTART_PATIENCE = 0.005  # first wait for old readers, gate held
    RESTART_PATIENCE_MAX = 0.100  # the most it grows to after failed rounds
    PRE_ROUNDS = 4  # ungated PASSIVE rounds before a gated turn, at most
    GATED_FRAMES = 64  # ... until no more than this is left to copy under the gate
    HOLD_OFF = 0.25  # no turn for this long after two in a row gave up at the cap...
    HOLD_OFF_MAX = 4.0  # ... doubling after each further one, up to this
    LOCK_SECONDS = 1.0  # the longest a round waits for another checkpoint to end
    LITESTREAM_LOOK_SECONDS = 5.0  # how often the seated checkpointer looks for Litestream

    def __init__(
        self,
        path: str,
        connect: Callable[[], sqlite3.Connection],
        gate: Callable[[float], AbstractContextManager[bool]],
        seat: CheckpointSeat,
        *,
        every_commits: int,
        restart_frames: int,
    ) -> None:
        self.path = path
        self._connect = connect
        self._gate = gate
        self.seat = seat
        self.every_commits = max(1, every_commits)
        self.restart_frames = restart_frames  # the most the log grows before a turn
        # The log length that starts a turn now: every_commits while turns
        # are cheap (no reader to wait for), doubling up to restart_frames
        # while readers make them wait (see _turn).
        self._restart_least = min(self.every_commits, restart_frames)
        self.restart_at = self._restart_least
        self.pin_needed = not wal_reset_fixed()
        self._wake = threading.Event()  # stop, while a standby
        self._stop = False
        self.busy = False  # inside a round (fork safety reads this)
        # Held while this thread is inside SQLite (opening, a round,
        # closing): fork() waits for it (_gate._before_fork), since a child
        # forked while any thread is inside SQLite may find SQLite's
        # process-wide mutexes (its allocator's) taken forever.
        self.calls = threading.Lock()
        self.conn: sqlite3.Connection | None = None
        self.pin: sqlite3.Connection | None = None
        self._view: WalIndexView | None = None
        self._looked_at = 0  # frames in the log at the last look
        self._grew_at = -1e9  # when a look last saw the log change (monotonic)
        self.gated_passive = 0  # PASSIVE rounds run with the gate (no view of the WAL index)
        self.idle_rounds = 0  # rounds with nothing to copy
        self.passive = WaitHistogram()  # durations of PASSIVE checkpoints
        self.restart = WaitHistogram()  # durations of gated turns (catch-up + RESTART)
        self.restart_skipped = 0
        self.restart_pinned = 0  # turns not taken: a reader still pins the log
        self.patience = self.RESTART_PATIENCE
        self._pinned_at: tuple[int, int] | None = None  # (copied, log) a turn gave up at
        self._hold_off = 0.0  # current hold-off after turns that gave up at the cap
        self._capped = 0  # turns in a row that gave up at the cap
        self._hold_until = 0.0  # no turn before this (monotonic), unless the reader ended
        self.litestream_asked = False  # this process's Databases ask for Litestream mode
        self.litestream = False  # in force (asked here or elsewhere, or detected)
        self._litestream_looked = -1e9
        self.seated_since: float | None = None
        self.elections = 0  # times this process took the seat
        # (kind, perf_counter start, seconds) of recent checkpoints, so a
        # benchmark can tell whether a slow write overlapped one.
        self.events: deque[tuple[str, float, float]] = deque(maxlen=10_000)
        self.errors = 0
        self.last: tuple[int, int, int] | None = None  # (busy, log frames, copied)
        self._commits = 0  # this process's, since it last rang; bumped by the writer only
        self._thread = threading.Thread(target=self._run, name="litegate-checkpointer", daemon=True)
        self._thread.start()

    def committed(self) -> None:
        """Called by the writer after each COMMIT: cheap, never blocks."""
        self._commits += 1
        if self._commits >= self.every_commits:
            self._commits = 0
            self.seat.ring()  # (the seated checkpointer, in whatever process)

    # -- the thread ---------------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self._stop:
                if not self.seat.seated:
                    self._stand_by()
                    continue
                self._serve()
        finally:
            self._close_connections()
            self.seat.leave()

    def _stand_by(self) -> None:
        """Not seated: take the seat if it is free, else look again soon."""
        if not self.seat.take():
            self._wake.wait(self.seat.LOOK_SECONDS)
            return
        try:
            with self.calls:
                if self.conn is None:
                    self.conn = self._connect()
                    self.conn.execute(_PIN).fetchone()  # (opens the WAL index)
                    self.pin = self._connect() if self.pin_needed else None
        except Exception as exc:
            self.errors += 1
            self._close_connections()
            self.seat.leave()  # someone else may do better
            # "database is locked" passes: a new file's first writer holds
            # it while it turns WAL on. Waiting a whole IDLE_WAKE_SECONDS
            # then let the log grow unchecked (to 37 MB in the test suite's
            # bounded-WAL scenario); look again as soon as a standby would.
            busy = is_busy_error(exc)
            self._wake.wait(self.seat.LOOK_SECONDS if busy else self.IDLE_WAKE_SECONDS)
            return
        self.elections += 1
        self.seated_since = time.monotonic()
        # (its first round comes within IDLE_WAKE_SECONDS, or at the next ring)

    def _serve(self) -> None:
        """Seated: sleep until the doorbell rings, the log has grown by
        ``every_commits`` frames since the last round, or a second has
        passed; then a round (which copies what the WAL index shows
        uncopied).

        The doorbell counts commits, each process its own, which is what
        SQLite's ``wal_autocheckpoint`` counts only when a commit writes
        one page: 1,000 commits of a hundred rows each, spread over eight
        processes, grew the log by tens of MB between rounds. So the
        checkpointer also looks at the WAL index, counting frames whoever
        wrote them: every WATCH_SECONDS while the log grows (and for
        WATCH_LINGER after), every IDLE_LOOK_SECONDS otherwise, so that a
        burst after a quiet spell is seen within that."""
        seat = self.seat
        seen = seat.bell()
        deadline = time.monotonic() + self.IDLE_WAKE_SECONDS
        while not self._stop:
            now = time.monotonic()
            if now >= deadline:
                break
            state = self._wal_state()
            if state is not None:
                log = state[1]
                if log != self._looked_at:
                    self._looked_at, self._grew_at = log, now
                # frames since the last round's (all of them if the log restarted since)
                last = 0 if self.last is None or log < self.last[1] else self.last[1]
                if log - last >= self.every_commits:
                    break
            watching = now - self._grew_at < self.WATCH_LINGER
            look = self.WATCH_SECONDS if watching else self.IDLE_LOOK_SECONDS
            seat.wait_bell(seen, min(deadline - now, look))
            if seat.bell() != seen:
                break
        self._round()

    def _wal_state(self) -> tuple[int, int] | None:
        """(frames copied, frames in the log) from the WAL index, through a
        view opened on first use (on this thread's connection's descriptor);
        None without one, or while the header is being written."""
        if self._view is None:
            if self.conn is None:
                return None
            self._view = WalIndexView.open(self.path + "-shm")
            if self._view is None:
                return None
        return self._view.state()

    def _round(self) -> None:
        if self._stop:
            return
        with self.calls:
            try:
                self.checkpoint()
            except sqlite3.Error:
                self.errors += 1  # counted in stats(); the next round tries again

    # -- a round --------------------------------------------------------------------
    def checkpoint(self) -> tuple[int, int, int] | None:
        """One round: PASSIVE, then a gated catch-up and RESTART if the log is long."""
        self.busy = True
        try:
            litestream = self._litestream_mode()
            row = self._passive()
            if row is None or litestream:
                return self.last
            _busy, log, copied = row
            if log < self.restart_at:
                return self.last
            # Shrink what the gated turn must copy (and fsync) while
            # writers wait: a few more PASSIVE rounds first, without the
            # gate, until only a little is left.
            for _ in range(self.PRE_ROUNDS):
                if log - copied <= self.GATED_FRAMES:
                    break
                row = self._passive()
                if row is None:
                    return self.last
                _busy, log, copied = row
            pinned = self._pinned_at
            if pinned is not None:
                ended = copied > pinned[0] or log < pinned[1]  # copied past it, or restarted
                if not ended and time.monotonic() < self._hold_until:
                    self.restart_pinned += 1  # a reader that outlasted the turns still pins it
                    return self.last
                self._pinned_at = None
            self._turn()
            return self.last
        finally:
            self.busy = False

    def _passive(self) -> tuple[int, int, int] | None:
        """A PASSIVE checkpoint without the gate (see the module's
        docstring): with litegate's checkpoint lock held, only once the WAL
        index shows committed frames not copied yet, and inside the pin's
        read transaction begun after that. Without a view of the WAL index,
        with the gate. None if it did not run (another checkpoint of
        litegate's held the lock, or the gate could not be had)."""
        conn, pin, seat = self.conn, self.pin, self.seat
        assert conn is not None
        if not seat.lock_checkpoints(self.LOCK_SECONDS):
            return None
        try:
            if pin is not None:
                seen = self._wal_state()
                if seen is None:
                    if not os.path.exists(self.path + "-wal"):
                        return None  # not in WAL mode: nothing to checkpoint
                    return self._gated_passive(conn)
                copied, log = seen
                if copied >= log:  # all copied (or empty): nothing to do
                    self.idle_rounds += 1
                    self.last = (0, log, copied)
                    return self.last
                pin.execute("BEGIN")
            try:
                if pin is not None:
                    pin.execute(_PIN).fetchone()
                t0 = time.perf_counter()
                row = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                dt = time.perf_counter() - t0
            finally:
                if pin is not None:
                    pin.execute("COMMIT")
        finally:
            seat.unlock_checkpoints()
        self.passive.record(dt)
        self.events.append(("passive", t0, dt))
        self.last = (int(row[0]), int(row[1]), int(row[2]))
        return self.last

    def _gated_passive(self, conn: sqlite3.Connection) -> tuple[int, int, int] | None:
        """The PASSIVE checkpoint with the write gate held (the checkpoint
        lock is held already)."""
        with self._gate(0.05) as held:
            if not held:
                return None
            t0 = time.perf_counter()
            row = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            dt = time.perf_counter() - t0
        self.gated_passive += 1
        self.passive.record(dt)
        self.events.append(("passive", t0, dt))
        self.last = (int(row[0]), int(row[1]), int(row[2]))
        return self.last

    def _turn(self) -> None:
        """The gated turn: catch up and RESTART with the write gate held."""
        conn, seat = self.conn, self.seat
        assert conn is not None
        if not seat.lock_checkpoints(0.05):  # (before the gate, never while holding it)
            self.restart_skipped += 1
            return
        try:
            with self._gate(0.05) as held:
                if not held:
                    self.restart_skipped += 1
                    return
                t0 = time.perf_counter()
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()  # catch up
                waited = False
                while True:
                    row = conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
                    if int(row[0]) == 0 or time.perf_counter() - t0 > self.patience:
                        break
                    waited = True
                    time.sleep(0.0005)  # a reader is still on the old log
                dt = time.perf_counter() - t0
        finally:
            seat.unlock_checkpoints()
        self.last = (int(row[0]), int(row[1]), int(row[2]))
        # A turn that waited for a reader on the old log (or gave up)
        # stopped every writer for as long: the next one waits for a longer
        # log (up to restart_frames), so such stops come less often. One
        # that found no reader cost writers the catch-up only (~1-2 ms
        # here, whatever the log's length): the next comes at a shorter log
        # (down to every_commits, the WAL about as long as SQLite's own
        # auto-checkpoint keeps it).
        if waited or int(row[0]) != 0:
            self.restart_at = min(2 * self.restart_at, self.restart_frames)
        else:
            self.restart_at = max(self.restart_at // 2, self._restart_least)
        if int(row[0]) != 0:
            self.restart_skipped += 1
            if self.patience >= self.RESTART_PATIENCE_MAX:  # it gave up at the cap
                self._capped += 1
            if self._capped >= 2:
                self._hold_off = min(2 * self._hold_off or self.HOLD_OFF, self.HOLD_OFF_MAX)
                self._hold_until = time.monotonic() + self._hold_off
                self._pinned_at = (int(row[2]), int(row[1]))
            self.patience = min(2 * self.patience, self.RESTART_PATIENCE_MAX)
        else:
            self.patience = self.RESTART_PATIENCE
            self._hold_off = 0.0
            self._capped = 0
        self.events.append(("restart", t0, dt))
        self.restart.record(dt)  # last: a reader of the count sees the rest done

    def _litestream_mode(self) -> bool:
        """Litestream mode: asked for by a Database of this process or of
        another one (the sidecar says), or Litestream found on the file
        (looked for every LITESTREAM_LOOK_SECONDS)."""
        if self.litestream_asked or self.seat.litestream_asked_elsewhere():
            self.litestream = True
            return True
        now = time.monotonic()
        if now - self._litestream_looked >= self.LITESTREAM_LOOK_SECONDS:
            self._litestream_looked = now
            self.litestream = litestream_markers(self.path, self.conn)
        return self.litestream

    # -- reporting, stopping ----------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        p, t = self.passive, self.restart
        last = (
            None
            if self.last is None
            else dict(zip(("busy", "log", "copied"), self.last, strict=True))
        )
        holder = self.seat.holder() if not self._stop else 0
        return {
            "checkpointer_pid": holder or None,
            "this_process": self.seat.seated,
            "litestream": self.litestream or self.litestream_asked,
            "sqlite_version": sqlite3.sqlite_version,
            "wal_reset_fixed": not self.pin_needed,
            "passive": {"count": p.count, "total_ms": round(p.total * 1e3, 3),
                        "max_ms": round(p.max * 1e3, 3)},
            "restart": {"count": t.count, "total_ms": round(t.total * 1e3, 3),
                         "max_ms": round(t.max * 1e3, 3), "skipped": self.restart_skipped,
                         "pinned": self.restart_pinned},
            "idle_rounds": self.idle_rounds,
            "gated_passive": self.gated_passive,
            "patience_ms": round(self.patience * 1e3, 1),
            "every_commits": self.every_commits,
            "restart_frames": self.restart_frames,
            "restart_at": self.restart_at,
            "last": last,
            "errors": self.errors,
        }  # fmt: skip

    def stop(self) -> None:
        """Stop the thread, close its connections and leave the seat. Safe
        to call twice."""
        self._stop = True
        self._wake.set()
        self.seat.ring()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(5)
        if not self._thread.is_alive():
            self._close_connections()

    def _close_connections(self) -> None:
        if self.busy:
            return
        with self.calls:
            view, self._view = self._view, None
            if view is not None:
                view.close()  # (before the connection that keeps the file open)
            for name in ("pin", "conn"):
                conn = getattr(self, name)
                setattr(self, name, None)
                if conn is not None:
                    conn.close()
