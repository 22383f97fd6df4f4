"""Ctrl-C at every step: SIGINT raised at each traced step of one operation.

``python -m tests.litegate.interrupts <op> [--cold] [--python-default]``
runs one operation (``write``: ``with db.write()``; ``execute``;
``transact``; ``query``) once per step of litegate's core code that it runs,
raising SIGINT (a real signal, handled as Python handles any) at that step;
after each it checks what a user would see and another process would find:

- the interrupt reached the program exactly once (in the operation, or
  right after it returned), never swallowed;
- the next write of this Database succeeds;
- another process writes (through the gate, within its timeout), and
  SQLite's write lock is not held;
- the table holds exactly one row per write that returned.

Prints one JSON object: the number of steps, and each step that broke one
of these (its place in the code and what broke). ``--cold``: the Database's
first write each time (a fresh file per step: the keeper and the
checkpointer start in it). ``--python-default``: with Python's own SIGINT
handler (the behaviour before litegate deferred interrupts, to compare);
``--first``: stop at the first broken step. ``--fork``: in a child forked
after this process connected. ``--queued``: instead, one
Ctrl-C while the operation waits for the gate, which another process holds
for 3 s: the interrupt lands at once, and then the same checks.

``python -m tests.litegate.interrupts storm --seconds S``: real SIGINTs
instead, sent to the main thread every 0.1-3 ms while it writes in a loop
(``db.write()``, ``db.execute()``, ``db.transact()`` in turn) and catches
each ``KeyboardInterrupt``; then the same checks, once.
"""

from __future__ import annotations

import argparse
import json
import linecache
import multiprocessing as mp
import os
import random
import signal
import sqlite3
import sys
import tempfile
import threading
import time
from types import FrameType
from typing import Any

import litegate
from litegate import _interrupts


def _fresh(folder: str, n: int) -> str:
    path = os.path.join(folder, f"k{n}.db")
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
        conn.execute("CREATE TABLE o(id INTEGER PRIMARY KEY, v TEXT)")
    return path


def _op(db: litegate.Database, op: str) -> bool:
    """Run the operation; True if it wrote a row."""
    if op == "write":
        with db.write() as conn:
            conn.execute("INSERT INTO t(v) VALUES ('w')")
    elif op == "execute":
        db.execute("INSERT INTO t(v) VALUES ('e')")
    elif op == "transact":
        db.transact(lambda conn: conn.execute("INSERT INTO t(v) VALUES ('t')"))
    else:
        db.query("SELECT count(*) FROM t")
        return False
    return True


