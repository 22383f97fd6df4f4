"""The misuse contract, searched for with Hypothesis.

For any arguments to ``connect()``, any PRAGMA through ``connect(pragmas=)``
and any PRAGMA statement through ``db.execute()`` / ``db.query()``, litegate
either works or raises a typed error: a ``litegate.Error`` whose message
says what to do, or (for SQL that SQLite itself rejects) sqlite3's own error
to that caller. Never another exception, never a hang, and never a lost
committed row: every case runs against a file holding committed rows, which
are counted after each case.
"""

from __future__ import annotations

import asyncio
import math
import os
import shutil
import sqlite3
import sys
import tempfile
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import litegate
import litegate.aio
from litegate._profiles import GUARDED, PRAGMA_RULES
from tests.litegate.misuse import ran

ROWS = 25
# Process-wide settings: a random value would change every other test's
# process (a 1-byte soft heap limit shrinks every cache), so they are not
# drawn. hard_heap_limit is refused (it is in GUARDED), so it is drawn often.
PROCESS_WIDE = {"soft_heap_limit", "threads", "shrink_memory"}
with closing(sqlite3.connect(":memory:")) as _memory:
    _KNOWN = sorted(
        ({r[0] for r in _memory.execute("PRAGMA pragma_list")} | set(PRAGMA_RULES)) - PROCESS_WIDE
    )

names = st.one_of(
    st.sampled_from(sorted(GUARDED)),  # the ones that break litegate, drawn often
    st.sampled_from(sorted(set(PRAGMA_RULES) - PROCESS_WIDE)),
    st.sampled_from(_KNOWN),
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True),
    st.text(max_size=8),
)
WORDS = ["ON", "off", "wal", "DELETE", "TRUNCATE", "PERSIST", "MEMORY", "OFF", "FULL"]
WORDS += ["normal", "EXCLUSIVE", "FAST", "-1", "0", "1", "'delete'", "yes", "2"]
values = st.one_of(
    st.sampled_from(WORDS),
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=10),
    st.lists(st.integers(), max_size=2),
)
timeouts = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-5, max_value=10**20),
    st.sampled_from(["5", True, 1e12, 1e-9]),
)

SETTINGS = settings(
    max_examples=int(os.environ.get("LITEGATE_MISUSE_EXAMPLES", "150")),
    deadline=None,  # timed by pytest-timeout, not per example (the machine is shared)
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    database=None,  # no example database written into the checkout
)


@pytest.fixture(scope="module")
def seeded() -> Iterator[str]:
    folder = tempfile.mkdtemp(prefix="litegate-misuse-")
    path = os.path.join(folder, "app.db")
    with litegate.connect(path) as db:
        db.execute("CREATE TABLE kept(id INTEGER PRIMARY KEY, v TEXT)")
        db.executemany("INSERT INTO kept(v) VALUES (?)", [(f"row{i}",) for i in range(ROWS)])
    yield path
    shutil.rmtree(folder, ignore_errors=True)


def committed_rows(path: str) -> int:
    raw = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        (n,) = raw.execute("SELECT count(*) FROM kept").fetchone()
        assert raw.execute("PRAGMA quick_check").fetchone() == ("ok",)
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        raw.close()
    return int(n)


def typed(exc: BaseException) -> None:
    """A litegate error must say something a user can act on."""
    assert isinstance(exc, litegate.Error), f"untyped {type(exc).__name__}: {exc}"
    assert len(str(exc)) >= 20, f"a message too short to help: {exc!r}"


@SETTINGS
@given(
    readers=st.one_of(st.integers(min_value=-3, max_value=64), st.sampled_from([0.5, "2", None])),
    timeout=timeouts,
    profile=st.one_of(st.sampled_from(sorted(litegate.PROFILES)), st.text(max_size=6)),
    pragmas=st.one_of(
        st.none(), st.dictionaries(names, values, max_size=3), st.lists(names, max_size=2)
    ),
    busy=st.one_of(
        st.sampled_from(sorted(litegate.BUSY_STRATEGIES)), st.text(max_size=5), st.integers()
    ),
    checkpoints=st.booleans(),
)
def test_connect_works_or_says_what_to_do(seeded: str, **kwargs: Any) -> None:
    try:
        db = litegate.connect(seeded, **kwargs)
    except Exception as exc:
        typed(exc)
    else:
        try:
            if db.timeout != math.inf:
                assert db.timeout > 0
            assert db.query("SELECT count(*) FROM kept") == [(ROWS,)]
            with db.write() as conn:  # a write that is undone: the file stays as it was
                conn.execute("INSERT INTO kept(v) VALUES ('undone')")
                raise_to_roll_back()
        except _RolledBack:
            pass
        except sqlite3.Error:
            pass  # a PRAGMA the caller chose (max_page_count, ...) may refuse writes: SQL's say
        finally:
            db.close()
    assert committed_rows(seeded) == ROWS


