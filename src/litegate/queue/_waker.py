"""Wakes claimers that wait for work (``claim(wait=...)``).

A ``put`` in this process wakes them at once. A ``put`` in another process
cannot call us, so while anyone waits a thread watches ``PRAGMA
data_version`` on a read-only connection of its own: SQLite changes that
number whenever another connection commits, and reading it costs a look at
shared memory, not a query. Waiters then check for due work with a read
before they take the write gate, so commits that brought no work for them
(acks, other queues) cost a read, not a write.

Cross-process wake-up latency is therefore at most ``poll`` seconds; the
thread runs only while someone waits.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from urllib.parse import quote

_STARTING = object()  # Waker._thread while a waiter starts the watcher


class Waiters:
    """The waiting claimers of one queue object, and what every waker does
    with them: count, wake all, forget one. (The watching differs: this
    module's :class:`Waker` for SQLite, ``_pgdb.PgWaker`` for PostgreSQL.)"""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards the subclass's fields too; no I/O under it
        self._waiters: list[Callable[[], None]] = []
        self._closed = False
        self._pid = os.getpid()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def notify(self) -> None:
        """Wake every waiter (they re-check for work themselves)."""
        with self._lock:
            woken, self._waiters = self._waiters, []
        for wake in woken:
            wake()

    def discard(self, wake: Callable[[], None]) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._waiters.remove(wake)


class Waker(Waiters):
    def __init__(self, path: str, poll: float) -> None:
        super().__init__()
        self._path = path
        self._poll = poll
        self._thread: threading.Thread | object | None = None
        self._conn: sqlite3.Connection | None = None

    def add(self, wake: Callable[[], None]) -> None:
        """Register ``wake``; it is called once at the next commit seen (or
        notify()). Commits after this returns are seen: a new watcher reads
        its baseline here, before the caller looks for work."""
        with self._lock:
            if self._pid != os.getpid():  # forked: the thread and connection stayed behind
                self._pid, self._thread, self._conn = os.getpid(), None, None
            self._waiters.append(wake)
            start = self._thread is None and not self._closed
            if start:
                self._thread = _STARTING  # one starter; it reads the baseline unlocked
        if start:
            baseline = self._version()
            thread = threading.Thread(
                target=self._watch, args=(baseline,), name="litegate-queue-waker", daemon=True
            )
            with self._lock:
                self._thread = thread
            thread.start()

    def _version(self) -> int | None:
        try:
            if self._conn is None:
                uri = "file:" + quote(self._path, safe="/") + "?mode=ro"
                self._conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
            return int(self._conn.execute("PRAGMA data_version").fetchone()[0])
        except sqlite3.Error:
            return None  # waiters still wake at their own deadline

    def _watch(self, last: int | None) -> None:
        me = threading.current_thread()
        pause = threading.Event()
        idle_since: float | None = None
        while True:
            with self._lock:
                if self._closed or self._thread is not me:
                    return
                if self._waiters:
                    idle_since = None
                elif idle_since is None:
                    idle_since = time.monotonic()
                elif time.monotonic() - idle_since > self.LINGER:
                    # Nobody has waited for a while: stop. (A claimer that
                    # waits again soon finds this thread still watching.)
                    self._thread = None
                    return
            pause.wait(self._poll)
            version = self._version()
            if version != last:
                last = version
                self.notify()

    # How long the watcher outlives its last waiter: claimers come back to
    # wait after each commit they see, so it should not stop in between.
    LINGER = 1.0

    def close(self) -> None:
        with self._lock:
            self._closed = True
            thread = self._thread
        self.notify()
        # (a watcher not started yet sees _closed when it starts, and stops)
        if (
            isinstance(thread, threading.Thread)
            and thread.ident is not None
            and thread is not threading.current_thread()
        ):
            thread.join(timeout=max(1.0, 2 * self._poll))
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None and self._pid == os.getpid():
            with contextlib.suppress(sqlite3.Error):
                conn.close()
