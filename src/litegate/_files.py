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
