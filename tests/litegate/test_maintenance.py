"""Maintenance through the gate: backup, vacuum, checkpoint, optimize, and
the typed errors of a bad sidecar. Real threads write and read throughout;
the assertions are about what the files hold, never about speed."""

from __future__ import annotations

import asyncio
import functools
import os
import sqlite3
import subprocess
import sys
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


# -- destinations that belong to a live database -----------


def _files_in(directory: Path) -> dict[str, tuple[int, int]]:
    """name -> (inode, size) of every entry: a refused call must change none."""
    out = {}
    for p in directory.iterdir():
        st = p.lstat()
        out[p.name] = (st.st_ino, st.st_size)
    return out


def _names_for_the_live_database(tmp_path: Path, db_path: str) -> dict[str, str]:
    """Other names for the database and its companions, made on disk."""
    os.symlink(db_path, tmp_path / "link.db")
    os.link(db_path, tmp_path / "hard.db")
    (tmp_path / "sub").mkdir()
    os.symlink(tmp_path, tmp_path / "dirlink")
    return {
        "itself": db_path,
        "relative": "app.db",
        "dot-relative": "./app.db",
        "dot-dot": "sub/../app.db",
        "symlink": str(tmp_path / "link.db"),
        "hard link": str(tmp_path / "hard.db"),
        "through a symlinked directory": str(tmp_path / "dirlink" / "app.db"),
        "its -wal": db_path + "-wal",
        "its -shm": db_path + "-shm",
        "its -journal (not there yet)": db_path + "-journal",
        "its sidecar": db_path + "-litegate",
    }


@pytest.mark.parametrize("overwrite", [True, False])
@pytest.mark.parametrize("call", ["backup", "vacuum into"])
def test_a_destination_that_is_the_live_database_is_refused_before_anything_is_touched(
    db: litegate.Database,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    call: str,
    overwrite: bool,
) -> None:
    """backup/vacuum into the database itself must not delete it (nor its
    -wal and -shm) before the check. Every other name for the database or
    its companions is refused too, whatever overwrite= says, and nothing is
    created, replaced or removed."""
    db.executemany("INSERT INTO t (v) VALUES (?)", [(i,) for i in range(50)])
    monkeypatch.chdir(tmp_path)
    names = _names_for_the_live_database(tmp_path, db.path)
    before = _files_in(tmp_path)
    for what, dest in names.items():
        attempt: Callable[[], object]
        if call == "backup":
            attempt = functools.partial(db.backup, dest, overwrite=overwrite)
        else:
            attempt = functools.partial(db.vacuum, into=dest, overwrite=overwrite)
        with pytest.raises(litegate.ConfigError, match="live database") as info:
            attempt()
        assert "pick another path" in str(info.value), what
        assert _files_in(tmp_path) == before, what
        assert db.query("SELECT count(*) FROM t") == [(50,)], what
    db.execute("INSERT INTO t (v) VALUES (50)")  # the database still works
    with closing(sqlite3.connect(db.path)) as check:
        assert check.execute("SELECT count(*) FROM t").fetchone() == (51,)


def test_a_destination_that_belongs_to_another_database_is_refused(
    db: litegate.Database, tmp_path: Path
) -> None:
    """Another database's -wal/-shm/-journal/-litegate, and a database open
    in another process, are refused: replacing them would break it."""
    other = str(tmp_path / "other.db")
    code = (
        "import sys, litegate\n"
        f"db = litegate.connect({other!r})\n"
        "db.execute('CREATE TABLE t (x)'); db.execute('INSERT INTO t VALUES (1)')\n"
        "with db.read() as c:\n"
        "    c.execute('SELECT * FROM t').fetchall()\n"
        "    print('open', flush=True); sys.stdin.readline()\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True, env=env,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "open"
        before = _files_in(tmp_path)
        with pytest.raises(litegate.ConfigError, match=rf"open in process\(es\) {proc.pid}"):
            db.backup(other, overwrite=True)
        with pytest.raises(litegate.ConfigError, match=rf"open in process\(es\) {proc.pid}"):
            db.vacuum(into=other, overwrite=True)
        for suffix in ("-wal", "-shm", "-journal", "-litegate"):
            with pytest.raises(litegate.ConfigError, match=f"is the {suffix} file of the database"):
                db.backup(other + suffix, overwrite=True)
        assert _files_in(tmp_path) == before
    finally:
        proc.communicate("done\n", timeout=30)
    with closing(sqlite3.connect(other)) as check:
        assert check.execute("SELECT * FROM t").fetchall() == [(1,)]


def test_a_failed_backup_leaves_the_old_copy_in_place(
    db: litegate.Database, tmp_path: Path
) -> None:
    """The copy is written beside the destination and renamed over it when
    complete: a backup that fails half-way replaces (and deletes) nothing."""
    db.executemany("INSERT INTO t (v) VALUES (?)", [("x" * 500,)] * 500)
    target = tmp_path / "copy.db"
    first = db.backup(target)
    old = target.read_bytes()

    def boom(done: int, total: int) -> None:
        if done > 10:
            raise RuntimeError("stop")

    db.execute("INSERT INTO t (v) VALUES ('new')")
    with pytest.raises(RuntimeError, match="stop"):
        db.backup(target, pages=5, progress=boom, overwrite=True)
    assert target.read_bytes() == old
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("copy")) == ["copy.db"]
    again = db.backup(target, overwrite=True)
    assert again.pages >= first.pages
    with closing(sqlite3.connect(target)) as copy:
        assert copy.execute("SELECT count(*) FROM t").fetchone() == (501,)


