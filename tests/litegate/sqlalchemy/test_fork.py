"""fork() inside a transaction of sqlite+litegate: with a Session, inside
``engine.connect()`` or ``engine.begin()``, sync and asyncio. The child can
write (through a new engine, the asyncio engine, the inherited engine,
``litegate.connect()`` and plain ``sqlite3``) once the parent's transaction
is over, and the parent loses nothing. Spawn is the control: the same
scenario with a fresh process."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import sqlite3
import warnings
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, closing, contextmanager
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, insert, select, text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from tests.litegate.sqlalchemy import procs
from tests.litegate.sqlalchemy.models import Base, Entry

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")

FACES = ["session", "connect", "begin"]
WAYS = ["engine", "asyncio engine", "litegate", "sqlite3"]


@contextmanager
def fork_allowed() -> Iterator[None]:
    # Python >= 3.12 warns about fork() with threads running (the gate's and
    # the checkpointer's): that hazard is what the after-fork hooks handle.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


def fresh(tmp_path: Path, query: str = "") -> tuple[str, str]:
    path = str(tmp_path / "app.db")
    url = f"sqlite+litegate:///{path}{query}"
    engine = create_engine(url)
    Base.metadata.create_all(engine)
    with Session(engine) as s, s.begin():
        s.add(Entry(who="before"))
    engine.dispose()
    return url, path


def rows(path: str) -> list[str]:
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        return sorted(who for (who,) in conn.execute("SELECT who FROM entry"))


@contextmanager
def inside(engine: Engine, face: str) -> Iterator[None]:
    """A transaction of ``face`` whose first statement has run (so it holds
    the gate, BEGIN IMMEDIATE)."""
    if face == "session":
        with Session(engine) as s:
            s.execute(text("SELECT count(*) FROM entry"))  # a read only
            yield
    elif face == "connect":
        with engine.connect() as c:
            c.execute(text("SELECT count(*) FROM entry"))
            yield
    else:
        with engine.begin() as c:
            c.execute(text("INSERT INTO entry(who) VALUES ('parent')"))
            yield


def expected(face: str, ways: list[str]) -> list[str]:
    return sorted(["before", *(["parent"] if face == "begin" else []), *ways])


@pytest.mark.parametrize("face", FACES)
def test_fork_inside_a_transaction_then_the_child_writes(tmp_path: Path, face: str) -> None:
    url, path = fresh(tmp_path)
    engine = create_engine(url)
    procs.INHERITED["engine"] = engine
    ctx = mp.get_context("fork")
    done, results = ctx.Event(), ctx.Queue()
    try:
        with fork_allowed(), inside(engine, face):
            child = ctx.Process(target=procs.write_each_way_later, args=(url, path, done, results))
            child.start()
        done.set()
        out = results.get(timeout=60)
        child.join(30)
        ways = ["engine", "asyncio engine", "inherited engine", "litegate", "sqlite3"]
        assert out == [f"{w}: ok" for w in ways]
        assert child.exitcode == 0
        # The parent goes on with its own connections.
        with Session(engine) as s, s.begin():
            s.add(Entry(who="parent after"))
        assert rows(path) == expected(face, [*ways, "parent after"])
    finally:
        procs.INHERITED.clear()
        engine.dispose()


@asynccontextmanager
async def inside_async(engine: AsyncEngine, face: str) -> AsyncIterator[None]:
    if face == "session":
        async with AsyncSession(engine) as s:
            await s.execute(text("SELECT count(*) FROM entry"))
            yield
    elif face == "connect":
        async with engine.connect() as c:
            await c.execute(text("SELECT count(*) FROM entry"))
            yield
    else:
        async with engine.begin() as c:
            await c.execute(text("INSERT INTO entry(who) VALUES ('parent')"))
            yield


@pytest.mark.parametrize("face", FACES)
def test_fork_inside_an_asyncio_transaction_then_the_child_writes(
    tmp_path: Path, face: str
) -> None:
    url, path = fresh(tmp_path)
    ctx = mp.get_context("fork")
    done, results = ctx.Event(), ctx.Queue()

    async def main() -> list[str]:
        engine = create_async_engine(url)
        try:
            with fork_allowed():
                async with inside_async(engine, face):
                    child = ctx.Process(
                        target=procs.write_each_way_later, args=(url, path, done, results)
                    )
                    child.start()
            done.set()
            out: list[str] = await asyncio.to_thread(results.get, timeout=60)
            await asyncio.to_thread(child.join, 30)
            assert child.exitcode == 0
            async with AsyncSession(engine) as s, s.begin():
                s.add(Entry(who="parent after"))
            return out
        finally:
            await engine.dispose()

    out = asyncio.run(main())
    assert out == [f"{w}: ok" for w in WAYS]
    assert rows(path) == expected(face, [*WAYS, "parent after"])


@pytest.mark.parametrize("kind", ["sync", "asyncio"])
def test_spawn_inside_a_transaction_control(tmp_path: Path, kind: str) -> None:
    """The control: a process spawned (not forked) inside the same Session
    writes every way once the parent's transaction is over."""
    url, path = fresh(tmp_path)
    ctx = mp.get_context("spawn")
    done, results = ctx.Event(), ctx.Queue()
    child = ctx.Process(target=procs.write_each_way_later, args=(url, path, done, results))
    if kind == "sync":
        engine = create_engine(url)
        with Session(engine) as s:
            s.execute(text("SELECT count(*) FROM entry"))
            child.start()
        engine.dispose()
    else:

        async def main() -> None:
            engine = create_async_engine(url)
            async with AsyncSession(engine) as s:
                await s.execute(text("SELECT count(*) FROM entry"))
                child.start()
            await engine.dispose()

        asyncio.run(main())
    done.set()
    assert results.get(timeout=120) == [f"{w}: ok" for w in WAYS]
    child.join(30)
    assert rows(path) == expected("session", WAYS)


