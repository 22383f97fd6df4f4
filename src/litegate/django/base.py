"""The database wrapper Django loads for ``ENGINE: "litegate.django"``.

It subclasses Django's own SQLite backend and overrides a few named methods:
``get_connection_params`` (litegate's OPTIONS), ``get_new_connection`` (the
profile's PRAGMAs, the file's gate and checkpointer), ``create_cursor``
(autocommit writes through the gate), ``_start_transaction_under_autocommit``
(gate, then ``BEGIN IMMEDIATE``), and ``_commit`` / ``_rollback`` /
``_close`` (give the gate back on every path). ``vendor`` stays ``"sqlite"``,
so Django's SQLite code paths and third-party apps see SQLite.
"""

from __future__ import annotations

import difflib
import math
import os
import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.backends.sqlite3 import base as sqlite_base
from django.db.transaction import TransactionManagementError
from django.db.utils import OperationalError

from .. import _profiles
from .._database import _check_path as check_path
from .._database import budget_of
from .._errors import ConfigError, Error, OpenError, WriteTimeout
from .._fair import BOUNDED
from .._gate import FileGate, drop_after_fork
from .._guard import is_denied
from .._statements import VACUUM, WRITE
from .._statements import kind as statement_kind
from .creation import DatabaseCreation

T = TypeVar("T")


class SettingsError(ImproperlyConfigured, ConfigError):
    """A ``settings.DATABASES`` entry litegate.django cannot use: Django's
    ``ImproperlyConfigured`` and :class:`litegate.ConfigError`."""


class DatabaseOpenError(OperationalError, OpenError):
    """The database file cannot be opened the way litegate needs it (a
    missing directory, a directory, no write access, a bad sidecar): Django's
    ``OperationalError`` (what Django reports for "unable to open database
    file") and :class:`litegate.OpenError`, with litegate's message saying
    what to do."""


# OPTIONS keys: litegate's own, then what Django's SQLite backend takes
# itself (from 5.1 on), then the keyword arguments it hands to
# sqlite3.connect(). Anything else would reach sqlite3.connect() and fail
# there with a TypeError about an unexpected keyword argument.
_LITEGATE_OPTIONS = ("profile", "pragmas", "fair")
_DJANGO_OPTIONS = (
    ("transaction_mode", "init_command")
    if hasattr(sqlite_base.DatabaseWrapper, "transaction_modes")
    else ()
)
_SQLITE_OPTIONS = (
    "timeout",
    "detect_types",
    "isolation_level",
    "check_same_thread",
    "factory",
    "cached_statements",
    "uri",
)
# sqlite3.connect() takes these, but they would break the gate: "database"
# opens another file than NAME (the file the gate is for); "autocommit"
# (Python 3.12) changes how sqlite3 opens transactions, and the gate
# follows Django's.
_REFUSED_OPTIONS = {
    "database": "set the file with NAME; OPTIONS['database'] would open another file than "
    "the one litegate's gate is for",
    "autocommit": "litegate.django follows Django's own transaction handling (AUTOCOMMIT "
    "and atomic()); sqlite3's autocommit= would open transactions the gate never sees",
}
ALLOWED_OPTIONS = (*_LITEGATE_OPTIONS, *_DJANGO_OPTIONS, *_SQLITE_OPTIONS)


def _check_options(alias: str, options: object) -> dict[str, Any]:
    where = f"settings.DATABASES[{alias!r}]['OPTIONS']"
    if not isinstance(options, dict):
        raise SettingsError(f"{where} must be a dict, got {options!r}")
    for key in options:
        if key in _REFUSED_OPTIONS:
            raise SettingsError(f"{where}[{key!r}] is not allowed: {_REFUSED_OPTIONS[key]}")
    unknown = [k for k in options if k not in ALLOWED_OPTIONS]
    if unknown:
        hints = [
            f"{k!r} (did you mean {close[0]!r}?)" if close else repr(k)
            for k in unknown
            for close in [difflib.get_close_matches(str(k), ALLOWED_OPTIONS, n=1)]
        ]
        raise SettingsError(
            f"{where} has unknown key(s) {', '.join(hints)}; litegate.django takes "
            f"{', '.join(ALLOWED_OPTIONS)} (profile, pragmas and fair are litegate's, the rest "
            "Django's and sqlite3.connect()'s)"
        )
    return dict(options)


class GateTimeout(OperationalError, WriteTimeout):
    """The write gate was not free within the timeout: Django's
    ``OperationalError`` (what Django code catches) and
    :class:`litegate.WriteTimeout`."""


