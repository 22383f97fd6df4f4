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

import contextlib
import os
import secrets
import sqlite3
import stat
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, closing
from typing import NamedTuple, Protocol
from urllib.parse import quote

from ._errors import ConfigError, OpenError, WriteTimeout
from ._files import FAMILY, JOURNALS, SIDECAR, openers, owner_of, same_file

CHECKPOINT_MODES = ("PASSIVE", "FULL", "RESTART", "TRUNCATE")
_INT_MAX = 2**31 - 1


class _Target(Protocol):
    """What maintenance needs of a :class:`litegate.Database` (a protocol,
    so that this module does not import ``_database``, which imports it)."""

    path: str

    def _exclusive(self, timeout: float | None) -> AbstractContextManager[sqlite3.Connection]:
        """The write connection, the whole gate held, no transaction open."""
        ...

    def _checkpoint_turn(self, timeout: float | None) -> AbstractContextManager[bool]:
        """litegate's checkpoint lock, taken before the gate (False: timed out)."""
        ...


class BackupResult(NamedTuple):
    """What ``db.backup(dest)`` did: the copy's path and size in bytes and pages,
    and how long it took in seconds."""

    path: str
    bytes: int
    pages: int
    seconds: float


class VacuumResult(NamedTuple):
    """What ``db.vacuum()`` did: the file's size before and after (in bytes and
    pages), the free pages it dropped, the seconds it took, and the new file
    (``into=``) or ``None``."""

    bytes_before: int
    bytes_after: int  # the file vacuumed (or the new file, with into=)
    pages_before: int
    pages_after: int
    freed_pages: int  # free-list pages the vacuum dropped
    seconds: float
    into: str | None


class CheckpointResult(NamedTuple):
    """What ``db.checkpoint(mode)`` did: SQLite's answer (``busy``: a reader or
    writer kept it from finishing; the frames in the WAL and those copied back),
    the WAL's size after it, and the seconds it took."""

    mode: str
    busy: bool  # a reader or writer kept the checkpoint from finishing
    wal_frames: int  # frames in the WAL (before a TRUNCATE/RESTART reset)
    checkpointed_frames: int
    wal_bytes_after: int
    seconds: float


class OptimizeResult(NamedTuple):
    """What ``db.optimize()`` did (``PRAGMA optimize``): the seconds it took."""

    seconds: float


Progress = Callable[[int, int], None]
"""``progress(pages_copied, pages_total)``, called after each step."""


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


# -- destinations of backup() and vacuum(into=) ---------------------------------
#
# Every check runs before anything is created, replaced or deleted, and the
# copy is written to a temporary file beside the destination and renamed
# over it only once it is complete: a refused or failed call leaves every
# file as it was.


def _not_a_path(what: str, dest: str) -> str | None:
    """Why ``dest`` is not a plain file path, or None."""
    if dest == "":
        return f"{what} is an empty path; pass a file path such as 'backup.db'"
    if dest == ":memory:":
        return (
            f"{what} ':memory:' is SQLite's name for a private in-memory database: a copy "
            "there would vanish at once. Pass a file path (for a file really named "
            "':memory:', pass './:memory:')"
        )
    if dest.startswith("file:"):
        return (
            f"{what} {dest!r} looks like a SQLite URI; pass a plain file path (for a file "
            f"whose name starts with 'file:', pass {'./' + dest!r})"
        )
    if "\0" in dest:
        return f"{what} {dest!r} contains a NUL character; pass a file path"
    if dest.endswith(("/", os.sep)):
        return (
            f"{what} {dest!r} ends with a slash, so it names a folder; pass the path of a "
            f"file in it, e.g. {dest + 'backup.db'!r}"
        )
    return None


def _relation(target: str, theirs: str, mine: str, source: str) -> str:
    """How ``target`` collides with the live database ``source``."""
    other_name = "" if target == source else " (another name for it)"
    if theirs == "" and mine == "":
        return f"is the database itself{other_name}"
    if theirs == "":
        return f"is the database's {mine} file"
    return f"would put its {theirs} file on top of the database's {mine or 'main'} file"


