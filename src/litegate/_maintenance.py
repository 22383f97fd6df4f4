"""Maintenance through the gate: backup, VACUUM, checkpoints on demand,
``PRAGMA optimize``. Each returns what it did.

SQLite refuses VACUUM and ``wal_checkpoint`` inside a transaction, and both
need the write lock; run on a connection of their own they would bypass the
gate and fail with "database is locked" under load. Here they take the whole
write gate on the write connection with no transaction open
(``Database._exclusive``), so litegate's writers wait for them in line and
nothing else competes. A backup needs no gate at all: it copies one
snapshot, pinned by a read transaction, while writers go on (WAL).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from typing import TYPE_CHECKING, NamedTuple

from ._errors import ConfigError, OpenError

if TYPE_CHECKING:
    from ._database import Database

CHECKPOINT_MODES = ("PASSIVE", "FULL", "RESTART", "TRUNCATE")


class BackupResult(NamedTuple):
    path: str
    bytes: int
    pages: int
    seconds: float


class VacuumResult(NamedTuple):
    bytes_before: int
    bytes_after: int  # the file vacuumed (or the new file, with into=)
    pages_before: int
    pages_after: int
    freed_pages: int  # free-list pages the vacuum dropped
    seconds: float
    into: str | None


class CheckpointResult(NamedTuple):
    mode: str
    busy: bool  # a reader or writer kept the checkpoint from finishing
    wal_frames: int  # frames in the WAL (before a TRUNCATE/RESTART reset)
    checkpointed_frames: int
    wal_bytes_after: int
    seconds: float


class OptimizeResult(NamedTuple):
    seconds: float


Progress = Callable[[int, int], None]
"""``progress(pages_copied, pages_total)``, called after each step."""


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _new_file(path: object, what: str, overwrite: bool) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError(f"{what} must be a file path, got {path!r}")
    target = os.path.abspath(os.fspath(path))
    if not os.path.isdir(os.path.dirname(target)):
        raise OpenError(f"{what} {target!r}: its directory does not exist; create it first")
    if os.path.exists(target):
        if not overwrite:
            raise ConfigError(
                f"{what} {target!r} exists; pick a new path, or pass overwrite=True to replace it"
            )
        for suffix in ("", "-wal", "-shm", "-journal"):
            if os.path.exists(target + suffix):
                os.remove(target + suffix)
    return target


def backup(
    db: Database,
    dest: object,
    *,
    pages: int = 1024,
    progress: Progress | None = None,
    overwrite: bool = False,
) -> BackupResult:
    """An online, consistent copy of the database at ``dest``: one snapshot
    (a read transaction pins it), copied ``pages`` pages per step with
    SQLite's backup API. Writers are never stopped: in WAL mode they append
    to the WAL while the copy reads the snapshot."""
    if isinstance(pages, bool) or not isinstance(pages, int) or pages < 1:
        raise ConfigError(f"pages must be a whole number >= 1, got {pages!r}")
    target = _new_file(dest, "backup destination", overwrite)
    if target == db.path:
        raise ConfigError("the backup destination is the database itself; pick another path")
    t0 = time.monotonic()
    with (
        closing(sqlite3.connect(db.path, isolation_level=None)) as src,
        closing(sqlite3.connect(target, isolation_level=None)) as dst,
    ):
        src.execute("PRAGMA query_only = 1")
        src.execute("BEGIN")
        src.execute("SELECT count(*) FROM sqlite_master").fetchone()  # pins the snapshot

        def step(status: int, remaining: int, total: int) -> None:
            if progress is not None:
                progress(total - remaining, total)

        src.backup(dst, pages=pages, progress=step, sleep=0)
        src.execute("COMMIT")
        n = int(dst.execute("PRAGMA page_count").fetchone()[0])
        # A standalone copy: one file, no WAL beside it.
        dst.execute("PRAGMA journal_mode = DELETE")
    return BackupResult(target, _size(target), n, time.monotonic() - t0)


def vacuum(
    db: Database, *, into: object = None, overwrite: bool = False, timeout: float | None = None
) -> VacuumResult:
    """``VACUUM`` (rebuild the file, return free pages to the filesystem)
    with the write gate held; or, with ``into=``, ``VACUUM INTO`` a new,
    compact file from one snapshot, which needs no gate.

    In WAL mode the rebuilt pages go to the WAL first; the file on disk
    shrinks when a checkpoint gets past every reader's snapshot. vacuum()
    tries one at once (TRUNCATE); with readers active it may not finish,
    and ``bytes_after`` is then still the old size until a later
    checkpoint (litegate's checkpointer, or ``db.checkpoint("TRUNCATE")``)."""
    t0 = time.monotonic()
    if into is not None:
        target = _new_file(into, "vacuum into=", overwrite)
        with closing(sqlite3.connect(db.path, isolation_level=None)) as conn:
            before = _pages(conn)
            conn.execute("VACUUM INTO ?", (target,))
        with closing(sqlite3.connect(target)) as new:
            after = _pages(new)
        return VacuumResult(
            _size(db.path), _size(target), before[0], after[0], before[1], time.monotonic() - t0,
            target,
        )  # fmt: skip
    bytes_before = _size(db.path)
    with db._exclusive(timeout) as conn:
        before = _pages(conn)
        conn.execute("VACUUM")
        after = _pages(conn)
        # VACUUM in WAL mode writes the whole file into the WAL: fold it back
        # now, while nobody else can write, so the file shrinks at once.
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    return VacuumResult(
        bytes_before, _size(db.path), before[0], after[0], before[1], time.monotonic() - t0, None
    )


def _pages(conn: sqlite3.Connection) -> tuple[int, int]:
    count = int(conn.execute("PRAGMA page_count").fetchone()[0])
    free = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
    return count, free


def checkpoint(
    db: Database, mode: str = "PASSIVE", *, timeout: float | None = None
) -> CheckpointResult:
    """``PRAGMA wal_checkpoint(mode)`` with the write gate held: PASSIVE
    copies what it can; FULL, RESTART and TRUNCATE also wait for readers
    (up to the busy timeout) and RESTART/TRUNCATE reset the WAL."""
    name = mode.upper() if isinstance(mode, str) else mode
    if name not in CHECKPOINT_MODES:
        raise ConfigError(f"mode must be one of {', '.join(CHECKPOINT_MODES)}, got {mode!r}")
    t0 = time.monotonic()
    with db._exclusive(timeout) as conn:
        busy, frames, done = conn.execute(f"PRAGMA wal_checkpoint({name})").fetchone()
    return CheckpointResult(
        name, bool(busy), max(0, int(frames)), max(0, int(done)), _size(db.path + "-wal"),
        time.monotonic() - t0,
    )  # fmt: skip


def optimize(db: Database, *, timeout: float | None = None) -> OptimizeResult:
    """``PRAGMA optimize`` (refreshes the query planner's statistics where
    they are stale), with the write gate held: it may run ANALYZE."""
    t0 = time.monotonic()
    with db._exclusive(timeout) as conn:
        conn.execute("PRAGMA optimize")
    return OptimizeResult(time.monotonic() - t0)
