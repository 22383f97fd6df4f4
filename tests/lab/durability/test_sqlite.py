"""SQLite and litegate on the power-cut filesystem: the harness loses what
SQLite did not sync (so it can catch a durability bug), and keeps what it
did. Every database is opened in a child process: a cut kills the
processes that use the mount, and the test process must not be one."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from litegate_lab.durability import PowerCutMount
from litegate_lab.durability._run import in_child

import litegate

pytestmark = pytest.mark.slow


def _commit(path: str, pragmas: dict[str, Any], rows: int, checkpoint_after: int = 0) -> int:
    """``rows`` one-row commits in WAL mode (a PASSIVE checkpoint after the
    first ``checkpoint_after``), then leave without closing (as if killed)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    for name, value in pragmas.items():
        conn.execute(f"PRAGMA {name} = {value}")
    conn.execute("CREATE TABLE IF NOT EXISTS t (n INTEGER)")
    for n in range(rows):
        conn.execute("INSERT INTO t VALUES (?)", (n,))
        if n + 1 == checkpoint_after:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    os._exit(0)  # no close: the WAL stays as a crash would leave it


def _count(path: str) -> tuple[list[str], int]:
    with litegate.connect(path, readers=1) as db:
        integrity = [r[0] for r in db.query("PRAGMA integrity_check")]
        exists = db.query("SELECT count(*) FROM sqlite_master WHERE name = 't'")[0][0]
        return integrity, (db.query("SELECT count(*) FROM t")[0][0] if exists else -1)


def _run_then_cut(mount: PowerCutMount, pragmas: dict[str, Any], **kw: Any) -> tuple[Any, ...]:
    path = os.path.join(mount.mountpoint, "t.db")
    in_child(_create, path)
    mount.sync()  # the empty database is durable
    with pytest.raises(RuntimeError, match="without an answer"):  # it leaves by os._exit
        in_child(_commit, path, pragmas, kw.get("rows", 50), kw.get("checkpoint_after", 0))
    mount.cut()
    mount.start()
    result: tuple[Any, ...] = in_child(_count, path)
    return result


def _create(path: str) -> str:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.close()
    return "ok"


def test_synchronous_full_keeps_every_commit(mount: PowerCutMount) -> None:
    assert _run_then_cut(mount, {"synchronous": "FULL", "wal_autocheckpoint": 0}) == (["ok"], 50)


def test_synchronous_normal_loses_the_commits_since_the_last_checkpoint(
    mount: PowerCutMount,
) -> None:
    # NORMAL syncs the WAL only when it checkpoints: the 20 commits before
    # the checkpoint survive, the 30 after it are lost
    got = _run_then_cut(
        mount, {"synchronous": "NORMAL", "wal_autocheckpoint": 0}, checkpoint_after=20
    )
    assert got == (["ok"], 20)


def test_synchronous_off_loses_everything_never_synced(mount: PowerCutMount) -> None:
    # not even the table: its CREATE was in the WAL, which was never synced
    assert _run_then_cut(mount, {"synchronous": "OFF", "wal_autocheckpoint": 0}) == (["ok"], -1)


def _litegate_writes(path: str, profile: str) -> int:
    with litegate.connect(path, profile=profile) as db:
        db.execute("CREATE TABLE IF NOT EXISTS t (n INTEGER)")
        for n in range(30):
            db.execute("INSERT INTO t VALUES (?)", (n,))
        os._exit(0)
    return 0  # pragma: no cover


@pytest.mark.parametrize(("profile", "survivors"), [("conservative", 30), ("default", -1)])
def test_litegate_profiles_across_a_cut(
    mount: PowerCutMount, tmp_path: Path, profile: str, survivors: int
) -> None:
    """conservative (FULL) keeps all 30 acknowledged writes; default
    (NORMAL) loses them when the cut comes before its first checkpoint
    (the background checkpointer waits up to a second)."""
    path = os.path.join(mount.mountpoint, "lg.db")
    in_child(_create, path)
    mount.sync()
    with pytest.raises(RuntimeError, match="without an answer"):  # it leaves by os._exit
        in_child(_litegate_writes, path, profile)
    mount.cut()
    mount.start()
    assert in_child(_count, path) == (["ok"], survivors)
