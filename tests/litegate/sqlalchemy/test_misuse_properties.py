"""The misuse suite for sqlite+litegate (the contract of
``tests/litegate/misuse.py``), over the dialect's entry points:
``create_engine`` / ``create_async_engine`` with any URL query string,
``connect_args`` and path (a missing folder, a directory, a garbage file, a
bad sidecar), the first connection; PRAGMAs, transaction control and
VACUUM through ``exec_driver_sql``, ``text()`` in a transaction, a
``Session``, ``AUTOCOMMIT``, the raw DBAPI connection and the asyncio
engine; and fork() inside a transaction with a checked-out connection.

Per call: success, or a typed ``litegate.Error`` that says what to do, or
(for SQL that SQLite itself rejects, in a statement the caller wrote)
SQLAlchemy's wrapper of sqlite3's own error; never another exception,
never a hang. After every case the seeded file holds every committed row,
is still in WAL mode with normal locking, and another engine (another
pool) can take the write gate and write at once: nothing the case did
kept the gate, SQLite's write lock or a pooled connection's settings."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import sqlite3
import time
import urllib.parse
import warnings
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import Engine, create_engine, exc, text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import Session

import litegate
from tests.litegate import misuse
from tests.litegate.misuse import examples, ran
from tests.litegate.sqlalchemy import procs
from tests.litegate.test_misuse_properties import names as pragma_names
from tests.litegate.test_misuse_properties import values as pragma_values

ROWS = 25


def seed(path: str) -> None:
    engine = create_engine(f"sqlite+litegate:///{path}")
    with engine.begin() as c:
        c.exec_driver_sql("CREATE TABLE kept(id INTEGER PRIMARY KEY, who TEXT)")
        c.exec_driver_sql("CREATE TABLE entry(id INTEGER PRIMARY KEY, who VARCHAR(40))")
        c.exec_driver_sql(
            "INSERT INTO kept(who) WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 "
            f"FROM r WHERE i < {ROWS}) SELECT 'row ' || i FROM r"
        )
    engine.dispose()


def intact(path: str, rows: int = ROWS) -> None:
    """Every committed row, quick_check ok, still WAL, and another pool
    takes the gate and SQLite's write lock at once (a write, undone)."""
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as raw:
        assert raw.execute("SELECT count(*) FROM kept").fetchone() == (rows,)
        assert raw.execute("PRAGMA quick_check").fetchone() == ("ok",)
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    other = create_engine(f"sqlite+litegate:///{path}", connect_args={"timeout": 2})
    try:
        with other.connect() as c:
            c.exec_driver_sql("DELETE FROM kept")
            c.rollback()
    finally:
        other.dispose()


def call(fn: Callable[[], Any], what: str, sql_ok: bool) -> str:
    """``fn()``: "ok", "typed" (a litegate.Error that says what to do) or,
    with ``sql_ok``, "sql" (sqlite3's own error to SQL the caller wrote, in
    SQLAlchemy's wrapper or, from the raw connection, as is); anything else
    fails the case."""
    t0 = time.monotonic()
    try:
        fn()
        outcome = "ok"
    except litegate.Error as err:
        misuse.typed(err)
        outcome = "typed"
    except (exc.DBAPIError, sqlite3.Error) as err:
        if not (sql_ok and sqlite_says(err)):
            raise AssertionError(f"{what}: untyped {type(err).__name__}: {err}") from err
        outcome = "sql"
    except Exception as err:
        raise AssertionError(f"{what}: untyped {type(err).__name__}: {err}") from err
    took = time.monotonic() - t0
    assert took < misuse.HANG, f"{what}: took {took:.1f} s"
    return outcome


def sqlite_says(err: BaseException) -> bool:
    """sqlite3's own error: raw (the DBAPI connection) or in SQLAlchemy's
    wrapper."""
    if isinstance(err, exc.DBAPIError):
        err = err.orig  # type: ignore[assignment]
    return isinstance(err, sqlite3.Error)


@contextmanager
def quiet() -> Iterator[None]:
    # SQLAlchemy's pool logs (never raises) what a reset on return hit; a
    # fork with threads warns on Python >= 3.12 (the after-fork hooks handle it).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


# -- create_engine, connect_args and the first connection ----------------------------

QUERY_KEYS = ["timeout", "profile", "pragmas", "fair", "uri", "check_same_thread", "detect_types",
              "cached_statements", "isolation_level", "mode", "cache", "nolock", "immutable",
              "vfs", "profil", "foo"]  # fmt: skip
