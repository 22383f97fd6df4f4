"""``litegate doctor`` agrees with ``litegate.connect()``: on each bad
sidecar, doctor's verdict is checked against what connect then does on the
same file; a SIGKILLed gate holder is reported as gone;
doctor leaves no file behind and no lock dropped; ``doctor --json | head``
ends quietly."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

import litegate
from litegate.__main__ import main
from litegate.ops import diagnose
from tests.conftest import wait_until

MAGIC = b"LGTQ0002"  # the lock file's first bytes (_lockformat.MAGIC)
OLD_MAGIC = b"LGTQ0001"  # an older litegate's (strict ticket order), set up anew if unused


def doctor(path: str, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    code = main(["doctor", path, "--no-check", *extra])
    out = capsys.readouterr()
    return code, out.out + out.err


def gate_finding(path: str) -> dict[str, str]:
    report = diagnose(path, check=False).as_dict()
    gates: list[dict[str, str]] = [f for f in report["findings"] if f["check"] == "litegate gate"]
    assert len(gates) == 1
    return gates[0]


def made(db_path: str, rows: int = 3) -> None:
    """A litegate database with ``rows`` committed rows, closed."""
    with litegate.connect(db_path) as db:
        db.execute("CREATE TABLE t (x)")
        db.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(rows)])


def rows_in(db_path: str) -> int:
    with closing(sqlite3.connect(db_path)) as conn:
        return int(conn.execute("SELECT count(*) FROM t").fetchone()[0])


def writes(db_path: str) -> None:
    """connect, one write, one read: what doctor's "ok" promises."""
    with litegate.connect(db_path, timeout=5) as db:
        before = db.query("SELECT count(*) FROM t")[0][0]
        db.execute("INSERT INTO t VALUES (-1)")
        assert db.query("SELECT count(*) FROM t") == [(before + 1,)]


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\0\0\0",
        MAGIC,
        MAGIC + b"\0" * 8,
        MAGIC + (5).to_bytes(8, "little"),
        OLD_MAGIC + (2**63).to_bytes(8, "little"),
    ],
    ids=[
        "empty",
        "three zero bytes",
        "magic only",
        "magic and a zero counter",
        "short table",
        "an older litegate's, unused",
    ],
)
def test_a_blank_or_short_sidecar_is_fine_as_connect_finds(
    db_path: str, capsys: pytest.CaptureFixture[str], content: bytes
) -> None:
    """Doctor said "litegate cannot open the database" for these; connect
    opens them (it grows the table with zeros and writes the magic)."""
    made(db_path)
    Path(db_path + "-litegate").write_bytes(content)
    code, text = doctor(db_path, capsys)
    assert code == 0, text
    assert gate_finding(db_path)["status"] == "ok"
    writes(db_path)
    assert rows_in(db_path) == 4


