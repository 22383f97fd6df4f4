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


def kind(sql: str) -> str:
    """``TX``, ``VACUUM``, ``READ`` or ``WRITE``."""
    known = _SEEN.get(sql)
    if known is None:
        head = sql.lstrip()[:9].upper()
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