def _destination(db: _Target, dest: object, what: str, overwrite: object) -> str:
    """The absolute path to write, after every check that protects a live
    database; raises :class:`ConfigError` / :class:`OpenError` otherwise."""
    if not isinstance(overwrite, bool):
        raise ConfigError(f"overwrite must be True or False, got {overwrite!r}")
    raw = os.fspath(dest) if isinstance(dest, os.PathLike) else dest
    if not isinstance(raw, str):
        raise ConfigError(f"{what} must be a file path (str or os.PathLike[str]), got {dest!r}")
    why = _not_a_path(what, raw)
    if why is not None:
        raise ConfigError(why)
    target = os.path.abspath(raw)
    source = db.path
    suggestion = os.path.splitext(source)[0] + "-backup.db"
    # The live database, its journal files and its sidecar, whatever the name:
    # a new file at target (or the journal files SQLite keeps beside it) must
    # not be any of them. Refused whatever overwrite says.
    for mine in FAMILY:
        for theirs in ("", *JOURNALS):
            if same_file(target + theirs, source + mine):
                raise ConfigError(
                    f"{what} {target!r} {_relation(target, theirs, mine, source)}: writing "
                    f"there would destroy the live database {source!r}; pick another "
                    f"path, e.g. {suggestion!r}"
                )
    owner = owner_of(target) or owner_of(os.path.realpath(target))
    if owner is not None:
        raise ConfigError(
            f"{what} {target!r} is the {owner[1]} file of the database {owner[0]!r} (SQLite "
            "or litegate keeps it there, and would replay or delete it); pick a path that "
            "does not end in -wal, -shm, -journal or -litegate"
        )
    directory = os.path.dirname(target)
    if not os.path.isdir(directory):
        raise OpenError(f"{what} {target!r}: its directory does not exist; create it first")
    if os.path.isdir(target):
        raise OpenError(
            f"{what} {target!r} is a directory; pass the path of a file in it, e.g. "
            f"{os.path.join(target, os.path.basename(suggestion))!r}"
        )
    there = [target + s for s in ("", *JOURNALS) if os.path.lexists(target + s)]
    if there:
        if not overwrite:
            leftover = "" if there[0] == target else " (left by a database that was there?)"
            raise ConfigError(
                f"{what} {there[0]!r} exists{leftover}; pick a new path, or pass "
                "overwrite=True to replace it"
            )
        for p in there:
            mode = os.lstat(p).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
                raise OpenError(
                    f"{what} {p!r} is not a regular file (a directory, device, pipe or "
                    "socket); litegate replaces files only. Pick a file path"
                )
        users = openers([*there, target + SIDECAR])
        if users:
            raise ConfigError(
                f"{what} {target!r} is open in process(es) {', '.join(map(str, users))}: a "
                "live database, or a file in use; replacing it would pull it from under "
                "them. Close it there first, or pick another path"
            )
    if not os.access(directory, os.W_OK | os.X_OK):
        raise OpenError(
            f"cannot write {what} {target!r}: its directory is read-only for this process; "
            "make it writable or pick another directory"
        )
    return target


def _scratch(target: str) -> str:
    """A new file name beside ``target`` (same filesystem: the rename is atomic)."""
    return f"{target}.litegate-tmp-{os.getpid()}-{secrets.token_hex(4)}"


def _discard(path: str) -> None:
    for suffix in ("", *JOURNALS):
        with contextlib.suppress(OSError):
            os.remove(path + suffix)


def _install(scratch: str, target: str) -> None:
    """Put the finished copy at ``target``. The journal files of an old file
    there go first: SQLite would replay or trust them on the new one."""
    for suffix in JOURNALS:
        if os.path.lexists(target + suffix):
            os.remove(target + suffix)
    os.replace(scratch, target)


def _failed(what: str, target: str, exc: sqlite3.Error) -> OpenError:
    return OpenError(
        f"could not write {what} {target!r}: {exc}. Nothing was replaced and the database "
        "is untouched; check the free space and permissions there"
    )


def _source_uri(path: str) -> str:
    # mode=rw: never create the database if its file went away meanwhile
    return "file:" + quote(path, safe="/") + "?mode=rw"


