"""The connections' guards on their own (``_guard``): what SQLite's
authorizer refuses on the write and read connections, the typed error each
refusal becomes, and what litegate itself may still run."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from litegate import ConfigError, TransactionError
from litegate._guard import (
    BEGIN,
    COMMIT,
    ROLLBACK,
    ReaderConnection,
    WriterConnection,
    close_connection,
    is_denied,
)


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[WriterConnection]:
    conn = sqlite3.connect(tmp_path / "x.db", isolation_level=None, factory=WriterConnection)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE t(v)")
    conn.guard_now({"cache_size"})
    yield conn
    close_connection(conn)


def _refused(conn: WriterConnection, sql: str) -> BaseException:
    with pytest.raises(sqlite3.DatabaseError) as info:
        conn.execute(sql)
    assert is_denied(info.value)
    return conn.guard.typed(info.value)


@pytest.mark.parametrize("sql", ["BEGIN", "BEGIN IMMEDIATE", "COMMIT", "ROLLBACK", "END"])
def test_user_transaction_control_is_refused_with_advice(
    writer: WriterConnection, sql: str
) -> None:
    if sql in ("COMMIT", "ROLLBACK", "END"):
        writer.control(BEGIN)  # litegate's own transaction is open
    typed = _refused(writer, sql)
    assert isinstance(typed, TransactionError)
    assert "belongs to litegate" in str(typed)
    assert isinstance(typed.__cause__, sqlite3.DatabaseError)
    assert writer.guard.denied is None  # handed out once


def test_litegates_own_control_runs_and_is_not_cached_for_the_user(
    writer: WriterConnection,
) -> None:
    """The same words without litegate's comment are a different statement:
    litegate's authorized COMMIT is never reused for a user's plain one."""
    writer.control(BEGIN)
    writer.execute("INSERT INTO t VALUES (1)")
    writer.control(COMMIT)
    writer.control(BEGIN)
    assert isinstance(_refused(writer, "COMMIT"), TransactionError)
    assert writer.in_transaction  # the user's COMMIT ended nothing
    writer.control(ROLLBACK)
    assert writer.execute("SELECT count(*) FROM t").fetchone() == (1,)


def test_savepoints_of_the_users_own_pass_and_litegates_name_does_not(
    writer: WriterConnection,
) -> None:
    writer.control(BEGIN)
    writer.execute("SAVEPOINT mine")
    writer.execute("INSERT INTO t VALUES (2)")
    writer.execute("ROLLBACK TO mine")
    writer.execute("RELEASE mine")
    assert isinstance(_refused(writer, "SAVEPOINT litegate_member"), TransactionError)
    writer.control(ROLLBACK)


def test_pragmas_that_break_other_connections_are_refused(writer: WriterConnection) -> None:
    for sql in ("PRAGMA journal_mode = DELETE", "PRAGMA locking_mode = EXCLUSIVE"):
        typed = _refused(writer, sql)
        assert isinstance(typed, ConfigError), sql
    # allowed: WAL again, NORMAL locking, reading a setting
    assert writer.execute("PRAGMA journal_mode = WAL").fetchone() == ("wal",)
    writer.execute("PRAGMA locking_mode = NORMAL")
    writer.execute("PRAGMA journal_mode").fetchone()


def test_a_watched_setting_changed_is_noted(writer: WriterConnection) -> None:
    assert writer.guard.pragma_set is False
    writer.execute("PRAGMA synchronous = NORMAL")  # not watched
    assert writer.guard.pragma_set is False
    writer.execute("PRAGMA cache_size = -4000")
    assert writer.guard.pragma_set is True


def test_an_error_the_guard_did_not_cause_is_left_as_it_is(writer: WriterConnection) -> None:
    with pytest.raises(sqlite3.OperationalError) as info:
        writer.execute("INSERT INTO nowhere VALUES (1)")
    assert not is_denied(info.value)
    assert writer.guard.typed(info.value) is info.value


def test_the_write_connection_cannot_be_closed_by_user_code(writer: WriterConnection) -> None:
    with pytest.raises(TransactionError, match=r"db\.close"):
        writer.close()
    assert writer.execute("SELECT 1").fetchone() == (1,)  # still open


def test_a_read_connection_refuses_settings_and_file_changes(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    sqlite3.connect(path).close()
    conn = sqlite3.connect(path, isolation_level=None, factory=ReaderConnection)
    conn.guard_now()
    try:
        for sql in (
            "PRAGMA cache_size = 10",
            "PRAGMA journal_mode = DELETE",
            "PRAGMA wal_checkpoint(TRUNCATE)",
            "PRAGMA user_version = 7",
        ):
            with pytest.raises(sqlite3.DatabaseError) as info:
                conn.execute(sql)
            assert is_denied(info.value)
            why = conn.guard.take_denied()
            assert why is not None, sql
            assert "read connection" in why, sql
            assert conn.guard.take_denied() is None  # taken once
        conn.execute("PRAGMA cache_size").fetchone()  # reading is fine
        conn.execute("SELECT 1").fetchone()
    finally:
        conn.close()
