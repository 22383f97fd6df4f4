"""Many processes and threads on one file: real processes, fork and spawn,
SIGKILL while holding and while waiting, and a writer outside litegate."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sqlite3
import threading
import time
from contextlib import closing
from typing import Any

import pytest

import litegate
from tests.conftest import wait_until
from tests.litegate import workers

START_METHODS = ["fork", "spawn"]


def ctx_for(method: str) -> Any:
    """A multiprocessing context (typeshed's BaseContext lacks Process)."""
    return mp.get_context(method)


def run_processes(method: str, fn_name: str, args: list[tuple[object, ...]]) -> list[int | None]:
    """One real process per args tuple, all running at once; their exit codes."""
    ctx = ctx_for(method)
    procs = [ctx.Process(target=workers.exit_with_failures, args=(fn_name, *a)) for a in args]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    return [p.exitcode for p in procs]


def _setup_counter(path: str) -> None:
    db = litegate.connect(path)
    db.execute("CREATE TABLE c(id INTEGER PRIMARY KEY, n INTEGER NOT NULL)")
    db.execute("CREATE TABLE log(id INTEGER PRIMARY KEY, pid INTEGER)")
    db.execute("INSERT INTO c VALUES (1, 0)")
    db.close()


@pytest.mark.parametrize("method", START_METHODS)
def test_processes_x_threads_read_then_write(db_path: str, method: str) -> None:
    _setup_counter(db_path)
    procs, threads, iters = 4, 4, 40
    codes = run_processes(method, "counter_worker", [(db_path, threads, iters)] * procs)
    assert codes == [0] * procs  # exit code = failed transactions
    with closing(sqlite3.connect(db_path)) as conn:
        assert conn.execute("SELECT n FROM c").fetchone()[0] == procs * threads * iters
        assert conn.execute("SELECT count(*) FROM log").fetchone()[0] == procs * threads * iters
        assert conn.execute("SELECT count(DISTINCT pid) FROM log").fetchone()[0] == procs


@pytest.mark.parametrize("method", START_METHODS)
def test_group_commit_across_processes(db_path: str, method: str) -> None:
    """Each process batches its own callers; the gate orders the batches."""
    _setup_counter(db_path)
    procs, threads, iters = 3, 6, 100
    codes = run_processes(method, "execute_worker", [(db_path, threads, iters)] * procs)
    assert codes == [0] * procs  # no failed write, and batches formed in every process
    with closing(sqlite3.connect(db_path)) as conn:
        assert conn.execute("SELECT count(*) FROM log").fetchone()[0] == procs * threads * iters
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


@pytest.mark.slow
def test_bank_transfers_keep_their_sum(db_path: str) -> None:
    db = litegate.connect(db_path)
    db.execute("CREATE TABLE acct(id INTEGER PRIMARY KEY, bal INTEGER NOT NULL)")
    db.executemany("INSERT INTO acct VALUES (?, 1000)", [(i,) for i in range(10)])
    codes = run_processes(
        "spawn", "transfer_worker", [(db_path, 4, 150, seed) for seed in range(4)]
    )
    assert codes == [0, 0, 0, 0]  # exit code = failed transfers or broken sums
    assert db.query("SELECT sum(bal) FROM acct") == [(10_000,)]
    assert db.query("PRAGMA integrity_check") == [("ok",)]
    db.close()


@pytest.mark.parametrize("method", START_METHODS)
def test_sigkill_while_holding_the_gate(db: litegate.Database, db_path: str, method: str) -> None:
    db.execute("INSERT INTO t(v) VALUES ('before')")
    ctx = ctx_for(method)
    ready = ctx.Event()
    holder = ctx.Process(target=workers.hold_gate_forever, args=(db_path, ready))
    holder.start()
    assert ready.wait(30)
    done = threading.Event()
    results: list[object] = []

    def waiter() -> None:
        results.append(db.execute("INSERT INTO t(v) VALUES ('after')", timeout=30))
        done.set()

    t = threading.Thread(target=waiter)
    t.start()
    wait_until(
        lambda: workers.queued_writers(db_path + "-litegate") == 1,
        what="our writer to block on the dead-to-be holder",
    )
    assert not done.is_set()
    assert holder.pid is not None
    os.kill(holder.pid, signal.SIGKILL)
    holder.join()
    assert done.wait(30), "the waiter did not proceed after the holder was killed"
    t.join()
    rows = sorted(v for (v,) in db.query("SELECT v FROM t"))
    assert rows == ["after", "before"]  # the killed transaction left nothing
    assert db.query("PRAGMA integrity_check") == [("ok",)]


@pytest.mark.parametrize("method", START_METHODS)
def test_sigkill_while_waiting_for_the_gate(
    db: litegate.Database, db_path: str, method: str
) -> None:
    ctx = ctx_for(method)
    started, survivor_started = ctx.Event(), ctx.Event()
    with db.write() as conn:
        conn.execute("INSERT INTO t(v) VALUES ('holder')")
        victim = ctx.Process(target=workers.write_once, args=(db_path, "victim", started))
        survivor = ctx.Process(
            target=workers.write_once, args=(db_path, "survivor", survivor_started)
        )
        victim.start()
        assert started.wait(30)
        wait_until(
            lambda: workers.queued_writers(db_path + "-litegate") == 1,
            what="the victim to block on the gate",
        )
        survivor.start()
        wait_until(
            lambda: workers.queued_writers(db_path + "-litegate") == 2,
            what="the survivor to block on the gate",
        )
        assert victim.pid is not None
        os.kill(victim.pid, signal.SIGKILL)
        victim.join()
        wait_until(
            lambda: workers.queued_writers(db_path + "-litegate") == 1,
            what="the kernel to drop the victim's request",
        )
    survivor.join(30)
    assert survivor.exitcode == 0
    assert sorted(v for (v,) in db.query("SELECT v FROM t")) == ["holder", "survivor"]
    db.execute("INSERT INTO t(v) VALUES ('later')")  # nothing is stuck
    assert db.query("PRAGMA integrity_check") == [("ok",)]


def test_foreign_writer_busy_fallback_then_success(db: litegate.Database, db_path: str) -> None:
    ctx = ctx_for("spawn")
    ready = ctx.Event()
    p = ctx.Process(target=workers.foreign_writer, args=(db_path, ready, 0.3))
    p.start()
    assert ready.wait(30)
    db.execute("INSERT INTO t(v) VALUES ('litegate')", timeout=30)
    p.join()
    assert sorted(v for (v,) in db.query("SELECT v FROM t")) == ["foreign", "litegate"]
    assert db.stats()["busy_retries"] > 0


@pytest.mark.parametrize("strategy", sorted(litegate.BUSY_STRATEGIES))
def test_foreign_writer_timeout_obeyed(db_path: str, strategy: str) -> None:
    db = litegate.connect(db_path, busy=strategy)
    db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v)")
    other = sqlite3.connect(db_path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        t0 = time.monotonic()
        with pytest.raises(litegate.WriteTimeout, match="writer outside litegate"):
            db.execute("INSERT INTO t(v) VALUES (1)", timeout=0.3)
        elapsed = time.monotonic() - t0
    finally:
        other.execute("ROLLBACK")
        other.close()
    # The deadline is honoured (never stops early); the generous upper bound
    # only guards against a wait that ignores the deadline altogether.
    assert 0.3 <= elapsed < 3.0
    assert db.stats()["busy_retries"] >= 1
    db.execute("INSERT INTO t(v) VALUES (2)")  # usable once the lock is gone
    db.close()


def test_fork_child_reopens_its_own(db: litegate.Database, db_path: str) -> None:
    db.execute("INSERT INTO t(v) VALUES ('parent')")
    assert db.query("SELECT count(*) FROM t") == [(1,)]  # parent has a reader open
    pid = os.fork()
    if pid == 0:  # child: must not use the parent's connections
        code = 1
        try:
            s = db.stats()
            assert s["pid"] == os.getpid()
            assert s["connections"]["readers"] == 0  # nothing inherited in use
            db.execute("INSERT INTO t(v) VALUES ('child')")
            assert db.query("SELECT count(*) FROM t") == [(2,)]
            # the parent's checkpointer thread does not exist here: a new one runs
            names = [t.name for t in threading.enumerate()]
            assert names.count("litegate-checkpointer") == 1
            assert db.stats()["checkpoints"]["errors"] == 0
            db.close()
            assert "litegate-checkpointer" not in [t.name for t in threading.enumerate()]
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status)
    assert os.WEXITSTATUS(status) == 0
    # The parent's connections are untouched and keep working.
    assert sorted(v for (v,) in db.query("SELECT v FROM t")) == ["child", "parent"]
    db.execute("INSERT INTO t(v) VALUES ('parent again')")
    assert db.stats()["connections"] == {"writer": 1, "readers": 1}
    assert "litegate-checkpointer" in [t.name for t in threading.enumerate()]


