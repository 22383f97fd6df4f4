"""The exceptions litegate raises. All derive from :class:`Error`."""

from __future__ import annotations

import sqlite3

# SQLite's message for each primary result code litegate tells apart, for
# Pythons whose sqlite3 errors carry no code (sqlite_errorcode is 3.11's).
_CODE_OF_MESSAGE = {
    "database is locked": 5,  # SQLITE_BUSY
    "database table is locked": 6,  # SQLITE_LOCKED
    "attempt to write a readonly database": 8,  # SQLITE_READONLY
    "disk I/O error": 10,  # SQLITE_IOERR
    "database disk image is malformed": 11,  # SQLITE_CORRUPT
    "unable to open database file": 14,  # SQLITE_CANTOPEN
    "not authorized": 23,  # SQLITE_AUTH (an authorizer's denial)
    "file is not a database": 26,  # SQLITE_NOTADB
}


def sqlite_code(exc: BaseException) -> int:
    """SQLite's primary result code for ``exc``, -1 if it has none: its
    ``sqlite_errorcode`` & 0xFF, or, on Python 3.10 (no such attribute), the
    code whose message SQLite gave."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return int(code) & 0xFF
    return _CODE_OF_MESSAGE.get(str(exc), -1) if isinstance(exc, sqlite3.Error) else -1


class Error(Exception):
    """Base class of every error litegate raises itself.

    SQL errors (a syntax error, a constraint violation) are not wrapped: the
    caller that caused them gets sqlite3's own exception, and nobody else does.
    """


class ConfigError(Error, ValueError):
    """A bad argument to :func:`litegate.connect` or a call: unknown profile,
    unknown busy strategy, a size or timeout that is not positive, a PRAGMA
    SQLite does not know."""


class OpenError(Error):
    """The database cannot be opened the way litegate needs it (missing
    directory, a directory instead of a file, not a SQLite file, no write
    access to the file or to the files WAL mode has to create)."""


class Closed(Error):
    """The :class:`~litegate.Database` was closed (possibly while the caller
    was waiting in a queue)."""


class PoolTimeout(Error, TimeoutError):
    """No read connection became free before the timeout."""


class WriteTimeout(Error, TimeoutError):
    """The write gate (or SQLite's own write lock, held by a writer that does
    not use litegate) was not obtained before the timeout."""


class ReadOnlyError(Error, sqlite3.OperationalError):
    """A statement that writes was sent through a read path (``db.query()`` or
    a connection from ``db.read()``). Nothing was changed.

    Also an ``sqlite3.OperationalError``, so code that already catches that
    keeps working.
    """


class NestedWriteError(Error, RuntimeError):
    """A thread asked for the write gate while it already holds it.

    Waiting would wait for itself forever, so litegate refuses at once. Run the
    inner statements on the connection the outer ``db.write()`` gave you.
    """


class TransactionError(Error, ValueError):
    """Code tried to control a transaction that litegate owns: ``BEGIN``,
    ``COMMIT`` or ``ROLLBACK`` through ``db.execute()``, inside a
    ``db.transact()`` function or a ``db.write()`` block, or closing the
    write connection. Nothing of it ran; litegate commits when the block or
    function returns and rolls back on an exception.

    Also a ``ValueError`` (what ``db.execute("BEGIN")`` raised before)."""
