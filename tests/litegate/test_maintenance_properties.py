"""The misuse suite, part 2: ``db.backup()`` and
``db.vacuum(into=)`` over destinations (the live database by every name,
its companions, another database's, an existing file, a directory, a pipe,
a missing folder, names that are not paths), spellings (absolute, relative,
``./``, ``sub/../``, through a symlinked folder), ``overwrite`` and
``pages`` / ``progress`` values.

The contract, per case: success (a complete, standalone copy with every
committed row, at the destination and nowhere else) or a typed
litegate.Error that says what to do and leaves every file as it was; a
destination that is, or belongs to, the live database is always refused;
the live database keeps every committed row and every file."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import litegate
from tests.litegate.misuse import attempt, examples, ran

ROWS = 30

# Destinations that are, or belong to, the live database app.db.
LIVE = {
    "app.db": "itself",
    "app.db-wal": "its WAL",
    "app.db-shm": "its WAL index",
    "app.db-journal": "its rollback journal (not there)",
    "app.db-litegate": "its sidecar",
    "link.db": "a symlink to it",
    "hard.db": "a hard link to it",
}
OTHERS = [
    "copy.db",  # new
    "notes.txt",  # an existing file
    "other.db",  # another (closed) database
    "other.db-wal",  # ... and its companions
    "other.db-litegate",
    "folder",  # a directory
    "pipe",  # a FIFO
    "nope/copy.db",  # a missing folder
    "folder/copy.db",  # a new file in a folder
    "dangling.db",  # a symlink to nothing
]
ODD = [":memory:", "", "file:copy.db", "file:copy.db?mode=memory", "bad\0.db", "copy.db/", "."]


@dataclass(frozen=True)
class Case:
    call: str  # backup, vacuum
    name: str
    spelling: str  # absolute, relative, dot, dotdot, dirlink, pathlib, bytes
    overwrite: Any
    pages: Any = 1024
    progress: Any = None

    def dest(self, d: str) -> object:
        name = self.name
        if name in ODD:
            return name
        spelled = {
            "absolute": os.path.join(d, name),
            "relative": name,
            "dot": "./" + name,
            "dotdot": "sub/../" + name,
            "dirlink": os.path.join(d, "dirlink", name),
            "pathlib": Path(d, name),
            "bytes": os.path.join(d, name).encode(),
        }
        return spelled[self.spelling]


def cases() -> st.SearchStrategy[Case]:
    names = st.sampled_from([*LIVE, *OTHERS, *ODD])
    spellings = st.sampled_from(
        ["absolute", "relative", "dot", "dotdot", "dirlink", "pathlib", "bytes"]
    )
    overwrite = st.one_of(st.booleans(), st.sampled_from([None, 0, 1, "yes"]))
    pages = st.one_of(
        st.just(1024), st.integers(-2, 2**40), st.booleans(), st.floats(allow_nan=True)
    )
    progress = st.sampled_from([None, "callable", 3])
    return st.builds(
        Case,
        st.sampled_from(["backup", "vacuum"]),
        names,
        spellings,
        overwrite,
        pages,
        progress,
    )


def build(d: str, template: litegate.Database) -> None:
    """The scene: app.db (open, live) and everything else the names need."""
    template.backup(os.path.join(d, "other.db"))
    Path(d, "notes.txt").write_text("my notes")
    os.mkdir(os.path.join(d, "folder"))
    Path(d, "folder", "keep.txt").write_text("keep")
    os.mkdir(os.path.join(d, "sub"))
    os.mkfifo(os.path.join(d, "pipe"))
    os.symlink(os.path.join(d, "nowhere.db"), os.path.join(d, "dangling.db"))
    os.symlink(d, os.path.join(d, "dirlink"))


def snapshot(d: str) -> dict[str, tuple[int, int, int]]:
    """Every entry under ``d`` (not through symlinks): (inode, size, mode)."""
    out = {}
    for root, dirs, names in os.walk(d):
        for name in dirs + names:
            p = os.path.join(root, name)
            st_ = os.lstat(p)
            out[os.path.relpath(p, d)] = (st_.st_ino, st_.st_size, st_.st_mode)
    return out


@contextmanager
def scene(tmp: Path, template: litegate.Database) -> Iterator[tuple[str, litegate.Database]]:
    d = tmp / f"case{len(list(tmp.iterdir()))}"
    d.mkdir()
    template.backup(d / "app.db")
    db = litegate.connect(d / "app.db", timeout=5)
    db.query("SELECT count(*) FROM t")  # WAL mode: -wal and -shm exist now
    os.symlink(d / "app.db", d / "link.db")
    os.link(d / "app.db", d / "hard.db")
    build(str(d), template)
    cwd = os.getcwd()
    os.chdir(d)
    try:
        yield str(d), db
    finally:
        os.chdir(cwd)
        db.close()


def run(case: Case, db: litegate.Database, dest: object) -> Callable[[], object]:
    def progress(done: int, total: int) -> None:
        assert 0 <= done <= total

    prog = progress if case.progress == "callable" else case.progress
    if case.call == "backup":
        return lambda: db.backup(
            dest,  # type: ignore[arg-type]
            pages=case.pages,
            progress=prog,
            overwrite=case.overwrite,
        )
    return lambda: db.vacuum(into=dest, overwrite=case.overwrite)  # type: ignore[arg-type]


def rows(path: str) -> int:
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        return int(conn.execute("SELECT count(*) FROM t").fetchone()[0])


def check(tmp: Path, template: litegate.Database, case: Case) -> None:
    with scene(tmp, template) as (d, db):
        dest = case.dest(d)
        before = snapshot(d)
        live = {n: before[n] for n in ("app.db", "app.db-wal", "app.db-shm", "app.db-litegate")}
        outcome = attempt(run(case, db, dest), repr(case))
        after = snapshot(d)
        if case.name in LIVE:
            assert not outcome.ok, f"{LIVE[case.name]} was accepted: {case}"
            assert isinstance(outcome.error, litegate.ConfigError), outcome
        if case.name in ODD:
            assert not outcome.ok, f"{case.name!r} is not a file path, and was accepted"
        if not outcome.ok:
            assert after == before, f"a refused call changed files: {case}"
        else:
            target = outcome.value.path if case.call == "backup" else outcome.value.into
            assert os.path.dirname(os.path.realpath(target)) in (d, os.path.join(d, "folder"))
            with closing(sqlite3.connect(f"file:{target}?mode=ro", uri=True)) as copy:
                assert copy.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            assert rows(target) == ROWS
            name = os.path.relpath(os.path.realpath(target), os.path.realpath(d))
            changed = {n for n in set(before) | set(after) if before.get(n) != after.get(n)}
            # the destination, and the journals of an old file there
            assert changed <= {name, name + "-wal", name + "-shm", name + "-journal"}, changed
        for n, ident in live.items():  # the live database's files, untouched
            assert after[n][0] == ident[0], n
        assert db.query("SELECT count(*) FROM t") == [(ROWS,)]
        assert rows(os.path.join(d, "app.db")) == ROWS


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[litegate.Database]:
    path = tmp_path_factory.mktemp("template") / "template.db"
    with litegate.connect(path) as db:
        db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        db.executemany("INSERT INTO t (v) VALUES (?)", [(f"row {i}",) for i in range(ROWS)])
        yield db


@pytest.mark.slow
def test_backup_and_vacuum_into_any_destination(
    template: litegate.Database, tmp_path_factory: pytest.TempPathFactory
) -> None:
    tmp = tmp_path_factory.mktemp("destinations")

    @examples(120)
    @given(cases())
    def case(c: Case) -> None:
        ran("backup destinations")
        check(tmp, template, c)

    case()
