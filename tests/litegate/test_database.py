"""The public API of a Database, and every bad input the issue lists.

The behaviour suite runs on both faces: each test that takes ``db`` or
``connect`` runs once on the sync :class:`litegate.Database` and once on
:mod:`litegate.aio` (through tests/litegate/faces.py), so the faces cannot
drift apart unseen. Tests of what only one face has (a thread's nested
write, file permissions) take ``sync_db`` or connect directly."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

import litegate
from tests.conftest import gate_held_by_another_thread, running_as_root, wait_until
from tests.litegate.faces import AsyncFace, sync_of

Connect = Callable[..., Any]


@pytest.fixture(params=["sync", "aio"])
def connect(request: pytest.FixtureRequest) -> Iterator[Connect]:
    """``litegate.connect`` on this run's face (closed at the end)."""
    opened: list[Any] = []

    def open_(path: str, **kwargs: Any) -> Any:
        db = litegate.connect(path, **kwargs)
        face = db if request.param == "sync" else AsyncFace(db)
        opened.append(face)
        return face

    yield open_
    for face in opened:
        face.close()
        if isinstance(face, AsyncFace):
            face.shutdown()


@pytest.fixture
def db(connect: Connect, db_path: str) -> Any:
    """The suite's database (table ``t``) on this run's face."""
    database = connect(db_path, readers=2, timeout=10)
    database.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v)")
    return database


@pytest.fixture
def sync_db(db_path: str) -> Iterator[litegate.Database]:
    database = litegate.connect(db_path, readers=2, timeout=10)
    database.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v)")
    yield database
    database.close()


def count(db: Any) -> int:
    return int(db.query("SELECT count(*) FROM t")[0][0])


# -- the API ---------------------------------------------------------------


def test_execute_returns_after_commit(db: Any, db_path: str) -> None:
    r = db.execute("INSERT INTO t(v) VALUES (?)", ("a",))
    assert r == litegate.WriteResult(rowcount=1, lastrowid=1, rows=[])
    # Visible to a connection that litegate does not manage: it is committed.
    with closing(sqlite3.connect(db_path)) as other:
        assert other.execute("SELECT v FROM t").fetchall() == [("a",)]


def test_executemany_is_one_transaction(db: Any) -> None:
    r = db.executemany("INSERT INTO t(v) VALUES (?)", [(i,) for i in range(10)])
    assert r.rowcount == 10
    assert db.stats()["writes"]["committed"] == 2  # CREATE TABLE + this one
    with pytest.raises(sqlite3.IntegrityError):
        db.executemany("INSERT INTO t(id, v) VALUES (?, ?)", [(100, 1), (100, 2)])
    assert count(db) == 10  # the failed batch left nothing behind


def test_returning_rows(db: Any) -> None:
    r = db.execute("INSERT INTO t(v) VALUES (?) RETURNING id, v", ("x",))
    assert r.rows == [(1, "x")]


def test_transact_returns_fns_value_after_commit_and_fails_alone(db: Any) -> None:
    def two(conn: Any) -> int:
        conn.execute("INSERT INTO t(v) VALUES ('a')")
        conn.execute("INSERT INTO t(v) VALUES ('b')")
        return 2

    def half_then_fail(conn: Any) -> None:
        conn.execute("INSERT INTO t(v) VALUES ('undone')")
        raise ZeroDivisionError

    assert db.transact(two) == 2
    with pytest.raises(ZeroDivisionError):
        db.transact(half_then_fail)
    assert sorted(v for (v,) in db.query("SELECT v FROM t")) == ["a", "b"]
    with pytest.raises(litegate.TransactionError):
        db.execute("COMMIT")  # litegate's transaction is not the caller's to end
    with pytest.raises(litegate.ConfigError, match=r"db\.vacuum"):
        db.execute("VACUUM")


def test_write_block_commits_and_rolls_back(db: Any) -> None:
    with db.write() as conn:
        conn.execute("INSERT INTO t(v) VALUES (1)")
        assert conn.in_transaction
    assert count(db) == 1

    def fail_inside() -> None:
        with db.write() as conn:
            conn.execute("INSERT INTO t(v) VALUES (2)")
            raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        fail_inside()
    assert count(db) == 1


