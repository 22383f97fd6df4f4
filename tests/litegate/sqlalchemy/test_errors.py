"""What sqlite+litegate refuses, and how: files it cannot open (OpenError),
PRAGMAs that would break every other process (StatementRefused), bad URL
values (ConfigError, at create_engine), and VACUUM. Each error is both
SQLAlchemy's and litegate's, with the core's error in ``orig``."""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, exc, text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.orm import Session

import litegate
from litegate.sqlalchemy import (
    GateTimeout,
    OpenError,
    ReadOnlyScopeError,
    StatementRefused,
    read_only,
)
from tests.conftest import running_as_root

# -- files that cannot be opened -------------------------------------------------


def open_sync(url: str) -> None:
    engine = create_engine(url)
    try:
        with engine.connect() as c:
            c.execute(text("SELECT 1"))
    finally:
        engine.dispose()


def open_async(url: str) -> None:
    async def main() -> None:
        engine = create_async_engine(url)
        try:
            async with engine.connect() as c:
                await c.execute(text("SELECT 1"))
        finally:
            await engine.dispose()

    asyncio.run(main())


OPENERS = {"sync": open_sync, "asyncio": open_async}


def bad_path(tmp_path: Path, what: str) -> tuple[str, str]:
    """A path of kind ``what`` and what the error must say about it."""
    if what == "missing folder":
        return str(tmp_path / "nowhere" / "app.db"), "does not exist; create it first"
    if what == "a directory":
        (tmp_path / "adir").mkdir()
        return str(tmp_path / "adir"), "is a directory; pass the path of a database file"
    if what == "garbage file":
        (tmp_path / "junk.db").write_bytes(b"not a database, " * 400)
        return str(tmp_path / "junk.db"), "is not a SQLite database (file is not a database)"
    (tmp_path / "side.db-litegate").mkdir()  # a bad sidecar
    return str(tmp_path / "side.db"), "is a directory, not litegate's lock file"