class _RolledBack(Exception):
    pass


def raise_to_roll_back() -> None:
    raise _RolledBack


CONTROL = ["BEGIN", "BEGIN IMMEDIATE", "COMMIT", "END", "ROLLBACK", "SAVEPOINT s", "RELEASE s"]
CONTROL += ["ROLLBACK TO s", "VACUUM", "ATTACH ':memory:' AS x", "DETACH x"]
THROUGH = ["execute", "query", "write", "fn", "aexecute", "aquery", "awrite", "afn"]


async def _through_aio(path: str, through: str, sql: str) -> None:
    """``sql`` through the asyncio face's entry point ``through``."""
    adb = litegate.aio.AsyncDatabase(litegate.connect(path, timeout=5))
    try:
        if through == "aexecute":
            await adb.execute(sql)
        elif through == "aquery":
            await adb.query(sql)
        elif through == "awrite":
            async with adb.write() as tx:
                await tx.execute(sql)
        else:
            await adb.transact(lambda conn: conn.execute(sql).fetchall())
    finally:
        await adb.close()


@SETTINGS
@given(
    statement=st.one_of(
        st.tuples(names, values).map(
            lambda nv: f"PRAGMA {nv[0]}" if nv[1] is None else f"PRAGMA {nv[0]} = {nv[1]}"
        ),
        st.sampled_from(CONTROL),
    ),
    through=st.sampled_from(THROUGH),
)
def test_pragma_statements_work_or_say_what_to_do(
    seeded: str, statement: str, through: str
) -> None:
    """Any PRAGMA or transaction-control statement through every entry point
    of both faces (sync and asyncio): it works, or a typed error says what
    to do, or SQLite's own error reaches the caller. A statement litegate's
    guard refused never leaks as SQLite's bare "not authorized"."""
    sql = statement
    ran("statements (sync and asyncio faces)")
    db = litegate.connect(seeded, timeout=5)
    leaked: sqlite3.Error | None = None
    try:
        try:
            if through == "execute":
                db.execute(sql)
            elif through == "query":
                db.query(sql)
            elif through == "write":
                with db.write() as conn:
                    conn.execute(sql).fetchall()
            elif through == "fn":
                db.transact(lambda conn: conn.execute(sql).fetchall())
            else:
                asyncio.run(_through_aio(seeded, through, sql))
        except litegate.Error as exc:
            typed(exc)
        except sqlite3.Error as exc:
            # SQL that SQLite rejects: its own error, to this caller only
            if "not authorized" in str(exc):
                leaked = exc
        except ValueError as exc:
            # sqlite3's own refusal of a NUL in SQL: a ValueError before Python
            # 3.11 (a sqlite3.ProgrammingError, caught above, from 3.11 on)
            if sys.version_info >= (3, 11) or "null character" not in str(exc):
                raise
        except sqlite3.Warning as exc:
            # sqlite3's own refusal of two statements in one (a drawn name with
            # a ";"): a sqlite3.Warning, not an Error, before Python 3.11 (a
            # sqlite3.ProgrammingError, caught above, from 3.11 on)
            if sys.version_info >= (3, 11) or "one statement at a time" not in str(exc):
                raise
        assert leaked is None, f"{sql!r} via {through}: untyped {leaked!r}"
        # Whatever the PRAGMA did to this connection, litegate still works:
        # still WAL, still read and written, and the Database not broken.
        assert db.query("SELECT count(*) FROM kept") == [(ROWS,)]

        def delete_then_undo(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM kept")
            raise_to_roll_back()

        try:
            db.transact(delete_then_undo)
        except _RolledBack:
            pass
        except sqlite3.Error:
            pass  # e.g. max_page_count below the file's size: the caller's choice
    finally:
        db.close()
    assert committed_rows(seeded) == ROWS
