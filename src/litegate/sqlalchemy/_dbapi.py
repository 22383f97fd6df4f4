"""The DBAPI connection behind ``sqlite+litegate``: ``sqlite3``'s own,
subclassed, so that whatever SQLAlchemy (or code holding the raw
connection) does with it goes through the file's write gate.

The rules, all in this file:

- a transaction SQLAlchemy begins (``do_begin``) is *pending* until its
  first statement that is not a PRAGMA; then the connection takes the gate
  and sends ``BEGIN IMMEDIATE``, so the transaction's reads and writes run
  with the gate held (read-then-write loses nothing). PRAGMAs before it run
  outside the transaction, as with SQLAlchemy's stock driver (so ``PRAGMA
  foreign_keys`` still takes effect);
- outside a transaction (``AUTOCOMMIT``, or the raw connection), a write,
  or a ``BEGIN``/``SAVEPOINT`` that opens a transaction, takes the gate;
  reads never do;
- the gate is given back as soon as the connection is no longer in a
  transaction: after the statement, ``commit()``, ``rollback()`` or
  ``close()``, whichever ends it, on every path;
- read-only (``litegate_read_only``): ``BEGIN`` without the gate and
  ``PRAGMA query_only``: SQLite refuses any write, which surfaces as
  :class:`ReadOnlyScopeError`;
- a transaction that begins while its own thread holds the gate through
  another connection of the same file would wait for itself: it runs as a
  read-only snapshot instead (``PRAGMA query_only`` again), and a write in
  it raises :class:`litegate.NestedWriteError` before anything changes.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import threading
import urllib.parse
import weakref
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from .. import _profiles
from .._engine import open_error
from .._errors import ConfigError as CoreConfigError
from .._errors import NestedWriteError
from .._errors import OpenError as CoreOpenError
from .._fair import BOUNDED
from .._files import check_path
from .._gate import FileGate, drop_after_fork, on_fork_in_child
from .._guard import is_denied
from .._profiles import guarded_change
from .._statements import READ as _READ_KIND
from .._statements import TX as _TX_KIND
from .._statements import VACUUM as _VACUUM_KIND
from .._statements import kind as _kind
from .._time import sqlite_timeout
from ._config import DEFAULT_PROFILE, Settings, resolve
from ._errors import ConfigError, gate_timeout, open_failed, read_only_refused, statement_refused

# What a statement means to the gate (memoized per SQL string). PRAGMA also
# covers ATTACH and DETACH: statements about the connection, not the data.
# VACUUM rebuilds the file in place (it needs the whole gate and no
# transaction); VACUUM_INTO writes a copy (a read of one snapshot).
PRAGMA, READ, BEGIN, TX, WRITE, VACUUM, VACUUM_INTO = range(7)
_SEEN: dict[str, int] = {}
_MEMO_LIMIT = 4096

_R = TypeVar("_R")
_INTO = re.compile(r"\bINTO\b", re.IGNORECASE)


def classify(sql: str) -> int:
    c = _SEEN.get(sql)
    if c is None:
        k = _kind(sql)
        head = sql.lstrip()[:9].upper()
        if head.startswith(("ATTACH", "DETACH")):
            c = PRAGMA  # the connection's own business: no gate, no BEGIN before it
        elif k == _READ_KIND:
            c = PRAGMA if head.startswith("PRAGMA") else READ
        elif k == _TX_KIND:
            c = BEGIN if head.startswith(("BEGIN", "SAVEPOINT")) else TX
        elif k == _VACUUM_KIND:
            c = VACUUM_INTO if _INTO.search(sql) else VACUUM
        else:
            c = WRITE  # INSERT … DDL, WITH (which may write)
        if len(_SEEN) < _MEMO_LIMIT:
            _SEEN[sql] = c
    return c


def _readonly_refusal(exc: sqlite3.OperationalError) -> bool:
    return "readonly database" in str(exc)


_OK, _DENY, _PRAGMA_ACTION = sqlite3.SQLITE_OK, sqlite3.SQLITE_DENY, sqlite3.SQLITE_PRAGMA


class _Guard:
    """A file connection's authorizer (SQLite asks it while preparing each
    statement): it refuses the PRAGMAs litegate's write connection refuses
    (``_profiles.GUARDED``, listed in docs/errors.md), which break every
    other connection to the file or the process, or corrupt the file. ``own``:
    litegate's own statements run (they carry ``-- litegate``, so that the
    statement cache never hands their authorization to a user's)."""

    __slots__ = ("denied", "own")

    def __init__(self) -> None:
        self.own = False
        self.denied: str | None = None

    def __call__(
        self, action: int, arg1: str | None, arg2: str | None, _db: str | None, _src: str | None
    ) -> int:
        if action != _PRAGMA_ACTION or arg2 is None or arg1 is None or self.own:
            return _OK
        why = guarded_change(arg1, arg2)
        if why is None:
            return _OK
        if arg1.lower() == "query_only":  # (the core's advice names its own read paths)
            why = (
                f"PRAGMA query_only = {arg2!r}: a pooled connection must come back as it "
                "went out, writable. For transactions that only read use the "
                "litegate_read_only=True execution option or litegate.sqlalchemy.read_only()"
            )
        self.denied = f"{why} (refused before it ran, nothing changed: remove the statement)"
        return _DENY


