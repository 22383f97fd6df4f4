"""FairQueuePool: first come, first served, for threads and asyncio tasks.
(SQLAlchemy's own pool tests run against it in make test-sqlalchemy-full.)"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import create_engine, exc
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool, PoolProxiedConnection, SingletonThreadPool

from litegate.sqlalchemy import AsyncFairQueuePool, FairQueuePool
from tests.conftest import wait_until
from tests.litegate.sqlalchemy.loop import Ticker, until


def memory() -> sqlite3.Connection:
    return sqlite3.connect(":memory:", check_same_thread=False)


def queue_up(pool: FairQueuePool, n: int, then: Callable[[int, PoolProxiedConnection], None]
             ) -> list[threading.Thread]:  # fmt: skip
    """Start n threads that each wait for a connection, one after another
    (each is in the line before the next starts)."""
    ts = []
    for k in range(n):

        def run(k: int = k) -> None:
            conn = pool.connect()
            then(k, conn)
            conn.close()

        t = threading.Thread(target=run)
        t.start()

        def queued(n: int = k + 1) -> bool:
            return pool.waiting() == n

        wait_until(queued, what=f"waiter {k} to queue")
        ts.append(t)
    return ts


def test_waiters_are_served_in_arrival_order_and_nobody_barges() -> None:
    pool = FairQueuePool(memory, pool_size=1, max_overflow=0, timeout=30)
    order: list[object] = []
    holder = pool.connect()
    ts = queue_up(pool, 5, lambda k, _c: order.append(k))
    holder.close()  # straight to waiter 0
    again = pool.connect()  # the thread that just gave it back asks again: last in line
    order.append("returner")
    again.close()
    for t in ts:
        t.join()
    assert order == [0, 1, 2, 3, 4, "returner"]
    assert pool.checkedout() == 0
    pool.dispose()


def test_sizes_overflow_and_timeout_are_queuepools() -> None:
    pool = FairQueuePool(memory, pool_size=2, max_overflow=1, timeout=0.1)
    conns = [pool.connect() for _ in range(3)]
    assert (pool.size(), pool.checkedout(), pool.overflow()) == (2, 3, 1)
    with pytest.raises(exc.TimeoutError, match="limit of size 2 overflow 1 reached"):
        pool.connect()
    for c in conns:
        c.close()
    assert (pool.checkedin(), pool.overflow()) == (2, 0)  # the overflow one was closed
    pool.dispose()
    assert pool.checkedin() == 0


def test_engine_pools(tmp_path: Path) -> None:
    url = f"sqlite+litegate:///{tmp_path / 'p.db'}"
    assert type(create_engine(url).pool) is FairQueuePool
    assert type(create_engine(url, poolclass=NullPool).pool) is NullPool
    assert type(create_engine("sqlite+litegate://").pool) is SingletonThreadPool
    eng = create_engine(url, pool_size=3, max_overflow=2, pool_timeout=4)
    pool = eng.pool
    assert isinstance(pool, FairQueuePool)
    assert (pool.size(), pool._max_overflow, pool.timeout()) == (3, 2, 4)
    assert type(create_async_engine(url).pool) is AsyncFairQueuePool


def test_asyncio_tasks_wait_on_the_loop_in_order_and_a_cancelled_one_leaves(
    tmp_path: Path,
) -> None:
    async def main() -> tuple[list[int], int]:
        eng = create_async_engine(f"sqlite+litegate:///{tmp_path / 'a.db'}", pool_size=1,
                                  max_overflow=0)  # fmt: skip
        pool = eng.sync_engine.pool
        assert isinstance(pool, AsyncFairQueuePool)
        order: list[int] = []

        async def waiter(k: int) -> None:
            async with eng.connect():
                order.append(k)

        ticker = Ticker().start()
        holder = await eng.connect()
        tasks = []
        for k in range(4):
            tasks.append(asyncio.create_task(waiter(k)))
            await until(pool.waiting, k + 1, f"task {k} in the pool's line")
        ticks_while_waiting = await ticker.during(0.05)  # the loop runs while four tasks wait
        tasks[1].cancel()
        await until(pool.waiting, 3, "the cancelled task to leave the line")
        await holder.close()
        await asyncio.gather(tasks[0], tasks[2], tasks[3])
        ticker.stop()
        await eng.dispose()
        return order, ticks_while_waiting

    order, ticks = asyncio.run(main())
    assert order == [0, 2, 3]
    assert ticks > 5
