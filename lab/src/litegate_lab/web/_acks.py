"""Acknowledged writes: the apps' ledger, and the check of a database
against it after a load.

Both apps (Django and FastAPI) call :func:`record` once per write
transaction, after its commit returned and before the response is sent:
one line, ``post_create 1234`` or ``comment_create 77 12`` (comment, post)
or ``post_destroy 12`` or ``comment_destroy 77``. Each worker process
appends to its own file ``DIR/acks-PID-TAG`` (``DIR`` from
``$LITEGATE_WEB_ACKS``, which ``litegate web serve --acks DIR`` sets), with
one ``write(2)`` per line on an ``O_APPEND`` descriptor and no buffer in
between, so a line is in the file before its client hears back. The
ledger is outside the database on purpose: it is what the app was told,
and :func:`check` asks whether the database kept it.

Every write the app acknowledged is then "there" when, in the file:

- each acknowledged ``post_create`` row exists, unless an acknowledged
  ``post_destroy`` removed it (ids are ``AUTOINCREMENT``: never reused);
- each acknowledged ``comment_create`` row exists, unless an acknowledged
  ``comment_destroy`` removed it or its post was acknowledged deleted;
- no acknowledged ``post_destroy`` or ``comment_destroy`` row exists, and
  no comment of a deleted post does (the delete took its comments).

Together with ``PRAGMA integrity_check`` and ``PRAGMA foreign_key_check``
these are the violations the bench reports per cell. The touch of a user
(``last_seen_at``, overwritten by every request) is not in the ledger:
last writer wins, so no single acknowledged value must survive.

A file appears when a worker starts (:func:`start`), so the files also
tell ``litegate bench web`` how many workers are up.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import closing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ENV = "LITEGATE_WEB_ACKS"
PREFIX = "acks-"
KINDS = {"post_create": 1, "comment_create": 2, "post_destroy": 1, "comment_destroy": 1}
"""Each kind of line and how many ids it carries."""

_lock = threading.Lock()
_fd: tuple[int, int] | None = None  # (pid, descriptor) of this process's file


def _descriptor() -> int | None:
    """This process's ledger file, opened on first use (and again in a
    forked child); None when no ledger is asked for."""
    global _fd
    pid = os.getpid()
    current = _fd
    if current is not None and current[0] == pid:
        return current[1]
    directory = os.environ.get(ENV)
    if not directory:
        return None
    # A name of its own per worker start (the PID and a random tag): a
    # worker that reuses a PID of an earlier cell's still adds a file.
    name = f"{PREFIX}{pid}-{os.urandom(4).hex()}"
    fd = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    with _lock:  # two threads may open it at once: the first one kept wins
        if _fd is None or _fd[0] != pid:
            _fd = (pid, fd)
            return fd
        kept = _fd[1]
    os.close(fd)
    return kept


def start() -> None:
    """Create this worker's ledger file now (at the app's start-up)."""
    _descriptor()


def record(kind: str, *ids: int) -> None:
    """One acknowledged write (no-op without ``$LITEGATE_WEB_ACKS``)."""
    if KINDS.get(kind) != len(ids):
        raise ValueError(f"a {kind!r} acknowledgement takes {KINDS.get(kind)} ids, got {ids}")
    fd = _descriptor()
    if fd is not None:
        os.write(fd, (" ".join((kind, *map(str, ids))) + "\n").encode())


def workers(directory: str | Path) -> int:
    """How many worker processes have started with a ledger file in ``directory``."""
    return sum(1 for p in Path(directory).glob(f"{PREFIX}*"))


def entries(directory: str | Path) -> Iterator[tuple[str, tuple[int, ...]] | None]:
    """Every line of every ledger file in ``directory`` (None for a line
    that does not parse)."""
    for path in sorted(Path(directory).glob(f"{PREFIX}*")):
        for line in path.read_text(encoding="ascii", errors="replace").splitlines():
            kind, *rest = line.split() or [""]
            try:
                ids = tuple(int(x) for x in rest)
            except ValueError:
                yield None
                continue
            yield (kind, ids) if KINDS.get(kind) == len(ids) else None


SAMPLE = 5
"""How many ids of each kind of violation a report keeps."""


@dataclass
class Report:
    """What :func:`check` found in one database."""

    integrity: list[str] = field(default_factory=list)  # integrity_check's lines if not "ok"
    foreign_keys: int = 0  # rows foreign_key_check reports
    acknowledged: dict[str, int] = field(default_factory=dict)  # ledger lines per kind
    unreadable: int = 0  # ledger lines that do not parse
    lost: int = 0  # acknowledged rows missing
    resurrected: int = 0  # acknowledged deletes whose row is there
    orphaned: int = 0  # comments of acknowledged-deleted posts still there
    examples: list[str] = field(default_factory=list)  # a few of each, for the report

    @property
    def violations(self) -> int:
        return (
            len(self.integrity) + self.foreign_keys + self.unreadable
            + self.lost + self.resurrected + self.orphaned
        )  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "violations": self.violations}


def check(db: str | Path, directory: str | Path) -> Report:
    """Check ``db`` (no server running on it) against the ledger files in
    ``directory``."""
    report = Report()
    created_posts: set[int] = set()
    deleted_posts: set[int] = set()
    created_comments: dict[int, int] = {}
    deleted_comments: set[int] = set()
    for entry in entries(directory):
        if entry is None:
            report.unreadable += 1
            continue
        kind, ids = entry
        report.acknowledged[kind] = report.acknowledged.get(kind, 0) + 1
        if kind == "post_create":
            created_posts.add(ids[0])
        elif kind == "post_destroy":
            deleted_posts.add(ids[0])
        elif kind == "comment_create":
            created_comments[ids[0]] = ids[1]
        else:
            deleted_comments.add(ids[0])
    with closing(sqlite3.connect(db)) as conn:
        rows = [r[0] for r in conn.execute("PRAGMA integrity_check")]
        report.integrity = [] if rows == ["ok"] else [str(r) for r in rows]
        report.foreign_keys = len(conn.execute("PRAGMA foreign_key_check").fetchall())
        posts = {r[0] for r in conn.execute("SELECT id FROM hn_post")}
        comments = dict(conn.execute("SELECT id, post_id FROM hn_comment").fetchall())

    def note(what: str, ids: list[int]) -> int:
        report.examples += [f"{what} {i}" for i in sorted(ids)[:SAMPLE]]
        return len(ids)

    report.lost = note(
        "lost post", [p for p in created_posts if p not in posts and p not in deleted_posts]
    ) + note(
        "lost comment",
        [
            c
            for c, p in created_comments.items()
            if c not in comments and c not in deleted_comments and p not in deleted_posts
        ],
    )
    report.resurrected = note("deleted post still there:", list(deleted_posts & posts)) + note(
        "deleted comment still there:", [c for c in deleted_comments if c in comments]
    )
    report.orphaned = note(
        "comment of a deleted post still there:",
        [c for c, p in comments.items() if p in deleted_posts],
    )
    return report
