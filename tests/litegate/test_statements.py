"""The one statement classifier the write path and Django share."""

from __future__ import annotations

import pytest

from litegate import _statements
from litegate._statements import READ, TX, VACUUM, WRITE, kind


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("BEGIN", TX),
        ("begin immediate", TX),
        ("  COMMIT", TX),
        ("END TRANSACTION", TX),
        ("rollback to sp", TX),
        ("SAVEPOINT a", TX),
        ("RELEASE a", TX),
        ("/* a comment */ BEGIN", TX),
        ("-- a line comment\nCOMMIT", TX),
        ("-- one\n  /* two */ -- three\n ROLLBACK", TX),
        ("VACUUM", VACUUM),
        ("vacuum into 'x.db'", VACUUM),
        ("SELECT 1", READ),
        ("pragma user_version", READ),
        ("EXPLAIN QUERY PLAN SELECT 1", READ),
        ("VALUES (1)", READ),
        ("INSERT INTO t VALUES (1)", WRITE),
        ("WITH x AS (SELECT 1) DELETE FROM t", WRITE),  # may write: treated as a write
        ("CREATE TABLE t (a)", WRITE),
        ("REPLACE INTO t VALUES (1)", WRITE),
        ("", WRITE),
        ("-- only a comment", WRITE),
        ("/* unterminated", WRITE),
    ],
)
def test_kind_reads_the_first_keyword_past_comments(sql: str, expected: str) -> None:
    assert kind(sql) == expected
    assert kind(sql) == expected  # (and the memo says the same)


def test_the_memo_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_statements, "_SEEN", {})
    monkeypatch.setattr(_statements, "_MEMO_LIMIT", 3)
    for i in range(10):
        assert kind(f"SELECT {i}") == READ
    assert len(_statements._SEEN) == 3
