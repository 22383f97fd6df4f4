"""The asyncio front: same behaviour as the sync API, never on the loop's
thread, cancellation leaves queues cleanly."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest

import litegate
import litegate.aio
from tests.conftest import gate_held_by_another_thread


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coro)


async def until(cond: Callable[[], bool], what: str = "condition") -> None:
    for _ in range(10_000):
        if cond():
            return
        await asyncio.sleep(0.001)
    pytest.fail(f"timed out waiting for {what}")


def test_api_round_trip(db_path: str) -> None:
    async def main() -> None:
        db = await litegate.aio.connect(db_path, readers=2)
        await db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
        r = await db.execute("INSERT INTO t(v) VALUES (?)", ("a",))
        assert (r.rowcount, r.lastrowid) == (1, 1)
        r = await db.executemany("INSERT INTO t(v) VALUES (?)", [("b",), ("c",)])
        assert r.rowcount == 2
        assert await db.query("SELECT v FROM t ORDER BY id") == [("a",), ("b",), ("c",)]
        async with db.write() as tx:
            (n,) = (await tx.execute("SELECT count(*) FROM t")).rows[0]
            await tx.execute("INSERT INTO t(v) VALUES (?)", (f"n{n}",))

        async def fail_inside() -> None:
            async with db.write() as tx:
                await tx.execute("INSERT INTO t(v) VALUES ('rolled back')")
                raise ZeroDivisionError

        with pytest.raises(ZeroDivisionError):
            await fail_inside()
        async with db.read() as rx:
            assert (await rx.execute("SELECT count(*) FROM t")).rows == [(4,)]
        with pytest.raises(litegate.ReadOnlyError):
            await db.query("DELETE FROM t")
        with pytest.raises(litegate.ReadOnlyError):
            async with db.read() as rx:
                await rx.execute("DELETE FROM t")
        with pytest.raises(sqlite3.IntegrityError):
            await db.execute("INSERT INTO t(v) VALUES (NULL)")
        assert db.stats()["writes"]["committed"] >= 4
        await db.close()
        await db.close()
        with pytest.raises(litegate.Closed):
            await db.query("SELECT 1")
        with pytest.raises(litegate.Closed):
            await db.execute("SELECT 1")

    run(main())


def test_sqlite_never_runs_on_the_loop_thread(db_path: str) -> None:
    threads: set[int] = set()

    def trace(conn: sqlite3.Connection) -> sqlite3.Connection:
        conn.set_trace_callback(lambda _sql: threads.add(threading.get_ident()))
        return conn

    async def main() -> int:
        db = await litegate.aio.connect(db_path, readers=2)
        state = db.sync._process_state()
        assert state.writer is not None
        trace(state.writer)
        opener = state.pool._factory
        state.pool._factory = lambda: trace(opener())
        await db.execute("CREATE TABLE t(v)")
        await asyncio.gather(*(db.execute("INSERT INTO t VALUES (?)", (i,)) for i in range(200)))
        await asyncio.gather(*(db.query("SELECT count(*) FROM t") for _ in range(20)))
        async with db.write() as tx:
            await tx.execute("INSERT INTO t VALUES (-1)")
        async with db.read() as rx:
            await rx.execute("SELECT 1")
        await db.close()
        return threading.get_ident()

    loop_thread = run(main())
    assert threads, "the trace saw no statement"
    assert loop_thread not in threads


def test_many_tasks_are_group_committed(db_path: str) -> None:
    async def main() -> dict[str, Any]:
        db = await litegate.aio.connect(db_path)
        await db.execute("CREATE TABLE t(v)")
        results = await asyncio.gather(
            *(db.execute("INSERT INTO t VALUES (?)", (i,)) for i in range(1000))
        )
        assert sorted(r.lastrowid or 0 for r in results) == list(range(1, 1001))
        assert await db.query("SELECT count(*) FROM t") == [(1000,)]
        stats: dict[str, Any] = db.stats()["writes"]["group_commit"]
        await db.close()
        return stats

    gc = run(main())
    assert gc["statements"] == 1001
    assert gc["max"] > 1  # tasks really shared transactions


def test_cancelled_gate_waiter_leaves_the_queue(db_path: str) -> None:
    async def main() -> list[str]:
        db = await litegate.aio.connect(db_path)
        await db.execute("CREATE TABLE t(v)")
        order: list[str] = []

        async def writer(name: str) -> None:
            async with db.write() as tx:
                order.append(name)
                await tx.execute("INSERT INTO t VALUES (?)", (name,))

        gate = db.sync._process_state().filegate
        tasks = {}
        with gate_held_by_another_thread(db.sync):
            for n, name in enumerate(("first", "cancelled", "third"), start=1):
                tasks[name] = asyncio.create_task(writer(name))
                await until(lambda n=n: gate.waiting == n, f"{name} to queue")  # type: ignore[misc]
            tasks["cancelled"].cancel()
            await until(lambda: gate.waiting == 2, "the cancelled task to leave the queue")
        await asyncio.gather(tasks["first"], tasks["third"])
        with pytest.raises(asyncio.CancelledError):
            await tasks["cancelled"]
        assert await db.query("SELECT v FROM t") == [("first",), ("third",)]
        await db.close()
        return order

    assert run(main()) == ["first", "third"]


def test_cancelled_execute_while_queued_is_withdrawn(db_path: str) -> None:
    async def main() -> None:
        db = await litegate.aio.connect(db_path)
        await db.execute("CREATE TABLE t(v)")
        batcher = db.sync._process_state().batcher
        with gate_held_by_another_thread(db.sync):
            kept = asyncio.create_task(db.execute("INSERT INTO t VALUES ('kept')"))
            await until(lambda: batcher.queued == 1)
            dropped = asyncio.create_task(db.execute("INSERT INTO t VALUES ('dropped')"))
            await until(lambda: batcher.queued == 2)
            dropped.cancel()
            await until(lambda: batcher.queued == 1, "the cancelled write to be withdrawn")
        await kept
        with pytest.raises(asyncio.CancelledError):
            await dropped
        assert await db.query("SELECT v FROM t") == [("kept",)]
        await db.close()

    run(main())


def test_timeouts(db_path: str) -> None:
    async def main() -> None:
        db = await litegate.aio.connect(db_path, readers=1)
        await db.execute("CREATE TABLE t(v)")

        async def nested_block() -> None:
            async with db.write(timeout=0.05):
                pass

        async with db.write():
            # other tasks wait for the block (it does not await them), and time out ...
            waiters = [
                asyncio.create_task(db.execute("INSERT INTO t VALUES (1)", timeout=0.05)),
                asyncio.create_task(nested_block()),
            ]
            await until(lambda: all(w.done() for w in waiters), "the waiters' timeouts")
            assert [type(w.exception()) for w in waiters] == [litegate.WriteTimeout] * 2
            # ... while the task inside the block would wait for itself: refused at once
            with pytest.raises(litegate.NestedWriteError, match=r"tx\.execute"):
                await db.execute("INSERT INTO t VALUES (1)", timeout=1e12)
            with pytest.raises(litegate.NestedWriteError):
                async with db.write():
                    pass
            with pytest.raises(litegate.NestedWriteError):
                await db.transact(lambda c: None)
        async with db.read():
            with pytest.raises(litegate.PoolTimeout):
                await db.query("SELECT 1", timeout=0.05)
        assert await db.query("SELECT count(*) FROM t") == [(0,)]
        assert db.stats()["gate"]["waiting"] == 0
        assert db.stats()["pool"]["waiting"] == 0
        await db.close()

    run(main())


def test_cancel_inside_write_block_rolls_back(db_path: str) -> None:
    async def main() -> None:
        db = await litegate.aio.connect(db_path)
        await db.execute("CREATE TABLE t(v)")
        inside = asyncio.Event()

        async def body() -> None:
            async with db.write() as tx:
                await tx.execute("INSERT INTO t VALUES ('never')")
                inside.set()
                await asyncio.sleep(60)

        task = asyncio.create_task(body())
        await inside.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await db.query("SELECT count(*) FROM t") == [(0,)]
        await db.execute("INSERT INTO t VALUES ('after')")  # the gate was given back
        await db.close()

    run(main())


SCENARIO = [
    ("execute", "INSERT INTO t(v) VALUES ('a')"),
    ("execute", "INSERT INTO t(v) VALUES (NULL)"),
    ("execute", "INSRT broken"),
    ("query", "SELECT v FROM t"),
    ("query", "DELETE FROM t"),
    ("execute", "COMMIT"),
]


def _outcome(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:
        return type(exc)


async def _aoutcome(coro: Awaitable[Any]) -> Any:
    try:
        return await coro
    except Exception as exc:
        return type(exc)


def test_same_behaviour_sync_and_async(tmp_path: Any) -> None:
    create = "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT NOT NULL)"
    sdb = litegate.connect(str(tmp_path / "s.db"))
    sdb.execute(create)
    sync_out = [
        _outcome(lambda k=k, q=q: sdb.execute(q) if k == "execute" else sdb.query(q))  # type: ignore[misc]
        for k, q in SCENARIO
    ]
    sdb.close()

    async def main() -> list[Any]:
        adb = await litegate.aio.connect(str(tmp_path / "a.db"))
        await adb.execute(create)
        out = []
        for k, q in SCENARIO:
            out.append(await _aoutcome(adb.execute(q) if k == "execute" else adb.query(q)))
        await adb.close()
        return out

    async_out = run(main())
    assert sync_out == async_out
    assert sync_out[1] is sqlite3.IntegrityError
    assert sync_out[4] is litegate.ReadOnlyError
    assert sync_out[5] is litegate.TransactionError


def test_writes_that_would_wait_for_their_own_block_are_refused_at_once(db_path: str) -> None:
    """Inside ``async with db.write()``, a write from a task the block awaits
    (gather, wait_for: a new task before Python 3.12, await task) or a sync
    call on the loop's thread would wait for the block, which waits for it:
    each gets NestedWriteError at once, not a WriteTimeout after the whole
    limit, and close() afterwards raises nothing."""

    async def main() -> None:
        db = await litegate.aio.connect(db_path, timeout=30)
        await db.execute("CREATE TABLE t(v)")
        got: list[Any] = []
        async with db.write() as tx:
            await tx.execute("INSERT INTO t VALUES (0)")
            for make in (
                lambda: asyncio.wait_for(db.execute("INSERT INTO t VALUES (1)"), 60),
                lambda: asyncio.gather(db.executemany("INSERT INTO t VALUES (?)", [(2,)])),
                lambda: asyncio.create_task(db.transact(lambda c: None)),
                lambda: asyncio.ensure_future(_enter_block(db)),
            ):
                got.append(await _aoutcome(make()))
            got.append(_outcome(lambda: db.sync.execute("INSERT INTO t VALUES (3)")))
            got.append(_outcome(lambda: db.sync.transact(lambda c: None)))
            got.append(_outcome(lambda: db.sync.write().__enter__()))
        assert got == [litegate.NestedWriteError] * 7
        # the block committed its own row, nothing else was written
        assert await db.query("SELECT v FROM t") == [(0,)]
        # A task started inside the block that the block does not await waits
        # for the gate as usual, and writes once the block has ended.
        async with db.write():
            later = asyncio.ensure_future(db.execute("INSERT INTO t VALUES (5)"))
            await asyncio.sleep(0.05)
            assert not later.done()
        await later
        assert await db.query("SELECT v FROM t ORDER BY v") == [(0,), (5,)]
        await db.close()

    run(main())


def test_a_write_through_another_database_from_the_blocks_thread_is_refused(
    db_path: str,
) -> None:
    """Inside ``async with db.write()``, a sync write on the loop's thread
    through another Database on the same file would wait for the gate the
    block holds, while the block waits for the loop: NestedWriteError at
    once (the gate's owner is the block's thread), not a WriteTimeout after
    the other Database's whole limit. The block then commits."""

    async def main() -> list[Any]:
        db = await litegate.aio.connect(db_path, timeout=30)
        await db.execute("CREATE TABLE t(v)")
        other = litegate.connect(db_path, timeout=2)
        try:
            async with db.write() as tx:
                await tx.execute("INSERT INTO t VALUES (0)")
                got = [
                    _outcome(lambda: other.execute("INSERT INTO t VALUES (1)")),
                    _outcome(lambda: other.write().__enter__()),
                ]
            got.append(other.query("SELECT v FROM t"))
            other.execute("INSERT INTO t VALUES (2)")  # the gate is free again
        finally:
            other.close()
        got.append(await db.query("SELECT v FROM t ORDER BY v"))
        await db.close()
        return got

    assert asyncio.run(main()) == [
        litegate.NestedWriteError,
        litegate.NestedWriteError,
        [(0,)],
        [(0,), (2,)],
    ]


