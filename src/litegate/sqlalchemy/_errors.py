"""The errors ``sqlite+litegate`` raises itself: each is both the SQLAlchemy
exception that SQLAlchemy code already catches and a ``litegate`` error."""

from __future__ import annotations

from sqlalchemy import exc

from .. import _errors


class GateTimeout(exc.OperationalError, _errors.WriteTimeout):
    """The write gate was not free within the timeout: SQLAlchemy's
    ``OperationalError`` and :class:`litegate.WriteTimeout`. ``orig`` is a
    :class:`litegate.WriteTimeout` saying what waited and for how long.
    Nothing was changed; the transaction can be retried."""


class ReadOnlyScopeError(exc.OperationalError, _errors.Error):
    """A write inside a read-only scope (``litegate_read_only=True`` or
    :func:`~litegate.sqlalchemy.read_only`), refused by SQLite before
    anything changed: SQLAlchemy's ``OperationalError`` and a
    :class:`litegate.Error`. ``orig`` is a :class:`litegate.ReadOnlyError`
    saying so (its ``__cause__``, SQLite's own refusal)."""


class OpenError(exc.OperationalError, _errors.OpenError):
    """The database file cannot be opened the way litegate needs it (a
    missing directory, a directory, no write access to the file or its
    folder, not a SQLite file, a bad ``-litegate`` sidecar): SQLAlchemy's
    ``OperationalError`` (what the stock driver raises for "unable to open
    database file") and :class:`litegate.OpenError`. ``orig`` is the
    :class:`litegate.OpenError` saying what is wrong and what to do.
    Raised when a connection opens (the engine's first use)."""


class StatementRefused(exc.OperationalError, _errors.ConfigError):
    """A statement sqlite+litegate does not run, refused before anything
    changed: a PRAGMA that would break every other connection to the file
    or the process (``litegate._profiles.GUARDED``, listed in
    docs/errors.md), as :func:`litegate.connect` refuses it; a ``VACUUM`` inside a transaction.
    SQLAlchemy's ``OperationalError`` and :class:`litegate.ConfigError`;
    ``orig`` is the :class:`litegate.ConfigError` saying what to do
    instead."""


class ConfigError(exc.ArgumentError, _errors.ConfigError):
    """A bad ``profile``, ``pragmas`` or ``timeout`` in the URL or in
    ``connect_args``: SQLAlchemy's ``ArgumentError`` and
    :class:`litegate.ConfigError`."""


def gate_timeout(statement: str, message: str) -> GateTimeout:
    return GateTimeout(statement, None, _errors.WriteTimeout(message))


def read_only_refused(statement: str) -> ReadOnlyScopeError:
    return ReadOnlyScopeError(
        statement,
        None,
        _errors.ReadOnlyError(
            "a write inside a litegate read-only scope was refused; nothing was changed "
            f"({statement.lstrip()[:40]!r}). Write outside the read-only scope: on an engine, "
            "connection or session without litegate_read_only=True, or after read_only() ends"
        ),
    )


def open_failed(error: _errors.OpenError) -> OpenError:
    return OpenError(None, None, error)


def statement_refused(statement: str, error: _errors.ConfigError) -> StatementRefused:
    return StatementRefused(statement, None, error)
