"""Checkpoints off the commit path.

SQLite's own auto-checkpoint runs inside the COMMIT that crosses the
threshold, so that one commit pays for copying the whole WAL back into the
database (seed 002's 34 ms single-insert outlier). litegate turns it off on
every connection and runs checkpoints on a background thread with its own
connection instead:

- after every ``every_commits`` commits of this process (the profile's
  ``wal_autocheckpoint``), or one second after a commit if fewer came, a
  PASSIVE checkpoint: it copies what it can without blocking any reader or
  writer;
- when the log has grown past ``restart_frames`` (under continuous writes a
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
  longest read transaction in use. That pause, once per ``restart_frames``
  frames and about as long as the longest read, is the price writers pay for
  a WAL that stays bounded while readers never stop (SQLite's "checkpoint
  starvation" otherwise lets it grow without limit).

So the WAL file stays at about its high-water mark, bounded by
``restart_frames`` plus what arrives during one round; ``journal_size_limit``
(twice that) makes SQLite trim it after an unusual overshoot.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from ._stats import WaitHistogram


class Checkpointer:
    IDLE_WAKE_SECONDS = 1.0
    RESTART_PATIENCE = 0.005  # first wait for old readers, gate held
    RESTART_PATIENCE_MAX = 0.100  # the most it grows to after failed rounds
    PRE_ROUNDS = 4  # ungated PASSIVE rounds before a gated turn, at most
    GATED_FRAMES = 64  # ... until no more than this is left to copy under the gate

    def __init__(
        self,
        connect: Callable[[], sqlite3.Connection],
        gate: Callable[[float], AbstractContextManager[bool]],
        *,
        every_commits: int,
        restart_frames: int,
    ) -> None:
        self._connect = connect
        self._gate = gate
        self.every_commits = max(1, every_commits)
        self.restart_frames = restart_frames
        self._commits = 0  # since the last checkpoint; bumped by the writer only
        self._wake = threading.Event()
        self._stop = False
        self.busy = False  # inside a checkpoint call (fork safety reads this)
        # Held while this thread is inside SQLite (opening, checkpointing,
        # closing): fork() waits for it (_gate._before_fork), since a child
        # forked while any thread is inside SQLite may find SQLite's
        # process-wide mutexes (its allocator's) taken forever.
        self.calls = threading.Lock()
        self.conn: sqlite3.Connection | None = None
        self.passive = WaitHistogram()  # durations of PASSIVE checkpoints
        self.restart = WaitHistogram()  # durations of gated turns (catch-up + RESTART)
        self.restart_skipped = 0
        self.patience = self.RESTART_PATIENCE
        # (kind, perf_counter start, seconds) of recent checkpoints, so a
        # benchmark can tell whether a slow write overlapped one.
        self.events: deque[tuple[str, float, float]] = deque(maxlen=10_000)
        self.errors = 0
        self.last: tuple[int, int, int] | None = None  # (busy, log frames, copied)
        self._thread = threading.Thread(target=self._run, name="litegate-checkpointer", daemon=True)
        self._thread.start()

    def committed(self) -> None:
        """Called by the writer after each COMMIT: cheap, never blocks."""
        self._commits += 1
        if self._commits >= self.every_commits:
            self._wake.set()

    def _run(self) -> None:
        try:
            with self.calls:
                self.conn = self._connect()
        except Exception:
            self.errors += 1
            return
        while not self._stop:
            self._wake.wait(self.IDLE_WAKE_SECONDS)
            self._wake.clear()
            if self._stop:
                break
            if self._commits == 0:
                continue
            self._commits = 0
            with self.calls:
                try:
                    self.checkpoint()
                except sqlite3.Error:
                    self.errors += 1  # counted in stats(); the next round tries again

    def checkpoint(self) -> tuple[int, int, int]:
        """One round: PASSIVE, then a gated catch-up and RESTART if the log is long."""
        conn = self.conn
        assert conn is not None
        self.busy = True
        try:
            t0 = time.perf_counter()
            row = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            self.passive.record(time.perf_counter() - t0)
            self.events.append(("passive", t0, time.perf_counter() - t0))
            busy, log, copied = int(row[0]), int(row[1]), int(row[2])
            self.last = (busy, log, copied)
            if log >= self.restart_frames:
                # Shrink what the gated turn must copy (and fsync) while
                # writers wait: a few more PASSIVE rounds first, without the
                # gate, until only a little is left.
                for _ in range(self.PRE_ROUNDS):
                    if log - copied <= self.GATED_FRAMES:
                        break
                    t0 = time.perf_counter()
                    row = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    self.passive.record(time.perf_counter() - t0)
                    self.events.append(("passive", t0, time.perf_counter() - t0))
                    log, copied = int(row[1]), int(row[2])
                with self._gate(0.05) as held:
                    if not held:
                        self.restart_skipped += 1
                        return self.last
                    t0 = time.perf_counter()
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()  # catch up
                    while True:
                        row = conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
                        if int(row[0]) == 0 or time.perf_counter() - t0 > self.patience:
                            break
                        time.sleep(0.0005)  # a reader is still on the old log
                    self.restart.record(time.perf_counter() - t0)
                    self.events.append(("restart", t0, time.perf_counter() - t0))
                    self.last = (int(row[0]), int(row[1]), int(row[2]))
                    if int(row[0]) != 0:
                        self.restart_skipped += 1
                        self.patience = min(2 * self.patience, self.RESTART_PATIENCE_MAX)
                    else:
                        self.patience = self.RESTART_PATIENCE
            return self.last
        finally:
            self.busy = False

    def stats(self) -> dict[str, Any]:
        p, t = self.passive, self.restart
        last = (
            None
            if self.last is None
            else dict(zip(("busy", "log", "copied"), self.last, strict=True))
        )
        return {
            "passive": {"count": p.count, "total_ms": round(p.total * 1e3, 3),
                        "max_ms": round(p.max * 1e3, 3)},
            "restart": {"count": t.count, "total_ms": round(t.total * 1e3, 3),
                         "max_ms": round(t.max * 1e3, 3), "skipped": self.restart_skipped},
            "patience_ms": round(self.patience * 1e3, 1),
            "every_commits": self.every_commits,
            "restart_frames": self.restart_frames,
            "last": last,
            "errors": self.errors,
        }  # fmt: skip

    def stop(self) -> None:
        """Stop the thread and close its connection. Safe to call twice."""
        self._stop = True
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(5)
        conn, self.conn = self.conn, None
        if conn is not None and not self.busy:
            with self.calls:
                conn.close()
