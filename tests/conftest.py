"""Shared fixtures."""

from __future__ import annotations

import gc
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import litegate


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    return str(tmp_path / "app.db")


@pytest.fixture
def db(db_path: str) -> Iterator[litegate.Database]:
    database = litegate.connect(db_path, readers=2, timeout=10)
    database.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v)")
    yield database
    database.close()


def collect_dropped() -> None:
    """``gc.collect()`` for a test that drops a Database or connection
    without closing it on purpose: Python 3.13's sqlite3 warns
    (ResourceWarning, "unclosed database") for each such connection, as it
    does for any connection nobody closed."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def wait_until(cond: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll ``cond`` until true; the test fails (not hangs) after ``timeout``.

    Used only to sequence test threads (e.g. "thread 3 is now queued"), never
    to assert on speed.
    """
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.001)


def running_as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


@contextmanager
def gate_held_by_another_thread(db: litegate.Database) -> Iterator[None]:
    """Another thread holds ``db.write()`` for the body of the with-block."""
    held, leave = threading.Event(), threading.Event()

    def holder() -> None:
        with db.write():
            held.set()
            leave.wait(30)

    t = threading.Thread(target=holder)
    t.start()
    assert held.wait(10)
    try:
        yield
    finally:
        leave.set()
        t.join()


# -- PostgreSQL: one throwaway server for the whole run -------------------------


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    """A PostgreSQL 15 server of our own (Unix socket, fsync off), started
    once and removed at the end. Skipped, with how to get the binaries, on
    a machine without them."""
    from litegate_lab._pgserver import MISSING_HELP, PgServer, PgUnavailable, find_bindir

    if find_bindir() is None:
        pytest.skip(MISSING_HELP)
    try:
        server = PgServer().start()
    except PgUnavailable as exc:
        pytest.skip(str(exc))
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def pg_url(pg_server: Any) -> str:
    """The superuser URL of a database made for this run's queue tests."""
    url: str = pg_server.create_database("queue_tests")
    return url


@pytest.fixture
def pg_empty(pg_url: str) -> str:
    """``pg_url``, emptied: no tables (the queue creates its own again)."""
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    return pg_url
