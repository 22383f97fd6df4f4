"""The files of one database, and which processes have them open.

A SQLite database in use is more than its file: SQLite keeps ``-wal`` and
``-shm`` (WAL mode) or ``-journal`` (rollback mode) beside it, and litegate
its ``-litegate`` sidecar (the gate). Each may be reached by other names (a
symlink, a hard link, ``./x.db``), so "is this the same file" is answered by
the resolved path and by the inode, never by the spelling.

Standard library only; the process table comes from ``/proc`` (Linux, as
the gate itself). Nothing here opens a database file: closing a descriptor
would drop this process's POSIX locks on it (SQLite's), so files are only
stat()ed.
"""

from __future__ import annotations

import os
import stat

from ._errors import OpenError

JOURNALS = ("-wal", "-shm", "-journal")
"""What SQLite keeps beside a database file (and deletes or replays)."""
SIDECAR = "-litegate"
FAMILY = ("", *JOURNALS, SIDECAR)
"""A database and everything that belongs to it."""


def identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of what ``path`` names (symlinks followed), None if
    nothing is there or it cannot be looked at."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def same_file(a: str, b: str) -> bool:
    """True if ``a`` and ``b`` name one file: the same resolved path
    (whether or not it exists yet), or the same inode (hard links)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    ia = identity(a)
    return ia is not None and ia == identity(b)


def owner_of(path: str) -> tuple[str, str] | None:
    """If ``path`` is named like one of a database's companions
    (``x.db-wal``, ``x.db-litegate`` ...) and that database exists:
    (the database, the suffix). Else None."""
    for suffix in (*JOURNALS, SIDECAR):
        if path.endswith(suffix):
            stem = path[: -len(suffix)]
            if stem and os.path.isfile(stem):
                return stem, suffix
    return None


def openers(paths: list[str]) -> list[int]:
    """The pids of processes that have any of ``paths`` open (those this
    user may look at in /proc), this process included."""
    wanted = {i for i in map(identity, paths) if i is not None}
    if not wanted:
        return []
    found: set[int] = set()
    try:
        entries = os.listdir("/proc")
    except OSError:  # pragma: no cover - no /proc: nothing to say
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                st = os.stat(f"/proc/{entry}/fd/{fd}")
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in wanted:
                found.add(int(entry))
                break
    return sorted(found)


def orphan_log(path: str) -> str:
    """Why ``path`` must not be opened (or ""): its database file is gone
    but its write-ahead log (or a rollback journal) is still there, holding
    committed transactions. Opening would create an empty database and
    SQLite would discard the log with it."""
    if os.path.lexists(path):
        return ""
    for suffix, what in (("-wal", "write-ahead log"), ("-journal", "rollback journal")):
        try:
            size = os.path.getsize(path + suffix)
        except OSError:
            continue
        if size > 0:
            return (
                f"{path!r} does not exist, but its {what} {path + suffix!r} ({size} bytes) does: "
                "it holds transactions of a database file that was moved or deleted, and "
                "opening the path would create an empty database and discard them. Put the "
                f"database file back at {path!r} (from where it was moved, or a backup), or, "
                f"if those transactions are not wanted, move {path + suffix!r} away first"
            )
    return ""


def _not_ours_to_write(path: str) -> bool:
    """``path`` exists and this process may not read and write it. (A file
    that goes away meanwhile is no finding: another process's last
    connection deletes the -shm and -wal as it closes, and os.access()
    says False for a file that is not there.)"""
    return os.path.exists(path) and not os.access(path, os.R_OK | os.W_OK) and os.path.exists(path)


def check_path(path: str) -> None:
    """Refuse, with an OpenError that says what to do, a database path that
    litegate cannot or must not open (before anything is opened)."""
    orphan = orphan_log(path)
    if orphan:
        raise OpenError(orphan)
    directory = os.path.dirname(path)
    try:
        is_dir = stat.S_ISDIR(os.stat(directory).st_mode)
    except PermissionError:
        raise OpenError(
            f"directory {directory!r} cannot be reached by this process (permission denied on "
            "it or on a folder above it); give this user access (x permission) to each folder "
            "on the way"
        ) from None
    except OSError:
        is_dir = False
    if not is_dir:
        raise OpenError(
            f"directory {directory!r} does not exist; create it first (litegate creates the "
            "database file, not the folders above it)"
        )
    if os.path.isdir(path):
        raise OpenError(
            f"{path!r} is a directory; pass the path of a database file, "
            f"e.g. {os.path.join(path, 'app.db')!r}"
        )
    if _not_ours_to_write(path):
        raise OpenError(
            f"{path!r} is read-only for this process; litegate writes to it. Make it writable "
            "for this user (chmod u+w, or g+w and a shared group) or work on a copy"
        )
    try:
        links = os.stat(path).st_nlink
    except OSError:
        links = 1
    if links > 1:
        # Each name would get its own -wal, -shm and gate: two logs for one
        # file corrupt it (SQLite's "How To Corrupt", multiple links).
        raise OpenError(
            f"{path!r} has {links} hard links; SQLite names its -wal and -shm files after the "
            "path, so two names for one database file corrupt it. Keep one name (remove the "
            "other links) and use a symlink if you need a second path"
        )
    companions = [path + s for s in ("", "-wal", "-shm", "-litegate")]
    missing = [os.path.basename(p) for p in companions if not os.path.exists(p)]
    if missing and not os.access(directory, os.W_OK | os.X_OK):
        raise OpenError(
            f"directory {directory!r} is read-only for this process, but WAL mode must create "
            f"{', '.join(missing)} there; make the directory writable or move the database"
        )
    for p in companions[1:]:
        if _not_ours_to_write(p):
            raise OpenError(
                f"{p!r} is read-only for this process, and every process that opens the "
                "database writes it. Give this user write access to it as to the database "
                f"(e.g. chmod g+w {p!r} with a shared group), or remove it while no process "
                "uses the database: it is created again with the database file's permissions"
            )
