"""The claim waker: wakes claimers waiting for work, watches other
processes' commits only while someone waits."""

from __future__ import annotations

import sqlite3
import threading
from contextlib import closing

import pytest

from litegate.queue._waker import Waker


def test_close_while_the_watcher_thread_is_being_started(
    db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """close() between the watcher's creation and its start raises nothing
    (it once joined a thread not yet started: RuntimeError), and the
    watcher, started late, stops at once."""
    with closing(sqlite3.connect(db_path)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
    waker = Waker(db_path, poll=0.001)
    creating, go_on = threading.Event(), threading.Event()
    real = threading.Thread
    started: list[threading.Thread] = []

    class SlowToStart(real):  # type: ignore[valid-type,misc]
        def start(self) -> None:
            started.append(self)
            creating.set()
            assert go_on.wait(10)
            super().start()

    monkeypatch.setattr(threading, "Thread", SlowToStart)
    adder = real(target=waker.add, args=(lambda: None,))
    adder.start()
    assert creating.wait(10)
    monkeypatch.setattr(threading, "Thread", real)
    waker.close()  # the watcher exists but has not started
    go_on.set()
    adder.join(10)
    (watcher,) = started
    watcher.join(10)
    assert not watcher.is_alive()


def test_a_commit_of_another_connection_wakes_a_waiter(db_path: str) -> None:
    with closing(sqlite3.connect(db_path)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE t(v)")
    waker = Waker(db_path, poll=0.001)
    woken = threading.Event()
    waker.add(woken.set)
    assert waker.waiting == 1
    with closing(sqlite3.connect(db_path)) as conn, conn:
        conn.execute("INSERT INTO t VALUES (1)")
    assert woken.wait(10)
    assert waker.waiting == 0
    waker.close()