QUERY_WORDS = ["abc", "0", "-1", "nan", "inf", "1e400", "5", "2.5", "true", "false", "maybe",
               "strict", "", "balanced", "default", "conservative", "nosuch=1",
               "synchronous=FULL", "journal_mode=DELETE", "cache_size=-4000,mmap_size=",
               "locking_mode=EXCLUSIVE", "page_size=1024", "1", "unix-none", "unix", "ro",
               "rwc", "memory", "private", "DEFERRED"]  # fmt: skip
query_values = st.one_of(st.sampled_from(QUERY_WORDS), st.text(max_size=6))
queries = st.dictionaries(
    st.sampled_from(QUERY_KEYS),
    st.lists(query_values, min_size=1, max_size=2),  # two: the key given twice
    max_size=3,
)
ODD_ARGS = [None, 0, -1, 0.5, 5, 1e12, float("nan"), "x", "strict", True, ["a"], {"nosuch": 1},
            {"journal_mode": "DELETE"}, {"cache_size": -3000}, "balanced"]  # fmt: skip
connect_args = st.one_of(
    st.none(),
    st.dictionaries(
        st.sampled_from(["profile", "pragmas", "timeout", "fair"]),
        st.sampled_from(ODD_ARGS),
        max_size=2,
    ),
)
PATHS = ["seeded", "new file", "missing folder", "a directory", "garbage file", "bad sidecar"]


def path_of(kind: str, seeded: str, scratch: Path, n: int) -> str:
    if kind == "seeded":
        return seeded
    if kind == "new file":
        return str(scratch / f"new{n}.db")
    if kind == "missing folder":
        return str(scratch / f"nowhere{n}" / "app.db")
    if kind == "a directory":
        (scratch / f"dir{n}").mkdir()
        return str(scratch / f"dir{n}")
    if kind == "garbage file":
        (scratch / f"junk{n}.db").write_bytes(os.urandom(3000))
        return str(scratch / f"junk{n}.db")
    (scratch / f"side{n}.db-litegate").mkdir()
    return str(scratch / f"side{n}.db")


def test_create_engine_and_connect_work_or_say_what_to_do(tmp_path: Path) -> None:
    seeded = str(tmp_path / "app.db")
    seed(seeded)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    counter = [0]

    @examples(70)
    @given(
        kind=st.sampled_from(["sync", "asyncio"]),
        where=st.sampled_from(PATHS),
        query=queries,
        args=connect_args,
    )
    def case(kind: str, where: str, query: dict[str, list[str]], args: Any) -> None:
        counter[0] += 1
        ran(f"sqlalchemy create_engine + connect ({kind})")
        path = path_of(where, seeded, scratch, counter[0])
        qs = urllib.parse.urlencode(query, doseq=True)
        url = f"sqlite+litegate:///{path}" + (f"?{qs}" if qs else "")
        kw = {} if args is None else {"connect_args": args}
        what = f"{kind} {where} ?{qs} {args!r}"
        if kind == "sync":
            engines: list[Engine] = []
            if call(lambda: engines.append(create_engine(url, **kw)), what, False) == "ok":
                try:
                    first_use(engines[0], where, what)
                finally:
                    engines[0].dispose()
        else:
            aengines: list[AsyncEngine] = []
            if call(lambda: aengines.append(create_async_engine(url, **kw)), what, False) == "ok":
                asyncio.run(first_use_async(aengines[0], where, what))
        intact(seeded)

    with quiet():
        case()


def first_use(engine: Engine, where: str, what: str) -> None:
    def read() -> None:
        with engine.connect() as c:
            got = c.exec_driver_sql(
                "SELECT count(*) FROM kept" if where == "seeded" else "SELECT 1"
            )
            assert got.scalar() == (ROWS if where == "seeded" else 1)

    def write_undone() -> None:
        with engine.connect() as c:
            c.exec_driver_sql("CREATE TABLE IF NOT EXISTS scratch(a)")
            c.exec_driver_sql("INSERT INTO scratch VALUES (1)")
            c.rollback()

    # opening: typed errors only (no sqlite3 error may reach the user here)
    if call(read, f"connect {what}", False) == "ok":
        # a setting the caller chose may make SQLite refuse a write (mode=ro): SQLite's say
        call(write_undone, f"write {what}", True)


async def first_use_async(engine: AsyncEngine, where: str, what: str) -> None:
    async def read() -> None:
        async with engine.connect() as c:
            sql = "SELECT count(*) FROM kept" if where == "seeded" else "SELECT 1"
            assert (await c.exec_driver_sql(sql)).scalar() == (ROWS if where == "seeded" else 1)

    outcome = await acall(read, f"connect {what}", False)
    if outcome == "ok":

        async def write_undone() -> None:
            async with engine.connect() as c:
                await c.exec_driver_sql("CREATE TABLE IF NOT EXISTS scratch(a)")
                await c.exec_driver_sql("INSERT INTO scratch VALUES (1)")
                await c.rollback()

        await acall(write_undone, f"write {what}", True)
    await engine.dispose()