def test_the_child_goes_on_in_the_parents_session(tmp_path: Path) -> None:
    """os.fork() inside a Session whose transaction wrote, and the child runs
    on through the rest of the block (its statement fails: the transaction
    is the parent's), ends the session, then writes through the inherited
    engine. The parent commits its row; nothing of the child's session
    touches it."""
    url, path = fresh(tmp_path)
    engine = create_engine(url)
    r, w = os.pipe()
    try:
        with fork_allowed(), Session(engine) as s:
            s.add(Entry(who="parent"))
            s.flush()
            pid = os.fork()
            if pid == 0:  # the child
                code = 1
                try:
                    os.close(r)
                    said: list[str] = []
                    try:
                        s.add(Entry(who="child in parent's session"))
                        s.commit()
                        said.append("committed?!")
                    except Exception as exc:
                        said.append(type(exc).__name__)
                    s.close()
                    with Session(engine) as s2, s2.begin():
                        s2.add(Entry(who="child"))
                    said.append("wrote")
                    os.write(w, ",".join(said).encode())
                    code = 0
                finally:
                    os._exit(code)
            s.commit()
        os.close(w)
        told = os.read(r, 200).decode().split(",")
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status)
        assert os.WEXITSTATUS(status) == 0
        assert told == ["ProgrammingError", "wrote"]
        assert rows(path) == ["before", "child", "parent"]
    finally:
        os.close(r)
        engine.dispose()


@pytest.mark.parametrize("log", ["with commits", "empty"])
def test_fork_inside_a_transaction_that_spilled_keeps_the_parents_pages(
    tmp_path: Path, log: str
) -> None:
    """A transaction bigger than the page cache has written pages to the WAL
    before it commits. A child forked inside it must not roll its copy back
    when that would erase those pages from the shared WAL index (and corrupt
    the parent's commit): with commits in the WAL before the transaction,
    its copy is parked, and the child's writes to the file fail at once
    with NestedWriteError saying why; with none (SQLite's rollback then
    leaves the index alone) the copy is closed and the child writes. Either
    way the parent commits every row and the file is intact."""
    url, path = fresh(tmp_path, "?pragmas=cache_size=10")  # (its last close emptied the WAL)
    engine = create_engine(url)
    if log == "with commits":
        with Session(engine) as s, s.begin():
            s.add(Entry(who="committed"))
    ctx = mp.get_context("fork")
    done, results = ctx.Event(), ctx.Queue()
    big = [{"who": f"{i:05d}" + "x" * 200} for i in range(3000)]
    try:
        with fork_allowed(), engine.begin() as c:
            c.execute(insert(Entry), big[:1500])
            child = ctx.Process(target=procs.write_each_way_later, args=(url, path, done, results))
            child.start()
            c.execute(insert(Entry), big[1500:])
        done.set()
        out = results.get(timeout=60)
        child.join(30)
        assert child.exitcode == 0
        before = ["before", *(b["who"] for b in big)]
        if log == "with commits":
            refused = "NestedWriteError: this process was forked while the forking thread"
            assert [o.split(": ", 1)[0] for o in out] == WAYS
            assert all(o.split(": ", 1)[1].startswith(refused) for o in out[:3]), out
            assert out[3] == "sqlite3: OperationalError: database is locked"
            assert rows(path) == sorted([*before, "committed"])
        else:
            assert out == [f"{w}: ok" for w in WAYS]
            assert rows(path) == sorted([*before, *WAYS])
        with engine.connect() as c2:
            assert c2.scalar(select(Entry.who).where(Entry.who.like("02999%"))) == big[-1]["who"]
    finally:
        engine.dispose()