def backup(
    db: _Target,
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
    if progress is not None and not callable(progress):
        raise ConfigError(f"progress must be a function (done, total) or None, got {progress!r}")
    target = _destination(db, dest, "backup destination", overwrite)
    scratch = _scratch(target)
    t0 = time.monotonic()
    try:
        with (
            closing(sqlite3.connect(_source_uri(db.path), uri=True, isolation_level=None)) as src,
            closing(sqlite3.connect(scratch, isolation_level=None)) as dst,
        ):
            src.execute("PRAGMA query_only = 1")
            src.execute("BEGIN")
            src.execute("SELECT count(*) FROM sqlite_master").fetchone()  # pins the snapshot

            def step(status: int, remaining: int, total: int) -> None:
                if progress is not None:
                    progress(total - remaining, total)

            # SQLite takes an int; more pages than the file has copies it all.
            src.backup(dst, pages=min(pages, _INT_MAX), progress=step, sleep=0)
            src.execute("COMMIT")
            n = int(dst.execute("PRAGMA page_count").fetchone()[0])
            # A standalone copy: one file, no WAL beside it.
            dst.execute("PRAGMA journal_mode = DELETE")
        _install(scratch, target)
    except sqlite3.Error as exc:
        _discard(scratch)
        raise _failed("backup destination", target, exc) from exc
    except BaseException:
        _discard(scratch)
        raise
    return BackupResult(target, _size(target), n, time.monotonic() - t0)


def vacuum(
    db: _Target, *, into: object = None, overwrite: bool = False, timeout: float | None = None
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
        target = _destination(db, into, "vacuum into=", overwrite)
        scratch = _scratch(target)
        try:
            with closing(
                sqlite3.connect(_source_uri(db.path), uri=True, isolation_level=None)
            ) as conn:
                before = _pages(conn)
                conn.execute("VACUUM INTO ?", (scratch,))
            with closing(sqlite3.connect(scratch)) as new:
                after = _pages(new)
            _install(scratch, target)
        except sqlite3.Error as exc:
            _discard(scratch)
            raise _failed("vacuum into=", target, exc) from exc
        except BaseException:
            _discard(scratch)
            raise
        return VacuumResult(
            _size(db.path), _size(target), before[0], after[0], before[1], time.monotonic() - t0,
            target,
        )  # fmt: skip
    if not isinstance(overwrite, bool) or overwrite:
        raise ConfigError("overwrite= goes with into=; vacuum() without into= rebuilds in place")
    bytes_before = _size(db.path)
    t1 = time.monotonic()
    with db._checkpoint_turn(timeout) as ours:
        if not ours:
            raise _checkpoint_timeout("vacuum()", timeout)
        with db._exclusive(_left("vacuum()", timeout, t1)) as conn:
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
    db: _Target, mode: str = "PASSIVE", *, timeout: float | None = None
) -> CheckpointResult:
    """``PRAGMA wal_checkpoint(mode)`` with the write gate held: PASSIVE
    copies what it can; FULL, RESTART and TRUNCATE also wait for readers
    (up to the busy timeout) and RESTART/TRUNCATE reset the WAL."""
    name = mode.upper() if isinstance(mode, str) else mode
    if name not in CHECKPOINT_MODES:
        raise ConfigError(f"mode must be one of {', '.join(CHECKPOINT_MODES)}, got {mode!r}")
    t0 = time.monotonic()
    with db._checkpoint_turn(timeout) as ours:
        if not ours:
            raise _checkpoint_timeout("checkpoint()", timeout)
        with db._exclusive(_left("checkpoint()", timeout, t0)) as conn:
            busy, frames, done = conn.execute(f"PRAGMA wal_checkpoint({name})").fetchone()
    return CheckpointResult(
        name, bool(busy), max(0, int(frames)), max(0, int(done)), _size(db.path + "-wal"),
        time.monotonic() - t0,
    )  # fmt: skip


def _left(what: str, timeout: float | None, t0: float) -> float | None:
    """What is left of ``timeout`` (None: the database's default) since
    ``t0``, once the checkpoint lock is held; WriteTimeout if nothing is."""
    if timeout is None:
        return None
    left = timeout - (time.monotonic() - t0)
    if left <= 0:  # the wait for the checkpoint lock took it all
        raise _checkpoint_timeout(what, timeout)
    return left


def _checkpoint_timeout(what: str, timeout: float | None) -> WriteTimeout:
    limit = "the database's timeout" if timeout is None else f"{timeout:g} s"
    return WriteTimeout(
        f"{what}: another checkpoint of this file (litegate's background checkpointer, or "
        f"maintenance in another process) did not end within {limit}; litegate runs its "
        "checkpoints one at a time. Raise timeout= or try again"
    )


def optimize(db: _Target, *, timeout: float | None = None) -> OptimizeResult:
    """``PRAGMA optimize`` (refreshes the query planner's statistics where
    they are stale), with the write gate held: it may run ANALYZE."""
    t0 = time.monotonic()
    with db._exclusive(timeout) as conn:
        conn.execute("PRAGMA optimize")
    return OptimizeResult(time.monotonic() - t0)
