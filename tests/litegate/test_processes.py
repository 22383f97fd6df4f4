"""Many processes and threads on one file: real processes, fork and spawn,
SIGKILL while holding and while waiting, and a writer outside litegate."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sqlite3
import threading
import time
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
    with sqlite3.connect(db_path) as conn:
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
    with sqlite3.connect(db_path) as conn:
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