class ReadOnlyScopeError(OperationalError, Error):
    """A write inside :func:`read_only`: refused before it reached SQLite;
    nothing was changed. Django's ``OperationalError`` and a
    :class:`litegate.Error` (not a ``sqlite3`` error, which Django would
    re-wrap into its own class)."""


@contextmanager
def read_only(using: str | None = None) -> Iterator[None]:
    """An ``atomic()`` block that only reads: one consistent snapshot, no
    write gate (so it never waits behind writers), and any write in it
    raises :class:`ReadOnlyScopeError`. For views under ``ATOMIC_REQUESTS``
    that only read, for example::

        with read_only():
            posts = list(Post.objects.filter(...))
    """
    conn = connections[using or DEFAULT_DB_ALIAS]
    if not isinstance(conn, DatabaseWrapper):
        raise ImproperlyConfigured(
            f"read_only() needs a litegate.django database, and {conn.alias!r} uses "
            f"{conn.settings_dict['ENGINE']!r}"
        )
    if conn.in_atomic_block:
        raise TransactionManagementError(
            "read_only() must be the outermost transaction: its snapshot is taken when the "
            "transaction begins. Open it outside any atomic() block"
        )
    conn.litegate_read_only = True
    try:
        with transaction.atomic(using=conn.alias):
            yield
    finally:
        conn.litegate_read_only = False


# A Django connection writes as well as reads, so query_only gets advice of
# its own; the other refused PRAGMAs keep the core's.
_QUERY_ONLY_ADVICE = (
    "PRAGMA query_only = {value}: Django's connection is the one every query of this thread "
    "writes through. For a block that only reads use litegate.django.read_only()"
)


class PragmaGuard:
    """The SQLite authorizer of a litegate.django connection: it refuses the
    PRAGMAs that litegate's core refuses on its writer (``journal_mode``
    other than WAL, ``locking_mode=EXCLUSIVE``, ``query_only``,
    ``writable_schema``, ``schema_version``), which would break the other
    connections and processes sharing the file. SQLite asks it when a
    statement is prepared, so a refused statement never runs; the reason
    is kept for :meth:`typed`."""

    __slots__ = ("denied",)

    def __init__(self) -> None:
        self.denied: str | None = None

    def __call__(
        self, action: int, arg1: str | None, arg2: str | None, _db: str | None, _src: str | None
    ) -> int:
        if action == sqlite3.SQLITE_PRAGMA and arg1 is not None and arg2 is not None:
            why = _profiles.guarded_change(arg1, arg2)
            if why is not None:
                if arg1.lower() == "query_only":
                    why = _QUERY_ONLY_ADVICE.format(value=f"{arg2!r}")
                self.denied = why
                return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    def typed(self, exc: BaseException, where: str) -> BaseException | None:
        """A :class:`litegate.ConfigError` for ``exc`` if this guard refused
        the statement, else None."""
        why, self.denied = self.denied, None
        if why is None or not is_denied(exc):
            return None
        return ConfigError(f"{where}: {why} (refused before it ran; nothing was changed)")


def _needs_gate(sql: str) -> bool:
    """A write in autocommit mode takes the gate; reads and transaction
    control sent as raw SQL (the gate follows atomic()) do not."""
    return statement_kind(sql) in (WRITE, VACUUM)


class LitegateCursorWrapper(sqlite_base.SQLiteCursorWrapper):
    """Django's SQLite cursor; a write outside a transaction runs as gate →
    one statement → release."""

    litegate_wrapper: DatabaseWrapper

    def execute(self, query: str, params: Any = None) -> Any:
        return self._typed(super().execute, query, params)

    def executemany(self, query: str, param_list: Any) -> Any:
        return self._typed(super().executemany, query, param_list)

    def _typed(self, run: Any, query: str, params: Any) -> Any:
        try:
            return self._gated(run, query, params)
        except sqlite3.DatabaseError as exc:
            # Not a sqlite3 error, so Django's error wrapper lets it through.
            guard = self.litegate_wrapper.litegate_guard
            typed = (
                None
                if guard is None
                else guard.typed(exc, f"database {self.litegate_wrapper.alias!r}")
            )
            if typed is None:
                raise
            raise typed from exc

    def _gated(self, run: Any, query: str, params: Any) -> Any:
        w = self.litegate_wrapper
        if w.litegate_read_only and _needs_gate(query):
            raise ReadOnlyScopeError(
                f"a write inside litegate.django.read_only() on {w.alias!r} was refused; "
                f"nothing was changed ({query.lstrip()[:40]!r}…). Write outside the read_only() "
                "block, or use transaction.atomic() for blocks that write"
            )
        if w.litegate_gate is None or self.connection.in_transaction or not _needs_gate(query):
            return run(query, params)
        w.litegate_take_gate()
        committed = False
        try:
            result = run(query, params)
            committed = True  # autocommit: the statement was its own transaction
            return result
        finally:
            w.litegate_give_gate(committed)