async def _enter_block(db: litegate.aio.AsyncDatabase) -> None:
    async with db.write():
        pass


def test_guard_errors_are_typed_alike_in_both_write_blocks(db_path: str) -> None:
    """A COMMIT (or a PRAGMA the guard refuses) inside ``async with
    db.write()`` raises the same typed error as inside ``with db.write()``,
    and the block's statements are rolled back in both."""
    sdb = litegate.connect(db_path)
    sdb.execute("CREATE TABLE t(v)")
    refused = ["COMMIT", "ROLLBACK", "PRAGMA journal_mode=DELETE"]
    sync_got = []
    for sql in refused:
        try:
            with sdb.write() as conn:
                conn.execute("INSERT INTO t VALUES (1)")
                conn.execute(sql)
        except Exception as exc:
            sync_got.append((type(exc), str(exc)))
    sdb.close()

    async def main() -> list[tuple[type[Exception], str]]:
        adb = await litegate.aio.connect(db_path)
        got = []
        for sql in refused:
            try:
                async with adb.write() as tx:
                    await tx.execute("INSERT INTO t VALUES (1)")
                    await tx.execute(sql)
            except Exception as exc:
                got.append((type(exc), str(exc)))
        assert await adb.query("SELECT count(*) FROM t") == [(0,)]
        await adb.close()
        return got

    async_got = run(main())
    assert [t for t, _ in sync_got] == [
        litegate.TransactionError,
        litegate.TransactionError,
        litegate.ConfigError,
    ]
    assert async_got == sync_got


