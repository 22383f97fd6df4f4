"""The database wrapper Django loads for ``ENGINE: "litegate.django"``.

It subclasses Django's own SQLite backend and overrides a few named methods:
``get_connection_params`` (litegate's OPTIONS, every value checked),
``get_new_connection`` (the PRAGMA guard, ``init_command``, the profile's
PRAGMAs, the file's gate and checkpointer), ``create_cursor`` (writes
through the gate, transaction control checked),
``_start_transaction_under_autocommit`` (gate, then ``BEGIN IMMEDIATE``),
and ``_commit`` / ``_rollback`` / ``_set_autocommit`` / ``_close`` (give the
gate back on every path). ``vendor`` stays ``"sqlite"``, so Django's SQLite
code paths and third-party apps see SQLite.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import os
import re
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
from .._errors import ConfigError, Error, OpenError, TransactionError, WriteTimeout
from .._fair import BOUNDED
from .._files import check_path
from .._gate import FileGate, drop_after_fork, on_fork_in_child
from .._guard import is_denied
from .._settings import budget_of, resolve_settings
from .._statements import READ, TX, VACUUM, WRITE
from .._statements import kind as statement_kind
from .._time import sqlite_timeout
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
    "and atomic()); sqlite3's autocommit= would open transactions the gate never sees. Remove "
    "it",
}

_C_INT = 2**31 - 1
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _C_INT


# What the values of Django's and sqlite3.connect()'s keys must be, checked
# before Django or sqlite3 sees them (they would fail with TypeError,
# AttributeError or OverflowError there); the text says what to pass.
# (timeout is checked with the profile's busy_timeout; check_same_thread and
# uri are overridden by Django whatever they are.)
_VALUES: dict[str, tuple[Callable[[object], bool], str]] = {
    "detect_types": (
        _whole,
        "a whole number of sqlite3's PARSE_* flags, e.g. sqlite3.PARSE_DECLTYPES",
    ),
    "cached_statements": (_whole, "a whole number of statements >= 0"),
    "isolation_level": (
        lambda v: (
            v is None
            or (isinstance(v, str) and v.upper() in ("", "DEFERRED", "IMMEDIATE", "EXCLUSIVE"))
        ),
        "None, '', 'DEFERRED', 'IMMEDIATE' or 'EXCLUSIVE' (Django sets it itself as it "
        "connects; leave it out)",
    ),
    "factory": (
        lambda v: isinstance(v, type) and issubclass(v, sqlite3.Connection),
        "a subclass of sqlite3.Connection",
    ),
    "transaction_mode": (
        lambda v: v is None or isinstance(v, str),
        "None, 'DEFERRED', 'IMMEDIATE' or 'EXCLUSIVE'",
    ),
    "init_command": (
        lambda v: isinstance(v, str),
        "a string of SQL statements separated by ';'",
    ),
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
            "Django's and sqlite3.connect()'s): rename or remove the others"
        )
    for key, (ok, what) in _VALUES.items():
        if key in options and not ok(options[key]):
            raise SettingsError(f"{where}[{key!r}] must be {what}, got {options[key]!r}")
    return dict(options)


def _check_name(alias: str, name: object) -> str:
    """NAME as a str: the path of the database file (or a ``file:`` URI,
    ``:memory:``)."""
    where = f"settings.DATABASES[{alias!r}]['NAME']"
    if isinstance(name, os.PathLike):
        name = os.fspath(name)
    if not isinstance(name, str) or not name:
        raise SettingsError(
            f"{where} must be the path of the database file (a str or pathlib.Path), got "
            f"{name!r}; set it, e.g. BASE_DIR / 'db.sqlite3'"
        )
    if "\0" in name:
        raise SettingsError(f"{where} contains a NUL character; set it to the file's path")
    return name


class GateTimeout(OperationalError, WriteTimeout):
    """The write gate was not free within the timeout: Django's
    ``OperationalError`` (what Django code catches) and
    :class:`litegate.WriteTimeout`."""


class TransactionControlError(TransactionManagementError, TransactionError):
    """``BEGIN``, ``COMMIT``, ``END`` or ``ROLLBACK`` sent as SQL through a
    cursor inside ``atomic()``: refused before it ran (it would commit or
    end the block's transaction behind Django's back). Django's
    ``TransactionManagementError`` (what ``transaction.commit()`` inside
    ``atomic()`` raises) and :class:`litegate.TransactionError`."""


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
    PRAGMAs that litegate's core refuses on its writer
    (``litegate._profiles.GUARDED``, listed in docs/errors.md), which
    would break the other connections and processes sharing the file, or
    every connection of this process. SQLite asks it when a
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
        return ConfigError(f"{where}: {why}. Refused before it ran, nothing was changed: remove it")


def _writes(sql: str) -> bool:
    """Takes SQLite's write lock: a write, VACUUM, or a PRAGMA that writes
    the file (or, as a FULL / RESTART / TRUNCATE checkpoint, keeps writers
    out while it runs)."""
    kind = statement_kind(sql)
    if kind in (WRITE, VACUUM):
        return True
    return kind == READ and _PRAGMA_HEAD.match(sql) is not None and _pragma_writes(sql)


_COMMENTS = re.compile(r"/\*.*?(?:\*/|$)|--[^\n]*", re.S)
# Anchored, so a SELECT is told apart at its first letter.
_PRAGMA_HEAD = re.compile(r"\s*(?:(?:/\*.*?\*/|--[^\n]*\n)\s*)*PRAGMA\b", re.S | re.I)
_PRAGMA = re.compile(r"PRAGMA\s+(?:\w+\s*\.\s*)?(\w+)\s*(.*)", re.S | re.I)
_PRAGMA_RUNS = frozenset({"optimize", "incremental_vacuum"})  # write whatever their argument
_PRAGMA_SETS = frozenset({"user_version", "application_id", "auto_vacuum", "default_cache_size"})


@functools.lru_cache(maxsize=256)
def _pragma_writes(sql: str) -> bool:
    match = _PRAGMA.match(_COMMENTS.sub(" ", sql).strip())
    if match is None:
        return False
    name, rest = match.group(1).lower(), match.group(2).strip().upper()
    if name in _PRAGMA_RUNS:
        return True
    if name == "wal_checkpoint":
        return any(mode in rest for mode in ("FULL", "RESTART", "TRUNCATE"))
    return name in _PRAGMA_SETS and rest[:1] in ("=", "(")


@functools.lru_cache(maxsize=256)
def _control(sql: str) -> tuple[bool, bool, bool]:
    """For transaction control sent as SQL: (begins a transaction, ends
    one, takes SQLite's write lock as it begins). ``ROLLBACK TO`` ends only
    a savepoint; ``SAVEPOINT`` / ``RELEASE`` are left to SQLite."""
    words = re.findall(r"[A-Z]+", _COMMENTS.sub(" ", sql[:200]).upper())[:4]
    first = words[0] if words else ""
    rest = [w for w in words[1:] if w != "TRANSACTION"]
    begins = first == "BEGIN"
    ends = first in ("COMMIT", "END") or (first == "ROLLBACK" and rest[:1] != ["TO"])
    return begins, ends, begins and rest[:1] in (["IMMEDIATE"], ["EXCLUSIVE"])


class LitegateCursorWrapper(sqlite_base.SQLiteCursorWrapper):
    """Django's SQLite cursor. A write that finds no transaction open runs
    as gate → one statement → release. A write inside a transaction that
    does not hold the gate (Django's manual transactions, ``BEGIN`` sent as
    SQL, ``transaction_mode="DEFERRED"``) takes it and keeps it until the
    transaction ends, as ``BEGIN IMMEDIATE`` / ``EXCLUSIVE`` sent as SQL does
    from the start: SQLite's write lock is never taken outside the gate,
    and the gate is never held once no transaction is open. Transaction
    control that would end or nest ``atomic()``'s transaction is refused."""

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
        writes = _writes(query)
        locks = False
        if not writes and statement_kind(query) == TX:
            begins, ends, locks = _control(query)
            if w.in_atomic_block and (begins or ends):
                raise TransactionControlError(
                    f"{query.strip()[:40]!r} through a cursor inside atomic() on {w.alias!r} was "
                    "refused; nothing ran. The transaction is atomic()'s: it commits when the "
                    "outermost block exits and rolls back when an exception leaves it. Raise an "
                    "exception to roll back, or use a nested atomic() (a savepoint) for a "
                    "partial undo"
                )
        if w.litegate_read_only and writes:
            raise ReadOnlyScopeError(
                f"a write inside litegate.django.read_only() on {w.alias!r} was refused; "
                f"nothing was changed ({query.lstrip()[:40]!r}…). Write outside the read_only() "
                "block, or use transaction.atomic() for blocks that write"
            )
        if w.litegate_gate is None:
            return run(query, params)
        if (writes or locks) and not w.litegate_held:
            w.litegate_take_gate()
        done = False
        try:
            result = run(query, params)
            done = True
            return result
        finally:
            if w.litegate_held and not self.connection.in_transaction:
                # the statement's own transaction, or the one it ended (a
                # COMMIT or ROLLBACK sent as SQL, or a failed BEGIN)
                w.litegate_give_gate(done)


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


on_fork_in_child(_after_fork_in_child)


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
        _check_name(self.alias, self.settings_dict["NAME"])
        options = _check_options(self.alias, self.settings_dict["OPTIONS"])
        profile = options.pop("profile", "default")
        overrides = options.pop("pragmas", None)
        fair = options.pop("fair", True)
        timeout = options.get("timeout")  # also sqlite3's busy timeout for outside writers
        saved = self.settings_dict["OPTIONS"]
        self.settings_dict["OPTIONS"] = options
        try:
            kwargs: dict[str, Any] = super().get_connection_params()
        except ImproperlyConfigured as exc:  # transaction_mode's value, said by Django
            raise SettingsError(str(exc)) from None
        finally:
            self.settings_dict["OPTIONS"] = saved
        # Django >= 5.1 runs OPTIONS["init_command"] as it connects; litegate
        # runs it instead, once the connection has its PRAGMA guard.
        self._litegate_init = [c.strip() for c in getattr(self, "init_commands", ()) if c.strip()]
        self.init_commands: list[str] = []
        for command in self._litegate_init:
            if statement_kind(command) != READ:
                raise SettingsError(
                    f"settings.DATABASES[{self.alias!r}]['OPTIONS']['init_command']: "
                    f"{command[:40]!r} would write or control a transaction at every connect, "
                    "outside the write gate and Django's transactions; keep init_command to "
                    "PRAGMAs and run writes in a migration"
                )
        where = f"settings.DATABASES[{self.alias!r}]['OPTIONS']"
        try:
            # the connection's timeout= also sets sqlite3's busy timeout
            settings = resolve_settings(profile, overrides, timeout, busy_from_timeout=True)
        except ConfigError as exc:
            raise SettingsError(f"{where}: {exc}") from None
        try:
            self.litegate_budget = budget_of(fair)
        except ConfigError as exc:
            raise SettingsError(f"{where}['fair']: {exc}") from None
        kwargs["timeout"] = sqlite_timeout(settings.timeout)
        self.litegate_timeout = settings.timeout
        self._litegate_every = settings.every
        pragmas = settings.pragmas
        self.litegate_pragmas = pragmas
        return kwargs

    def is_in_memory_db(self) -> bool:
        # Django's raises TypeError for a NAME that is not a str, also in
        # close(); the connection refuses such a NAME (SettingsError).
        if not isinstance(self.settings_dict["NAME"], (str, os.PathLike)):
            return False
        return bool(super().is_in_memory_db())

    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        name = str(self.settings_dict["NAME"])
        in_memory = self.is_in_memory_db()
        # as connect() names the file: symlinks resolved, one gate per file
        path = os.path.realpath(os.path.abspath(name))
        if not in_memory and not name.startswith("file:"):
            # connect()'s checks, before sqlite3 says "unable to open database file"
            self._litegate_open(lambda: check_path(path))
        try:
            conn = super().get_new_connection(conn_params)
        except sqlite3.DatabaseError as exc:
            self._litegate_unreadable(exc)
            raise
        if in_memory:
            # One connection, nobody to share with: no gate, no guard.
            self.litegate_gate = None
            self.litegate_guard = None
            try:
                self._litegate_init_command(conn, None)
            except BaseException:
                conn.close()
                raise
            return conn
        try:
            guard = self.litegate_guard = PragmaGuard()
            conn.set_authorizer(guard)
            self._litegate_init_command(conn, guard)
            try:
                _profiles.apply(conn, self.litegate_pragmas, writer=True)
            except sqlite3.DatabaseError as exc:
                self._litegate_unreadable(exc)
                raise
            if self.litegate_gate is None:  # one use of the file's gate per open connection
                self.litegate_gate = self._litegate_open(lambda: FileGate.open(path))
                self.litegate_gate.checkpointer(
                    every_commits=self._litegate_every, restart_frames=4 * self._litegate_every
                )
        except BaseException:
            conn.close()
            raise
        return conn

    def _litegate_init_command(self, conn: sqlite3.Connection, guard: PragmaGuard | None) -> None:
        """OPTIONS["init_command"]'s statements (Django's order: after its own
        PRAGMAs, before the profile's); one that fails is the setting's
        error, said as such."""
        where = f"settings.DATABASES[{self.alias!r}]['OPTIONS']['init_command']"
        for command in self._litegate_init:
            try:
                conn.execute(command).fetchall()
            except sqlite3.Error as exc:
                typed = None if guard is None else guard.typed(exc, where)
                if typed is not None:
                    raise SettingsError(str(typed)) from None
                raise SettingsError(
                    f"{where}: {command[:40]!r} failed: {exc}; fix or remove that statement"
                ) from None

    def _litegate_unreadable(self, exc: sqlite3.DatabaseError) -> None:
        """For a file SQLite cannot read as a database, raise
        :class:`DatabaseOpenError` saying so (as connect() does)."""
        code = int(getattr(exc, "sqlite_errorcode", -1)) & 0xFF
        unreadable = code in (_SQLITE_CORRUPT, _SQLITE_NOTADB) or str(exc) in (
            "file is not a database",
            "database disk image is malformed",
        )
        if unreadable:
            raise DatabaseOpenError(
                f"database {self.alias!r}: {str(self.settings_dict['NAME'])!r} is not a SQLite "
                f"database or is damaged ({exc}); point NAME at a SQLite file or at a path "
                "where it may create a new one, or run litegate doctor on it"
            ) from exc

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
            super()._start_transaction_under_autocommit()  # its first write takes the gate
            return
        if self.connection.in_transaction:
            # BEGIN would fail, but BEGIN IMMEDIATE takes SQLite's write lock
            # first, and the transaction begun with SQL would keep it.
            raise TransactionControlError(
                f"a transaction begun with SQL (BEGIN through a cursor) is still open on "
                f"{self.alias!r}, so atomic() cannot begin its own; nothing was changed. End it "
                "with COMMIT or ROLLBACK first, or use atomic() alone"
            )
        self.litegate_take_gate()
        try:
            self.cursor().execute(f"BEGIN {mode or 'IMMEDIATE'}")
        except BaseException:
            self.litegate_give_gate()
            raise

    def _set_autocommit(self, autocommit: bool) -> None:
        # Back to autocommit, sqlite3 commits the transaction still open.
        try:
            super()._set_autocommit(autocommit)
        finally:
            if self.connection is None or not self.connection.in_transaction:
                self.litegate_give_gate(committed=autocommit)

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
            conn = self.connection
            if conn is not None and conn.in_transaction:
                # A statement still alive (a cursor an exception's traceback
                # holds, say) keeps a closed connection open as a zombie,
                # with its transaction and SQLite's lock, after the gate has
                # gone: roll back first, so that the lock goes with the gate.
                with contextlib.suppress(sqlite3.Error):
                    conn.rollback()
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
    "TransactionControlError",
    "read_only",
]
