"""Maintenance through the gate: backup, vacuum, checkpoint, optimize, and
the typed errors of a bad sidecar. Real threads write and read throughout;
the assertions are about what the files hold, never about speed."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

import litegate
import litegate.aio


@contextmanager
def writers(db: litegate.Database, n: int = 4) -> Iterator[list[int]]:
    """``n`` threads committing transactions of 3 rows (writer, seq) until
    the block ends; yields each writer's count of committed transactions."""
    db.execute("CREATE TABLE IF NOT EXISTS w (writer INTEGER, seq INTEGER, part INTEGER)")
    done = [0] * n
    stop = threading.Event()
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            while not stop.is_set():
                seq = done[k] + 1
                with db.write() as conn:
                    conn.executemany(
                        "INSERT INTO w VALUES (?, ?, ?)", [(k, seq, p) for p in range(3)]
                    )
                done[k] = seq
        except BaseException as exc:  # collected and asserted on
            errors.append(exc)

    ts = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for t in ts:
        t.start()
    try:
        yield done
    finally:
        stop.set()
        for t in ts:
            t.join()
    assert errors == []


def _whole_transactions(conn: sqlite3.Connection) -> dict[int, list[int]]:
    """Each writer's transaction numbers found, checking none is torn."""
    rows = conn.execute(
        "SELECT writer, seq, count(*) FROM w GROUP BY writer, seq ORDER BY writer, seq"
    ).fetchall()
    assert all(n == 3 for _, _, n in rows), "a transaction was copied in part"
    out: dict[int, list[int]] = {}
    for writer, seq, _ in rows:
        out.setdefault(writer, []).append(seq)
    return out


def test_backup_while_writers_run_is_a_consistent_prefix(
    db: litegate.Database, tmp_path: Path
) -> None:
    db.execute("CREATE TABLE filler (x TEXT)")
    db.executemany("INSERT INTO filler VALUES (?)", [("x" * 400,)] * 5000)  # a few MB
    steps: list[tuple[int, int]] = []
    with writers(db) as done:
        while min(done) < 5:
            time.sleep(0.001)
        result = db.backup(
            tmp_path / "copy.db", pages=50, progress=lambda a, b: steps.append((a, b))
        )
        after = list(done)
    assert result.path == str(tmp_path / "copy.db")
    assert result.pages > 50
    assert result.bytes == os.path.getsize(result.path)
    assert len(steps) > 1
    assert steps[-1] == (result.pages, result.pages)
    assert [a for a, _ in steps] == sorted(a for a, _ in steps)
    with closing(sqlite3.connect(result.path)) as copy:
        assert copy.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert copy.execute("PRAGMA journal_mode").fetchone() == ("delete",)
        assert copy.execute("SELECT count(*) FROM filler").fetchone() == (5000,)
        found = _whole_transactions(copy)
    for writer, seqs in found.items():
        assert seqs == list(range(1, len(seqs) + 1))  # a prefix of what it committed
        assert len(seqs) <= after[writer]


def test_backup_refuses_to_overwrite_and_says_so(db: litegate.Database, tmp_path: Path) -> None:
    target = tmp_path / "copy.db"
    target.write_bytes(b"old")
    with pytest.raises(litegate.ConfigError, match="overwrite=True"):
        db.backup(target)
    assert target.read_bytes() == b"old"
    assert db.backup(target, overwrite=True).pages >= 1
    with pytest.raises(litegate.ConfigError, match="the database itself"):
        db.backup(db.path, overwrite=True)
    with pytest.raises(litegate.OpenError, match="directory does not exist"):
        db.backup(tmp_path / "nope" / "copy.db")
    with pytest.raises(litegate.ConfigError, match="pages"):
        db.backup(tmp_path / "c2.db", pages=0)