def test_read_block_is_one_snapshot(db: Any) -> None:
    db.execute("INSERT INTO t(v) VALUES (1)")
    with db.read() as conn:
        before = conn.execute("SELECT count(*) FROM t").fetchone()[0]
        db.execute("INSERT INTO t(v) VALUES (2)")  # another connection commits
        after = conn.execute("SELECT count(*) FROM t").fetchone()[0]
    assert before == after == 1
    assert count(db) == 2


def test_read_then_write_in_write_block_never_locked(db_path: str) -> None:
    """The ORM pattern (SELECT, then UPDATE) from many threads: no 'database
    is locked', no lost update."""
    db = litegate.connect(db_path, timeout=30)
    db.execute("CREATE TABLE c(id INTEGER PRIMARY KEY, n INTEGER)")
    db.execute("INSERT INTO c VALUES (1, 0)")
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            for _ in range(50):
                with db.write() as conn:
                    (n,) = conn.execute("SELECT n FROM c WHERE id = 1").fetchone()
                    conn.execute("UPDATE c SET n = ? WHERE id = 1", (n + 1,))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert db.query("SELECT n FROM c")[0][0] == 400
    db.close()


def test_stats_report_what_is_in_force(connect: Connect, db_path: str) -> None:
    db = connect(db_path, profile="conservative", pragmas={"cache_size": -4000})
    db.query("SELECT 1")
    s = db.stats()
    w = s["pragmas"]["writer"]
    # read back from SQLite: synchronous FULL is 2, journal mode in lower case
    assert w["journal_mode"] == "wal"
    assert w["synchronous"] == 2
    assert w["cache_size"] == -4000
    # litegate's checkpointer replaces SQLite's auto-checkpoint: off on the
    # connection, the profile's value drives the background thread instead
    assert w["wal_autocheckpoint"] == 0
    assert s["checkpoints"]["every_commits"] == 500
    assert w["journal_size_limit"] == 8 * 500 * 4096
    assert w["busy_timeout"] == 0  # the writer never sleeps inside SQLite
    assert s["pragmas"]["readers"]["busy_timeout"] == 10000
    assert s["pragmas"]["readers"]["query_only"] == 1
    assert s["timeout_s"] == 10.0  # from the profile's busy_timeout
    assert s["connections"] == {"writer": 1, "readers": 1}
    assert s["gate"]["count"] == 0
    assert s["pool"]["count"] == 1
    assert s["wal_bytes"] >= 0
    db.close()


def test_stats_count_waits(db: Any) -> None:
    with gate_held_by_another_thread(sync_of(db)):
        w = threading.Thread(target=lambda: db.execute("INSERT INTO t(v) VALUES (1)"))
        w.start()
        wait_until(lambda: db.stats()["gate"]["waiting"] == 1)
        assert "writers_waiting=1" in repr(db)
        assert "gate=held" in repr(db)
    w.join()
    g = db.stats()["gate"]
    assert g["count"] == 3  # CREATE TABLE, holder, waiter
    assert g["max_ms"] > 0
    assert g["timeouts"] == 0
    assert g["waiting"] == 0


def test_close_is_idempotent_and_final(connect: Connect, db_path: str) -> None:
    db = connect(db_path)
    db.close()
    db.close()
    assert "closed" in repr(db)
    with pytest.raises(litegate.Closed):
        db.query("SELECT 1")
    with pytest.raises(litegate.Closed):
        db.execute("SELECT 1")
    with pytest.raises(litegate.Closed), db.write():
        pass
    with pytest.raises(litegate.Closed), db.read():
        pass
    with pytest.raises(litegate.Closed):
        db.stats()