class Cursor(sqlite3.Cursor):
    """``sqlite3``'s cursor; every statement passes the gate's rules first."""

    connection: Connection

    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        conn = self.connection
        if classify(sql) >= VACUUM:
            conn.litegate_vacuum(sql, super().execute, sql, parameters)
            return self
        return conn.litegate_run(sql, super().execute, sql, parameters)

    def executemany(self, sql: str, seq_of_parameters: Iterable[Any], /) -> Any:
        return self.connection.litegate_run(sql, super().executemany, sql, seq_of_parameters)

    def executescript(self, sql_script: str, /) -> Any:
        # A script may hold anything: it is a write (sqlite3 commits first).
        return self.connection.litegate_run("INSERT", super().executescript, sql_script)


# Every connection of this process, for the fork hook.
_CONNECTIONS: weakref.WeakSet[Connection] = weakref.WeakSet()


class Connection(sqlite3.Connection):
    """A ``sqlite3`` connection that takes the file's write gate."""

    litegate_gate: FileGate | None = None  # None: in memory, or closed
    litegate_timeout = 5.0
    litegate_budget = BOUNDED  # the write gate's policy (fair=)
    litegate_held = False  # this connection holds the gate
    litegate_pending = False  # do_begin happened, BEGIN goes with the first statement
    litegate_read_only = False
    litegate_nested = False  # this transaction began while this thread held the gate elsewhere
    litegate_task: object = None  # the asyncio task that took the gate (asyncio driver)
    _lg_forked = False  # the parent's, in a forked child: closed or parked, never used
    # For the fork hook: calls into SQLite under way through this connection,
    # and the thread that last ran a statement on it (a copy is closed in the
    # child only if no other thread can be inside SQLite with it).
    litegate_calls = 0
    litegate_thread: int | None = None
    litegate_own_thread = False  # the asyncio driver: every call on the connection's thread
    _lg_collected: weakref.finalize[Any, Any] | None = None
    _lg_guard: _Guard | None = None  # file databases: see _Guard

    def litegate_setup(self, gate: FileGate | None, settings: Settings) -> None:
        """Called once, right after connecting, with one use of the file's
        gate (None for ``:memory:``), which :meth:`close` gives back: the
        profile's PRAGMAs and the file's background checkpointer."""
        self.litegate_timeout = settings.timeout
        self.litegate_budget = settings.budget
        if gate is not None:
            self.litegate_gate = gate
            # Collected without close() (a pool SQLAlchemy dropped with this
            # connection idle in it, after Engine.dispose()): SQLite closes
            # its handle, and this gives the file's gate its use back, or the
            # gate and its threads would stay for the rest of the process.
            self._lg_collected = weakref.finalize(self, gate.close_soon)
            self._lg_collected.atexit = False
            _profiles.apply(self, settings.pragmas, writer=True)
            gate.checkpointer(every_commits=settings.every, restart_frames=4 * settings.every)
            self._lg_guard = _Guard()
            self.set_authorizer(self._lg_guard)
        _CONNECTIONS.add(self)

    # sqlite3's shortcuts make a plain cursor in C: route them through ours.
    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> Any:
        return self.cursor().executemany(sql, parameters)

    def executescript(self, sql_script: str, /) -> Any:
        return self.cursor().executescript(sql_script)

    def cursor(self, factory: Any = None) -> Any:
        if self._lg_forked:
            # The parent's connection, in a forked child: SQLAlchemy treats
            # this message as a disconnect and opens a new connection.
            raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
        return super().cursor(factory or Cursor)

    # -- the rules -------------------------------------------------------------
    def litegate_begin(self) -> None:
        """SQLAlchemy's ``do_begin``. No I/O: the gate and ``BEGIN`` wait for
        the transaction's first statement (so PRAGMAs before it work)."""
        if self.isolation_level is not None and not self.in_transaction:
            self.litegate_pending = True

    def litegate_wants_gate(self, sql: str) -> bool:
        """Would running ``sql`` now take the gate? (The asyncio driver asks
        first, and takes it on the event loop instead.)"""
        if (
            self.litegate_gate is None
            or self.litegate_held
            or self.litegate_read_only
            or self.litegate_nested
        ):
            return False
        c = classify(sql)
        if c >= VACUUM:  # outside any transaction; a copy (INTO) needs no gate
            return c == VACUUM and not self.in_transaction
        if self.litegate_pending:
            return c != PRAGMA
        return c == WRITE or (c == BEGIN and not self.in_transaction)

    def litegate_run(self, sql: str, run: Callable[..., _R], *args: Any) -> _R:
        """Run one statement under the rules of this module's docstring."""
        self.litegate_thread = threading.get_ident()
        self.litegate_calls += 1
        try:
            return self._lg_run(sql, run, *args)
        finally:
            self.litegate_calls -= 1

    def _lg_run(self, sql: str, run: Callable[..., _R], *args: Any) -> _R:
        c = classify(sql)
        if self.litegate_pending and c != PRAGMA:
            if c == BEGIN and sql.lstrip()[:5].upper() == "BEGIN":
                self.litegate_pending = False  # the caller's own BEGIN opens it (below)
            else:
                self._lg_open()
        if c in (WRITE, VACUUM):
            # Read-only and nested transactions run with PRAGMA query_only:
            # SQLite itself refuses what really writes (a WITH … SELECT reads).
            if (
                not self.litegate_held
                and self.litegate_gate is not None
                and not self.litegate_read_only
                and not self.litegate_nested
            ):
                self.litegate_take(sql)
        elif (
            c == BEGIN
            and not self.litegate_held
            and self.litegate_gate is not None
            and not self.in_transaction
            and not self.litegate_read_only
        ):
            self.litegate_take(sql)
        ok = False
        try:
            result = run(*args)
            ok = True
            return result
        except sqlite3.DatabaseError as exc:
            guard = self._lg_guard
            if guard is not None and guard.denied is not None and is_denied(exc):
                why, guard.denied = guard.denied, None
                raise statement_refused(sql, CoreConfigError(why)) from exc
            if isinstance(exc, sqlite3.OperationalError) and _readonly_refusal(exc):
                if self.litegate_read_only:
                    raise read_only_refused(sql) from exc
                if self.litegate_nested:
                    raise self._lg_nested_write() from exc
            raise
        except (sqlite3.Warning, ValueError) as exc:
            # Python 3.10's sqlite3 refuses several statements at once with a
            # Warning and a NUL in the SQL with ValueError, neither a DB-API
            # error, so SQLAlchemy let them through unwrapped; 3.11 and later
            # raise ProgrammingError for both, as here.
            if isinstance(exc, ValueError) and "null character" not in str(exc):
                raise
            raise sqlite3.ProgrammingError(str(exc)) from exc
        finally:
            if self.litegate_held and not self._lg_in_transaction():
                self.litegate_give(committed=ok)

    def _lg_nested_write(self) -> NestedWriteError:
        return NestedWriteError(
            f"this transaction on {self._lg_path()!r} began while this thread (or "
            "asyncio task) held the file's write gate through another connection, "
            "so it can only read: waiting for the gate would wait for itself. "
            "Nothing was changed. Write through the connection that holds the "
            "gate, or end its transaction first"
        )

    def litegate_vacuum(self, sql: str, run: Callable[..., Any], *args: Any) -> None:
        """``VACUUM`` (``run(*args)``) outside any transaction, as
        ``db.vacuum()`` runs it: with the file's whole write gate held (every
        writer waits, readers go on), then a TRUNCATE checkpoint so that the
        file shrinks at once. A transaction SQLAlchemy began and that has
        not sent anything yet is not opened by it (it opens at its next
        statement). ``VACUUM INTO`` writes a copy from one snapshot: no
        gate. Inside an open transaction SQLite cannot run either:
        :class:`StatementRefused` says what to do instead."""
        self.litegate_thread = threading.get_ident()
        self.litegate_calls += 1
        try:
            into = classify(sql) == VACUUM_INTO
            if not into and self.litegate_read_only:
                raise read_only_refused(sql)
            if not into and self.litegate_nested:
                raise self._lg_nested_write()
            if self._lg_in_transaction():
                raise statement_refused(
                    sql,
                    CoreConfigError(
                        "VACUUM cannot run inside a transaction, and a sqlite+litegate "
                        "transaction begins at its first statement, reads included (the stock "
                        "driver begins at the first write). Nothing was changed. Run VACUUM as "
                        "the first statement of a connection or transaction (with "
                        "engine.connect() as c: c.exec_driver_sql('VACUUM')), or on a "
                        "connection with isolation_level='AUTOCOMMIT'"
                    ),
                )
            gate = self.litegate_gate
            if into or gate is None:  # a copy, or an in-memory database: nobody to wait for
                run(*args)
                return
            if not self.litegate_held:
                self.litegate_take(sql)
            try:
                run(*args)
                # The rebuilt file went to the WAL: fold it back while nobody
                # else can write, without waiting for readers (busy 0).
                (ms,) = sqlite3.Cursor(self).execute("PRAGMA busy_timeout").fetchone()
                self._lg_raw("PRAGMA busy_timeout = 0 -- litegate")
                try:
                    self._lg_raw("PRAGMA wal_checkpoint(TRUNCATE) -- litegate")
                finally:
                    self._lg_raw(f"PRAGMA busy_timeout = {int(ms)} -- litegate")
            finally:
                self.litegate_give(committed=True)
        finally:
            self.litegate_calls -= 1

    def _lg_open(self) -> None:
        """The pending transaction's ``BEGIN``: IMMEDIATE with the gate, or a
        read-only snapshot (read-only scope; or nested, see above)."""
        self.litegate_pending = False
        if self.litegate_read_only:
            self._lg_raw("BEGIN")
            return
        if not self.litegate_held and self.litegate_gate is not None and not self.litegate_nested:
            try:
                self.litegate_take("BEGIN IMMEDIATE")
            except NestedWriteError:
                if self.litegate_gate.fork_blocked:  # not nesting: a fork left the lock taken
                    raise
                self.litegate_nested = True
        if self.litegate_nested:
            self._lg_raw("PRAGMA query_only = 1 -- litegate")
            self._lg_raw("BEGIN")
            return
        try:
            self._lg_raw("BEGIN IMMEDIATE")
        except BaseException:
            self.litegate_give()
            raise

    def _lg_raw(self, sql: str) -> None:
        """One of litegate's own statements (past the guard)."""
        guard = self._lg_guard
        if guard is None:
            sqlite3.Cursor(self).execute(sql)
            return
        guard.own = True
        try:
            sqlite3.Cursor(self).execute(sql)
        finally:
            guard.own = False

    def _lg_in_transaction(self) -> bool:
        try:
            return self.in_transaction
        except sqlite3.ProgrammingError:  # closed
            return False

    def _lg_path(self) -> str:
        gate = self.litegate_gate
        return gate.path if gate is not None else ":memory:"

    # -- the gate ----------------------------------------------------------------
    def litegate_take(self, statement: str) -> None:
        gate = self.litegate_gate
        assert gate is not None
        if not gate.acquire(self.litegate_timeout, self.litegate_budget):
            raise gate_timeout(statement, timeout_message(gate, self.litegate_timeout))
        self.litegate_held = True

    def litegate_give(self, committed: bool = False) -> None:
        """Give the gate back if held; ``committed``: a COMMIT happened in
        this turn (it counts towards the file's next checkpoint)."""
        if self.litegate_held:
            self.litegate_held = False
            self.litegate_task = None
            gate = self.litegate_gate
            assert gate is not None
            gate.release()
            if committed:
                gate.committed()

    def _lg_settle(self, committed: bool) -> None:
        if not self._lg_in_transaction():
            if self.litegate_nested:
                self.litegate_nested = False
                if not self.litegate_read_only:
                    with contextlib.suppress(sqlite3.Error):  # closed: nothing to undo
                        self._lg_raw("PRAGMA query_only = 0 -- litegate")
            self.litegate_give(committed)

    def commit(self) -> None:
        if self._lg_forked:  # the parent's transaction: not the child's to commit
            raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
        self.litegate_pending = False
        ok = False
        self.litegate_calls += 1
        try:
            super().commit()
            ok = True
        finally:
            self.litegate_calls -= 1
            self._lg_settle(ok)

    def rollback(self) -> None:
        if self._lg_forked:
            # The parent's: a parked copy must never roll back (that would
            # undo the parent's pages in the WAL), and nothing of it is the
            # child's to undo.
            return
        self.litegate_pending = False
        self.litegate_calls += 1
        try:
            super().rollback()
        finally:
            self.litegate_calls -= 1
            self._lg_settle(False)

    def litegate_set_read_only(self, value: bool) -> None:
        """The ``litegate_read_only`` execution option (set outside a
        transaction): SQLite itself refuses writes while it is on."""
        value = bool(value)
        if value != self.litegate_read_only:
            self._lg_raw(f"PRAGMA query_only = {int(value)} -- litegate")
            self.litegate_read_only = value

    def close(self) -> None:
        """The SQLite connection closes; its gate turn, if any, and its use
        of the file's gate go with it, on every path."""
        if self._lg_forked:  # the fork hook closed it, or parked it for good
            return
        self.litegate_pending = self.litegate_nested = False
        self.litegate_calls += 1
        try:
            if self._lg_in_transaction():
                # End the transaction first: with a cursor still open, sqlite3
                # leaves a "zombie" connection that keeps SQLite's write lock
                # until that cursor is collected, after the gate was given back.
                with contextlib.suppress(sqlite3.Error):
                    super().rollback()
            super().close()
        finally:
            self.litegate_calls -= 1
            self.litegate_give()
            gate, self.litegate_gate = self.litegate_gate, None
            if self._lg_collected is not None:
                self._lg_collected.detach()
            if gate is not None:
                gate.close()

    def litegate_quiet_at_fork(self, forking_thread: int) -> bool:
        """At the fork (asked in the child): no thread was inside SQLite with
        this connection. True when no call was under way and either every
        call runs on the connection's own thread (asyncio) or the last
        statement ran on the forking thread, which was calling fork()."""
        return self.litegate_calls == 0 and (
            self.litegate_own_thread or self.litegate_thread in (None, forking_thread)
        )

    def litegate_forget_parent(self, idle: bool) -> None:
        """In a forked child: this is the parent's connection. Never touch
        its gate (the parent's); close it if no thread was using it at the
        fork, else park it (see :func:`litegate._gate.drop_after_fork`)."""
        self._lg_forked = True
        self.litegate_gate = None
        if self._lg_collected is not None:
            self._lg_collected.detach()  # the parent's gate: never closed here
        self.litegate_held = self.litegate_pending = False
        drop_after_fork(self, idle=idle)