def test_write_timeouts_share_one_timer_and_keep_each_limit(db_path: str) -> None:
    """Queued writes with different limits, on the loop's one deadline timer:
    each times out at its own limit (a shorter limit submitted later expires
    first), none of them is written, and writes that got their answer leave
    no timer behind."""

    async def main() -> None:
        db = await litegate.aio.connect(db_path)
        await db.execute("CREATE TABLE t(v)")
        loop = asyncio.get_running_loop()
        for i in range(50):  # answered writes: the line empties as answers come
            await db.execute("INSERT INTO t VALUES (?)", (i,))
        deadlines = db._notifier(loop).deadlines
        assert all(not line for line in deadlines._lines.values())
        ended: list[str] = []

        async def write(name: str, timeout: float) -> None:
            try:
                await db.execute("INSERT INTO t VALUES (?)", (name,), timeout=timeout)
            except litegate.WriteTimeout:
                ended.append(name)

        async with db.write():
            tasks = [
                asyncio.create_task(write("slow-a", 0.4)),
                asyncio.create_task(write("slow-b", 0.4)),
                asyncio.create_task(write("quick", 0.1)),
            ]
            await until(lambda: len(ended) == 3, "three timeouts")
            await asyncio.gather(*tasks)
        assert ended == ["quick", "slow-a", "slow-b"]
        assert not deadlines._lines
        assert await db.query("SELECT count(*) FROM t") == [(50,)]
        await db.close()

    run(main())


