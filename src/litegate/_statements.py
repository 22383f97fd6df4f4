"""What kind of statement a piece of SQL is, by its first keyword: the one
classifier the write path (group commit) and the Django backend share.

Memoized per SQL string: applications repeat the same statements, and the
check runs on every write."""

from __future__ import annotations

# Transaction control: would end or nest a transaction someone else owns.
TX_CONTROL = ("BEGIN", "COMMIT", "END", "ROLLBACK", "SAVEPOINT", "RELEASE")
# Statements that never need SQLite's write lock. Everything else (INSERT,
# UPDATE, DELETE, REPLACE, DDL, WITH … which may write, VACUUM) does.
READS = ("SELECT", "PRAGMA", "EXPLAIN", "VALUES")

TX, VACUUM, READ, WRITE = "tx", "vacuum", "read", "write"

_SEEN: dict[str, str] = {}
_MEMO_LIMIT = 4096  # statements repeat; a bounded memo is enough


def _skip_comments(sql: str) -> str:
    """``sql`` without the whitespace and comments SQLite skips before the
    first keyword (``/* ... */`` and ``-- ...``): "/*c*/ BEGIN" is a BEGIN."""
    text = sql.lstrip()
    while True:
        if text.startswith("--"):
            end = text.find("\n")
            text = "" if end < 0 else text[end + 1 :].lstrip()
        elif text.startswith("/*"):
            end = text.find("*/")
            text = "" if end < 0 else text[end + 2 :].lstrip()
        else:
            return text


def kind(sql: str) -> str:
    """``TX``, ``VACUUM``, ``READ`` or ``WRITE``."""
    known = _SEEN.get(sql)
    if known is None:
        head = _skip_comments(sql)[:9].upper()
        if head.startswith(TX_CONTROL):
            known = TX
        elif head.startswith("VACUUM"):
            known = VACUUM
        elif head.startswith(READS):
            known = READ
        else:
            known = WRITE
        if len(_SEEN) < _MEMO_LIMIT:
            _SEEN[sql] = known
    return known