# Every wrapper of this process, for the fork hook below.
_WRAPPERS: weakref.WeakSet[DatabaseWrapper] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """gunicorn --preload and friends: a child starts with the parent's
    wrappers (Django keeps them per thread). Their SQLite connections and
    gates are the parent's; each wrapper lets go of them, and opens its own
    on next use, as if Django had closed it."""
    me = threading.get_ident()  # the forking thread keeps its ident in the child
    for wrapper in list(_WRAPPERS):
        wrapper.litegate_forget_parent(me)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class DatabaseWrapper(sqlite_base.DatabaseWrapper):
    """Django's SQLite ``DatabaseWrapper`` with litegate's write gate."""

    creation_class = DatabaseCreation
    connection: Any  # Django's: the sqlite3 connection, None while closed

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _WRAPPERS.add(self)
        self.litegate_gate: FileGate | None = None  # None: in-memory, no gate needed
        self.litegate_held = False
        self.litegate_read_only = False  # inside read_only(): no gate, writes refused
        self.litegate_timeout = 5.0
        self.litegate_pragmas: dict[str, _profiles.PragmaValue] = {}
        self.litegate_budget = BOUNDED  # the write gate's policy, OPTIONS["fair"]
        self.litegate_guard: PragmaGuard | None = None  # the open connection's (file databases)
        self._litegate_init: list[str] = []  # OPTIONS["init_command"], run under the guard
        self._litegate_every = 1000

    # -- settings ---------------------------------------------------------------
    def get_connection_params(self) -> dict[str, Any]:
        options = _check_options(self.alias, self.settings_dict["OPTIONS"])
        profile = options.pop("profile", "default")
        overrides = options.pop("pragmas", None)
        fair = options.pop("fair", True)
        timeout = options.get("timeout")  # also sqlite3's busy timeout for outside writers
        saved = self.settings_dict["OPTIONS"]
        self.settings_dict["OPTIONS"] = options
        try:
            kwargs: dict[str, Any] = super().get_connection_params()
        finally:
            self.settings_dict["OPTIONS"] = saved
        # Django >= 5.1 runs OPTIONS["init_command"] as it connects; litegate
        # runs it instead, once the connection has its PRAGMA guard.
        self._litegate_init = [c.strip() for c in getattr(self, "init_commands", ()) if c.strip()]
        self.init_commands: list[str] = []
        try:
            pragmas = _profiles.resolve(profile, overrides)
        except ConfigError as exc:
            raise SettingsError(f"settings.DATABASES[{self.alias!r}]['OPTIONS']: {exc}") from None
        try:
            self.litegate_budget = budget_of(fair)
        except ConfigError as exc:
            raise SettingsError(
                f"settings.DATABASES[{self.alias!r}]['OPTIONS']['fair']: {exc}"
            ) from None
        if timeout is None:
            timeout = int(pragmas.get("busy_timeout", 5000)) / 1000.0
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not timeout > 0
            or math.isnan(timeout)
        ):
            raise SettingsError(
                f"settings.DATABASES[{self.alias!r}]['OPTIONS']['timeout'] must be a number "
                f"of seconds greater than zero, got {timeout!r}"
            )
        kwargs["timeout"] = float(timeout)
        self.litegate_timeout = float(timeout)
        # Checkpoints run on litegate's background thread, not inside COMMIT.
        self._litegate_every = int(pragmas.get("wal_autocheckpoint", 1000)) or 1000
        pragmas["wal_autocheckpoint"] = 0
        pragmas.setdefault("journal_size_limit", 8 * self._litegate_every * 4096)
        pragmas.pop("busy_timeout", None)  # the connection's timeout= sets it
        self.litegate_pragmas = pragmas
        return kwargs

    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        name = str(self.settings_dict["NAME"])
        in_memory = self.is_in_memory_db()
        # as connect() names the file: symlinks resolved, one gate per file
        path = os.path.realpath(os.path.abspath(name))
        if not in_memory and not name.startswith("file:"):
            # connect()'s checks, before sqlite3 says "unable to open database file"
            self._litegate_open(lambda: check_path(path))
        conn = super().get_new_connection(conn_params)
        if in_memory:
            # One connection, nobody to share with: no gate, no guard.
            self.litegate_gate = None
            self.litegate_guard = None
            try:
                for command in self._litegate_init:
                    conn.execute(command)
            except BaseException:
                conn.close()
                raise
            return conn
        try:
            guard = self.litegate_guard = PragmaGuard()
            conn.set_authorizer(guard)
            for command in self._litegate_init:
                try:
                    conn.execute(command)
                except sqlite3.DatabaseError as exc:
                    where = f"settings.DATABASES[{self.alias!r}]['OPTIONS']['init_command']"
                    typed = guard.typed(exc, where)
                    if typed is None:
                        raise
                    raise SettingsError(str(typed)) from None
            _profiles.apply(conn, self.litegate_pragmas, writer=True)
            if self.litegate_gate is None:  # one use of the file's gate per open connection
                self.litegate_gate = self._litegate_open(lambda: FileGate.open(path))
                self.litegate_gate.checkpointer(
                    every_commits=self._litegate_every, restart_frames=4 * self._litegate_every
                )
        except BaseException:
            conn.close()
            raise
        return conn

    def _litegate_open(self, step: Callable[[], T]) -> T:
        """``step()``, its :class:`litegate.OpenError` as Django's
        OperationalError too (:class:`DatabaseOpenError`)."""
        try:
            return step()
        except OpenError as exc:
            raise DatabaseOpenError(f"database {self.alias!r}: {exc}") from None

    def create_cursor(self, name: str | None = None) -> Any:
        cursor = self.connection.cursor(factory=LitegateCursorWrapper)
        cursor.litegate_wrapper = self
        return cursor

    # -- the gate ---------------------------------------------------------------
    def litegate_take_gate(self) -> None:
        gate = self.litegate_gate
        assert gate is not None
        if not gate.acquire(self.litegate_timeout, self.litegate_budget):
            raise GateTimeout(
                f"database {self.alias!r}: no write gate within {self.litegate_timeout:g} s "
                f"({gate.waiting} more writers of this process queued, others may be in other "
                "processes); raise OPTIONS['timeout'] or make write transactions shorter"
            )
        self.litegate_held = True

    def litegate_give_gate(self, committed: bool = False) -> None:
        """Give the gate back if held; ``committed``: a COMMIT happened in
        this turn (it counts towards the file's next checkpoint)."""
        if self.litegate_held:
            self.litegate_held = False
            gate = self.litegate_gate
            assert gate is not None
            gate.release()
            if committed:
                gate.committed()

    def _start_transaction_under_autocommit(self) -> None:
        if self.litegate_read_only:
            self.cursor().execute("BEGIN DEFERRED")  # a snapshot; no gate
            return
        # transaction_mode exists from Django 5.1 on; before, BEGIN is DEFERRED.
        mode = getattr(self, "transaction_mode", None)
        if self.litegate_gate is None or mode == "DEFERRED":
            super()._start_transaction_under_autocommit()
            return
        self.litegate_take_gate()
        try:
            self.cursor().execute(f"BEGIN {mode or 'IMMEDIATE'}")
        except BaseException:
            self.litegate_give_gate()
            raise

    def _commit(self) -> None:
        committed = False
        try:
            super()._commit()
            committed = True
        finally:
            if self.connection is None or not self.connection.in_transaction:
                self.litegate_give_gate(committed)

    def _rollback(self) -> None:
        try:
            super()._rollback()
        finally:
            if self.connection is None or not self.connection.in_transaction:
                self.litegate_give_gate()

    def litegate_forget_parent(self, forking_thread: int) -> None:
        """In a forked child: drop the parent's connection (closed if the
        forking thread owned it, else parked: another thread may have been
        inside SQLite with it) and its gate, without touching either's locks.
        Django opens a fresh connection on next use."""
        conn: Any = self.connection
        self.connection = None
        self.litegate_gate = None  # the parent's; the registry forgot it already
        self.litegate_held = False
        if conn is not None:
            drop_after_fork(conn, idle=self._thread_ident == forking_thread)
        if self.in_atomic_block:  # forked mid-transaction: nothing of it is ours
            self.needs_rollback = True
            self.closed_in_transaction = True

    def _close(self) -> None:
        """The SQLite connection closes: its gate turn (if any) and its use
        of the file's gate go with it, on every path."""
        try:
            super()._close()
        finally:
            self.litegate_give_gate()
            gate, self.litegate_gate = self.litegate_gate, None
            if gate is not None:
                gate.close()


__all__ = [
    "DatabaseOpenError",
    "DatabaseWrapper",
    "GateTimeout",
    "ReadOnlyScopeError",
    "SettingsError",
    "read_only",
]