def timeout_message(gate: FileGate, timeout: float) -> str:
    return (
        f"no write gate on {gate.path!r} within {timeout:g} s ({gate.waiting} more writers of "
        "this process queued, others may be in other processes); raise the timeout "
        "(?timeout= in the URL or connect_args={'timeout': ...}) or make write "
        "transactions shorter"
    )


def gate_path(database: str, uri: bool) -> str | None:
    """The file whose gate a connection to ``database`` takes; None for an
    in-memory database."""
    if uri:
        parts = urllib.parse.urlsplit(database)
        query = urllib.parse.parse_qs(parts.query)
        path = urllib.parse.unquote(parts.path)
        if "memory" in query.get("mode", []) or path in ("", ":memory:"):
            return None
        return os.path.abspath(path)
    if database in ("", ":memory:"):
        return None
    return os.path.abspath(database)


def connect(database: str, **kwargs: Any) -> Connection:
    """``sqlite3.connect`` for ``sqlite+litegate``: what the dialect opens,
    and what a ``creator=`` (or ``async_creator=``) must return. Takes
    litegate's ``profile``, ``pragmas`` and ``fair`` (the write gate's policy,
    as ``litegate.connect`` takes it) besides sqlite3's own arguments;
    ``timeout`` is both the gate's wait and sqlite3's busy timeout. A file
    database's connection may be used from any thread (one at a time), as
    SQLAlchemy's pool does."""
    settings = resolve(kwargs.pop("profile", DEFAULT_PROFILE), kwargs.pop("pragmas", None),
                       kwargs.get("timeout"), kwargs.pop("fair", True))  # fmt: skip
    kwargs["timeout"] = sqlite_timeout(settings.timeout)
    path = gate_path(database, bool(kwargs.get("uri")))
    kwargs.setdefault("check_same_thread", path is None)
    factory = kwargs.pop("factory", None)
    cls: type[Connection] = Connection
    if factory is not None and not issubclass(Connection, factory):
        # someone else's sqlite3.Connection subclass: ours in front of it
        cls = type(f"Litegate{factory.__name__}", (Connection, factory), {})
    gate = None
    if path is not None:
        try:
            if not _read_only_uri(database, bool(kwargs.get("uri"))):
                # litegate.connect()'s checks, before sqlite3 says "unable to open
                # database file" (or creates a file it cannot use)
                check_path(os.path.realpath(path))
            gate = FileGate.open(path)
        except CoreOpenError as exc:
            raise open_failed(exc) from None
    try:
        conn = sqlite3.connect(database, factory=cls, **kwargs)
    except BaseException as exc:
        if gate is not None:
            gate.close()
        if path is None or not isinstance(exc, sqlite3.Error):
            raise
        raise open_failed(open_error(path, exc)) from exc
    try:
        conn.litegate_setup(gate, settings)
    except BaseException as exc:
        conn.close()
        if isinstance(exc, CoreOpenError):
            raise open_failed(exc) from None
        if isinstance(exc, (sqlite3.Error, UnicodeDecodeError)) and path is not None:
            # (sqlite3 decodes SQLite's message, which may quote a damaged schema)
            raise open_failed(open_error(path, exc)) from exc
        if isinstance(exc, CoreConfigError) and not isinstance(exc, ConfigError):
            raise ConfigError(f"sqlite+litegate: {exc}") from None
        raise
    return conn


