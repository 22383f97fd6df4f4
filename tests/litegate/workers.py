"""Process entry points for the multi-process tests (importable under spawn)."""

from __future__ import annotations

import fcntl
import os
import sqlite3
import struct
import threading
import time
from collections.abc import Callable
from multiprocessing.synchronize import Event

import litegate
from litegate import _lockformat


def on_threads(n: int, body: Callable[[int], None]) -> None:
    """Run ``body(k)`` for k in 0..n-1 on n threads at once; wait for all."""
    ts = [threading.Thread(target=body, args=(k,)) for k in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def counter_worker(path: str, threads: int, iters: int) -> int:
    """ORM-style read-then-write transactions; returns how many failed."""
    db = litegate.connect(path, timeout=60)
    errors: list[BaseException] = []

    def run() -> None:
        for _ in range(iters):
            try:
                with db.write() as conn:
                    (n,) = conn.execute("SELECT n FROM c WHERE id = 1").fetchone()
                    conn.execute("UPDATE c SET n = ? WHERE id = 1", (n + 1,))
                    conn.execute("INSERT INTO log(pid) VALUES (?)", (os.getpid(),))
            except BaseException as exc:  # counted, and the test asserts zero
                errors.append(exc)

    on_threads(threads, lambda _k: run())
    db.close()
    return len(errors)


def transfer_worker(path: str, threads: int, iters: int, seed: int) -> int:
    """Bank transfers between accounts; the sum of balances never changes."""
    import random

    db = litegate.connect(path, timeout=60)
    errors: list[BaseException] = []

    def run(k: int) -> None:
        rnd = random.Random(seed * 1000 + k)
        for _ in range(iters):
            a, b = rnd.sample(range(10), 2)
            amount = rnd.randint(1, 50)
            try:
                with db.write() as conn:
                    (bal,) = conn.execute("SELECT bal FROM acct WHERE id = ?", (a,)).fetchone()
                    if bal < amount:
                        continue
                    conn.execute("UPDATE acct SET bal = bal - ? WHERE id = ?", (amount, a))
                    conn.execute("UPDATE acct SET bal = bal + ? WHERE id = ?", (amount, b))
                total = db.query("SELECT sum(bal) FROM acct")[0][0]
                if total != 10_000:
                    raise AssertionError(f"sum of balances is {total}")
            except BaseException as exc:
                errors.append(exc)

    on_threads(threads, run)
    db.close()
    return len(errors)


def exit_with_failures(fn_name: str, *args: object) -> None:
    """Run ``fn_name`` from this module; its failure count is the exit code."""
    import sys

    failures = globals()[fn_name](*args)
    sys.exit(min(int(failures), 100))


def hold_gate_forever(path: str, ready: Event) -> None:
    """Write a row inside db.write() and never finish: to be SIGKILLed."""
    db = litegate.connect(path, timeout=60)
    with db.write() as conn:
        conn.execute("INSERT INTO t(v) VALUES ('uncommitted')")
        ready.set()
        time.sleep(600)


def write_once(path: str, value: str, started: Event) -> None:
    """One db.execute(); the parent may SIGKILL us while we wait for the gate."""
    db = litegate.connect(path, timeout=60)
    started.set()
    db.execute("INSERT INTO t(v) VALUES (?)", (value,))
    db.close()


def foreign_writer(path: str, ready: Event, hold: float) -> None:
    """A writer that does not use litegate: holds SQLite's lock for ``hold`` s."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO t(v) VALUES ('foreign')")
    ready.set()
    time.sleep(hold)
    conn.execute("COMMIT")
    conn.close()


def queued_writers(path: str) -> int:
    """How many writers are queued for the gate of lock file ``path``: the
    tickets in its queue whose slot lock is still held (a dead waiter's
    record stays, but the kernel dropped its lock)."""
    table = _lockformat.read_queue(path)
    if table is None:
        return 0
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        alive = 0
        for _t, slot, _state in table[1]:
            probe = struct.pack(
                "hhqqixxxx", fcntl.F_WRLCK, os.SEEK_SET, _lockformat.slot_lock_offset(slot), 1, 0
            )
            got = fcntl.fcntl(fd, _GETLK, probe)
            if struct.unpack("hhqqixxxx", got)[0] != fcntl.F_UNLCK:
                alive += 1
        return alive
    finally:
        os.close(fd)


_GETLK: int = getattr(fcntl, "F_OFD_GETLK", 36)


def ack_writer(path: str, acks: str, threads: int, start_at: int) -> None:
    """Group-committed writes until SIGKILLed. Each write inserts two rows in
    one statement; its id is appended to ``acks`` only after execute returned
    (so every id in ``acks`` was acknowledged as committed)."""
    db = litegate.connect(path, timeout=60)
    counter = iter(range(start_at, start_at + 10_000_000))
    lock = threading.Lock()
    fd = os.open(acks, os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    def run() -> None:
        while True:
            with lock:
                i = next(counter)
            db.execute("INSERT INTO pairs(k, part) VALUES (?, 1), (?, 2)", (i, i))
            os.write(fd, f"{i}\n".encode())

    ts = [threading.Thread(target=run, daemon=True) for _ in range(threads)]
    for t in ts:
        t.start()
    time.sleep(600)


def execute_worker(path: str, threads: int, iters: int) -> int:
    """Group-committed single-statement writes from several threads."""
    db = litegate.connect(path, timeout=60)
    errors: list[BaseException] = []

    def run(k: int) -> None:
        for _ in range(iters):
            try:
                db.execute("INSERT INTO log(pid) VALUES (?)", (os.getpid() * 1000 + k,))
            except BaseException as exc:
                errors.append(exc)

    # The threads' first writes queue behind a block this thread holds, so
    # that a batch of several forms in every process whatever the timing
    # (left alone, a process whose threads happened to take turns neatly
    # would commit every write on its own, which is correct, not a test).
    ts = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    with db.write():
        for t in ts:
            t.start()
        deadline = time.monotonic() + 30
        while db.stats()["gate"]["waiting"] < 1 and time.monotonic() < deadline:
            time.sleep(0.001)  # a leader waits for the gate ...
        time.sleep(0.2)  # ... and the other threads queue behind it
    for t in ts:
        t.join()
    writes = db.stats()["writes"]["group_commit"]
    db.close()
    # more than one statement in some transaction shows batching happened
    return len(errors) + (100 if writes["max"] < 2 else 0)


def keep_open(path: str, ready: Event, stop: str, checkpoints: object = True) -> None:
    """Open the database (its checkpointer thread starts with it), commit
    once, tell the parent, and keep it open until the file ``stop`` exists
    (a file, not an Event: a sibling SIGKILLed inside Event.wait() leaves
    the Event's lock taken for good)."""
    db = litegate.connect(path, timeout=60, checkpoints=checkpoints)  # type: ignore[arg-type]
    db.execute("INSERT INTO t(v) VALUES (?)", (os.getpid(),))
    ready.set()
    deadline = time.monotonic() + 600
    while not os.path.exists(stop) and time.monotonic() < deadline:
        time.sleep(0.01)
    db.close()


def commit_from(path: str, n: int) -> int:
    """``n`` one-row commits through litegate; returns this process's view
    of the file's checkpointer: (its pid) as stats() report it."""
    db = litegate.connect(path, timeout=60)
    for i in range(n):
        db.execute("INSERT INTO t(v) VALUES (?)", (i,))
    pid = db.stats()["checkpoints"]["checkpointer_pid"]
    db.close()
    return int(pid or 0)
