"""Process entry points (spawn and fork) for the dialect's process tests:
ORM read-then-write transactions, as applications write them."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from sqlalchemy import Engine, create_engine, select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from tests.litegate.sqlalchemy.models import Counter, Entry

# The engine a forked child inherits (set by the parent before it forks).
INHERITED: dict[str, Engine] = {}


def increment(engine: Engine) -> None:
    """One ORM transaction: read the counter, write it back plus one."""
    with Session(engine) as s, s.begin():
        c = s.get(Counter, 1)
        assert c is not None
        c.n = c.n + 1


def on_threads(engine: Engine, threads: int, each: int) -> tuple[int, int, list[str]]:
    """``threads`` threads x ``each`` transactions: (committed, errors, the
    first few error messages)."""
    done = [0] * threads
    errors = [0] * threads
    messages: list[str] = []

    def run(k: int) -> None:
        for _ in range(each):
            try:
                increment(engine)
                done[k] += 1
            except Exception as exc:  # counted: the tests assert on (or report) them
                errors[k] += 1
                if len(messages) < 3:
                    messages.append(f"{type(exc).__name__}: {str(exc).splitlines()[0]}")

    ts = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(done), sum(errors), messages


def read_then_write(url: str, threads: int, each: int) -> tuple[int, int, list[str]]:
    """A spawned process: its own engine on ``url``."""
    engine = create_engine(url)
    try:
        return on_threads(engine, threads, each)
    finally:
        engine.dispose()


def forked_read_then_write(threads: int, each: int) -> tuple[int, int, int, list[str]]:
    """A forked child of a process whose engine had pooled connections open:
    (connections idle in the pool at start, committed, errors, messages)."""
    engine = INHERITED["engine"]
    idle_at_start = engine.pool.checkedin()  # type: ignore[attr-defined]
    done, errors, messages = on_threads(engine, threads, each)
    return idle_at_start, done, errors, messages


def hold_in_transaction(url: str, holding: Any) -> None:
    """Write inside a transaction (holding the gate), say so, and hang there
    until SIGKILLed."""
    engine = create_engine(url)
    with Session(engine) as s, s.begin():
        s.add(Entry(who="killed"))
        s.flush()
        holding.set()
        time.sleep(600)


async def tasks_read_then_write(engine: AsyncEngine, tasks: int, each: int) -> tuple[int, int]:
    """``tasks`` asyncio tasks x ``each`` ORM transactions on one loop:
    (committed, errors)."""
    done = 0
    errors = 0

    async def one() -> None:
        nonlocal done, errors
        for _ in range(each):
            try:
                async with AsyncSession(engine) as s, s.begin():
                    c = (await s.execute(select(Counter).where(Counter.id == 1))).scalar_one()
                    c.n = c.n + 1
                done += 1
            except Exception:  # counted
                errors += 1

    await asyncio.gather(*(one() for _ in range(tasks)))
    return done, errors


def asyncio_read_then_write(url: str, tasks: int, each: int) -> tuple[int, int]:
    async def main() -> tuple[int, int]:
        engine = create_async_engine(url)
        try:
            return await tasks_read_then_write(engine, tasks, each)
        finally:
            await engine.dispose()

    return asyncio.run(main())


def counter(url: str) -> int:
    engine = create_engine(url)
    try:
        with Session(engine) as s:
            c = s.get(Counter, 1)
            assert c is not None
            return c.n
    finally:
        engine.dispose()


# -- fork inside a transaction ---------------------------------------------------


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"


def write_each_way(url: str, path: str) -> list[str]:
    """One write through each way into the file (a new engine, the asyncio
    engine, the engine inherited from a forking parent if any,
    ``litegate.connect()``, plain ``sqlite3``): "<way>: ok" or what failed."""
    import sqlite3

    import litegate

    out: list[str] = []

    def way(name: str, write: Any) -> None:
        try:
            write()
            out.append(f"{name}: ok")
        except Exception as exc:  # reported to the parent, which asserts on it
            out.append(f"{name}: {_first_line(exc)}")

    def new_engine() -> None:
        engine = create_engine(url, connect_args={"timeout": 2})
        try:
            with Session(engine) as s, s.begin():
                s.add(Entry(who="engine"))
        finally:
            engine.dispose()

    def asyncio_engine() -> None:
        async def main() -> None:
            engine = create_async_engine(url, connect_args={"timeout": 2})
            try:
                async with AsyncSession(engine) as s, s.begin():
                    s.add(Entry(who="asyncio engine"))
            finally:
                await engine.dispose()

        asyncio.run(main())

    def inherited() -> None:
        with Session(INHERITED["engine"]) as s, s.begin():
            s.add(Entry(who="inherited engine"))

    def core() -> None:
        with litegate.connect(path, timeout=2) as db:
            db.execute("INSERT INTO entry(who) VALUES ('litegate')")

    def plain() -> None:
        conn = sqlite3.connect(path, timeout=0.5)
        try:
            with conn:
                conn.execute("INSERT INTO entry(who) VALUES ('sqlite3')")
        finally:
            conn.close()

    way("engine", new_engine)
    way("asyncio engine", asyncio_engine)
    if "engine" in INHERITED:
        way("inherited engine", inherited)
    way("litegate", core)
    way("sqlite3", plain)
    return out


def write_each_way_later(url: str, path: str, parent_done: Any, results: Any) -> None:
    """A child started inside a transaction of its parent: once the parent
    says its transaction is over, :func:`write_each_way`, to ``results``."""
    parent_done.wait(60)
    results.put(write_each_way(url, path))
