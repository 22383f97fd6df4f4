"""Misuse of the core: each case once failed untyped, hung, lost
data or broke the Database; each now gets a typed error or works."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shutil
import sqlite3
import struct
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import litegate
import litegate.aio
from litegate import _lockformat
from tests.conftest import gate_held_by_another_thread, running_as_root, wait_until


@pytest.fixture
def tdb(db_path: str) -> Iterator[litegate.Database]:
    database = litegate.connect(db_path, readers=2, timeout=10)
    database.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v)")
    yield database
    database.close()


def values(db: litegate.Database) -> list[Any]:
    return [v for (v,) in db.query("SELECT v FROM t ORDER BY id")]


# -- a huge or infinite timeout means "no limit", never OverflowError -------


@pytest.mark.parametrize("limit", [1e12, float("inf"), 10**15])
def test_huge_timeouts_wait_without_limit(db_path: str, limit: float) -> None:
    db = litegate.connect(db_path, timeout=limit)
    assert db.timeout == float("inf")
    db.execute("CREATE TABLE t(v)")
    got: list[object] = []

    def writer(k: int) -> None:
        try:
            got.append(db.execute("INSERT INTO t VALUES (?)", (k,), timeout=limit).rowcount)
        except BaseException as exc:  # an OverflowError here was the bug
            got.append(exc)

    # Three threads queue behind a held gate: one leads a batch, the others
    # wait for it (the wait that overflowed), one more waits in db.write().
    with gate_held_by_another_thread(db):
        threads = [threading.Thread(target=writer, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        wait_until(lambda: db.stats()["gate"]["waiting"] >= 1, what="a queued leader")
    for t in threads:
        t.join(30)
    assert got == [1, 1, 1]
    with db.write(timeout=limit) as conn:
        conn.execute("INSERT INTO t VALUES (9)")
    assert db.query("SELECT count(*) FROM t", timeout=limit) == [(4,)]
    db.close()


def test_huge_timeout_on_the_asyncio_face(db_path: str) -> None:
    async def main() -> None:
        db = await litegate.aio.connect(db_path, timeout=1e12)
        await db.execute("CREATE TABLE t(v)", timeout=1e12)
        async with db.write(timeout=1e12) as tx:
            await tx.execute("INSERT INTO t VALUES (1)")
        assert await db.query("SELECT count(*) FROM t", timeout=1e12) == [(1,)]
        await db.close()

    asyncio.run(main())


@pytest.mark.parametrize("bad", [0, -1, float("nan"), "5", True])
def test_bad_timeouts_are_config_errors(db_path: str, bad: Any) -> None:
    with pytest.raises(litegate.ConfigError, match="timeout"):
        litegate.connect(db_path, timeout=bad)


# -- db.transact() with an async function -------------------------------------


async def _async_fn(conn: sqlite3.Connection) -> int:  # pragma: no cover - never runs
    conn.execute("INSERT INTO t(v) VALUES ('async')")
    return 1


class _AsyncCallable:
    async def __call__(self, conn: sqlite3.Connection) -> int:  # pragma: no cover
        return 1


@pytest.mark.parametrize(
    "fn", [_async_fn, functools.partial(_async_fn), _AsyncCallable(), None, 42], ids=repr
)
def test_transact_refuses_what_it_cannot_run(tdb: litegate.Database, fn: Any) -> None:
    with pytest.raises(litegate.ConfigError, match=r"db\.transact\(\)"):
        tdb.transact(fn)
    assert values(tdb) == []
    assert tdb.stats()["writes"]["committed"] == 1  # only the CREATE TABLE


def test_transact_fn_that_returns_a_coroutine(tdb: litegate.Database) -> None:
    # Not detectable up front: caught when it returns; the coroutine is closed
    # (no "never awaited" warning, which pytest would turn into an error).
    with pytest.raises(litegate.ConfigError, match="awaitable"):
        tdb.transact(lambda conn: _async_fn(conn))  # type: ignore[unused-coroutine]
    assert values(tdb) == []


def test_transact_with_async_fn_on_the_asyncio_face(db_path: str) -> None:
    async def main() -> None:
        db = await litegate.aio.connect(db_path)
        await db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v)")
        with pytest.raises(litegate.ConfigError, match="async function"):
            await db.transact(_async_fn)  # type: ignore[unused-coroutine]
        assert await db.query("SELECT count(*) FROM t") == [(0,)]
        await db.close()

    asyncio.run(main())


# -- PRAGMAs that break litegate, and values that are not values ---------


@pytest.mark.parametrize(
    ("pragmas", "match"),
    [
        ({"journal_mode": "DELETE"}, "needs WAL"),
        ({"journal_mode": "OFF"}, "needs WAL"),
        ({"locking_mode": "EXCLUSIVE"}, "EXCLUSIVE locking"),
        ({"query_only": 1}, "the writer must write"),
        ({"foreign_keys": "maybe"}, "on or off"),
        ({"cache_size": "abc"}, "whole number"),
        ({"synchronous": "BOGUS"}, "OFF, NORMAL, FULL, EXTRA"),
        ({"page_size": 1234}, "power of two"),
        ({"wal_autocheckpoint": -1}, "between 0 and"),
        ({"wal_autocheckpoint": "x"}, "whole number"),
        ({"busy_timeout": -5}, "PRAGMA busy_timeout must be between 0"),
        ({"busy_timeout": 0}, "busy_timeout=0 would make every wait"),
        ({"temp_store": 7}, "DEFAULT, FILE, MEMORY"),
        ({"mmap_size": -1}, ">= 0"),
        ({"cache_size": 1.5}, "whole number"),
        ([("synchronous", "FULL")], "must be a mapping"),
        ({"no_such_pragma": 1}, "does not know PRAGMA"),
        ({"hard_heap_limit": 1 << 30}, "process-wide.*soft_heap_limit"),
    ],
)
def test_pragma_values_are_checked(db_path: str, pragmas: Any, match: str) -> None:
    with pytest.raises(litegate.ConfigError, match=match):
        litegate.connect(db_path, pragmas=pragmas)


@pytest.mark.parametrize(
    ("pragmas", "name", "read_back"),
    [
        ({"foreign_keys": "off"}, "foreign_keys", 0),
        ({"foreign_keys": "YES"}, "foreign_keys", 1),
        ({"synchronous": "extra"}, "synchronous", 3),
        ({"synchronous": 2}, "synchronous", 2),
        ({"temp_store": "file"}, "temp_store", 1),
        ({"cache_size": "-4000"}, "cache_size", -4000),
        ({"secure_delete": "fast"}, "secure_delete", 2),
        ({"journal_mode": "wal"}, "journal_mode", "wal"),
    ],
)
def test_good_pragma_values_are_in_force(
    db_path: str, pragmas: dict[str, Any], name: str, read_back: object
) -> None:
    with litegate.connect(db_path, pragmas=pragmas) as db:
        db.query("SELECT 1")
        assert db.stats()["pragmas"]["writer"][name] == read_back
        assert db.stats()["pragmas"]["readers"][name] == read_back


def test_page_size_of_a_new_file_is_taken_and_of_a_wal_file_refused(db_path: str) -> None:
    with litegate.connect(db_path, pragmas={"page_size": 8192}) as db:
        db.execute("CREATE TABLE t(v)")
        assert db.stats()["pragmas"]["writer"]["page_size"] == 8192
    with pytest.raises(litegate.ConfigError, match="cannot change"):
        litegate.connect(db_path, pragmas={"page_size": 16384})


@pytest.mark.parametrize(
    "sql",
    [
        "PRAGMA journal_mode=DELETE",
        "PRAGMA journal_mode = off",
        "pragma journal_mode('truncate')",
        "PRAGMA locking_mode=EXCLUSIVE",
        "PRAGMA query_only=1",
        "PRAGMA writable_schema=ON",
        "PRAGMA hard_heap_limit = 403",
    ],
)
def test_pragmas_that_break_litegate_are_refused_at_runtime(
    tdb: litegate.Database, sql: str
) -> None:
    with pytest.raises(litegate.ConfigError, match="PRAGMA"):
        tdb.execute(sql)
    with pytest.raises(litegate.ConfigError, match="PRAGMA"):  # inside a transact() member
        tdb.transact(lambda conn: conn.execute(sql))
    with pytest.raises(litegate.ConfigError, match="PRAGMA"), tdb.write() as conn:
        conn.execute(sql)
    # Still WAL, still writable while a reader holds a snapshot (the defect:
    # "database is locked" once the file had left WAL).
    with tdb.read() as r:
        r.execute("SELECT count(*) FROM t").fetchone()
        tdb.execute("INSERT INTO t(v) VALUES ('during a read')")
    assert tdb.stats()["pragmas"]["writer"]["journal_mode"] == "wal"
    assert values(tdb) == ["during a read"]


def test_a_hard_heap_limit_is_refused_everywhere_and_the_process_keeps_none(
    tdb: litegate.Database,
) -> None:
    # The defect: PRAGMA hard_heap_limit = 403 through db.execute() (drawn by
    # the misuse search) set SQLite's process-wide limit, and from then on
    # every statement of every connection in the process, litegate's own
    # checkpointer included, failed with an untyped MemoryError.
    for run in (tdb.execute, tdb.query):
        with pytest.raises(litegate.Error, match="hard_heap_limit"):
            run("PRAGMA hard_heap_limit = 403")
    with contextlib.closing(sqlite3.connect(":memory:")) as other:
        assert other.execute("PRAGMA hard_heap_limit").fetchone() == (0,)
    assert tdb.query("PRAGMA hard_heap_limit") == [(0,)]  # reading it is fine
    tdb.execute("INSERT INTO t(v) VALUES ('after')")
    assert values(tdb) == ["after"]


def test_stats_reads_pragmas_back_after_a_runtime_change(tdb: litegate.Database) -> None:
    assert tdb.stats()["pragmas"]["writer"]["cache_size"] == -20000
    tdb.execute("PRAGMA cache_size = -1234")
    assert tdb.stats()["pragmas"]["writer"]["cache_size"] == -1234
    with tdb.write() as conn:
        conn.execute("PRAGMA temp_store = FILE")
        assert tdb.stats()["pragmas"]["writer"]["temp_store"] == 1  # read by the holder itself
    tdb.execute("PRAGMA cache_size = -20000")
    tdb.execute("PRAGMA cache_size = -1234")  # re-run from the statement cache
    assert tdb.stats()["pragmas"]["writer"]["cache_size"] == -1234
    assert tdb.stats()["pragmas"]["writer"]["temp_store"] == 1


# -- a setting through the read path -----------------------------------------


@pytest.mark.parametrize(
    "sql",
    [
        "PRAGMA journal_mode=delete",
        "PRAGMA cache_size=5",
        "PRAGMA user_version=3",
        "PRAGMA hard_heap_limit=403",
    ],
)
def test_setting_pragmas_through_reads_is_read_only_error(tdb: litegate.Database, sql: str) -> None:
    with pytest.raises(litegate.ReadOnlyError, match="read connection"):
        tdb.query(sql)
    with pytest.raises(litegate.ReadOnlyError, match="read connection"), tdb.read() as conn:
        conn.execute(sql)
    assert tdb.query("PRAGMA journal_mode") == [("wal",)]
    assert tdb.query("PRAGMA table_info(t)")[0][1] == "id"  # query PRAGMAs still work


# -- transaction control from user code ---------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        lambda c: c.close(),
        lambda c: c.commit(),
        lambda c: c.rollback(),
        lambda c: c.execute("COMMIT"),
        lambda c: c.execute("ROLLBACK"),
        lambda c: c.execute("/* x */ BEGIN"),
        lambda c: c.execute("RELEASE litegate_member"),
    ],
    ids=["close", "commit()", "rollback()", "COMMIT", "ROLLBACK", "BEGIN", "RELEASE ours"],
)
def test_transact_cannot_end_litegates_transaction(tdb: litegate.Database, body: Any) -> None:
    def fn(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t(v) VALUES ('undone')")
        body(conn)

    # fn is a member of a real batch: two innocent mates queue with it
    # behind a held gate and must commit whatever fn tried.
    results: dict[str, object] = {}

    def call(name: str, f: Any) -> None:
        try:
            results[name] = f()
        except Exception as exc:
            results[name] = exc

    with gate_held_by_another_thread(tdb):
        threads = [
            threading.Thread(target=call, args=("a", lambda: tdb.execute(
                "INSERT INTO t(v) VALUES ('a')").rowcount)),
            threading.Thread(target=call, args=("bad", lambda: tdb.transact(fn))),
            threading.Thread(target=call, args=("b", lambda: tdb.transact(
                lambda c: c.execute("INSERT INTO t(v) VALUES ('b')").rowcount))),
        ]  # fmt: skip
        for t in threads:
            t.start()
            wait_until(lambda: tdb.stats()["gate"]["waiting"] >= 1, what="queued")
        wait_until(lambda: tdb._process_state().batcher.queued >= 2, what="members queued")
    for t in threads:
        t.join(30)
    assert isinstance(results["bad"], litegate.TransactionError), results
    assert results["a"] == 1
    assert results["b"] == 1
    assert sorted(values(tdb)) == ["a", "b"]
    tdb.execute("INSERT INTO t(v) VALUES ('after')")  # the Database still writes
    assert "after" in values(tdb)


def test_write_block_cannot_commit_or_close(tdb: litegate.Database) -> None:
    def commit_inside() -> None:
        with tdb.write() as c:
            c.execute("INSERT INTO t(v) VALUES ('x')")
            c.execute("COMMIT")

    with pytest.raises(litegate.TransactionError, match="belongs to litegate"):
        commit_inside()
    with pytest.raises(litegate.TransactionError, match="stays open"), tdb.write() as c:
        c.close()
    assert values(tdb) == []
    with tdb.write() as c:  # and SAVEPOINTs of one's own still work
        c.execute("SAVEPOINT mine")
        c.execute("INSERT INTO t(v) VALUES ('kept')")
        c.execute("RELEASE mine")
    assert values(tdb) == ["kept"]


def test_execute_begin_is_a_typed_error(tdb: litegate.Database) -> None:
    with pytest.raises(litegate.TransactionError):
        tdb.execute("BEGIN")
    assert isinstance(litegate.TransactionError("x"), litegate.Error)


# -- one file, one gate, whatever path names it --------------------------------


def test_a_symlink_and_its_target_share_one_gate(tmp_path: Path) -> None:
    real = tmp_path / "real.db"
    link = tmp_path / "link.db"
    link.symlink_to(real)
    a = litegate.connect(str(link), timeout=5)
    b = litegate.connect(str(real), timeout=5)
    try:
        assert a.path == b.path == str(real)
        assert a._process_state().filegate is b._process_state().filegate
        assert not (tmp_path / "link.db-litegate").exists()
        a.execute("CREATE TABLE t(v)")
        # ordered by one gate: b's write waits for a's block, no WriteTimeout
        # blaming "a writer outside litegate"
        order: list[str] = []

        def write_b() -> None:
            b.execute("INSERT INTO t VALUES ('b')")
            order.append("b")

        with a.write() as conn:
            t = threading.Thread(target=write_b)
            t.start()
            wait_until(lambda: a._process_state().filegate.waiting >= 1, what="b queued")
            conn.execute("INSERT INTO t VALUES ('a')")
            order.append("a")
        t.join(10)
        assert order == ["a", "b"]
        assert b.stats()["busy_retries"] == 0
    finally:
        a.close()
        b.close()


def test_a_hard_linked_database_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real.db"
    litegate.connect(str(real)).close()
    os.link(real, tmp_path / "other.db")
    with pytest.raises(litegate.OpenError, match="hard links"):
        litegate.connect(str(tmp_path / "other.db"))


# -- fork() while another thread is inside db.write() --------------------------


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_fork_while_another_thread_writes(tdb: litegate.Database, db_path: str) -> None:
    inside, go = threading.Event(), threading.Event()

    def holder() -> None:
        with tdb.write() as conn:
            conn.execute("INSERT INTO t(v) VALUES ('parent')")
            inside.set()
            go.wait(10)

    t = threading.Thread(target=holder)
    t.start()
    assert inside.wait(10)
    # fork() waits for the block to end: let it end a moment after fork() began
    threading.Timer(0.2, go.set).start()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        code = 1
        try:
            tdb.execute("INSERT INTO t(v) VALUES ('child: same db')", timeout=5)
            with litegate.connect(db_path, timeout=5) as again:
                again.execute("INSERT INTO t(v) VALUES ('child: new connect')")
            raw = sqlite3.connect(db_path, timeout=5, isolation_level=None)
            raw.execute("INSERT INTO t(v) VALUES ('child: raw sqlite3')")
            raw.close()
            code = 0
        finally:
            os._exit(code)
    t.join(10)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert values(tdb) == [
        "parent",
        "child: same db",
        "child: new connect",
        "child: raw sqlite3",
    ]
    tdb.execute("INSERT INTO t(v) VALUES ('parent again')")  # the parent's gate is back


# -- the sidecar's header ----------------------------------------------------


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder every user can reach (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="litegate-shared-"))
    os.chmod(path, 0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_the_sidecar_follows_the_database_files_permissions(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    sqlite3.connect(path).close()
    os.chmod(path, 0o660)
    old = os.umask(0o022)  # would strip group write from a plain create
    try:
        with litegate.connect(str(path)) as db:
            db.execute("CREATE TABLE t(v)")
            assert (os.stat(f"{path}-wal").st_mode & 0o777) == 0o660  # as SQLite does
    finally:
        os.umask(old)
    assert (os.stat(f"{path}-litegate").st_mode & 0o777) == 0o660


@pytest.mark.skipif(not running_as_root(), reason="needs root to act as two users")
def test_the_sidecar_of_a_database_made_by_root_serves_its_owner(shared_dir: Path) -> None:
    path = shared_dir / "app.db"
    sqlite3.connect(path).close()
    os.chown(path, 65534, 65534)
    with litegate.connect(str(path)):  # root creates the sidecar ...
        pass
    st = os.stat(f"{path}-litegate")
    assert (st.st_uid, st.st_gid) == (65534, 65534)  # ... owned like the database


@pytest.mark.skipif(not running_as_root(), reason="needs root to act as another user")
def test_a_sidecar_another_user_cannot_write_says_what_to_do(shared_dir: Path) -> None:
    path = shared_dir / "app.db"
    with litegate.connect(str(path)):
        pass
    os.chmod(path, 0o666)  # (-wal and -shm are gone; SQLite makes them like this)
    os.chmod(f"{path}-litegate", 0o644)  # as an old litegate left it
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - reports through the pipe
        os.close(r)
        msg = "no error"
        try:
            os.setgid(65534)
            os.setuid(65534)
            litegate.connect(str(path)).close()
        except litegate.OpenError as exc:
            msg = str(exc)
        except BaseException as exc:
            msg = f"untyped {exc!r}"
        os.write(w, msg.encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        msg = f.read()
    os.waitpid(pid, 0)
    assert "-litegate" in msg, msg
    assert "chmod g+w" in msg, msg
    assert "remove it" in msg, msg


@pytest.mark.parametrize("counter", [2**64 - 1, 2**63, 2**62])
def test_a_sidecar_with_a_damaged_counter_is_an_open_error(db_path: str, counter: int) -> None:
    with litegate.connect(db_path):
        pass
    with open(db_path + "-litegate", "r+b") as f:
        f.seek(8)
        f.write(struct.pack("<Q", counter))
    with pytest.raises(litegate.OpenError, match="remove it"):
        litegate.connect(db_path)
    os.remove(db_path + "-litegate")
    with litegate.connect(db_path) as db:  # what the message says works
        db.execute("CREATE TABLE t(v)")
    assert _lockformat.read_queue(db_path + "-litegate") is not None


def _orphaned_log(db_path: str, rows: int) -> bytes:
    """A database whose committed rows are all in its -wal, then its main
    file moved away: returns the main file's bytes (to put it back)."""
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t(v)")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(rows)])
    conn.execute("COMMIT")
    main = Path(db_path).read_bytes()
    wal = Path(db_path + "-wal").read_bytes()
    conn.close()  # (the last connection checkpoints and deletes the -wal)
    os.remove(db_path)
    for extra in ("-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(db_path + extra)
    Path(db_path + "-wal").write_bytes(wal)
    return main


@pytest.mark.parametrize("face", ["sync", "aio"])
def test_a_log_without_its_database_is_refused_not_discarded(db_path: str, face: str) -> None:
    """A -wal holding committed rows whose database file is gone: connect()
    raises OpenError saying what happened and how to recover, and leaves
    the log as it was (SQLite would create an empty database and truncate
    the log: the rows were lost). With the database file put back, every
    row is there."""
    main = _orphaned_log(db_path, 500)
    wal = Path(db_path + "-wal").read_bytes()

    def opening() -> None:
        if face == "sync":
            litegate.connect(db_path)
        else:
            asyncio.run(litegate.aio.connect(db_path))

    with pytest.raises(litegate.OpenError) as info:
        opening()
    message = str(info.value)
    assert "does not exist, but its write-ahead log" in message
    assert f"({len(wal)} bytes)" in message
    assert "Put the database file back" in message
    assert not os.path.exists(db_path)
    assert Path(db_path + "-wal").read_bytes() == wal
    Path(db_path).write_bytes(main)
    with litegate.connect(db_path) as db:
        assert db.query("SELECT count(*) FROM t") == [(500,)]


def test_a_hot_journal_without_its_database_is_refused(db_path: str) -> None:
    Path(db_path + "-journal").write_bytes(b"\xd9\xd5\x05\xf9\x20\xa1\x63\xd7" + bytes(504))
    with pytest.raises(litegate.OpenError, match="rollback journal"):
        litegate.connect(db_path)
    assert not os.path.exists(db_path)
    # an empty leftover holds nothing: a new database is made as usual
    os.remove(db_path + "-journal")
    Path(db_path + "-wal").write_bytes(b"")
    litegate.connect(db_path).close()
