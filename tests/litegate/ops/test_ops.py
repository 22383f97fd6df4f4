"""``litegate doctor`` and ``litegate top`` on real files, with real
writers: a healthy file, a huge WAL, SQLite's write lock held by a foreign
process, a file that is not SQLite, and ``top`` driven in a pseudo-terminal
while writers run. Nothing here asserts a speed."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

import litegate
from litegate.__main__ import main

pytest.importorskip("rich", reason="litegate top needs rich: pip install -e '.[ops]'")


def doctor(path: str, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    code = main(["doctor", path, *extra])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_a_healthy_file_needs_nothing(db_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    with litegate.connect(db_path) as db:
        db.execute("CREATE TABLE t (x)")
        db.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(100)])
        code, text = doctor(db_path, capsys)
        assert code == 0, text
        assert "[ok    ] integrity: quick_check: ok" in text
        assert "journal_mode=wal" in text
        assert "nothing needs action" in text
        code, text = doctor(db_path, capsys, "--json")
    report = json.loads(text)
    assert report["needs_action"] is False
    assert report["facts"]["quick_check"] == "ok"
    assert report["facts"]["gate"]["pids"] == [os.getpid()]  # this process has the sidecar open


def test_a_huge_wal_and_a_rollback_journal_need_action(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(tmp_path / "big.db")
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        conn.execute("CREATE TABLE t (x BLOB)")
        for _ in range(70):
            conn.execute("INSERT INTO t VALUES (zeroblob(1048576))")
        code, text = doctor(path, capsys)  # the connection is open: the WAL stays
    assert code == 1, text
    assert "[ACTION] WAL size: the WAL is" in text
    assert (
        f"""python -c 'import litegate; print(litegate.connect("{path}").checkpoint("TRUNCATE"))'"""
        in text
    )
    rollback = str(tmp_path / "old.db")
    with closing(sqlite3.connect(rollback)) as conn:
        conn.execute("CREATE TABLE t (x)")
        conn.commit()
    code, text = doctor(rollback, capsys)
    assert code == 1
    assert "[ACTION] journal mode: journal_mode=delete" in text


@contextmanager
def foreign_writer(path: str) -> Iterator[subprocess.Popen[str]]:
    """A plain sqlite3 process holding SQLite's write lock (BEGIN IMMEDIATE)."""
    code = (
        "import sqlite3, sys, time\n"
        f"c = sqlite3.connect({path!r}, isolation_level=None)\n"
        "c.execute('BEGIN IMMEDIATE'); c.execute('INSERT INTO t VALUES (1)')\n"
        "print('ready', flush=True); sys.stdin.readline()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        yield proc
    finally:
        proc.kill()
        proc.communicate(timeout=10)  # and closes the pipes


def test_doctor_names_a_foreign_process_holding_the_write_lock(
    db_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with litegate.connect(db_path) as db:
        db.execute("CREATE TABLE t (x)")
        with foreign_writer(db_path) as proc:
            code, text = doctor(db_path, capsys, "--no-check")
            _, js = doctor(db_path, capsys, "--json", "--no-check")
    assert f"SQLite write lock: held by pid {proc.pid}, a process that does not use" in text
    assert json.loads(js)["facts"]["sqlite_locks"]["writer_pids"] == [proc.pid]
    assert code == 0  # a warning, not an action


def test_doctor_names_the_process_holding_the_gate_and_for_how_long(
    db_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with litegate.connect(db_path) as db:
        db.execute("CREATE TABLE t (x)")
    code = (
        "import sys, time, litegate\n"
        f"db = litegate.connect({db_path!r})\n"
        "with db.write() as c:\n"
        "    c.execute('INSERT INTO t VALUES (1)')\n"
        "    print('holding', flush=True); sys.stdin.readline()\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True, env=env,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "holding"
        status, text = doctor(db_path, capsys, "--no-check")
    finally:
        proc.communicate("go\n", timeout=30)
    assert re.search(
        rf"\[warn  \] litegate gate: held \(grant \d+, pid {proc.pid}\) for at least", text
    ), text
    assert f"SQLite write lock: held by pid {proc.pid} (the gate's holder)" in text
    assert status == 0


def test_not_a_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junk = tmp_path / "notes.txt"
    junk.write_text("hello")
    code, text = doctor(str(junk), capsys)
    assert code == 2
    assert "is not a SQLite database" in text
    code, text = doctor(str(tmp_path / "missing.db"), capsys)
    assert (code, "does not exist" in text) == (2, True)


def test_top_in_a_pseudo_terminal_while_writers_run(db_path: str) -> None:
    db = litegate.connect(db_path)
    db.execute("CREATE TABLE t (x)")
    stop = threading.Event()

    def write() -> None:
        while not stop.is_set():
            db.execute("INSERT INTO t VALUES (1)")

    ts = [threading.Thread(target=write) for _ in range(2)]
    for t in ts:
        t.start()
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "100", "LINES": "30", "TERM": "xterm"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "litegate", "top", db_path, "--interval", "0.2"],
        stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True,
    )  # fmt: skip
    os.close(slave)
    screen = b""
    try:
        deadline = time.monotonic() + 30
        while screen.count(b"commits/s") < 4 and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                screen += os.read(master, 65536)
        os.write(master, b"q")
        assert proc.wait(15) == 0
    finally:
        stop.set()
        for t in ts:
            t.join()
        proc.kill()
        os.close(master)
        db.close()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.decode(errors="replace"))
    assert text.count("commits/s") >= 4, text[-2000:]
    assert "gate holder" in text
    assert re.search(rf"processes\s+{os.getpid()}\b", text), text[-2000:]
    assert re.search(r"commits/s\s+[1-9]", text), text[-2000:]  # the writers were seen
    assert "WAL" in text
    assert re.search(rf"checkpointer\s+pid {os.getpid()}\b", text), text[-2000:]