@pytest.mark.parametrize("kind", ["sync", "asyncio"])
@pytest.mark.parametrize("what", ["missing folder", "a directory", "garbage file", "sidecar"])
def test_a_file_that_cannot_be_opened_is_an_open_error(
    tmp_path: Path, what: str, kind: str
) -> None:
    path, says = bad_path(tmp_path, what)
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(OpenError) as info:
        OPENERS[kind](f"sqlite+litegate:///{path}")
    err = info.value
    assert isinstance(err, litegate.OpenError)  # litegate's, as the core and Django give
    assert isinstance(err, exc.OperationalError)  # and SQLAlchemy's, as the stock driver's
    assert isinstance(err.orig, litegate.OpenError)
    assert says in str(err.orig)
    assert says in str(err)
    # nothing created (a file that exists gets litegate's lock file, as with connect())
    created = sorted(p.name for p in tmp_path.iterdir() if p.name not in before)
    assert created == (["junk.db-litegate"] if what == "garbage file" else [])


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A folder an unprivileged user can reach (pytest's own tmp is root-only)."""
    top = Path(tempfile.mkdtemp(prefix="litegate-sqla-ro-"))
    top.chmod(0o755)
    d = top / "db"
    d.mkdir()
    d.chmod(0o755)
    yield d
    d.chmod(0o755)
    shutil.rmtree(top)


def as_unprivileged(fn: Callable[[], str]) -> str:
    """``fn()`` in a forked child that drops to user nobody when this is
    root (permissions mean nothing to root): its answer."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(r)
            if running_as_root():
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            os.write(w, fn().encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    try:
        answer = os.read(r, 4096).decode()
    finally:
        os.close(r)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status)
    assert os.WEXITSTATUS(status) == 0
    return answer


def what_opening_says(url: str, kind: str) -> Callable[[], str]:
    def attempt() -> str:
        try:
            OPENERS[kind](url)
        except OpenError as err:
            return f"OpenError {isinstance(err.orig, litegate.OpenError)}: {err.orig}"
        except Exception as err:  # reported, asserted by the parent
            return f"{type(err).__name__}: {err}"
        return "opened"

    return attempt


@pytest.mark.parametrize("kind", ["sync", "asyncio"])
def test_a_read_only_folder_is_an_open_error(shared_tmp: Path, kind: str) -> None:
    create_engine("sqlite+litegate://").dispose()  # the dialect loaded before the fork
    url = f"sqlite+litegate:///{shared_tmp / 'new.db'}"
    shared_tmp.chmod(0o555)
    try:
        said = as_unprivileged(what_opening_says(url, kind))
    finally:
        shared_tmp.chmod(0o755)
    assert said.startswith(f"OpenError True: directory {str(shared_tmp)!r} is read-only"), said
    assert "WAL mode must create new.db" in said
    assert not (shared_tmp / "new.db").exists()


@pytest.mark.parametrize("kind", ["sync", "asyncio"])
def test_a_read_only_file_is_an_open_error(shared_tmp: Path, kind: str) -> None:
    create_engine("sqlite+litegate://").dispose()
    path = shared_tmp / "app.db"
    engine = create_engine(f"sqlite+litegate:///{path}")
    with engine.begin() as c:
        c.exec_driver_sql("CREATE TABLE t(a)")
        c.exec_driver_sql("INSERT INTO t VALUES ('kept')")
    engine.dispose()
    for f in shared_tmp.iterdir():
        f.chmod(0o644)  # readable by others, writable only by the owner
    if running_as_root():
        shared_tmp.chmod(0o777)  # the folder is not the problem here
    said = as_unprivileged(what_opening_says(f"sqlite+litegate:///{path}", kind))
    assert said.startswith(f"OpenError True: {str(path)!r} is read-only for this process"), said
    with closing(sqlite3.connect(path)) as check:
        assert check.execute("SELECT a FROM t").fetchall() == [("kept",)]


# -- PRAGMAs that break every other connection -----------------------------------

REFUSED = [
    "PRAGMA journal_mode=DELETE",
    "PRAGMA main.journal_mode = truncate",
    "PRAGMA locking_mode=EXCLUSIVE",
    "PRAGMA query_only=1",
    "PRAGMA writable_schema = ON",
    "PRAGMA schema_version=99",
]
ALLOWED = ["PRAGMA journal_mode=WAL", "PRAGMA locking_mode=normal", "PRAGMA query_only=0"]


def through(engine: Engine, how: str, sql: str) -> None:
    """``sql`` through one of the dialect's entry points."""
    if how == "exec_driver_sql":
        with engine.connect() as c:
            c.exec_driver_sql(sql)
    elif how == "text in begin()":
        with engine.begin() as c:
            c.execute(text("SELECT 1"))  # inside the transaction, holding the gate
            c.execute(text(sql))
    elif how == "Session":
        with Session(engine) as s:
            s.execute(text(sql))
    elif how == "AUTOCOMMIT":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
            c.exec_driver_sql(sql)
    elif how == "raw DBAPI":
        raw = engine.raw_connection()
        try:
            raw.cursor().execute(sql)
        finally:
            raw.close()
    else:  # the asyncio engine, on the same file

        async def main() -> None:
            aengine = create_async_engine(engine.url)
            try:
                async with aengine.connect() as c:
                    await c.exec_driver_sql(sql)
            finally:
                await aengine.dispose()

        asyncio.run(main())


HOWS = ["exec_driver_sql", "text in begin()", "Session", "AUTOCOMMIT", "raw DBAPI", "asyncio"]


def file_is_shared(engine: Engine, path: str) -> None:
    """Still WAL, normal locking, every pooled connection writable, and
    another process's plain sqlite3 reads and writes beside it."""
    with engine.connect() as c:
        assert c.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert c.exec_driver_sql("PRAGMA locking_mode").scalar() == "normal"
        assert c.exec_driver_sql("PRAGMA query_only").scalar() == 0
        assert c.exec_driver_sql("PRAGMA writable_schema").scalar() == 0
    conns = [engine.connect() for _ in range(3)]  # the pool's, whichever ran the PRAGMA
    try:
        for c in conns:
            assert c.exec_driver_sql("PRAGMA query_only").scalar() == 0
    finally:
        for c in conns:
            c.close()
    with engine.begin() as c:
        c.exec_driver_sql("INSERT INTO t VALUES ('ours')")
    with closing(sqlite3.connect(path, timeout=5)) as other:
        with other:
            other.execute("INSERT INTO t VALUES ('other')")
        assert other.execute("SELECT count(*) FROM t").fetchone() == (3,)


@pytest.fixture
def shared_file(tmp_path: Path) -> Iterator[tuple[Engine, str]]:
    path = str(tmp_path / "app.db")
    engine = create_engine(f"sqlite+litegate:///{path}")
    with engine.begin() as c:
        c.exec_driver_sql("CREATE TABLE t(a)")
        c.exec_driver_sql("INSERT INTO t VALUES ('kept')")
    yield engine, path
    engine.dispose()


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("sql", REFUSED)
def test_pragmas_that_break_other_connections_are_refused(
    shared_file: tuple[Engine, str], sql: str, how: str
) -> None:
    engine, path = shared_file
    with pytest.raises(StatementRefused) as info:
        through(engine, how, sql)
    err = info.value
    assert isinstance(err, litegate.ConfigError)  # the core's, as litegate.connect() refuses it
    assert isinstance(err, exc.OperationalError)
    assert isinstance(err.orig, litegate.ConfigError)
    name = sql.split()[1].split("=")[0].removeprefix("main.")
    assert str(err.orig).startswith(f"PRAGMA {name} = ")
    file_is_shared(engine, path)


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("sql", ALLOWED)
def test_pragmas_that_keep_the_file_shared_still_run(
    shared_file: tuple[Engine, str], sql: str, how: str
) -> None:
    engine, path = shared_file
    through(engine, how, sql)
    file_is_shared(engine, path)


def test_query_only_refusal_points_at_the_read_only_scope(shared_file: tuple[Engine, str]) -> None:
    engine, _ = shared_file
    with read_only(engine) as c:  # litegate's own PRAGMA query_only still runs
        assert c.exec_driver_sql("PRAGMA query_only").scalar() == 1
        advice = r"litegate_read_only=True .* or litegate.sqlalchemy.read_only\(\)"
        with pytest.raises(StatementRefused, match=advice):
            c.exec_driver_sql("PRAGMA query_only = 1")


# -- URL values: typed, at create_engine -------------------------------------------

BAD_URLS = [
    ("timeout=abc", r"\?timeout= must be a number of seconds, got 'abc' \(for example"),
    ("timeout=5&timeout=6", r"\?timeout= is given 2 times in the URL \('5', '6'\); give it once"),
    ("timeout=0", "timeout must be greater than zero, got 0.0; use float"),
    ("timeout=nan", "timeout must be greater than zero, got nan; use float"),
    ("pragmas=nosuch=1", "SQLite does not know PRAGMA 'nosuch'"),
    ("pragmas=synchronous=FULL&pragmas=cache_size=1", r"\?pragmas= is given 2 times"),
    ("pragmas=journal_mode=DELETE", "PRAGMA journal_mode = 'DELETE': litegate runs readers"),
    ("profile=balanced&profile=default", r"\?profile= is given 2 times"),
    ("fair=true&fair=strict", r"\?fair= is given 2 times"),
    ("uri=maybe", r"\?uri= must be true or false, got 'maybe'"),
    ("check_same_thread=2", r"\?check_same_thread= must be true or false, got '2'"),
    ("detect_types=x", r"\?detect_types= must be a whole number, got 'x'"),
    ("cached_statements=-1", r"\?cached_statements= must be 0 or more, got '-1'"),
    ("isolation_level=AUTOCOMMIT", r"\?isolation_level= in the URL is not applied"),
    ("profil=conservative", "the URL's 'profil' is not a setting; use profile, pragmas"),
    ("uri=true&nolock=1", r"\?nolock= is refused: it turns SQLite's locks off"),
    ("uri=true&immutable=1", r"\?immutable= is refused"),
    ("uri=true&vfs=unix-none", r"\?vfs=unix-none is refused"),
]


@pytest.mark.parametrize(("query", "says"), BAD_URLS)
def test_bad_url_values_are_config_errors_at_create_engine(
    tmp_path: Path, query: str, says: str
) -> None:
    from litegate.sqlalchemy import ConfigError

    for make in (create_engine, create_async_engine):
        with pytest.raises(ConfigError, match=says) as info:
            make(f"sqlite+litegate:///{tmp_path / 'app.db'}?{query}")  # no connection yet
        assert isinstance(info.value, litegate.ConfigError)
        assert isinstance(info.value, exc.ArgumentError)
    assert list(tmp_path.iterdir()) == []  # refused before anything opened


GOOD_URLS = [
    "timeout=2.5",
    "timeout=inf",
    "pragmas=mmap_size=,synchronous=FULL",
    "fair=strict",
    "check_same_thread=false",
    "cached_statements=64",
    "detect_types=0",
    "uri=true&cache=private",
]


@pytest.mark.parametrize("query", GOOD_URLS)
def test_good_url_values_still_work(tmp_path: Path, query: str) -> None:
    engine = create_engine(f"sqlite+litegate:///{tmp_path / 'app.db'}?{query}")
    try:
        with engine.begin() as c:
            c.exec_driver_sql("CREATE TABLE t(a)")
            c.exec_driver_sql("INSERT INTO t VALUES (1)")
        with engine.connect() as c:
            assert c.exec_driver_sql("SELECT count(*) FROM t").scalar() == 1
    finally:
        engine.dispose()


@pytest.mark.parametrize(("query", "busy_ms"), [("timeout=inf", 2**31 - 1), ("timeout=2.5", 2500)])
def test_timeout_is_sqlites_busy_timeout_even_without_a_limit(
    tmp_path: Path, query: str, busy_ms: int
) -> None:
    """``timeout=inf`` waits as long as SQLite can for a writer outside
    litegate: sqlite3 would turn inf into a busy timeout of 0 (no wait at
    all: a WAL recovery of another connection then failed a BEGIN with
    "database is locked"), so the longest SQLite takes is passed."""
    engine = create_engine(f"sqlite+litegate:///{tmp_path / 'app.db'}?{query}")
    try:
        with engine.connect() as c:
            assert c.exec_driver_sql("PRAGMA busy_timeout").scalar() == busy_ms
    finally:
        engine.dispose()


# -- VACUUM ------------------------------------------------------------------------


@pytest.fixture
def holey(tmp_path: Path) -> Iterator[tuple[Engine, str]]:
    """A file with half its pages free (rows deleted), and 1,500 rows kept."""
    path = str(tmp_path / "app.db")
    engine = create_engine(f"sqlite+litegate:///{path}")
    with engine.begin() as c:
        c.exec_driver_sql("CREATE TABLE t(a)")
        c.exec_driver_sql(
            "INSERT INTO t WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r "
            "WHERE i < 3000) SELECT randomblob(1000) FROM r"
        )
        c.exec_driver_sql("DELETE FROM t WHERE rowid > 1500")
    yield engine, path
    engine.dispose()


def pages(path: str) -> tuple[int, int, int]:
    with closing(sqlite3.connect(path)) as conn:
        count = conn.execute("PRAGMA page_count").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        rows = conn.execute("SELECT count(*) FROM t").fetchone()[0]
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    return count, free, rows


VACUUMS = ["connect()", "begin()", "Session", "AUTOCOMMIT", "raw DBAPI", "asyncio connect()",
           "asyncio begin()"]  # fmt: skip


@pytest.mark.parametrize("how", VACUUMS)
def test_vacuum_runs_as_the_first_statement(holey: tuple[Engine, str], how: str) -> None:
    """As with the stock driver, VACUUM runs as the first statement of a
    connection or transaction: outside any transaction, with the whole
    write gate held (as db.vacuum() runs it); the free pages are gone and
    the rows kept; the transaction goes on after it."""
    engine, path = holey
    count, free, rows = pages(path)
    assert free > count // 3
    if how == "connect()":
        with engine.connect() as c:
            assert not c.exec_driver_sql("VACUUM").returns_rows
    elif how == "begin()":
        with engine.begin() as c:
            c.exec_driver_sql("VACUUM")
            c.exec_driver_sql("INSERT INTO t VALUES (1)")  # the transaction opens here
            rows += 1
    elif how == "Session":
        with Session(engine) as s:
            s.execute(text("VACUUM"))
            s.commit()
    elif how == "AUTOCOMMIT":
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
            c.exec_driver_sql("VACUUM")
    elif how == "raw DBAPI":
        raw = engine.raw_connection()
        try:
            raw.cursor().execute("VACUUM")
        finally:
            raw.close()
    else:

        async def main() -> None:
            aengine = create_async_engine(engine.url)
            try:
                if how == "asyncio connect()":
                    async with aengine.connect() as c:
                        await c.exec_driver_sql("VACUUM")
                else:
                    async with aengine.begin() as c:
                        await c.exec_driver_sql("VACUUM")
                        await c.exec_driver_sql("INSERT INTO t VALUES (1)")
            finally:
                await aengine.dispose()

        asyncio.run(main())
        rows += how == "asyncio begin()"
    after = pages(path)
    assert after[1:] == (0, rows)
    assert after[0] <= count - free + 1


def test_vacuum_into_writes_a_copy(holey: tuple[Engine, str], tmp_path: Path) -> None:
    engine, path = holey
    copy = tmp_path / "copy.db"
    with engine.connect() as c:
        c.exec_driver_sql("VACUUM INTO ?", (str(copy),))
    with closing(sqlite3.connect(copy)) as conn:
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (1500,)
        assert conn.execute("PRAGMA freelist_count").fetchone() == (0,)
    assert pages(path)[2] == 1500


def test_vacuum_inside_an_open_transaction_says_what_to_do(holey: tuple[Engine, str]) -> None:
    """A sqlite+litegate transaction begins at its first statement, reads
    included (the stock driver, at the first write): VACUUM after a read is
    refused, nothing changed, and the transaction goes on."""
    engine, path = holey
    before = pages(path)
    with engine.begin() as c:
        c.exec_driver_sql("SELECT count(*) FROM t")
        with pytest.raises(StatementRefused) as info:
            c.exec_driver_sql("VACUUM")
        c.exec_driver_sql("INSERT INTO t VALUES (1)")
    assert isinstance(info.value, litegate.ConfigError)
    assert isinstance(info.value, exc.OperationalError)
    assert str(info.value.orig).startswith("VACUUM cannot run inside a transaction")
    assert "isolation_level='AUTOCOMMIT'" in str(info.value.orig)
    assert pages(path) == (before[0], before[1], before[2] + 1)


def test_vacuum_in_a_read_only_scope_is_refused(holey: tuple[Engine, str]) -> None:
    engine, path = holey
    before = pages(path)
    with pytest.raises(ReadOnlyScopeError), read_only(engine) as c:
        c.exec_driver_sql("VACUUM")
    assert pages(path) == before


def test_vacuum_queues_for_the_gate(holey: tuple[Engine, str], tmp_path: Path) -> None:
    """VACUUM waits for the gate like any writer: with a transaction of
    another thread holding it, it times out with GateTimeout (never
    "database is locked")."""
    engine, path = holey
    held, leave = threading.Event(), threading.Event()

    def holder() -> None:
        with engine.begin() as c:
            c.exec_driver_sql("INSERT INTO t VALUES (1)")
            held.set()
            leave.wait(30)

    t = threading.Thread(target=holder)
    t.start()
    assert held.wait(10)
    quick = create_engine(f"sqlite+litegate:///{path}?timeout=0.3")
    try:
        with pytest.raises(GateTimeout), quick.connect() as c:
            c.exec_driver_sql("VACUUM")
    finally:
        leave.set()
        t.join()
        quick.dispose()
    assert pages(path)[2] == 1501