def test_a_sidecar_that_is_a_directory_or_foreign_needs_action_as_connect_refuses(
    db_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A directory: doctor said "nothing needs action", connect raises
    OpenError. Now both refuse, and doctor's advice makes connect work."""
    made(db_path)
    sidecar = db_path + "-litegate"
    os.remove(sidecar)
    os.mkdir(sidecar)
    code, text = doctor(db_path, capsys)
    assert code == 1, text
    assert f"[ACTION] litegate gate: {sidecar} is a directory" in text
    assert f"mv {sidecar} {sidecar}.moved" in text
    with pytest.raises(litegate.OpenError, match="is a directory"):
        litegate.connect(db_path)
    os.rename(sidecar, sidecar + ".moved")  # the advice
    writes(db_path)
    for content in (b"abc", b"not a lock file " * 64):
        os.remove(sidecar)
        Path(sidecar).write_bytes(content)
        code, text = doctor(db_path, capsys)
        assert code == 1, text
        assert "is not a litegate lock file" in text
        assert f"no process has it open: rm {sidecar}" in text
        with pytest.raises(litegate.OpenError, match="is not a litegate lock file"):
            litegate.connect(db_path)
    os.remove(sidecar)  # the advice
    writes(db_path)
    assert rows_in(db_path) == 5


def test_a_fifo_sidecar_neither_hangs_doctor_nor_passes(
    db_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    made(db_path)
    sidecar = db_path + "-litegate"
    os.remove(sidecar)
    os.mkfifo(sidecar)
    code, text = doctor(db_path, capsys)  # opening a FIFO to read would block
    assert code == 1, text
    assert "is not a regular file" in text
    with pytest.raises(litegate.OpenError):
        litegate.connect(db_path)


def counter_at(sidecar: str, value: int) -> None:
    """Write the next-ticket counter of a lock file (bytes 8..16)."""
    with open(sidecar, "r+b") as f:
        f.seek(8)
        f.write(value.to_bytes(8, "little"))


def test_a_damaged_ticket_counter_needs_action_with_the_command_that_fixes_it(
    db_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A next ticket of 2**64 - 1 made every write raise struct.error, and
    doctor said the gate was ok. connect() now refuses a counter no writer
    could have reached (2**62 and up); doctor says so, with the command."""
    made(db_path)
    sidecar = db_path + "-litegate"
    for counter in (2**64 - 1, 2**62):
        counter_at(sidecar, counter)
        code, text = doctor(db_path, capsys)
        assert code == 1, text
        assert f"its ticket counter reads {counter}, which litegate never writes" in text
        assert f"do:  no process has it open: rm {sidecar}" in text
        with pytest.raises(litegate.OpenError, match="ticket counter"):
            litegate.connect(db_path)
    os.remove(sidecar)  # the advice
    writes(db_path)
    assert rows_in(db_path) == 4
    counter_at(sidecar, 2**62 - 1)  # the largest counter connect accepts
    assert gate_finding(db_path)["status"] == "ok"
    writes(db_path)


def test_a_damaged_grant_counter_needs_action(
    db_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same defect in the new lock file's other counter: grants at
    2**64 - 1 make every write raise struct.error (see the strict xfail
    below); doctor says the file is damaged, with the command."""
    made(db_path)
    sidecar = db_path + "-litegate"
    with open(sidecar, "r+b") as f:
        f.seek(16)  # the grant counter
        f.write((2**64 - 1).to_bytes(8, "little"))
    code, text = doctor(db_path, capsys)
    assert code == 1, text
    assert "its grant counter reads 18446744073709551615" in text
    assert f"do:  no process has it open: rm {sidecar}" in text
    os.remove(sidecar)  # the advice
    writes(db_path)


def test_a_grant_counter_at_its_end_is_a_typed_error(db_path: str) -> None:
    made(db_path)
    with open(db_path + "-litegate", "r+b") as f:
        f.seek(16)
        f.write((2**64 - 1).to_bytes(8, "little"))
    opened: list[litegate.Database] = []
    try:
        with pytest.raises(litegate.Error, match="-litegate"):  # noqa: PT012 - at open or write
            opened.append(litegate.connect(db_path))
            opened[0].execute("INSERT INTO t VALUES (1)")
    finally:
        for db in opened:
            db.close()
        assert rows_in(db_path) == 3  # nothing lost either way


def test_the_advice_names_the_processes_to_stop_first(
    db_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Removing a sidecar that processes still have open would give the file
    two gates: the advice says to stop them first, by pid."""
    made(db_path)
    with litegate.connect(db_path) as db:
        db.execute("INSERT INTO t VALUES (9)")
        counter_at(db_path + "-litegate", 2**63)
        code, text = doctor(db_path, capsys)
        counter_at(db_path + "-litegate", 10)  # so that this process may go on
    assert code == 1, text
    assert f"stop the processes using the database (pids {os.getpid()}), then rm" in text


def test_connect_on_a_damaged_file_says_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "damaged.db"
    path.write_bytes(b"SQLite format 3\x00\x02\x00\x00\x00\x00@  ")  # found by the property suite
    with pytest.raises(litegate.OpenError) as info:
        litegate.connect(path)
    assert "litegate doctor" in str(info.value) or "backup" in str(info.value)


def test_connect_with_a_dangling_sidecar_symlink_says_what_to_do(db_path: str) -> None:
    made(db_path)
    os.remove(db_path + "-litegate")
    os.symlink(db_path + ".nowhere", db_path + "-litegate")  # found by the property suite
    with pytest.raises(litegate.OpenError) as info:
        litegate.connect(db_path)
    assert "rm " in str(info.value) or "remove" in str(info.value)


def test_connect_on_a_schema_that_is_not_text_is_an_open_error(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    made(str(path))
    content = bytearray(path.read_bytes())
    at = content.index(b"CREATE TABLE t")
    content[at + len("CREATE TABLE t") + 1] = 0x80  # found by the property suite
    path.write_bytes(bytes(content))
    assert main(["doctor", str(path)]) == 1  # doctor: "SQLite cannot read it"
    with pytest.raises(litegate.OpenError):
        litegate.connect(path)


HOLD = """\
import sys, litegate
db = litegate.connect(sys.argv[1])
with db.write() as c:
    c.execute("INSERT INTO t VALUES (100)")
    print("holding", flush=True)
    sys.stdin.readline()
"""


def _holder(db_path: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, db_path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True, env=env,
    )  # fmt: skip
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "holding"
    return proc


def test_a_sigkilled_gate_holder_or_waiter_is_reported_gone(
    db_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Doctor kept reporting "gate held by ticket 1 (pid ?)" after the
    holder was SIGKILLed. The gate goes on (the kernel dropped the dead
    process's locks), and doctor says so: a dead holder, a dead waiter."""
    made(db_path)
    holder = _holder(db_path)
    waiter: subprocess.Popen[str] | None = None
    try:
        assert diagnose(db_path, check=False).facts["gate"]["holder"]["pid"] == holder.pid
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        waiter = subprocess.Popen(
            [sys.executable, "-c", HOLD, db_path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, env=env,
        )  # fmt: skip
        wait_until(
            lambda: len(diagnose(db_path, check=False).facts["gate"]["waiting"]) == 1,
            what="the second process asleep in the gate's queue",
        )
        os.kill(waiter.pid, signal.SIGKILL)
        waiter.wait(10)
        code, text = doctor(db_path, capsys)
        assert code == 0, text  # a warning at most: the gate is held, its queue moved on
        assert re.search(r"ticket \d+ died (waiting|head) \(the queue moves past it\)", text), text
        assert "0 waiting" in text
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(10)
    finally:
        for p in (holder, waiter):
            if p is not None:
                p.kill()
                p.communicate(timeout=10)
    code, text = doctor(db_path, capsys)
    assert code == 0, text
    assert "litegate gate: free; 0 waiting" in text  # the kernel dropped the holder's lock
    assert "held (" not in text
    gate = json.loads(doctor(db_path, capsys, "--json")[1])["facts"]["gate"]
    assert gate["holder"] is None
    writes(db_path)
    assert rows_in(db_path) == 4  # the killed transactions' rows never were


def listing(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir()}


def test_doctor_leaves_no_file_behind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Doctor promised not to disturb the file but left -wal and -shm beside
    a closed WAL database (a read-only open makes them, and cannot remove
    them on close)."""
    wal = str(tmp_path / "wal.db")
    made(wal)
    rollback = str(tmp_path / "old.db")
    with closing(sqlite3.connect(rollback)) as conn:
        conn.execute("CREATE TABLE t (x)")
        conn.commit()
    empty = tmp_path / "empty.db"
    empty.touch()
    before = listing(tmp_path)
    assert not any(n.endswith(("-wal", "-shm")) for n in before)
    for path in (wal, rollback, str(empty)):
        for extra in ((), ("--no-check",), ("--json",)):
            code = main(["doctor", path, *extra])
            capsys.readouterr()
            assert code in (0, 1)
            assert listing(tmp_path) == before, (path, extra)
    report = diagnose(wal)
    assert report.facts["journal_mode"] == "wal"  # read from the header
    assert report.facts["quick_check"] == "ok"
    assert diagnose(rollback).facts["journal_mode"] == "delete"


def my_locks(paths: list[str]) -> list[tuple[str, str, str]]:
    """This process's POSIX locks on ``paths``, from /proc/locks."""
    inodes = {os.stat(p).st_ino: os.path.basename(p) for p in paths}
    out = []
    with open("/proc/locks") as f:
        for line in f:
            parts = line.split()
            if "->" in parts or parts[1] != "POSIX" or int(parts[4]) != os.getpid():
                continue
            inode = int(parts[5].split(":")[2])
            if inode in inodes:
                out.append((inodes[inode], parts[6], parts[7]))
    return sorted(out)


def test_doctor_in_a_process_using_the_database_keeps_that_process_locks(db_path: str) -> None:
    """Closing any descriptor of a file drops every POSIX lock the process
    holds on it. Doctor opened and closed the -shm and the database file,
    so diagnose() in a process with the database open dropped SQLite's
    locks there (a reader's read mark: a checkpoint could then overwrite
    the frames its snapshot reads)."""
    made(db_path)
    with litegate.connect(db_path) as db, db.read() as conn:
        conn.execute("SELECT * FROM t").fetchall()
        files = [db_path, db_path + "-shm"]
        held = my_locks(files)
        assert any(name.endswith("-shm") for name, _, _ in held)  # the read mark
        report = diagnose(db_path)
        assert my_locks(files) == held
        assert report.facts["quick_check"] == "ok"
        assert report.facts["wal_index"]["changes"] >= 0  # read through our own descriptor


def test_doctor_on_an_empty_file_agrees_with_connect(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty file is a new database to SQLite and to connect(); doctor
    said "not a SQLite database"."""
    path = tmp_path / "new.db"
    path.touch()
    code, text = doctor(str(path), capsys)
    assert code == 0, text
    assert "an empty file: a new database" in text
    with litegate.connect(path) as db:
        db.execute("CREATE TABLE t (x)")


@pytest.mark.parametrize(
    "content",
    [b"SQLite format 3\0" + b"\xff" * 200, b"\0" * 4096, b"hello"],
    ids=["sqlite header then garbage", "zeros", "text"],
)
def test_a_file_sqlite_cannot_read_is_exit_2_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes
) -> None:
    path = tmp_path / "odd.db"
    path.write_bytes(content)
    code, text = doctor(str(path), capsys)
    assert code == 2, text
    assert "is not a SQLite database" in text
    assert "Traceback" not in text
    with pytest.raises(litegate.OpenError, match="not a SQLite database"):
        litegate.connect(path)
    assert path.read_bytes() == content


def test_doctor_json_into_a_closed_pipe_ends_quietly(db_path: str) -> None:
    """``litegate doctor --json | head`` ended in a BrokenPipeError traceback."""
    made(db_path)
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before doctor writes
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "litegate", "doctor", "--json", db_path],
            stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert proc.stderr == ""
    assert proc.returncode == 141


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: None, "does not exist"),
        (lambda p: os.mkdir(p), "is a directory"),
        (lambda p: Path(p).write_text("hello, not a database"), "is not a SQLite database"),
        (lambda p: os.mkfifo(p), "is not a regular file"),
    ],
    ids=["missing", "directory", "not SQLite", "fifo"],
)
def test_top_on_what_is_not_a_database_exits_2_like_doctor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: object, message: str
) -> None:
    """top on a database it cannot read says so and exits non-zero, not an empty dashboard and 0."""
    path = str(tmp_path / "x.db")
    make(path)  # type: ignore[operator]
    assert main(["top", path, "--iterations", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("litegate top: "), err
    assert message in err
    assert main(["doctor", path]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "args",
    [
        ["--interval", "0"],
        ["--interval", "-1"],
        ["--interval", "nan"],
        ["--interval", "inf"],
        ["--interval", "1e300"],
        ["--interval", "soon"],
        ["--iterations", "0"],
        ["--iterations", "-3"],
        ["--iterations", "1.5"],
    ],
)
def test_top_bad_options_exit_2_with_a_message(
    db_path: str, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    made(db_path)
    assert main(["top", db_path, *args]) == 2
    err = capsys.readouterr().err
    assert "litegate top: error:" in err
    assert "Traceback" not in err


def test_doctor_names_a_hot_rollback_journal_and_what_to_do(
    db_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A process killed mid-transaction in rollback-journal mode leaves a hot
    journal that a read-only open cannot roll back: doctor once said "run
    again when the file is quieter ... nothing needs action" (exit 0), which
    never helps. It now names the journal and the command that rolls it
    back; after that command, nothing needs action and every committed row
    is there."""
    conn = sqlite3.connect(db_path)
    conn.execute("CREATE TABLE t(v)")
    conn.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(1000)])
    conn.commit()
    conn.close()
    killed = (
        "import os, signal, sqlite3\n"
        f"c = sqlite3.connect({db_path!r}, isolation_level=None)\n"
        "c.execute('PRAGMA cache_size=1')\n"
        "c.execute('BEGIN IMMEDIATE')\n"
        "c.execute('UPDATE t SET v = v + 1')\n"
        "c.execute('INSERT INTO t SELECT v FROM t')\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", killed], check=False)
    assert proc.returncode == -signal.SIGKILL
    assert os.path.getsize(db_path + "-journal") > 0
    assert main(["doctor", db_path]) == 1
    out = capsys.readouterr().out
    assert "[ACTION] rollback journal:" in out
    assert "holds a write transaction that never finished" in out
    assert "roll the journal back first" in out
    assert "when the file is quieter" not in out
    assert "nothing needs action" not in out
    with litegate.connect(db_path) as db:  # the command doctor gives
        assert db.query("SELECT count(*), sum(v) FROM t") == [(1000, 499500)]
    assert main(["doctor", db_path]) == 0
    assert "rollback journal" not in capsys.readouterr().out


def test_doctor_names_a_log_whose_database_is_gone(
    db_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Once only "does not exist; check the path": the -wal with committed
    transactions beside the missing file is named, with how to recover."""
    made(db_path)
    Path(db_path + "-wal").write_bytes(b"x" * 4096)  # (its content is not read)
    os.remove(db_path)
    assert main(["doctor", db_path]) == 2
    err = capsys.readouterr().err
    assert "does not exist, but its write-ahead log" in err
    assert "Put the database file back" in err


def test_doctor_checks_the_queue_counts_and_offers_recount(
    db_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The queue's counts against its jobs (with the integrity check): SQL
    written by hand leaves them off; doctor names the queue and state and
    gives the recount command, after which they match."""
    from litegate.queue import Queue

    with Queue(db_path, "mail") as q:
        q.put_many(range(4))
        q.ack_many(q.claim(n=2))
    assert main(["doctor", db_path]) == 0
    assert "[ok    ] queue counts: match the jobs" in capsys.readouterr().out
    with closing(sqlite3.connect(db_path)) as conn, conn:
        conn.execute("DELETE FROM litegate_queue_jobs WHERE state = 2")
    assert main(["doctor", db_path]) == 1
    out = capsys.readouterr().out
    assert "queue 'mail' done: 2 kept, 0 counted" in out
    assert "Queue(" in out
    assert ".recount()" in out
    with Queue(db_path, "mail") as q:
        assert q.recount()["done"] == 0
    assert main(["doctor", db_path]) == 0
    assert "queue counts: match the jobs" in capsys.readouterr().out


OPEN_AND_WAIT = """\
import sys, litegate, sqlite3
kind = sys.argv[2]
if kind == "plain":  # a program that does not use litegate
    conn = sqlite3.connect(sys.argv[1])
    conn.execute("SELECT count(*) FROM t").fetchone()
else:
    pragmas = {"mmap_size": 1 << 20} if kind == "mmap" else {}
    db = litegate.connect(sys.argv[1], pragmas=pragmas,
                          checkpoints="litestream" if kind == "litestream" else True)
    db.execute("INSERT INTO t VALUES (7)")
    db.checkpoint("TRUNCATE")  # (so that reads come from the file, through the mapping)
    db.query("SELECT count(*) FROM t")
print("open", flush=True)
sys.stdin.readline()
"""


def _open_in(db_path: str, kind: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", OPEN_AND_WAIT, db_path, kind], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "open"
    return proc


def _finding(path: str, check: str) -> dict[str, str] | None:
    found = [f for f in diagnose(path, check=False).as_dict()["findings"] if f["check"] == check]
    return found[0] if found else None


def test_doctor_names_the_checkpointer_and_the_sqlite_library(
    db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Which process checkpoints the file (one per file), this Python's
    SQLite and, before the WAL-reset fix, what litegate covers and what it
    cannot: a process with the file open that does not use litegate is a
    warning, with its pid."""
    import sqlite3 as sq

    from litegate.ops import _doctor

    monkeypatch.setattr(_doctor, "wal_reset_fixed", lambda _v=None: False)
    made(db_path)
    procs = [_open_in(db_path, "litegate"), _open_in(db_path, "litegate")]
    try:
        report = diagnose(db_path, check=False)
        assert report.facts["sqlite_version"] == sq.sqlite_version
        ckpt = _finding(db_path, "checkpointer")
        assert ckpt is not None
        assert report.facts["checkpointer_pid"] in {p.pid for p in procs}
        assert ckpt["detail"].startswith(f"pid {report.facts['checkpointer_pid']} checkpoints")
        lib = _finding(db_path, "SQLite library")
        assert lib is not None
        assert lib["status"] == "ok"
        assert "older than the fix for SQLite's WAL-reset bug" in lib["detail"]
        assert "cannot do that for connections that do not go through litegate" in lib["detail"]
        plain = _open_in(db_path, "plain")
        procs.append(plain)
        lib = _finding(db_path, "SQLite library")
        assert lib is not None
        assert lib["status"] == "warn"
        assert f"pid(s) {plain.pid} have the database open without litegate" in lib["detail"]
    finally:
        for p in procs:
            p.communicate("\n", timeout=30)
    monkeypatch.setattr(_doctor, "wal_reset_fixed", lambda _v=None: True)
    lib = _finding(db_path, "SQLite library")
    assert lib is not None
    assert lib["detail"].endswith("with the fix for SQLite's WAL-reset bug")


def test_doctor_says_litestream_mode_and_warns_of_mmap_with_several_processes(
    db_path: str,
) -> None:
    made(db_path)
    assert _finding(db_path, "Litestream") is None
    asking = _open_in(db_path, "litestream")
    try:
        found = _finding(db_path, "Litestream")
        assert found is not None
        assert 'a process opened it with checkpoints="litestream"' in found["detail"]
    finally:
        asking.communicate("\n", timeout=30)
    mapping = _open_in(db_path, "mmap")
    try:
        assert _finding(db_path, "memory-mapped I/O") is None  # one process: nothing to say
        other = _open_in(db_path, "litegate")
        try:
            warned = _finding(db_path, "memory-mapped I/O")
            assert warned is not None
            assert warned["status"] == "warn"
            assert warned["detail"].startswith(f"pid(s) {mapping.pid} read the database")
        finally:
            other.communicate("\n", timeout=30)
    finally:
        mapping.communicate("\n", timeout=30)
    with closing(sqlite3.connect(db_path)) as conn:
        conn.execute("CREATE TABLE _litestream_seq (id INTEGER PRIMARY KEY, seq INTEGER)")
    found = _finding(db_path, "Litestream")
    assert found is not None
    assert "its tables or its .<name>-litestream folder are there" in found["detail"]
