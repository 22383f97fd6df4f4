"""SQLite's result code of an error, on every supported Python: from
``sqlite_errorcode`` where sqlite3 sets it (3.11+), from SQLite's message on
Python 3.10, whose sqlite3 errors carry no code."""

from __future__ import annotations

import sqlite3
import sys
from contextlib import closing
from pathlib import Path

import pytest

import litegate
from litegate._errors import sqlite_code


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ("database is locked", 5),
        ("database table is locked", 6),
        ("attempt to write a readonly database", 8),
        ("disk I/O error", 10),
        ("database disk image is malformed", 11),
        ("unable to open database file", 14),
        ("not authorized", 23),
        ("file is not a database", 26),
        ("no such table: t", -1),
    ],
)
def test_the_code_of_an_error_without_one_comes_from_sqlites_message(
    message: str, code: int
) -> None:
    exc = sqlite3.OperationalError(message)  # as Python 3.10's sqlite3 raises it
    assert not hasattr(exc, "sqlite_errorcode")
    assert sqlite_code(exc) == code
    assert sqlite_code(ValueError(message)) == -1  # not SQLite's


def test_the_code_sqlite3_sets_wins() -> None:
    exc = sqlite3.OperationalError("file is not a database")
    exc.sqlite_errorcode = 8 | (3 << 8)  # type: ignore[attr-defined]  # an extended code
    assert sqlite_code(exc) == 8


def test_a_real_error_has_its_code(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database, not at all" * 200)
    with closing(sqlite3.connect(junk)) as conn, pytest.raises(sqlite3.DatabaseError) as info:
        conn.execute("SELECT * FROM sqlite_master").fetchall()
    assert sqlite_code(info.value) == 26
    assert hasattr(info.value, "sqlite_errorcode") == (sys.version_info >= (3, 11))
    with pytest.raises(litegate.OpenError, match="is not a SQLite database"):
        litegate.connect(str(junk))