def test_cancelled_and_answered_writes_leave_the_deadline_lines(db_path: str) -> None:
    """A write cancelled while it waits for the gate leaves its deadline line
    at the next burst of answers (answered writes leave theirs with the burst
    that answers them), so nothing holds its request or keeps the timer."""

    async def main() -> None:
        db = await litegate.aio.connect(db_path)
        await db.execute("CREATE TABLE t(v)")
        loop = asyncio.get_running_loop()
        deadlines = db._notifier(loop).deadlines
        async with db.write():  # the gate is held: the next writes wait in line
            cancelled = asyncio.create_task(db.execute("INSERT INTO t VALUES ('cancelled')"))
            waiting = asyncio.create_task(db.execute("INSERT INTO t VALUES ('kept')"))
            await until(lambda: sum(len(line) for line in deadlines._lines.values()) == 2)
            cancelled.cancel()
            with pytest.raises(asyncio.CancelledError):
                await cancelled
        await waiting  # its burst of answers settles both entries
        assert all(not line for line in deadlines._lines.values())
        assert await db.query("SELECT v FROM t") == [("kept",)]
        await db.close()

    run(main())


def test_both_faces_time_out_and_close_with_the_same_words(db_path: str) -> None:
    """A wait that times out or is closed says the same, with what to do, on
    the sync face and on asyncio (asyncio's said only the limit)."""
    db = litegate.connect(db_path, readers=1)
    adb = litegate.aio.AsyncDatabase(db)

    async def write_block() -> None:
        async with adb.write(timeout=0.05):
            pass

    with gate_held_by_another_thread(db):
        with pytest.raises(litegate.WriteTimeout) as sync_write, db.write(timeout=0.05):
            pass
        with pytest.raises(litegate.WriteTimeout) as async_write:
            run(write_block())
    assert str(async_write.value) == str(sync_write.value)
    assert "raise timeout= or make write transactions shorter" in str(sync_write.value)
    with db.read():
        with pytest.raises(litegate.PoolTimeout) as sync_read:
            db.query("SELECT 1", timeout=0.05)
        with pytest.raises(litegate.PoolTimeout) as async_read:
            run(adb.query("SELECT 1", timeout=0.05))
        assert str(async_read.value) == str(sync_read.value)
        assert "raise readers= or timeout=" in str(sync_read.value)
        assert db.stats()["pool"]["timeouts"] == 2  # counted alike

        # Closed while waiting for a read connection: both faces' waiters.
        closed: list[BaseException] = []

        def sync_waiter() -> None:
            try:
                db.query("SELECT 1", timeout=10)
            except litegate.Closed as exc:
                closed.append(exc)

        async def both() -> None:
            task = asyncio.ensure_future(adb.query("SELECT 1", timeout=10))
            await until(lambda: db._process_state().pool.waiting == 1, "the task in line")
            t = threading.Thread(target=sync_waiter)
            t.start()
            await until(lambda: db._process_state().pool.waiting == 2, "the thread in line")
            db.close()
            with pytest.raises(litegate.Closed) as async_closed:
                await task
            await asyncio.to_thread(t.join)
            closed.append(async_closed.value)

        run(both())
    assert [str(e) for e in closed] == [
        f"database {db_path!r} was closed while waiting to read"
    ] * 2
    adb._pool.shutdown(wait=False)