async def acall(fn: Callable[[], Any], what: str, sql_ok: bool) -> str:
    """:func:`call` for a coroutine function."""
    result: list[Any] = []
    t0 = time.monotonic()
    try:
        await fn()
        outcome = "ok"
    except litegate.Error as err:
        misuse.typed(err)
        outcome = "typed"
    except (exc.DBAPIError, sqlite3.Error) as err:
        if not (sql_ok and sqlite_says(err)):
            raise AssertionError(f"{what}: untyped {type(err).__name__}: {err}") from err
        outcome = "sql"
    except Exception as err:
        raise AssertionError(f"{what}: untyped {type(err).__name__}: {err}") from err
    del result
    assert time.monotonic() - t0 < misuse.HANG, what
    return outcome


# -- statements: PRAGMAs, transaction control, VACUUM ------------------------------

TX = ["BEGIN", "BEGIN DEFERRED", "BEGIN IMMEDIATE", "BEGIN EXCLUSIVE", "COMMIT", "END",
      "ROLLBACK", "SAVEPOINT sp", "RELEASE sp", "ROLLBACK TO sp", "VACUUM", "VACUUM main",
      "VACUUM nosuch", "VACUUM INTO {copy}", "vacuum; -- again"]  # fmt: skip


def pragma_sql(name: str, value: object) -> str:
    return f"PRAGMA {name}" if value is None else f"PRAGMA {name} = {value}"


statements = st.one_of(
    st.builds(pragma_sql, pragma_names, pragma_values),
    st.sampled_from(TX),
)
THROUGH = ["exec_driver_sql", "text in begin()", "Session", "AUTOCOMMIT", "raw DBAPI",
           "asyncio exec_driver_sql", "asyncio Session"]  # fmt: skip


def run_sync(engine: Engine, through: str, sql: str, after_read: bool, end: str) -> None:
    if through == "exec_driver_sql":
        with engine.connect() as c:
            if after_read:
                c.exec_driver_sql("SELECT count(*) FROM kept")
            c.exec_driver_sql(sql)
            c.commit() if end == "commit" else c.rollback()
    elif through == "text in begin()":
        with engine.begin() as c:
            if after_read:
                c.execute(text("SELECT count(*) FROM kept"))
            c.execute(text(sql.replace(":", r"\:")))
    elif through == "Session":
        with Session(engine) as s:
            if after_read:
                s.execute(text("SELECT count(*) FROM kept"))
            s.execute(text(sql.replace(":", r"\:")))
            s.commit() if end == "commit" else s.rollback()
    elif through == "AUTOCOMMIT":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
            c.exec_driver_sql(sql)
    else:
        raw = engine.raw_connection()
        try:
            cur = raw.cursor()
            if after_read:
                cur.execute("SELECT count(*) FROM kept")
            cur.execute(sql)
            raw.commit() if end == "commit" else raw.rollback()
        finally:
            raw.close()


async def run_async(url: str, through: str, sql: str, after_read: bool, end: str) -> str:
    engine = create_async_engine(url, connect_args={"timeout": 5})
    try:

        async def go() -> None:
            if through == "asyncio exec_driver_sql":
                async with engine.connect() as c:
                    if after_read:
                        await c.exec_driver_sql("SELECT count(*) FROM kept")
                    await c.exec_driver_sql(sql)
                    await (c.commit() if end == "commit" else c.rollback())
            else:
                async with AsyncSession(engine) as s:
                    if after_read:
                        await s.execute(text("SELECT count(*) FROM kept"))
                    await s.execute(text(sql.replace(":", r"\:")))
                    await (s.commit() if end == "commit" else s.rollback())

        outcome = await acall(go, f"{through} {sql!r}", True)

        async def still_works() -> None:
            async with engine.connect() as c:
                assert (await c.exec_driver_sql("SELECT count(*) FROM kept")).scalar() == ROWS

        await acall(still_works, f"after {through} {sql!r}", True)
        return outcome
    finally:
        await engine.dispose()


