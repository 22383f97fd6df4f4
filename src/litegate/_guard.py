"""What user code may not do on litegate's connections, enforced by SQLite.

Group commit runs several callers' writes in one transaction, each in its
own SAVEPOINT, and ``db.transact(fn)`` / ``db.write()`` hand user code the
write connection itself. A ``COMMIT`` or ``ROLLBACK`` from that code would
end a transaction litegate owns: commit other callers' writes before their
turn, or make innocent batch mates fail with "no such savepoint". A PRAGMA
that leaves WAL or locks the file exclusively breaks every reader.

SQLite's authorizer sees every statement when it is prepared (a statement
re-run from the statement cache was authorized when it was first prepared),
so the write connection gets a :class:`WriterGuard` that refuses transaction
control unless litegate itself runs it, and the PRAGMAs in
``_profiles.GUARDED``; read connections get a :class:`ReaderGuard` that
refuses PRAGMAs that change a setting (a pooled connection must come back
as it went out) or the file (``journal_mode``, ``wal_checkpoint``, ...).
Refused statements fail with sqlite3's "not authorized"; the guard keeps the
reason so litegate can raise a typed error that says what to do instead.

litegate's own control statements carry a comment (``-- litegate``) so that
the statement cache never hands a user's plain ``COMMIT`` the authorization
of litegate's.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from ._errors import ConfigError, Error, TransactionError
from ._profiles import PRAGMA_RULES, guarded_change

# litegate's own transaction control on the write connection.
BEGIN = "BEGIN IMMEDIATE -- litegate"
COMMIT = "COMMIT -- litegate"
ROLLBACK = "ROLLBACK -- litegate"
SAVEPOINT = "SAVEPOINT litegate_member -- litegate"
RELEASE = "RELEASE litegate_member -- litegate"
ROLLBACK_TO = "ROLLBACK TO litegate_member -- litegate"


def set_synchronous(level: int) -> str:
    """litegate's own ``PRAGMA synchronous`` for one transaction of a
    combiner's turn (raised, then set back: ``GroupCommit.in_turn``)."""
    return f"PRAGMA synchronous = {int(level)} -- litegate"


_OK, _DENY = sqlite3.SQLITE_OK, sqlite3.SQLITE_DENY
_PRAGMA = sqlite3.SQLITE_PRAGMA
_TRANSACTION = sqlite3.SQLITE_TRANSACTION
_SAVEPOINT = sqlite3.SQLITE_SAVEPOINT
_SQLITE_AUTH = 23  # "not authorized" (no named constant before Python 3.11)

# PRAGMAs with an argument that change the file, not just the connection.
_FILE_CHANGING = frozenset(
    {
        "wal_checkpoint",
        "optimize",
        "incremental_vacuum",
        "user_version",
        "application_id",
        "schema_version",
        "shrink_memory",
    }
)


class WriterGuard:
    """The write connection's authorizer. ``own`` is True while litegate runs
    its own transaction control; ``pragma_set`` becomes (and stays) True once
    any statement that sets a PRAGMA was prepared, so ``stats()`` knows it
    must read the settings back."""

    __slots__ = ("denied", "own", "pragma_set", "watched")

    def __init__(self, watched: frozenset[str]) -> None:
        self.own = False  # litegate's own statements (and maintenance) run
        self.denied: Error | None = None
        self.pragma_set = False
        self.watched = watched  # the settings stats() reports

    def __call__(
        self, action: int, arg1: str | None, arg2: str | None, _db: str | None, _src: str | None
    ) -> int:
        if self.own:
            return _OK
        if action == _TRANSACTION or (action == _SAVEPOINT and arg2 == "litegate_member"):
            self.denied = TransactionError(
                f"{arg1} refused: the transaction belongs to litegate, which commits when the "
                "db.write() block or the db.transact() function returns and rolls back on an "
                "exception. Raise an exception to roll back, or use a SAVEPOINT of your own "
                "for a partial undo"
            )
            return _DENY
        if action == _PRAGMA and arg2 is not None and arg1 is not None:
            why = guarded_change(arg1, arg2)
            if why is not None:
                self.denied = ConfigError(why)
                return _DENY
            if arg1.lower() in self.watched:
                self.pragma_set = True
        return _OK

    def typed(self, exc: BaseException) -> BaseException:
        """The typed error for ``exc`` if this guard refused the statement."""
        if self.denied is None or not is_denied(exc):
            return exc
        typed, self.denied = self.denied, None
        typed.__cause__ = exc
        return typed


class ReaderGuard:
    """A read connection's authorizer: no PRAGMA that sets a value."""

    __slots__ = ("denied",)

    def __init__(self) -> None:
        self.denied: str | None = None

    def __call__(
        self, action: int, arg1: str | None, arg2: str | None, _db: str | None, _src: str | None
    ) -> int:
        if action == _PRAGMA and arg2 is not None and arg1 is not None:
            name = arg1.lower()
            if name in PRAGMA_RULES or name in _FILE_CHANGING:
                self.denied = (
                    f"PRAGMA {name} = {arg2} on a read connection: read connections are "
                    "read-only and shared by the pool. Set PRAGMAs with "
                    "litegate.connect(pragmas=...), or run maintenance with db.checkpoint(), "
                    "db.optimize() or db.vacuum()"
                )
                return _DENY
        return _OK

    def take_denied(self) -> str | None:
        why, self.denied = self.denied, None
        return why


def is_denied(exc: BaseException) -> bool:
    """True for SQLite's "not authorized" (SQLITE_AUTH)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return (int(code) & 0xFF) == _SQLITE_AUTH
    return isinstance(exc, sqlite3.DatabaseError) and str(exc) == "not authorized"


class WriterConnection(sqlite3.Connection):
    """The write connection: a plain ``sqlite3.Connection`` (``execute`` and
    the rest are sqlite3's own, at no extra cost) with a :class:`WriterGuard`
    once :meth:`guard_now` ran, litegate's transaction control in
    :meth:`control`, and a ``close()`` that user code cannot call (litegate
    opens one write connection per Database and process; closed, the Database
    could not write again). litegate closes it with :func:`close_connection`."""

    guard: WriterGuard

    def guard_now(self, watched: Iterable[str]) -> None:
        """From here on, user code cannot control the transaction; a change to
        one of the ``watched`` settings is noted."""
        self.guard = WriterGuard(frozenset(watched))
        self.set_authorizer(self.guard)

    def control(self, sql: str) -> None:
        """Run one of litegate's own transaction-control statements."""
        guard = self.guard
        guard.own = True
        try:
            self.execute(sql)
        finally:
            guard.own = False

    def close(self) -> None:
        raise TransactionError(
            "the write connection belongs to litegate and stays open; nothing was closed. "
            "Call db.close() to close the database"
        )


class ReaderConnection(sqlite3.Connection):
    """A read connection of the pool, with its :class:`ReaderGuard`."""

    guard: ReaderGuard

    def guard_now(self) -> None:
        self.guard = ReaderGuard()
        self.set_authorizer(self.guard)


def close_connection(conn: sqlite3.Connection) -> None:
    """Close any of litegate's connections, the write connection included."""
    sqlite3.Connection.close(conn)
