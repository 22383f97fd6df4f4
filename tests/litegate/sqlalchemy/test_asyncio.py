"""sqlite+litegate under asyncio: the gate is waited for on the event loop
(which keeps running), a cancelled task leaves the line, SQLite runs on
other threads."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from sqlalchemy import Engine, event, insert, select, text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

import litegate
from litegate.sqlalchemy import GateTimeout, ReadOnlyScopeError, connect, read_only
from tests.litegate.sqlalchemy.loop import Ticker, until
from tests.litegate.sqlalchemy.models import Counter, Entry
from tests.litegate.sqlalchemy.test_gate import gate_of, whos


def test_waiting_for_the_gate_never_blocks_the_loop_and_cancel_leaves_the_line(
    engine: Engine, url: str
) -> None:
    gate = gate_of(engine)
    inside, leave = threading.Event(), threading.Event()

    def holder() -> None:  # a thread of this process holds the gate
        with engine.begin() as conn:
            conn.execute(insert(Entry).values(who="holder"))
            inside.set()
            assert leave.wait(30)

    async def main() -> tuple[int, list[str]]:
        aeng = create_async_engine(url)

        async def write(who: str) -> None:
            async with aeng.begin() as conn:
                await conn.execute(insert(Entry).values(who=who))

        ticker = Ticker().start()
        h = threading.Thread(target=holder)
        h.start()
        await asyncio.to_thread(inside.wait, 30)
        tasks = []
        for k in range(3):
            tasks.append(asyncio.create_task(write(f"task {k}")))
            await until(lambda: gate.waiting, k + 1, f"task {k} in the gate's line")
        moved = await ticker.during(0.05)  # the loop runs while three tasks wait
        tasks[1].cancel()
        await until(lambda: gate.waiting, 2, "the cancelled task to leave the line")
        leave.set()
        await asyncio.gather(tasks[0], tasks[2])
        with pytest.raises(asyncio.CancelledError):
            await tasks[1]
        await asyncio.to_thread(h.join)
        ticker.stop()
        await aeng.dispose()
        return moved, []

    moved, _ = asyncio.run(main())
    assert moved > 5
    assert whos(engine) == ["holder", "task 0", "task 2"]
    assert gate.waiting == 0
    assert not gate.held


def test_sqlite_runs_off_the_loops_thread(engine: Engine, url: str) -> None:
    async def main() -> tuple[int, set[int]]:
        aeng = create_async_engine(url)

        @event.listens_for(aeng.sync_engine, "connect")
        def udf(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.create_function("tid", 0, threading.get_ident)

        seen = set()
        for _ in range(3):
            async with aeng.connect() as conn:
                seen.add((await conn.execute(text("SELECT tid()"))).scalar_one())
        await aeng.dispose()
        return threading.get_ident(), seen

    loop_thread, seen = asyncio.run(main())
    assert seen
    assert loop_thread not in seen


def test_asyncio_timeout_nested_and_read_only(engine: Engine, url: str) -> None:
    async def main() -> list[str]:
        aeng = create_async_engine(url + "?timeout=0.2")
        notes = []
        async with aeng.begin() as outer:
            await outer.execute(insert(Entry).values(who="outer"))

            # another task: waits its turn, and times out
            async def other() -> None:
                async with aeng.begin() as conn:
                    await conn.execute(insert(Entry).values(who="other"))

            with pytest.raises(GateTimeout) as info:
                await asyncio.create_task(other())
            assert isinstance(info.value, litegate.WriteTimeout)
            notes.append("other task timed out")
            # this task, another connection: reads, refuses writes at once
            async with aeng.connect() as inner:
                assert (await inner.execute(select(Counter.n))).scalar() == 0
                with pytest.raises(litegate.NestedWriteError):
                    await inner.execute(insert(Entry).values(who="inner"))
            notes.append("nested read, write refused")
            # read-only: no gate, no wait, writes refused
            async with read_only(aeng) as conn:
                assert (await conn.execute(select(Counter.n))).scalar() == 0
                with pytest.raises(ReadOnlyScopeError):
                    await conn.execute(insert(Entry).values(who="refused"))
            async with AsyncSession(aeng) as s, read_only(s):
                assert (await s.get(Counter, 1)) is not None
            notes.append("read-only read")
        await aeng.dispose()
        return notes

    assert asyncio.run(main()) == ["other task timed out", "nested read, write refused",
                                   "read-only read"]  # fmt: skip
    assert whos(engine) == ["outer"]


def test_async_creator_takes_litegate_connections(engine: Engine, url: str) -> None:
    path = str(engine.url.database)

    async def main() -> int:
        async def make() -> Any:
            return await asyncio.to_thread(connect, path, timeout=3)

        aeng = create_async_engine("sqlite+litegate://", async_creator=make)
        async with aeng.begin() as conn:
            await conn.execute(text("UPDATE counter SET n = n + 1"))
        await aeng.dispose()
        return 1

    asyncio.run(main())
    with engine.connect() as conn:
        assert conn.execute(select(Counter.n)).scalar() == 1


def test_sqlmodel_works_unchanged_sync_and_async(tmp_path: Any) -> None:
    sqlmodel = pytest.importorskip("sqlmodel", reason="pip install -e '.[dev]'")
    from sqlmodel.ext.asyncio.session import AsyncSession as ModelAsyncSession

    from tests.litegate.sqlalchemy.sqlmodels import Hero

    url = f"sqlite+litegate:///{tmp_path / 'heroes.db'}"
    engine = sqlmodel.create_engine(url)
    sqlmodel.SQLModel.metadata.create_all(engine)
    with sqlmodel.Session(engine) as s:
        s.add(Hero(name="Deadpond", age=30))
        s.commit()

    def bump() -> None:
        for _ in range(20):
            with sqlmodel.Session(engine) as s:
                hero = s.exec(sqlmodel.select(Hero).where(Hero.name == "Deadpond")).one()
                hero.age += 1
                s.add(hero)
                s.commit()

    ts = [threading.Thread(target=bump) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()

    async def main() -> int:
        aeng = create_async_engine(url)

        async def bump_async() -> None:
            for _ in range(10):
                async with ModelAsyncSession(aeng) as s:
                    hero = (await s.exec(sqlmodel.select(Hero))).one()
                    hero.age += 1
                    s.add(hero)
                    await s.commit()

        await asyncio.gather(*(bump_async() for _ in range(5)))
        async with ModelAsyncSession(aeng) as s:
            age = (await s.exec(sqlmodel.select(Hero.age))).one()
        await aeng.dispose()
        return int(age)

    assert asyncio.run(main()) == 30 + 4 * 20 + 5 * 10
    engine.dispose()


def test_stream_fetches_rows_as_they_are_asked_for(engine: Engine, url: str) -> None:
    """AsyncConnection.stream() (a server-side cursor, as with aiosqlite)."""
    with engine.begin() as conn:
        conn.execute(insert(Entry), [{"who": f"w{i:03}"} for i in range(250)])

    async def main() -> list[str]:
        aeng = create_async_engine(url)
        async with aeng.connect() as conn:
            result = await conn.stream(select(Entry.who).order_by(Entry.who))
            first = await result.fetchmany(3)
            rest = [row.who async for row in result]
        async with AsyncSession(aeng) as s:
            scalars = await s.stream_scalars(select(Entry.who).order_by(Entry.who.desc()))
            last = await scalars.first()
        await aeng.dispose()
        return [r.who for r in first] + rest + [str(last)]

    got = asyncio.run(main())
    assert got == [f"w{i:03}" for i in range(250)] + ["w249"]