def test_close_wakes_queued_writers_and_readers(connect: Connect, db_path: str) -> None:
    db = connect(db_path, readers=1, timeout=30)
    held = threading.Event()
    leave = threading.Event()
    results: list[str] = []

    def holder() -> None:
        with db.write(), db.read():
            held.set()
            leave.wait(10)
        results.append("holder done")

    def waiter(kind: str) -> None:
        try:
            if kind == "w":
                db.execute("SELECT 1")
            else:
                db.query("SELECT 1")
        except litegate.Closed:
            results.append(f"{kind} closed")

    t = threading.Thread(target=holder)
    t.start()
    assert held.wait(10)
    ws = [threading.Thread(target=waiter, args=(k,)) for k in ("w", "r")]
    for x in ws:
        x.start()
    wait_until(lambda: db.stats()["gate"]["waiting"] == 1 and db.stats()["pool"]["waiting"] == 1)
    db.close()
    for x in ws:
        x.join()
    assert sorted(results) == ["r closed", "w closed"]
    leave.set()  # the transaction in progress still finishes normally
    t.join()
    assert results[-1] == "holder done"


def test_context_manager_closes(db_path: str) -> None:
    with litegate.connect(db_path) as db:
        db.execute("CREATE TABLE x(a)")
    with pytest.raises(litegate.Closed):
        db.query("SELECT 1")


def test_exceptions_are_catchable_as_documented() -> None:
    assert issubclass(litegate.PoolTimeout, TimeoutError)
    assert issubclass(litegate.WriteTimeout, TimeoutError)
    for exc in (
        litegate.PoolTimeout,
        litegate.WriteTimeout,
        litegate.Closed,
        litegate.ConfigError,
        litegate.OpenError,
        litegate.ReadOnlyError,
        litegate.NestedWriteError,
    ):
        assert issubclass(exc, litegate.Error)
    assert issubclass(litegate.ReadOnlyError, sqlite3.OperationalError)


# -- timeouts ---------------------------------------------------------------


def test_write_timeout_when_gate_held(db: Any) -> None:
    with (
        gate_held_by_another_thread(sync_of(db)),
        pytest.raises(litegate.WriteTimeout, match="raise timeout="),
    ):
        db.execute("INSERT INTO t(v) VALUES (1)", timeout=0.05)
    assert db.stats()["gate"]["timeouts"] == 1
    db.execute("INSERT INTO t(v) VALUES (2)")  # the gate still works afterwards
    assert count(db) == 1


def test_pool_timeout(connect: Connect, db_path: str) -> None:
    db = connect(db_path, readers=1)
    with db.read(), pytest.raises(litegate.PoolTimeout, match="readers="):
        db.query("SELECT 1", timeout=0.05)
    assert db.query("SELECT 1") == [(1,)]
    assert db.stats()["pool"]["timeouts"] == 1
    db.close()


# -- bad input ----------------------------------------------------------------


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(litegate.OpenError, match="does not exist; create it first"):
        litegate.connect(str(tmp_path / "nope" / "app.db"))
    assert not (tmp_path / "nope").exists()


def test_path_is_a_directory(tmp_path: Path) -> None:
    with pytest.raises(litegate.OpenError, match="is a directory"):
        litegate.connect(str(tmp_path))


def test_not_a_sqlite_file(tmp_path: Path) -> None:
    p = tmp_path / "notes.txt"
    p.write_text("hello, I am not a database\n" * 100)
    with pytest.raises(litegate.OpenError, match="is not a SQLite database"):
        litegate.connect(str(p))
    assert p.read_text().startswith("hello")  # untouched