def test_fork_while_parent_holds_the_gate(db: litegate.Database, db_path: str) -> None:
    """The child's writes wait for the parent's transaction; they do not share it."""
    r, w = os.pipe()
    with db.write() as conn:
        conn.execute("INSERT INTO t(v) VALUES ('parent')")
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(r)
                db.execute("INSERT INTO t(v) VALUES ('child')", timeout=30)
                n = db.query("SELECT count(*) FROM t")[0][0]
                os.write(w, str(n).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(w)
        wait_until(
            lambda: workers.queued_writers(db_path + "-litegate") == 1,
            what="the child to queue behind the parent",
        )
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert os.read(r, 16) == b"2"  # the child saw the parent's committed row
    os.close(r)
    assert sorted(v for (v,) in db.query("SELECT v FROM t")) == ["child", "parent"]


def _child_write(db_path: str, w: int) -> None:
    """In a forked child: say it runs (its after-fork hooks are done), then
    one write through a new Database; what happened, to ``w``."""
    code = 1
    try:
        os.write(w, b"+")
        try:
            with litegate.connect(db_path, timeout=2) as child_db:
                child_db.execute("INSERT INTO t(v) VALUES ('child')")
            said = "wrote"
        except litegate.Error as exc:
            said = f"{type(exc).__name__}: {exc}"
        os.write(w, said.encode())
        code = 0
    finally:
        os._exit(code)


@pytest.mark.parametrize("log", ["with commits", "empty"])
def test_fork_inside_a_write_that_spilled_keeps_the_parents_pages(db_path: str, log: str) -> None:
    """fork() inside db.write() after the transaction outgrew the page cache
    (SQLite wrote some of its pages to the WAL before COMMIT). The child's
    copy of the write connection must not be rolled back when that would
    erase those pages from the shared WAL index: the parent's COMMIT would
    then leave a corrupt file. With commits in the WAL the copy is parked
    and the child's writes fail at once with NestedWriteError saying why;
    with an empty WAL SQLite's rollback leaves the index alone, so the copy
    is closed and the child writes. The parent commits every row."""
    db = litegate.connect(db_path, pragmas={"cache_size": 10})
    db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v)")
    if log == "empty":
        db.checkpoint("TRUNCATE")  # nothing committed in the WAL: the next writer restarts it
    rows = [(f"{i:05d}" + "x" * 200,) for i in range(3000)]
    r, w = os.pipe()
    try:
        with db.write() as conn:
            conn.executemany("INSERT INTO t(v) VALUES (?)", rows[:1500])
            pid = os.fork()
            if pid == 0:
                os.close(r)
                _child_write(db_path, w)
            os.close(w)
            assert os.read(r, 1) == b"+"  # the child has let go of its copies
            conn.executemany("INSERT INTO t(v) VALUES (?)", rows[1500:])
        said = os.read(r, 1000).decode()
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status)
        assert os.WEXITSTATUS(status) == 0
        with closing(sqlite3.connect(db_path)) as check:
            assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            got = [v for (v,) in check.execute("SELECT v FROM t WHERE v != 'child' ORDER BY id")]
            assert got == [v for (v,) in rows]
            children = check.execute("SELECT count(*) FROM t WHERE v = 'child'").fetchone()[0]
        if log == "with commits":
            assert said.startswith(
                "NestedWriteError: this process was forked while the forking thread was inside "
                f"a write transaction on {os.path.realpath(db_path)!r} that had already written "
                "pages to the WAL"
            ), said
            assert children == 0
        else:
            assert (said, children) == ("wrote", 1)
    finally:
        os.close(r)
        db.close()