def test_vacuum_while_readers_and_writers_run_loses_nothing(
    db: litegate.Database, tmp_path: Path
) -> None:
    db.execute("CREATE TABLE junk (x TEXT)")
    db.executemany("INSERT INTO junk VALUES (?)", [("y" * 1000,)] * 4000)
    db.execute("DELETE FROM junk")
    db.checkpoint("TRUNCATE")
    size_before = os.path.getsize(db.path)
    read_errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        try:
            while not stop.is_set():
                db.query("SELECT count(*) FROM w")
        except BaseException as exc:  # collected and asserted on
            read_errors.append(exc)

    with writers(db) as done:
        rs = [threading.Thread(target=reader) for _ in range(2)]
        for r in rs:
            r.start()
        result = db.vacuum()
        into = db.vacuum(into=tmp_path / "compact.db")
        stop.set()
        for r in rs:
            r.join()
    assert read_errors == []
    assert result.freed_pages > 900  # the deleted rows' pages
    assert result.pages_after < result.pages_before
    # The file itself shrinks once a checkpoint gets past every reader's
    # snapshot: with readers running, that may be after vacuum() returned.
    assert db.checkpoint("TRUNCATE").busy is False
    assert os.path.getsize(db.path) < size_before
    assert into.into == str(tmp_path / "compact.db")
    with closing(sqlite3.connect(db.path)) as check:
        found = _whole_transactions(check)
    assert {w: len(s) for w, s in found.items()} == dict(enumerate(done))
    with closing(sqlite3.connect(into.into)) as compact:
        assert compact.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_checkpoint_modes_and_refusals(db: litegate.Database) -> None:
    db.executemany("INSERT INTO t (v) VALUES (?)", [(i,) for i in range(2000)])
    passive = db.checkpoint()
    assert passive.mode == "PASSIVE"
    assert passive.checkpointed_frames <= passive.wal_frames
    truncate = db.checkpoint("truncate")
    assert (truncate.mode, truncate.busy, truncate.wal_bytes_after) == ("TRUNCATE", False, 0)
    with pytest.raises(litegate.ConfigError, match="PASSIVE, FULL, RESTART, TRUNCATE"):
        db.checkpoint("SOMETIMES")
    with db.write(), pytest.raises(litegate.NestedWriteError, match=r"outside the db\.write"):
        db.checkpoint()
    assert db.optimize().seconds >= 0
    with pytest.raises(litegate.ConfigError, match=r"db\.vacuum\(\)"):
        db.execute("VACUUM")


def test_maintenance_waits_for_the_gate_in_line(db: litegate.Database) -> None:
    """A checkpoint asked for while another thread holds the gate waits for
    it, then runs (it never fails with 'database is locked')."""
    holding, leave = threading.Event(), threading.Event()
    order: list[str] = []

    def holder() -> None:
        with db.write() as conn:
            conn.execute("INSERT INTO t (v) VALUES (1)")
            holding.set()
            assert leave.wait(10)
            order.append("holder")

    h = threading.Thread(target=holder)
    h.start()
    assert holding.wait(10)

    def checkpointer() -> None:
        db.checkpoint("RESTART")
        order.append("checkpoint")

    t = threading.Thread(target=checkpointer)
    t.start()
    t.join(0.2)
    assert order == []  # still waiting
    leave.set()
    h.join()
    t.join(10)
    assert order == ["holder", "checkpoint"]


def test_aio_maintenance(db_path: str, tmp_path: Path) -> None:
    async def main() -> tuple[int, int, str, float]:
        async with await litegate.aio.connect(db_path) as adb:
            await adb.execute("CREATE TABLE t (x)")
            await adb.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(100)])
            b = await adb.backup(tmp_path / "a.db")
            v = await adb.vacuum()
            c = await adb.checkpoint("TRUNCATE")
            o = await adb.optimize()
            return b.pages, v.pages_after, c.mode, o.seconds

    pages, after, mode, secs = asyncio.run(main())
    assert pages >= 2
    assert after >= 2
    assert mode == "TRUNCATE"
    assert secs >= 0


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: os.mkdir(p), "is a directory"),
        (lambda p: Path(p).write_bytes(b"not a lock file " * 64), "is not a litegate lock file"),
    ],
    ids=["directory", "foreign file"],
)
def test_a_bad_sidecar_is_an_open_error(
    db_path: str, make: Callable[[str], object], message: str
) -> None:
    make(db_path + "-litegate")
    with pytest.raises(litegate.OpenError, match=message) as info:
        litegate.connect(db_path)
    assert db_path + "-litegate" in str(info.value)