@pytest.mark.parametrize("target", [":memory:", "", "file:x.db?mode=memory"])
def test_memory_or_uri_rejected(target: str) -> None:
    with pytest.raises(litegate.ConfigError, match="database file"):
        litegate.connect(target)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"profile": "fast"}, "unknown profile 'fast'; pick one of"),
        ({"busy": "spin"}, "unknown busy strategy 'spin'"),
        ({"readers": 0}, "readers must be greater than zero"),
        ({"readers": -3}, "readers must be greater than zero"),
        ({"readers": 2.5}, "readers must be a whole number"),
        ({"timeout": 0}, "timeout must be greater than zero"),
        ({"timeout": -1.0}, "timeout must be greater than zero"),
        ({"timeout": float("nan")}, "timeout must be greater than zero"),
        ({"timeout": "5"}, "timeout must be a number of seconds"),
        ({"pragmas": {"cache size": 1}}, "bad PRAGMA name"),
        ({"pragmas": {"cache_size": "1; DROP TABLE t"}}, "bad value"),
        ({"pragmas": {"cahce_size": 100}}, "does not know PRAGMA 'cahce_size'"),
    ],
)
def test_bad_arguments(db_path: str, kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(litegate.ConfigError, match=message):
        litegate.connect(db_path, **kwargs)  # type: ignore[arg-type]


def test_bad_per_call_timeout(db: Any) -> None:
    with pytest.raises(litegate.ConfigError):
        db.execute("SELECT 1", timeout=0)
    with pytest.raises(litegate.ConfigError):
        db.query("SELECT 1", timeout=-1)


def test_bad_sql_reaches_only_its_caller(db: Any) -> None:
    errors: dict[int, BaseException] = {}
    start = threading.Barrier(8)

    def worker(i: int) -> None:
        start.wait()
        try:
            if i == 3:
                db.execute("INSERT INTO no_such_table VALUES (1)")
            elif i == 5:
                db.execute("INSRT INTO t(v) VALUES (1)")
            else:
                db.execute("INSERT INTO t(v) VALUES (?)", (i,))
        except BaseException as exc:
            errors[i] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(errors) == {3, 5}
    assert all(isinstance(e, sqlite3.OperationalError) for e in errors.values())
    assert "no such table" in str(errors[3])
    assert "syntax error" in str(errors[5])
    assert sorted(v for (v,) in db.query("SELECT v FROM t")) == [0, 1, 2, 4, 6, 7]


def test_write_through_read_paths_is_refused(db: Any, db_path: str) -> None:
    db.execute("INSERT INTO t(v) VALUES ('keep')")
    statements = [
        "INSERT INTO t(v) VALUES ('x')",
        "DELETE FROM t",
        "UPDATE t SET v = 'y'",
        "DROP TABLE t",
        "CREATE TABLE u(a)",
    ]
    for sql in statements:
        with pytest.raises(litegate.ReadOnlyError, match="nothing was changed"):
            db.query(sql)
        with pytest.raises(litegate.ReadOnlyError), db.read() as conn:
            conn.execute(sql)
    assert db.query("SELECT v FROM t") == [("keep",)]
    # the read connections are still healthy and were reused, not leaked
    assert db.stats()["pool"]["in_use"] == 0
    assert db.query("SELECT count(*) FROM t") == [(1,)]


def test_nested_write_same_thread_is_an_error_not_a_deadlock(sync_db: litegate.Database) -> None:
    """A thread's nested write (the asyncio face's nesting is a task's: in
    test_aio.py)."""
    db = sync_db
    with db.write() as conn:
        conn.execute("INSERT INTO t(v) VALUES ('outer')")
        with pytest.raises(litegate.NestedWriteError, match=r"enclosing db\.write"), db.write():
            pass
        with pytest.raises(litegate.NestedWriteError, match=r"use conn\.execute"):
            db.execute("INSERT INTO t(v) VALUES ('inner')")
        conn.execute("INSERT INTO t(v) VALUES ('still fine')")
    assert sorted(v for (v,) in db.query("SELECT v FROM t")) == ["outer", "still fine"]


def test_existing_data_survives_bad_input(db: Any, db_path: str) -> None:
    db.execute("INSERT INTO t(v) VALUES ('precious')")
    with pytest.raises(litegate.ConfigError):
        litegate.connect(db_path, profile="nope")
    with pytest.raises(sqlite3.OperationalError):
        db.execute("garbage")
    with pytest.raises(litegate.ReadOnlyError):
        db.query("DELETE FROM t")
    db.close()
    again = litegate.connect(db_path)
    assert again.query("SELECT v FROM t") == [("precious",)]
    assert again.query("PRAGMA integrity_check") == [("ok",)]
    again.close()


# -- read-only locations: checked as an unprivileged user, since root may write anywhere


_RO_CHECK = textwrap.dedent(
    """
    import sys, litegate
    try:
        litegate.connect(sys.argv[1])
    except litegate.OpenError as exc:
        print("OpenError:", exc)
    else:
        print("opened")
    """
)


def _unprivileged_python() -> str:
    """An interpreter user 'nobody' can run (the venv's may live under /root)."""
    for cand in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        real = os.path.realpath(cand)
        chain: list[str | Path] = [real, *Path(real).parents]
        if os.path.exists(real) and all(os.stat(p).st_mode & 0o001 for p in chain):
            return cand
    pytest.skip("no Python interpreter that an unprivileged user may run")


def _connect_as_unprivileged(path: Path) -> str:
    if not running_as_root():
        python, env = sys.executable, {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        kwargs: dict[str, object] = {}
    else:
        # Copy the package next to the database so 'nobody' can import it.
        lib = path.parent.parent / "lib"
        if not lib.exists():
            shutil.copytree(Path(litegate.__file__).parent, lib / "litegate")
            for p in [lib, *lib.rglob("*")]:
                p.chmod(0o755 if p.is_dir() else 0o644)
        python, env = _unprivileged_python(), {"PYTHONPATH": str(lib), "PATH": "/usr/bin:/bin"}
        kwargs = {"user": 65534, "group": 65534, "extra_groups": []}
    out = subprocess.run(
        [python, "-c", _RO_CHECK, str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
        **kwargs,  # type: ignore[call-overload]
    )
    return str(out.stdout)


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A folder the unprivileged user can reach (pytest's own tmp is root-only)."""
    top = Path(tempfile.mkdtemp(prefix="litegate-ro-"))
    top.chmod(0o755)
    d = top / "db"
    d.mkdir()
    d.chmod(0o755)
    yield d
    d.chmod(0o755)
    shutil.rmtree(top)


def test_read_only_file(shared_tmp: Path) -> None:
    p = shared_tmp / "app.db"
    db = litegate.connect(str(p))
    db.execute("CREATE TABLE t(a)")
    db.execute("INSERT INTO t VALUES ('kept')")
    db.close()
    for f in shared_tmp.iterdir():
        f.chmod(0o644)  # readable by others, writable only by the owner
    if running_as_root():
        shared_tmp.chmod(0o777)  # the directory is not the problem here
    out = _connect_as_unprivileged(p)
    assert "OpenError:" in out
    assert "is read-only for this process" in out
    check = litegate.connect(str(p))
    assert check.query("SELECT a FROM t") == [("kept",)]
    check.close()


def test_read_only_directory(shared_tmp: Path) -> None:
    p = shared_tmp / "new.db"
    shared_tmp.chmod(0o555)
    try:
        out = _connect_as_unprivileged(p)
    finally:
        shared_tmp.chmod(0o755)
    assert "OpenError:" in out
    assert "WAL mode must create" in out
    assert "new.db-wal" in out
    assert not p.exists()


@pytest.mark.parametrize("companion", ["-shm", "-wal"])
def test_a_companion_deleted_while_it_is_looked_at_is_no_read_only_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, companion: str
) -> None:
    """Another process's last connection deletes the -shm (and -wal) as it
    closes. One that goes between our look at it and the access check is
    not "read-only for this process" (os.access says False for a file that
    is not there): the open goes on, and SQLite creates it again."""
    p = tmp_path / "app.db"
    with closing(sqlite3.connect(p)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE t(a)")
    (tmp_path / f"app.db{companion}").write_bytes(b"")  # (as a live process has it)
    real_access = os.access

    def another_process_closes_first(path: Any, mode: int, **kw: Any) -> bool:
        if str(path).endswith(companion):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        return real_access(path, mode, **kw)

    monkeypatch.setattr(os, "access", another_process_closes_first)
    db = litegate.connect(str(p))
    monkeypatch.undo()
    db.execute("INSERT INTO t VALUES (1)")
    assert db.query("SELECT a FROM t") == [(1,)]
    db.close()