def test_overwrite_drops_the_old_files_journals(db: litegate.Database, tmp_path: Path) -> None:
    """An old database at the destination with committed frames still in its
    -wal: the new copy must not inherit them (SQLite would replay them)."""
    target = str(tmp_path / "old.db")
    stale = sqlite3.connect(target, isolation_level=None)
    stale.execute("PRAGMA journal_mode = WAL")
    stale.execute("PRAGMA wal_autocheckpoint = 0")
    stale.execute("CREATE TABLE old (x)")
    stale.execute("INSERT INTO old VALUES (1)")
    wal = Path(target + "-wal").read_bytes()  # the frames, read while it is open
    stale.close()  # the last connection: checkpoints and removes the WAL ...
    with open(target + "-wal", "wb") as f:  # ... so put it back, as a crash would leave it
        f.write(wal)
    db.execute("INSERT INTO t (v) VALUES ('mine')")
    db.backup(target, overwrite=True)
    assert not os.path.exists(target + "-wal")
    with closing(sqlite3.connect(target)) as copy:
        tables = {r[0] for r in copy.execute("SELECT name FROM sqlite_master")}
        assert tables == {"t"}
        assert copy.execute("SELECT v FROM t").fetchall() == [("mine",)]
    into = str(tmp_path / "old2.db")
    with open(into + "-journal", "wb") as f:
        f.write(b"a journal left behind")
    with pytest.raises(litegate.ConfigError, match="left by a database that was there"):
        db.vacuum(into=into)
    db.vacuum(into=into, overwrite=True)
    assert not os.path.exists(into + "-journal")


@pytest.mark.parametrize(
    ("dest", "error", "message"),
    [
        (":memory:", litegate.ConfigError, "in-memory database"),
        ("", litegate.ConfigError, "empty path"),
        ("file:copy.db?mode=rwc", litegate.ConfigError, "looks like a SQLite URI"),
        ("bad\0name.db", litegate.ConfigError, "NUL"),
        (b"copy.db", litegate.ConfigError, "must be a file path"),
        ("copy.db/", litegate.ConfigError, "ends with a slash"),
        (42, litegate.ConfigError, "must be a file path"),
    ],
    ids=["memory", "empty", "uri", "nul", "bytes", "trailing slash", "int"],
)
def test_a_destination_that_is_not_a_file_path_is_a_config_error(
    db: litegate.Database,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    dest: object,
    error: type[Exception],
    message: str,
) -> None:
    """backup(':memory:') is refused, not a file named ':memory:'."""
    monkeypatch.chdir(tmp_path)
    before = _files_in(tmp_path)
    with pytest.raises(error, match=message):
        db.backup(dest)  # type: ignore[arg-type]
    with pytest.raises(error, match=message):
        db.vacuum(into=dest)  # type: ignore[arg-type]
    assert _files_in(tmp_path) == before
    assert db.backup("./:memory:").path == str(tmp_path / ":memory:")  # said explicitly


def test_a_directory_or_special_file_destination_is_an_open_error(
    db: litegate.Database, tmp_path: Path
) -> None:
    """backup('dir', overwrite=True) is a typed error, not IsADirectoryError."""
    folder = tmp_path / "backups"
    folder.mkdir()
    (folder / "keep.txt").write_text("mine")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for overwrite in (False, True):
        with pytest.raises(litegate.OpenError, match="is a directory; pass the path of a file"):
            db.backup(folder, overwrite=overwrite)
        with pytest.raises(litegate.OpenError, match="is a directory"):
            db.vacuum(into=folder, overwrite=overwrite)
    with pytest.raises(litegate.OpenError, match="not a regular file"):
        db.backup(fifo, overwrite=True)
    assert (folder / "keep.txt").read_text() == "mine"
    assert fifo.is_fifo()


def test_backup_argument_checks(db: litegate.Database, tmp_path: Path) -> None:
    with pytest.raises(litegate.ConfigError, match="overwrite must be True or False"):
        db.backup(tmp_path / "a.db", overwrite="no")  # type: ignore[arg-type]
    with pytest.raises(litegate.ConfigError, match="progress must be a function"):
        db.backup(tmp_path / "a.db", progress=3)  # type: ignore[arg-type]
    with pytest.raises(litegate.ConfigError, match="overwrite= goes with into="):
        db.vacuum(overwrite=True)
    assert db.backup(tmp_path / "a.db", pages=2**40).pages >= 1  # more than SQLite's int
    assert not os.path.exists(tmp_path / "nope")