def test_statements_work_or_say_what_to_do(tmp_path: Path) -> None:
    path = str(tmp_path / "app.db")
    seed(path)
    url = f"sqlite+litegate:///{path}"
    counter = [0]

    @examples(90)
    @given(
        through=st.sampled_from(THROUGH),
        sql=statements,
        after_read=st.booleans(),
        end=st.sampled_from(["commit", "rollback"]),
    )
    def case(through: str, sql: str, after_read: bool, end: str) -> None:
        counter[0] += 1
        ran(f"sqlalchemy {through}")
        sql = sql.replace("{copy}", repr(str(tmp_path / f"copy{counter[0]}.db")))
        what = f"{through} {sql!r} after_read={after_read} {end}"
        if through.startswith("asyncio"):
            asyncio.run(run_async(url, through, sql, after_read, end))
        else:
            engine = create_engine(url, connect_args={"timeout": 5})
            try:
                call(lambda: run_sync(engine, through, sql, after_read, end), what, True)

                # Whatever the statement did to its connection, the engine
                # still reads and writes (a PRAGMA the caller chose, such as
                # max_page_count, may make SQLite refuse a write: its say).
                def still_works() -> None:
                    with engine.connect() as c:
                        assert c.exec_driver_sql("SELECT count(*) FROM kept").scalar() == ROWS
                        c.exec_driver_sql("DELETE FROM kept")
                        c.rollback()

                call(still_works, f"after {what}", True)
                shared(engine)
            finally:
                engine.dispose()
        intact(path)

    with quiet():
        case()


def shared(engine: Engine) -> None:
    """Every pooled connection is as the pool handed it out: writable,
    normal locking, WAL."""
    conns = [engine.connect() for _ in range(3)]
    try:
        for c in conns:
            assert c.exec_driver_sql("PRAGMA query_only").scalar() == 0
            assert c.exec_driver_sql("PRAGMA locking_mode").scalar() == "normal"
            assert c.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    finally:
        for c in conns:
            c.close()


# -- fork() with a checked-out connection --------------------------------------------


def test_fork_inside_a_transaction_never_keeps_the_child_from_writing(tmp_path: Path) -> None:
    path = str(tmp_path / "app.db")
    seed(path)
    url = f"sqlite+litegate:///{path}"
    ctx = mp.get_context("fork")
    expected = [ROWS, 0]  # kept (the parent's), entry (the children's)

    @examples(8)
    @given(
        kind=st.sampled_from(["sync", "asyncio"]),
        face=st.sampled_from(["session", "connect", "begin"]),
        first=st.sampled_from(["read", "write"]),
    )
    def case(kind: str, face: str, first: str) -> None:
        ran(f"sqlalchemy fork inside a transaction ({kind})")
        done, results = ctx.Event(), ctx.Queue()
        child = ctx.Process(target=child_writes, args=(url, path, done, results))
        sql = (
            "SELECT count(*) FROM kept" if first == "read" else "INSERT INTO kept(who) VALUES ('p')"
        )
        if kind == "sync":
            engine = create_engine(url)
            try:
                with forked_inside_sync(engine, face, sql, child):
                    pass
            finally:
                engine.dispose()
        else:
            asyncio.run(forked_inside_async(url, face, sql, child))
        done.set()
        said = results.get(timeout=60)
        child.join(30)
        assert child.exitcode == 0
        assert said == ["engine: ok", "asyncio engine: ok", "litegate: ok", "sqlite3: ok"], said
        # the parent's write if its transaction committed; the child's four rows
        expected[0] += first == "write" and face == "begin"
        expected[1] += 4
        intact(path, expected[0])
        with closing(sqlite3.connect(path)) as raw:
            assert raw.execute("SELECT count(*) FROM entry").fetchone() == (expected[1],)

    with quiet():
        case()


@contextmanager
def forked_inside_sync(engine: Engine, face: str, sql: str, child: Any) -> Iterator[None]:
    if face == "session":
        with Session(engine) as s:
            s.execute(text(sql))
            child.start()
            yield
    elif face == "connect":
        with engine.connect() as c:
            c.exec_driver_sql(sql)
            child.start()
            yield
    else:
        with engine.begin() as c:
            c.exec_driver_sql(sql)
            child.start()
            yield


async def forked_inside_async(url: str, face: str, sql: str, child: Any) -> None:
    engine = create_async_engine(url)
    try:
        if face == "session":
            async with AsyncSession(engine) as s:
                await s.execute(text(sql))
                child.start()
        elif face == "connect":
            async with engine.connect() as c:
                await c.exec_driver_sql(sql)
                child.start()
        else:
            async with engine.begin() as c:
                await c.exec_driver_sql(sql)
                child.start()
    finally:
        await engine.dispose()


def child_writes(url: str, path: str, parent_done: Any, results: Any) -> None:
    """The forked child: once the parent's transaction is over, one write
    each through a new engine, the asyncio engine, litegate.connect() and
    plain sqlite3."""
    procs.INHERITED.clear()  # (no inherited engine here)
    procs.write_each_way_later(url, path, parent_done, results)
