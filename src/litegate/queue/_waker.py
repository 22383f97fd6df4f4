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
from collections.abc import Callable
from urllib.parse import quote


class Waker:
    def __init__(self, path: str, poll: float) -> None:
        self._path = path
        self._poll = poll
        self._lock = threading.Lock()  # guards the fields below; no I/O under it
        self._waiters: list[Callable[[], None]] = []
        self._thread: threading.Thread | None = None
        self._conn: sqlite3.Connection | None = None
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

    def add(self, wake: Callable[[], None]) -> None:
        with self._lock:
            if self._pid != os.getpid():  # forked: the thread and connection stayed behind
                self._pid, self._thread, self._conn = os.getpid(), None, None
            self._waiters.append(wake)
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._watch, name="litegate-queue-waker", daemon=True
                )
                self._thread.start()

    def discard(self, wake: Callable[[], None]) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self._waiters.remove(wake)

    def _version(self) -> int | None:
        try:
            if self._conn is None:
                uri = "file:" + quote(self._path, safe="/") + "?mode=ro"
                self._conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
            return int(self._conn.execute("PRAGMA data_version").fetchone()[0])
        except sqlite3.Error:
            return None  # waiters still wake at their own deadline

    def _watch(self) -> None:
        me = threading.current_thread()
        last = self._version()
        stop = threading.Event()
        while True:
            with self._lock:
                if not self._waiters or self._closed or self._thread is not me:
                    if self._thread is me:
                        self._thread = None
                    return
            stop.wait(self._poll)
            version = self._version()
            if version != last:
                last = version
                self.notify()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            thread = self._thread
        self.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=max(1.0, 2 * self._poll))
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None and self._pid == os.getpid():
            with contextlib.suppress(sqlite3.Error):
                conn.close()
