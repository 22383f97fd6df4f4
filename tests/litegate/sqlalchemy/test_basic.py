"""sqlite+litegate: the dialect, its connections, sync and asyncio."""

from __future__ import annotations

import asyncio
import threading

from sqlalchemy import Engine, text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from litegate.sqlalchemy import (
    AsyncFairQueuePool,
    AsyncLitegateDialect,
    FairQueuePool,
    LitegateDialect,
)
from tests.litegate.sqlalchemy.models import Counter


def test_url_gives_the_sqlite_dialect_with_litegates_pool_and_profile(engine: Engine) -> None:
    assert isinstance(engine.dialect, LitegateDialect)
    assert engine.dialect.name == "sqlite"
    assert engine.dialect.driver == "litegate"
    assert isinstance(engine.pool, FairQueuePool)
    with engine.connect() as conn:
        pragma = {
            name: conn.exec_driver_sql(f"PRAGMA {name}").scalar()
            for name in ("journal_mode", "wal_autocheckpoint", "foreign_keys", "synchronous")
        }
    # the "balanced" profile (foreign keys as with the stock driver: off);
    # litegate's checkpointer replaces wal_autocheckpoint
    assert pragma == {"journal_mode": "wal", "wal_autocheckpoint": 0, "foreign_keys": 0,
                      "synchronous": 1}  # fmt: skip


def test_orm_read_then_write_from_threads_loses_nothing(engine: Engine) -> None:
    errors: list[BaseException] = []

    def body() -> None:
        try:
            for _ in range(40):
                with Session(engine) as s, s.begin():
                    c = s.get(Counter, 1)
                    assert c is not None
                    c.n += 1
        except BaseException as exc:  # collected; asserted empty below
            errors.append(exc)

    ts = [threading.Thread(target=body) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    with Session(engine) as s:
        assert s.get(Counter, 1).n == 8 * 40  # type: ignore[union-attr]


def test_asyncio_read_then_write_from_tasks_loses_nothing(engine: Engine, url: str) -> None:
    async def main() -> int:
        aeng = create_async_engine(url)
        assert isinstance(aeng.dialect, AsyncLitegateDialect)
        assert isinstance(aeng.pool, AsyncFairQueuePool)

        async def task() -> None:
            for _ in range(10):
                async with AsyncSession(aeng) as s, s.begin():
                    c = await s.get(Counter, 1)
                    assert c is not None
                    c.n += 1

        await asyncio.gather(*(task() for _ in range(20)))
        async with aeng.connect() as conn:
            n = (await conn.execute(text("SELECT n FROM counter"))).scalar_one()
        await aeng.dispose()
        return int(n)

    assert asyncio.run(main()) == 200


def test_explicit_async_url(engine: Engine, url: str) -> None:
    async def main() -> int:
        aeng = create_async_engine(url.replace("+litegate", "+litegate_async"))
        assert isinstance(aeng.dialect, AsyncLitegateDialect)
        async with aeng.begin() as conn:
            await conn.execute(text("UPDATE counter SET n = n + 5"))
        async with aeng.connect() as conn:
            n = (await conn.execute(text("SELECT n FROM counter"))).scalar_one()
        await aeng.dispose()
        return int(n)

    assert asyncio.run(main()) == 5