def test_fork_inside_a_write_waits_for_the_child_to_let_go(
    db: litegate.Database, db_path: str, tmp_path: Any
) -> None:
    """fork() inside db.write() returns in the parent only after the child
    has let go of its copies (its after-fork hooks ran), so the parent's
    transaction cannot go on (and commit, and let another writer in) while
    the child rolls its copy back."""
    from litegate import _gate

    marker = tmp_path / "child-let-go"

    def slow_hook() -> None:  # runs in the child, among litegate's own hooks
        time.sleep(0.3)
        marker.write_text("done")

    _gate.on_fork_in_child(slow_hook)
    try:
        with db.write() as conn:
            conn.execute("INSERT INTO t(v) VALUES ('parent')")
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            seen = marker.exists()  # right after fork() returned in the parent
        os.waitpid(pid, 0)
    finally:
        _gate._CHILD_HOOKS.remove(slow_hook)
    assert seen
    assert db.query("SELECT v FROM t") == [("parent",)]


def test_subprocess_with_preexec_fn_inside_a_write(db: litegate.Database, monkeypatch: Any) -> None:
    """A child that runs no after-fork hook (subprocess with preexec_fn
    execs at once) releases the parent at its exec: the pipe it would
    signal on is closed there. (Were it not, the parent would wait
    FORK_WAIT_SECONDS, made longer than the test's timeout here.)"""
    import subprocess
    import sys

    from litegate import _gate

    monkeypatch.setattr(_gate, "FORK_WAIT_SECONDS", 3600.0)
    with db.write() as conn:
        conn.execute("INSERT INTO t(v) VALUES ('parent')")
        out = subprocess.run(
            [sys.executable, "-c", "print('child')"],
            preexec_fn=lambda: None,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
    assert out.stdout == "child\n"
    assert db.query("SELECT v FROM t") == [("parent",)]


def test_fork_waits_while_the_checkpointer_is_inside_sqlite(db: litegate.Database) -> None:
    """litegate's checkpointer thread may be inside SQLite when another
    thread forks (it opens its connection right after the file's first
    use, under gunicorn --preload just before the workers fork): a child
    forked then may find SQLite's process-wide mutexes (its allocator's)
    taken forever, and hang at its first SQLite call. fork() waits until
    the checkpointer is out of SQLite (its calls lock)."""
    db.execute("INSERT INTO t(v) VALUES ('x')")
    state = db._process_state()
    ckpt = state.filegate._ckpt
    assert ckpt is not None
    left = [False]
    assert ckpt.calls.acquire(timeout=10)  # as the checkpointer holds it inside SQLite

    def leave() -> None:
        time.sleep(0.3)
        left[0] = True
        ckpt.calls.release()

    t = threading.Thread(target=leave)
    t.start()
    pid = os.fork()
    if pid == 0:  # the child's copy of `left`: what it was at the fork
        os._exit(0 if left[0] else 1)
    t.join()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status)
    assert os.WEXITSTATUS(status) == 0
    assert ckpt.calls.acquire(timeout=10)  # given back after the fork
    ckpt.calls.release()