class _Step:
    """A trace function that raises SIGINT at the ``k``-th step (a call, a
    line or a return in litegate's core modules) and then stops tracing."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.n = 0
        self.where = ""
        self._seen: dict[int, set[int]] = {}

    def __call__(self, frame: FrameType, event: str, arg: Any) -> Any:
        code = frame.f_code
        name = code.co_filename
        if not _interrupts.in_core(code):  # (the handler's own test of "core")
            return self if event == "call" else None
        if event == "line":
            seen = self._seen.setdefault(id(frame), set())
            again = frame.f_lineno in seen
            seen.add(frame.f_lineno)
            text = linecache.getline(name, frame.f_lineno).strip()
            if again and text.startswith(("with ", "async with ")):
                # The with's exit: __exit__ is called before an interrupt can
                # land (no instruction in between checks for signals).
                return self
        if event not in ("call", "line", "return"):
            return self
        self.n += 1
        if self.n == self.k:
            self.where = f"{event} {os.path.basename(name)}:{frame.f_lineno} {code.co_name}"
            sys.settrace(None)
            # What the interpreter does when a signal lands here: the Python
            # handler runs with this frame (signal.raise_signal would run it
            # in this trace function's frame instead).
            handler = signal.getsignal(signal.SIGINT)
            assert callable(handler)
            handler(signal.SIGINT, frame)
            return None
        return self


def _other(conn: Any) -> None:
    """Another process: for each path it is sent, one write through the
    gate (its own Database on that file), answered "ok" or the error."""
    dbs: dict[str, litegate.Database] = {}
    while True:
        path = conn.recv()
        if path is None:
            return
        try:
            db = dbs.get(path) or dbs.setdefault(path, litegate.connect(path, timeout=2))
            db.execute("INSERT INTO o(v) VALUES ('other')")
            conn.send("ok")
        except litegate.Error as exc:
            conn.send(f"{type(exc).__name__}: {str(exc)[:80]}")


def _sqlite_free(path: str) -> bool:
    conn = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()


def _rows(path: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("SELECT count(*) FROM t").fetchone()[0])
    finally:
        conn.close()


def _after(db: litegate.Database, path: str, other: Any) -> tuple[list[str], bool]:
    """The checks after an interrupt: another process writes, SQLite's write
    lock is free, this Database's next write succeeds. What broke, and
    whether that next write went in."""
    wrong = []
    other.send(path)
    answer = other.recv()
    if answer != "ok":
        wrong.append(f"another process's write: {answer}")
    if not _sqlite_free(path):
        wrong.append("SQLite write lock held")
    try:
        db.execute("INSERT INTO t(v) VALUES ('next')")
    except litegate.Error as exc:
        wrong.append(f"next write: {type(exc).__name__}: {str(exc)[:80]}")
        return wrong, False
    return wrong, True


def run(op: str, cold: bool, other: Any, first: bool = False) -> dict[str, Any]:
    broken: list[dict[str, Any]] = []
    folder = tempfile.mkdtemp(prefix="litegate-interrupts-")
    path = _fresh(folder, 0)
    db = litegate.connect(path, timeout=1)
    written = 0
    if not cold:
        written += _op(db, op)  # (warm: keeper, checkpointer, statements cached)
    k = 0
    while True:
        k += 1
        if cold:
            db.close()
            path, written = _fresh(folder, k), 0
            db = litegate.connect(path, timeout=1)
        step = _Step(k)
        interrupts = 0
        returned = False
        sys.settrace(step)
        try:
            wrote = _op(db, op)
            returned = True
        except KeyboardInterrupt:
            interrupts += 1
        finally:
            sys.settrace(None)
        if not step.where:
            if returned:
                written += wrote
            return {"op": op, "cold": cold, "steps": k - 1, "broken": broken}
        if returned:
            written += wrote
        end = time.monotonic() + 2.0
        while interrupts == 0 and time.monotonic() < end:
            try:
                time.sleep(0.001)  # (a deferred interrupt lands here)
            except KeyboardInterrupt:
                interrupts += 1
        try:
            time.sleep(0.01)  # (a second one would land here)
        except KeyboardInterrupt:
            interrupts += 1
        wrong, next_ok = _after(db, path, other)
        written += next_ok
        if interrupts != 1:
            wrong.insert(0, f"{interrupts} interrupts")
        if _rows(path) != written:
            wrong.append(f"{_rows(path)} rows, {written} writes returned")
        if wrong:
            broken.append({"step": k, "where": step.where, "wrong": wrong})
            if first:
                return {"op": op, "cold": cold, "steps": k, "broken": broken}
            # (a broken Database is left as it is: a fresh one goes on)
            path, written = _fresh(folder, k), 0
            db = litegate.connect(path, timeout=1)
            if not cold:
                written += _op(db, op)


def storm(seconds: float, other: Any) -> dict[str, Any]:
    """Real SIGINTs at random moments while the main thread writes."""
    folder = tempfile.mkdtemp(prefix="litegate-interrupts-")
    path = _fresh(folder, 0)
    db = litegate.connect(path, timeout=1)
    go, stop = threading.Event(), threading.Event()
    main = threading.main_thread().ident
    assert main is not None
    rng = random.Random(7)

    def send() -> None:
        go.wait()
        while not stop.wait(rng.uniform(0.0001, 0.003)):
            signal.pthread_kill(main, signal.SIGINT)

    sender = threading.Thread(target=send, daemon=True)
    acked = interrupts = errors = 0
    ops = ("write", "execute", "transact")
    end = time.monotonic() + seconds
    sender.start()  # (it sends nothing before ``go``: set where an interrupt is caught)
    i = 0
    while True:
        try:
            go.set()
            if time.monotonic() >= end:
                stop.set()
                sender.join()
                time.sleep(0.1)  # (the last deferred interrupt lands here)
                break
            _op(db, ops[i % 3])
            i += 1
            acked += 1
        except KeyboardInterrupt:
            interrupts += 1
        except litegate.Error:
            errors += 1
    wrong, next_ok = _after(db, path, other)
    acked += next_ok
    rows = _rows(path)
    # (an interrupt that lands after a write returned and before the loop
    # counts it: a row more than counted, at most one per interrupt)
    if not acked <= rows <= acked + interrupts:
        wrong.append(f"{rows} rows, {acked} writes returned, {interrupts} interrupts")
    db.close()
    return {"op": "storm", "writes": acked, "interrupts": interrupts, "errors": errors,
            "deferred": _interrupts.deferred, "broken": wrong}  # fmt: skip


def _holder(path: str, held: Any, gone: Any, seconds: float) -> None:
    db = litegate.connect(path, timeout=5)
    with db.write() as conn:
        conn.execute("INSERT INTO o(v) VALUES ('holder')")
        held.set()
        time.sleep(seconds)
    gone.set()  # (after COMMIT, as the gate goes)
    db.close()


def queued(op: str, other: Any) -> dict[str, Any]:
    """Ctrl-C while the operation waits for the gate, held by another
    process for 3 s: the interrupt is not deferred (the wait leaves the
    gate's queue cleanly), and afterwards everything works."""
    folder = tempfile.mkdtemp(prefix="litegate-interrupts-")
    path = _fresh(folder, 0)
    db = litegate.connect(path, timeout=30)
    _op(db, op)  # (warm)
    ctx = mp.get_context("spawn")
    held, gone = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_holder, args=(path, held, gone, 3.0), daemon=True)
    holder.start()
    assert held.wait(60)
    main = threading.main_thread().ident
    assert main is not None
    timer = threading.Timer(0.3, signal.pthread_kill, (main, signal.SIGINT))
    start = time.monotonic()
    timer.start()
    wrong = []
    waited = None
    try:
        _op(db, op)
        wrong.append("not interrupted")
    except KeyboardInterrupt:
        waited = time.monotonic() - start
        if gone.is_set():
            wrong.append("the interrupt waited for the gate")
    holder.join(30)
    wrong += _after(db, path, other)[0]
    if _rows(path) != 2:
        wrong.append(f"{_rows(path)} rows, 2 writes returned")
    db.close()
    return {"op": op, "interrupted_after_s": waited, "broken": wrong}


