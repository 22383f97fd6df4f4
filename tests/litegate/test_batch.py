"""Group commit: deterministic batches built by holding the gate while
callers queue, then letting go."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import closing
from typing import Any

import pytest

import litegate
from litegate import _guard
from tests.conftest import wait_until


@pytest.fixture
def gdb(db_path: str) -> Iterator[litegate.Database]:
    db = litegate.connect(db_path, timeout=30)
    db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
    yield db
    db.close()


def queued(db: litegate.Database) -> int:
    state = db._process_state()
    return state.batcher.queued


def run_as_one_batch(db: litegate.Database, calls: list[Callable[[], Any]]) -> dict[int, Any]:
    """Queue every call while the gate is held, then release: the first caller
    leads and takes all of them into one transaction."""
    results: dict[int, Any] = {}

    def worker(i: int) -> None:
        try:
            results[i] = calls[i]()
        except BaseException as exc:
            results[i] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(calls))]
    with db.write():
        for i, t in enumerate(threads):
            t.start()
            # the first becomes the leader and waits on the gate; the rest queue
            wait_until(lambda i=i: queued(db) == i + 1, what=f"call {i} to queue")  # type: ignore[misc]
    for t in threads:
        t.join()
    return results


def values(db: litegate.Database) -> list[str]:
    return sorted(v for (v,) in db.query("SELECT v FROM t"))


def test_one_batch_and_every_caller_sees_its_commit(gdb: litegate.Database, db_path: str) -> None:
    seen: dict[str, bool] = {}

    def call(v: str) -> Callable[[], Any]:
        def go() -> Any:
            r = gdb.execute("INSERT INTO t(v) VALUES (?)", (v,))
            # returned: the COMMIT is done, so a foreign connection sees it
            with closing(sqlite3.connect(db_path)) as other:
                seen[v] = other.execute("SELECT 1 FROM t WHERE v = ?", (v,)).fetchone() is not None
            return r

        return go

    results = run_as_one_batch(gdb, [call(f"v{i}") for i in range(8)])
    assert all(isinstance(r, litegate.WriteResult) and r.rowcount == 1 for r in results.values())
    assert sorted(r.lastrowid for r in results.values()) == list(range(1, 9))
    assert seen == {f"v{i}": True for i in range(8)}
    gc = gdb.stats()["writes"]["group_commit"]
    assert gc["max"] == 8  # all eight in one transaction


def test_failing_member_rolls_back_only_itself(gdb: litegate.Database) -> None:
    calls: list[Callable[[], Any]] = [
        lambda: gdb.execute("INSERT INTO t(v) VALUES ('a')"),
        lambda: gdb.execute("INSERT INTO t(v) VALUES (NULL)"),  # NOT NULL violation
        lambda: gdb.execute("INSERT INTO t(v) VALUES ('c')"),
        lambda: gdb.execute("INSRT nonsense"),
        lambda: gdb.executemany("INSERT INTO t(v) VALUES (?)", [("e1",), ("e2",)]),
        lambda: gdb.executemany("INSERT INTO t(id, v) VALUES (?, ?)", [(99, "f1"), (99, "f2")]),
    ]
    r = run_as_one_batch(gdb, calls)
    assert isinstance(r[1], sqlite3.IntegrityError)
    assert isinstance(r[3], sqlite3.OperationalError)
    assert isinstance(r[5], sqlite3.IntegrityError)  # f1 was inserted, then rolled back
    assert values(gdb) == ["a", "c", "e1", "e2"]
    assert gdb.query("PRAGMA integrity_check") == [("ok",)]


def test_first_member_failing_does_not_hurt_the_rest(gdb: litegate.Database) -> None:
    r = run_as_one_batch(
        gdb,
        [
            lambda: gdb.execute("INSERT INTO t(v) VALUES ('lead')"),  # the leader
            lambda: gdb.execute("INSERT INTO t(v) VALUES (NULL)"),
            lambda: gdb.execute("INSERT INTO t(v) VALUES ('b')"),
        ],
    )
    assert isinstance(r[1], sqlite3.IntegrityError)
    assert values(gdb) == ["b", "lead"]


def test_failed_commit_fails_every_member(db_path: str) -> None:
    """A deferred foreign key is checked at COMMIT: a real COMMIT failure."""
    db = litegate.connect(db_path, timeout=30)
    db.execute("CREATE TABLE parent(id INTEGER PRIMARY KEY)")
    db.execute(
        "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT, "
        "p INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED)"
    )
    r = run_as_one_batch(
        db,
        [
            lambda: db.execute("INSERT INTO t(v) VALUES ('ok1')"),
            lambda: db.execute("INSERT INTO t(v, p) VALUES ('orphan', 42)"),  # fails at COMMIT
            lambda: db.execute("INSERT INTO t(v) VALUES ('ok2')"),
        ],
    )
    assert all(isinstance(x, sqlite3.IntegrityError) for x in r.values()), r
    assert len({id(x) for x in r.values()}) == 3  # one exception object per caller
    assert db.query("SELECT count(*) FROM t") == [(0,)]  # nothing half-applied
    db.execute("INSERT INTO t(v) VALUES ('after')")  # and the writer is healthy
    assert db.query("SELECT v FROM t") == [("after",)]
    db.close()


def test_disk_full_statement_fails_only_its_member(db_path: str) -> None:
    db = litegate.connect(db_path, timeout=30)
    db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
    (pages,) = db.query("PRAGMA page_count")[0]
    with db.write() as conn:
        conn.execute(f"PRAGMA max_page_count = {pages + 2}")
    big = "x" * 50_000
    r = run_as_one_batch(
        db,
        [
            lambda: db.execute("INSERT INTO t(v) VALUES ('small')"),
            lambda: db.execute("INSERT INTO t(v) VALUES (?)", (big,)),
            lambda: db.execute("INSERT INTO t(v) VALUES ('small2')"),
        ],
    )
    # SQLite rolls the whole transaction back on SQLITE_FULL; litegate runs
    # the members that had succeeded again, so only the culprit fails.
    assert isinstance(r[1], sqlite3.OperationalError)
    assert "full" in str(r[1])
    assert isinstance(r[0], litegate.WriteResult)
    assert isinstance(r[2], litegate.WriteResult)
    assert sorted(v for (v,) in db.query("SELECT v FROM t")) == ["small", "small2"]
    db.close()


def test_transaction_control_is_refused(gdb: litegate.Database) -> None:
    for sql in ("COMMIT", "  begin", "ROLLBACK", "savepoint x", "RELEASE x", "END", "/*c*/ BEGIN",
                "-- note\nBEGIN", "/* a */ /* b */ commit"):  # fmt: skip
        with pytest.raises(litegate.TransactionError, match=r"use db\.write\(\) or db\.transact"):
            gdb.execute(sql)
    assert issubclass(litegate.TransactionError, ValueError)  # what it raised before
    gdb.execute("INSERT INTO t(v) VALUES ('fine')")
    assert values(gdb) == ["fine"]


def test_batches_are_bounded_by_count(db_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(litegate.Database, "GROUP_COMMIT_MAX_STATEMENTS", 4)
    db = litegate.connect(db_path, timeout=30)
    db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT NOT NULL)")

    def insert(i: int) -> Callable[[], Any]:
        return lambda: db.execute("INSERT INTO t(v) VALUES (?)", (str(i),))

    run_as_one_batch(db, [insert(i) for i in range(10)])
    sizes = db._process_state().batcher.sizes.counts
    assert sizes == {1: 1, 4: 2, 2: 1}  # CREATE TABLE, then 4 + 4 + 2
    assert len(values(db)) == 10
    db.close()


def test_timeout_while_queued_leaves_the_queue(gdb: litegate.Database) -> None:
    out: list[BaseException] = []

    def late() -> None:
        try:
            gdb.execute("INSERT INTO t(v) VALUES ('late')", timeout=0.2)
        except litegate.WriteTimeout as exc:
            out.append(exc)

    with gdb.write():
        leader = threading.Thread(target=lambda: gdb.execute("INSERT INTO t(v) VALUES ('x')"))
        leader.start()
        wait_until(lambda: queued(gdb) == 1)
        t = threading.Thread(target=late)
        t.start()
        t.join()  # times out while the gate is still ours
        assert len(out) == 1
        assert queued(gdb) == 1  # only the leader's request is left
    leader.join()
    assert values(gdb) == ["x"]


def test_group_commit_across_threads_and_stats(gdb: litegate.Database) -> None:
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            for i in range(200):
                gdb.execute("INSERT INTO t(v) VALUES (?)", (f"{k}-{i}",))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert gdb.query("SELECT count(*), count(DISTINCT v) FROM t") == [(1600, 1600)]
    gc = gdb.stats()["writes"]["group_commit"]
    assert gc["statements"] == 1601  # every statement committed exactly once
    assert gc["batches"] <= 1601


@pytest.fixture
def tiny_disk(tmp_path: Any) -> Iterator[str]:
    """A 512 KiB tmpfs: a real disk that fills up. Needs mount rights (root)."""
    import subprocess

    mnt = tmp_path / "tiny"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}); needs root")
    try:
        yield str(mnt)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_disk_full_at_commit_fails_every_member(tiny_disk: str) -> None:
    """WAL frames are written at COMMIT: members that each succeed in the page
    cache fail together when the COMMIT finds the disk full, and nothing of
    the batch survives. Once space is back, the database works as before."""
    db = litegate.connect(os.path.join(tiny_disk, "full.db"), timeout=30)
    db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)")
    db.execute("INSERT INTO t(v) VALUES ('kept')")
    filler = os.path.join(tiny_disk, "filler")
    st = os.statvfs(tiny_disk)
    with open(filler, "wb") as f:  # leave ~48 KiB free
        f.write(b"\0" * max(0, st.f_bavail * st.f_frsize - 48 * 1024))
    blob = os.urandom(30_000)
    r = run_as_one_batch(
        db, [lambda: db.execute("INSERT INTO t(v) VALUES (?)", (blob,)) for _ in range(3)]
    )
    assert all(isinstance(x, sqlite3.OperationalError) for x in r.values()), r
    assert all("full" in str(x) for x in r.values())
    os.remove(filler)
    assert db.query("SELECT count(*) FROM t") == [(1,)]  # only the row from before
    db.execute("INSERT INTO t(v) VALUES (?)", (blob,))  # space is back: writes work
    assert db.query("SELECT count(*) FROM t") == [(2,)]
    assert db.query("PRAGMA integrity_check") == [("ok",)]
    db.close()


def test_transact_members_share_the_batch_and_fail_alone(gdb: litegate.Database) -> None:
    """db.transact(fn): several statements in one member's SAVEPOINT; an
    exception undoes only that member's statements and reaches only its caller."""

    def two_rows(tag: str) -> Callable[[sqlite3.Connection], int]:
        def fn(conn: sqlite3.Connection) -> int:
            conn.execute("INSERT INTO t(v) VALUES (?)", (tag + "1",))
            conn.execute("INSERT INTO t(v) VALUES (?)", (tag + "2",))
            return int(conn.execute("SELECT count(*) FROM t").fetchone()[0])

        return fn

    def half_then_fail(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t(v) VALUES ('half')")
        raise KeyError("mine alone")

    r = run_as_one_batch(
        gdb,
        [
            lambda: gdb.transact(two_rows("a")),  # the leader: no savepoint of its own
            lambda: gdb.transact(half_then_fail),
            lambda: gdb.execute("INSERT INTO t(v) VALUES ('plain')"),
            lambda: gdb.transact(two_rows("b")),
        ],
    )
    assert r[0] == 2
    assert isinstance(r[1], KeyError)
    assert r[2].rowcount == 1
    assert r[3] == 5  # saw a1, a2, plain: all in the same open transaction
    assert values(gdb) == ["a1", "a2", "b1", "b2", "plain"]
    assert gdb.stats()["writes"]["group_commit"]["max"] == 3


def test_transact_leader_failing_leaves_nothing(gdb: litegate.Database) -> None:
    def fail(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t(v) VALUES ('x')")
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        gdb.transact(fail)
    assert values(gdb) == []
    assert gdb.transact(lambda conn: conn.execute("SELECT 41 + 1").fetchone()[0]) == 42
    with gdb.write(), pytest.raises(litegate.NestedWriteError, match=r"db\.transact"):
        gdb.transact(lambda conn: None)


def test_transact_from_asyncio(db_path: str) -> None:
    import asyncio
    from functools import partial

    import litegate.aio

    async def main() -> list[int]:
        adb = await litegate.aio.connect(db_path)
        await adb.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT NOT NULL)")

        def insert(conn: sqlite3.Connection, i: int) -> int:
            cur = conn.execute("INSERT INTO t(v) VALUES (?)", (f"v{i}",))
            assert cur.lastrowid is not None
            return cur.lastrowid

        ids = await asyncio.gather(*(adb.transact(partial(insert, i=i)) for i in range(50)))
        with pytest.raises(ZeroDivisionError):
            await adb.transact(lambda conn: 1 // 0)
        await adb.close()
        return list(ids)

    ids = asyncio.run(main())
    assert sorted(ids) == list(range(1, 51))


def test_a_lone_statement_runs_in_autocommit_and_is_counted(db: litegate.Database) -> None:
    """Nobody else queued: the statement runs as one autocommit statement
    under the gate (no BEGIN/COMMIT round trips); executemany still runs in
    one transaction (its rows commit together). Both count as commits."""
    writer = db._process_state().writer
    assert writer is not None
    seen: list[str] = []
    writer.set_trace_callback(seen.append)
    try:
        before = db.stats()["writes"]["committed"]
        db.execute("INSERT INTO t(v) VALUES (1)")
        lone = list(seen)
        seen.clear()
        db.executemany("INSERT INTO t(v) VALUES (?)", [(2,), (3,)])
        many = list(seen)
    finally:
        writer.set_trace_callback(None)
    assert lone == ["INSERT INTO t(v) VALUES (1)"]
    assert many[0] == _guard.BEGIN
    assert many[-1] == _guard.COMMIT
    assert db.stats()["writes"]["committed"] == before + 2
    assert db.query("SELECT v FROM t ORDER BY id") == [(1,), (2,), (3,)]


def test_a_member_that_fails_part_way_leaves_nothing(gdb: litegate.Database) -> None:
    """No SAVEPOINT around a plain statement: SQLite undoes a failing one by
    itself, except ON CONFLICT FAIL, which keeps the rows before the failing
    one. Then the batch starts over without it: its first row is not
    committed, and its mates are."""
    r = run_as_one_batch(
        gdb,
        [
            lambda: gdb.execute("INSERT INTO t(v) VALUES ('a')"),
            lambda: gdb.execute("INSERT OR FAIL INTO t(v) VALUES ('partial'), (NULL)"),
            lambda: gdb.execute("INSERT INTO t(v) VALUES ('c')"),
            lambda: gdb.execute("INSERT INTO t(v) VALUES (NULL)"),  # plain ABORT: undone alone
            lambda: gdb.execute("INSERT INTO t(v) VALUES ('e')"),
        ],
    )
    assert isinstance(r[1], sqlite3.IntegrityError)
    assert isinstance(r[3], sqlite3.IntegrityError)
    assert values(gdb) == ["a", "c", "e"]
    assert gdb.stats()["writes"]["group_commit"]["max"] == 3