def test_fork_inside_an_async_write_block_leaves_a_child_that_can_write(
    db_path: str, tmp_path: Any
) -> None:
    """fork() on the event loop's thread inside ``async with adb.write()``
    (no statement under way): the block is the forking thread's, as a
    db.write() would be, so fork() returns in the parent only once the
    child has let go of its copies (the parent's COMMIT cannot race the
    child's check of the WAL: it did, after fork() had waited 5 s for the
    gate the block holds, and under load the child then saw the COMMIT's
    frame and refused to write); the child writes through a Database of its
    own; the parent's block commits."""
    import asyncio

    import litegate.aio
    from litegate import _gate

    marker = tmp_path / "child-let-go"

    def slow_hook() -> None:  # runs in the child, among litegate's own hooks
        time.sleep(0.3)
        marker.write_text("done")

    async def main() -> tuple[int, bytes, bool]:
        adb = await litegate.aio.connect(db_path, timeout=10)
        await adb.execute("CREATE TABLE IF NOT EXISTS t(v)")
        r, w = os.pipe()
        async with adb.write() as tx:
            await tx.execute("INSERT INTO t(v) VALUES ('parent')")
            pid = os.fork()
            if pid == 0:
                os.close(r)
                _child_write(db_path, w)
            seen = marker.exists()  # right after fork() returned in the parent
            os.close(w)
        said = b""
        while chunk := os.read(r, 4096):
            said += chunk
        os.close(r)
        _, status = os.waitpid(pid, 0)
        await adb.close()
        return status, said, seen

    _gate.on_fork_in_child(slow_hook)
    try:
        status, said, seen = asyncio.run(main())
    finally:
        _gate._CHILD_HOOKS.remove(slow_hook)
    assert os.WEXITSTATUS(status) == 0
    assert said == b"+wrote"
    assert seen
    with litegate.connect(db_path) as db:
        assert sorted(v for (v,) in db.query("SELECT v FROM t")) == ["child", "parent"]