def _read_only_uri(database: str, uri: bool) -> bool:
    """A ``file:`` URI with ``mode=ro``: no write access needed."""
    if not uri:
        return False
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(database).query)
    return "ro" in query.get("mode", [])


class DBAPI:
    """The DBAPI module of ``sqlite+litegate``: ``sqlite3``'s names, with
    :func:`connect` (so that ``create_engine(module=...)`` wrappers, as
    SQLAlchemy's own tests use, see every connection)."""

    paramstyle = "qmark"
    # The driver whose names and exceptions these are (SQLAlchemy looks it up).
    __name__ = sqlite3.dbapi2.__name__

    def __init__(self) -> None:
        for name in dir(sqlite3):
            if not name.startswith("_") and name != "connect":
                setattr(self, name, getattr(sqlite3, name))

    def __getattr__(self, name: str) -> Any:  # for mypy: sqlite3's names, set above
        raise AttributeError(name)

    def connect(self, database: str, **kwargs: Any) -> Any:
        return connect(database, **kwargs)


def _after_fork_in_child() -> None:
    """Every connection of the parent is let go of: closed if it was idle in
    a pool or, checked out, if no thread was inside SQLite with it (a
    session of the forking thread, even inside a transaction); else parked."""
    from ._pool import idle_after_fork  # the pools know which connections were idle

    idle = idle_after_fork()
    me = threading.get_ident()  # the forking thread keeps its ident in the child
    for conn in list(_CONNECTIONS):
        conn.litegate_forget_parent(idle=id(conn) in idle or conn.litegate_quiet_at_fork(me))


on_fork_in_child(_after_fork_in_child)