def _in_forked_child(fn: Any) -> Any:
    """``fn()`` in a child forked after this process connected (its SIGINT
    handler and retry thread in place: the child has no retry thread)."""
    folder = tempfile.mkdtemp(prefix="litegate-interrupts-")
    db = litegate.connect(_fresh(folder, 0), timeout=1)
    db.execute("INSERT INTO t(v) VALUES ('parent')")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        code = 0
        try:
            os.write(w, json.dumps(fn()).encode())
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r) as f:
        out = f.read()
    _, status = os.waitpid(pid, 0)
    assert status == 0, status
    db.close()
    return json.loads(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("op", choices=("write", "execute", "transact", "query", "storm"))
    parser.add_argument("--seconds", type=float, default=2.0, help="storm: how long")
    parser.add_argument("--cold", action="store_true")
    parser.add_argument("--python-default", action="store_true")
    parser.add_argument("--queued", action="store_true",
                        help="one Ctrl-C while the operation waits for the gate")  # fmt: skip
    parser.add_argument("--fork", action="store_true",
                        help="in a child forked after this process connected")  # fmt: skip
    parser.add_argument("--first", action="store_true", help="stop at the first broken step")
    args = parser.parse_args()
    # Python's own Ctrl-C handler, whatever this process inherited (a job a
    # shell starts in the background has SIGINT ignored, and Python keeps
    # it so), as in a program started from a terminal.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if args.python_default:
        os.environ["LITEGATE_DEFER_CTRL_C"] = "0"
    elif not _interrupts.install():
        raise SystemExit("litegate's SIGINT handler is not in place")
    ctx = mp.get_context("spawn")
    ours, theirs = ctx.Pipe()
    child = ctx.Process(target=_other, args=(theirs,), daemon=True)
    child.start()
    try:
        if args.fork:
            print(json.dumps(_in_forked_child(lambda: run(args.op, args.cold, ours, args.first))))
        elif args.queued:
            print(json.dumps(queued(args.op, ours)))
        elif args.op == "storm":
            print(json.dumps(storm(args.seconds, ours)))
        else:
            print(json.dumps(run(args.op, args.cold, ours, args.first)))
    finally:
        ours.send(None)
        child.join(10)


if __name__ == "__main__":
    main()
