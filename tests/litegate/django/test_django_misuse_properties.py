"""The misuse suite for the Django face: ``ENGINE: "litegate.django"`` and
the tasks backend, searched with Hypothesis.

Entry points: a ``DATABASES`` entry (``NAME``, every ``OPTIONS`` key with
odd values, ``AUTOCOMMIT``) connected, written and read; SQL through a
Django cursor (PRAGMAs, transaction control, writes) in autocommit mode,
inside nested ``atomic()`` blocks that commit or roll back, inside
``read_only()``, in Django's manual transactions (``set_autocommit``,
``commit``, ``rollback``) and through a second alias of the same file; the
tasks backend's ``OPTIONS``, ``enqueue()`` arguments and task options, and
``get_result()`` / ``aget_result()`` ids.

The contract (``tests/litegate/misuse.py``): each call succeeds or raises a
typed ``litegate.Error`` whose message says what to do. Django's own errors
where Django's API defines them: ``django.db.DatabaseError`` for SQL that
SQLite itself rejects (never "database is locked": litegate's gate is what
prevents it), ``InvalidTask`` from Django's task validation,
``TaskResultDoesNotExist`` for an id that is not a task's. And after every
case: no committed row lost (rows deleted inside a block that rolls back
come back), the file still in WAL, the gate held only while a transaction
is open, and another writer of the file either writes or is told that this
thread holds the gate: never "a writer outside litegate".
"""

from __future__ import annotations

import asyncio
import json
import math
import sqlite3
import warnings
from collections.abc import Iterator
from contextlib import closing, contextmanager, suppress
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from django.db import DatabaseError, connection, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from hypothesis import given
from hypothesis import strategies as st

import litegate
from litegate._profiles import GUARDED
from litegate.django import read_only
from litegate.django.base import ALLOWED_OPTIONS
from litegate.django.tasks import TaskBackend
from litegate.django.tasks._api import InvalidTask, TaskResultDoesNotExist
from litegate.queue import Queue
from tests.litegate.django.testapp import tasks
from tests.litegate.misuse import attempt, examples, ran, typed

ROWS = 20


def seed(path: str) -> None:
    """``ROWS`` committed rows in ``kept``, the rows no case may lose."""
    with closing(sqlite3.connect(path)) as raw:
        raw.execute("PRAGMA journal_mode = WAL")
        raw.execute("CREATE TABLE IF NOT EXISTS kept (id INTEGER PRIMARY KEY, v TEXT)")
        raw.execute("DELETE FROM kept")
        raw.executemany("INSERT INTO kept (v) VALUES (?)", [(f"row{i}",) for i in range(ROWS)])
        raw.commit()


def kept_and_wal(path: str) -> None:
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as raw:
        assert raw.execute("SELECT count(*) FROM kept").fetchone() == (ROWS,), "rows lost"
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def django_error(exc: BaseException, what: str) -> None:
    """An exception a step may raise: typed, or SQLite's refusal of the SQL
    through Django's DatabaseError, but never "database is locked"."""
    if isinstance(exc, litegate.Error):
        typed(exc)
        return
    assert isinstance(exc, DatabaseError), f"{what}: untyped {type(exc).__name__}: {exc}"
    assert "database is locked" not in str(exc), f"{what}: {exc}"


def probe(db: litegate.Database, what: str) -> None:
    """Another writer of the file (this thread, a Database of its own):
    it writes, or is told at once that this thread holds the gate. SQLite's
    lock held by a Django connection without the gate would make it wait
    for "a writer outside litegate"."""
    try:
        db.execute("INSERT INTO probe (x) VALUES (1)")
    except litegate.NestedWriteError:
        pass
    except litegate.WriteTimeout as exc:
        raise AssertionError(f"{what}: the gate was free with SQLite's lock taken: {exc}") from exc


def gate_follows_transaction(wrapper: Any, what: str) -> None:
    """Outside atomic() the gate is held only while SQLite has a
    transaction open on the connection (else nobody else could write)."""
    if wrapper.litegate_held and not wrapper.in_atomic_block:
        assert wrapper.connection is not None, f"{what}: the gate is held, closed"
        assert wrapper.connection.in_transaction, f"{what}: the gate is held, no transaction"


# -- DATABASES entries ---------------------------------------------------------

NAMES = ["seeded", "seeded", "seeded", "new", "missing folder", "directory", "not sqlite"]
NAMES += ["empty", "none", ":memory:", "memory uri", "nul", "pathlib"]
ODD: list[Any] = [None, True, False, 0, 1, -1, 5, 2.5, 1e12, math.nan, math.inf, "5", ""]
ODD += [2**70, [], {}]
WORDS = ["default", "fast", "safe", "strict", "IMMEDIATE", "DEFERRED", "EXCLUSIVE", "deferred"]
WORDS += ["bogus", "PRAGMA temp_store = MEMORY", "PRAGMA journal_mode = DELETE"]
WORDS += ["PRAGMA cache_size = 10; PRAGMA locking_mode = EXCLUSIVE", "SELECT 1;;", "nonsense sql"]
WORDS += ["BEGIN IMMEDIATE", "CREATE TABLE IF NOT EXISTS t2 (x)", "PRAGMA user_version = 3"]
MAPPINGS = [{"journal_mode": "DELETE"}, {"cache_size": -1000}, {"nosuch": 1}, {"synchronous": 9}]
OTHER = [sqlite3.Connection, str, litegate.Bounded(4, 0.5), ("timeout", 5)]
option_values = st.one_of(
    st.sampled_from(ODD + WORDS + MAPPINGS + OTHER),
    st.integers(-3, 10),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
)
option_keys = st.one_of(
    st.sampled_from(sorted(ALLOWED_OPTIONS)),
    st.sampled_from(["database", "autocommit", "timout", "Profile", "", "fair "]),
)
options = st.one_of(
    st.dictionaries(option_keys, option_values, max_size=3),
    st.sampled_from([None, [], "timeout=5", 5]),
)


def database_name(kind: str, tmp: Path, seeded: str, n: int) -> Any:
    if kind == "seeded":
        return seeded
    if kind == "pathlib":
        return Path(seeded)
    if kind == "new":
        return str(tmp / f"new-{n}.db")
    if kind == "missing folder":
        return str(tmp / "nope" / "x.db")
    if kind == "directory":
        return str(tmp)
    if kind == "not sqlite":
        path = tmp / "garbage.db"
        path.write_bytes(b"not a database, " * 64)
        return str(path)
    if kind == "nul":
        return str(tmp / "a\0b.db")
    return {"empty": "", "none": None, ":memory:": ":memory:"}.get(
        kind, "file:misuse?mode=memory&cache=shared"
    )


@contextmanager
def alias_for(name: Any, opts: Any, autocommit: bool) -> Iterator[Any]:
    """Django's ``connections["misuse"]``, a litegate.django entry added to
    the settings for the block (so atomic(using="misuse") is Django's own),
    closed and removed after it."""
    entry = {"ENGINE": "litegate.django", "NAME": name, "OPTIONS": opts, "AUTOCOMMIT": autocommit}
    filled = connections.configure_settings({"default": {}, "misuse": entry})["misuse"]
    connections.settings["misuse"] = filled
    try:
        yield connections["misuse"]
    finally:
        wrapper = connections["misuse"]
        try:
            wrapper.close()
            if wrapper.connection is not None:  # Django keeps :memory: open; we are done
                BaseDatabaseWrapper.close(wrapper)
        finally:
            del connections["misuse"]
            del connections.settings["misuse"]


def test_database_settings_work_or_say_what_to_do(tmp_path: Path) -> None:
    seeded = str(tmp_path / "seeded.db")
    seed(seeded)
    other = litegate.connect(seeded, timeout=0.3)
    other.execute("CREATE TABLE IF NOT EXISTS probe (x)")
    counter = [0]

    @given(
        kind=st.sampled_from(NAMES),
        opts=options,
        autocommit=st.booleans(),
        in_atomic=st.booleans(),
    )
    @examples(60)
    def case(kind: str, opts: Any, autocommit: bool, in_atomic: bool) -> None:
        counter[0] += 1
        name = database_name(kind, tmp_path, seeded, counter[0])
        what = f"NAME {kind}, OPTIONS {opts!r}, AUTOCOMMIT {autocommit}"
        with alias_for(name, opts, autocommit) as wrapper:
            with warnings.catch_warnings():
                # Django warns that it overrides check_same_thread=True: advice, not an error
                warnings.simplefilter("ignore", RuntimeWarning)
                opened = attempt(wrapper.ensure_connection, what)
            if opened.ok:
                use(wrapper, kind, in_atomic, other, what)
        assert wrapper.connection is None
        kept_and_wal(seeded)
        other.execute("INSERT INTO probe (x) VALUES (2)")  # the gate is free again
        ran("django settings")

    try:
        case()
    finally:
        other.close()


def use(wrapper: Any, kind: str, in_atomic: bool, other: litegate.Database, what: str) -> None:
    """Write and read through a connection that opened."""
    seeded = kind in ("seeded", "pathlib")

    def work() -> None:
        with wrapper.cursor() as cur:
            cur.execute("CREATE TABLE IF NOT EXISTS written (x)")
            cur.execute("INSERT INTO written VALUES (1)")
            if seeded:
                cur.execute("SELECT count(*) FROM kept")
                assert cur.fetchone() == (ROWS,)
                probe(other, what)
            gate_follows_transaction(wrapper, what)

    try:
        if in_atomic:
            with transaction.atomic(using="misuse"):
                work()
        else:
            work()
        if not wrapper.get_autocommit():
            wrapper.commit()
        gate_follows_transaction(wrapper, what)
    except AssertionError:
        raise
    except Exception as exc:
        django_error(exc, what)


# -- SQL through a cursor, atomic(), read_only(), manual transactions -----------

PRAGMA_NAMES = [
    *sorted(GUARDED),
    "foreign_keys", "synchronous", "cache_size", "user_version", "wal_checkpoint",
    "busy_timeout", "temp_store", "recursive_triggers", "defer_foreign_keys",
    "ignore_check_constraints", "read_uncommitted", "optimize", "max_page_count",
    "wal_autocheckpoint", "journal_size_limit", "mmap_size", "page_size", "auto_vacuum",
    "application_id", "incremental_vacuum", "secure_delete", "nosuch",
]  # fmt: skip
PRAGMA_VALUES = ["ON", "off", "wal", "DELETE", "TRUNCATE", "PERSIST", "MEMORY", "OFF", "FULL"]
PRAGMA_VALUES += ["normal", "EXCLUSIVE", "FAST", "-1", "0", "1", "'delete'", "yes", "2"]
PRAGMA_VALUES += [str(2**70), "(TRUNCATE)", "''"]
pragma_sql = st.builds(
    lambda schema, name, value: (
        f"PRAGMA {schema}{name}"
        + ("" if value is None else f" = {value}" if value[0] != "(" else value)
    ),
    st.sampled_from(["", "main."]),
    st.one_of(st.sampled_from(PRAGMA_NAMES), st.from_regex(r"[a-z_]{1,12}", fullmatch=True)),
    st.one_of(st.none(), st.sampled_from(PRAGMA_VALUES)),
)
TX_SQL = [
    "BEGIN", "BEGIN DEFERRED", "BEGIN IMMEDIATE", "begin exclusive transaction",
    "/* c */ BEGIN IMMEDIATE", "COMMIT", "END", "commit transaction", "ROLLBACK",
    "-- c\nROLLBACK", "ROLLBACK TO x", "ROLLBACK TRANSACTION TO SAVEPOINT x", "SAVEPOINT x",
    "RELEASE x", "RELEASE SAVEPOINT x",
]  # fmt: skip
OTHER_SQL = [
    "INSERT INTO testapp_entry (who) VALUES ('raw')", "UPDATE testapp_entry SET who = who",
    "SELECT count(*) FROM testapp_entry", "CREATE TABLE IF NOT EXISTS misuse_ddl (x)",
    "DROP TABLE IF EXISTS misuse_ddl", "VACUUM", "DELETE FROM testapp_entry WHERE who = 'raw'",
    "WITH w AS (SELECT 1) SELECT * FROM w", "nonsense",
]  # fmt: skip
leaf = st.one_of(
    st.tuples(
        st.just("sql"),
        st.one_of(pragma_sql, st.sampled_from(TX_SQL), st.sampled_from(OTHER_SQL)),
    ),
    st.sampled_from(
        [
            ("orm",),
            ("other",),
            ("probe",),
            ("delete kept",),
            ("manual", "off"),
            ("manual", "on"),
            ("commit",),
            ("rollback",),
        ]
    ),
)
statements = st.recursive(
    leaf,
    lambda inner: st.one_of(
        st.tuples(st.just("atomic"), st.lists(inner, max_size=4), st.booleans()),
        st.tuples(st.just("read_only"), st.lists(inner, max_size=3)),
    ),
    max_leaves=10,
)


class _Undo(Exception):
    """Leaves an atomic() block so that it rolls back."""


@contextmanager
def gate_timeouts(seconds: float) -> Iterator[None]:
    """Both aliases of the test file wait at most ``seconds`` for the gate
    (a case that waited would show as a failure, not a 30 s stall)."""
    connections.close_all()
    saved = {a: connections.settings[a]["OPTIONS"].get("timeout") for a in ("default", "other")}
    for alias in saved:
        connections.settings[alias]["OPTIONS"]["timeout"] = seconds
    try:
        yield
    finally:
        connections.close_all()
        for alias, value in saved.items():
            connections.settings[alias]["OPTIONS"]["timeout"] = value


def test_cursor_statements_and_transactions_work_or_say_what_to_do() -> None:
    from tests.litegate.django.testapp.models import Entry

    path = str(connection.settings_dict["NAME"])
    seed(path)
    other = litegate.connect(path, timeout=0.3)
    other.execute("CREATE TABLE IF NOT EXISTS probe (x)")

    def step(s: tuple[Any, ...], undone: bool) -> None:
        """One step; ``undone``: an enclosing atomic() block rolls back."""
        what = repr(s)[:120]
        kind = s[0]
        try:
            if kind == "atomic":
                _, inner, undo = s
                try:
                    with transaction.atomic():
                        for t in inner:
                            step(t, undone or undo)
                        if undo:
                            raise _Undo
                except _Undo:
                    pass
            elif kind == "read_only":
                with read_only():
                    for t in s[1]:
                        step(t, undone)
            elif kind == "sql":
                with connection.cursor() as cur:
                    cur.execute(s[1])
                    if cur.description is not None:
                        cur.fetchall()
            elif kind == "orm":
                Entry.objects.create(who="orm")
            elif kind == "other":  # the second alias of the same file
                Entry.objects.using("other").create(who="other")
            elif kind == "probe":
                probe(other, what)
            elif kind == "delete kept":
                if undone:  # only where a rollback will bring the rows back
                    with connection.cursor() as cur:
                        cur.execute("DELETE FROM kept")
            elif kind == "manual":
                transaction.set_autocommit(s[1] == "on")
            elif kind == "commit":
                transaction.commit()
            else:
                transaction.rollback()
        except AssertionError:
            raise
        except Exception as exc:
            django_error(exc, what)
        for alias in ("default", "other"):
            gate_follows_transaction(connections[alias], what)

    @given(st.lists(statements, min_size=1, max_size=6))
    @examples(80)
    def case(program: list[tuple[Any, ...]]) -> None:
        try:
            for s in program:
                step(s, False)
            if not connection.get_autocommit():
                connection.rollback()
                connection.set_autocommit(True)
        finally:
            connections.close_all()
        kept_and_wal(path)
        other.execute("INSERT INTO probe (x) VALUES (2)")  # the gate is free again
        ran("django statements")

    with gate_timeouts(2.0):
        try:
            case()
        finally:
            other.close()


# -- the tasks backend -----------------------------------------------------------

json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=8),  # lone surrogates included
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.one_of(st.text(max_size=4), st.integers(0, 9)), inner, max_size=3),
    ),
    max_leaves=8,
)


def _deep(n: int) -> list[Any]:
    out: list[Any] = []
    for _ in range(n):
        out = [out]
    return out


class _Deep(list):  # type: ignore[type-arg]
    """A list nested 5,000 deep that Hypothesis can print."""

    def __repr__(self) -> str:
        return "<list nested 5,000 deep>"


class _Huge(int):
    """10**5000, more digits than str() gives by default, printable."""

    def __repr__(self) -> str:
        return "10**5000"


ODD_ARGS = [object(), {1, 2}, b"\xff\xfe", b"bytes", (1, 2), _Huge(10**5000), _Deep(_deep(5000))]
ODD_ARGS += [lambda: None, datetime(2030, 1, 1, tzinfo=timezone.utc), {(1, 2): 3}]
arguments = st.one_of(json_values, st.sampled_from(ODD_ARGS))
run_afters = st.one_of(
    st.none(),
    st.sampled_from(
        [
            datetime.max.replace(tzinfo=timezone.utc),
            datetime.min.replace(tzinfo=timezone.utc),
            datetime(2001, 1, 1),  # naive (USE_TZ is on)
            datetime(1970, 1, 1, tzinfo=timezone.utc),
        ]
    ),
    st.timedeltas(min_value=timedelta(days=-3), max_value=timedelta(days=3)),
)
backend_options: st.SearchStrategy[Any] = st.one_of(
    st.dictionaries(
        st.sampled_from(["database", "max_attempts", "retries", "Database"]),
        st.sampled_from(["default", "other", "nope", None, 0, 1, 3, -1, True, 2.5, "3", []]),
        max_size=2,
    ),
    st.sampled_from([None, [], "default", 5]),
)
queues = st.one_of(
    st.none(),
    st.sampled_from(
        [["default"], ["default", "emails"], [], "default", 5, [5], [""], ("default",)]
    ),
)


OTHER_IDS = st.one_of(
    st.text(max_size=6),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(["9" * 30, str(2**63), str(2**63 - 1), "0", "-1", "", None, 1.5, b"1"]),
)
lookups = st.lists(
    st.tuples(st.integers(0, 63), st.integers(0, 9), st.one_of(st.none(), OTHER_IDS)),
    max_size=3,
)


def spelled(known: list[str], pick: int, how: int) -> Any:
    """One of the ``known`` ids, as it is (``how`` 0) or spelled otherwise."""
    i = known[pick % len(known)]
    arabic = "".join(chr(0x0660 + int(c)) for c in i)
    return [i, f" {i}", f"{i}\n", f"0{i}", f"+{i}", f"{i}.0", f"{i}_0", arabic, int(i), [i]][how]


@contextmanager
def tasks_alias(params: dict[str, Any]) -> Iterator[Any]:
    """Django's task backends with a "misuse" entry for the block."""
    from litegate.django.tasks._api import API

    if API == "django.tasks":
        from django.tasks import task_backends
    else:
        from django_tasks import task_backends
    task_backends.settings["misuse"] = params
    try:
        yield task_backends
    finally:
        with suppress(AttributeError):
            del task_backends["misuse"]
        del task_backends.settings["misuse"]


def tasks_error(exc: BaseException, what: str) -> None:
    """Django's task errors are Django's API; everything else is typed."""
    if isinstance(exc, InvalidTask):
        return
    if isinstance(exc, litegate.Error):
        typed(exc)
        return
    raise AssertionError(f"{what}: untyped {type(exc).__name__}: {exc}") from exc


def test_tasks_backend_calls_work_or_say_what_to_do() -> None:
    from django.utils import timezone as dj_timezone

    backend = tasks.echo.get_backend()
    assert isinstance(backend, TaskBackend)
    enqueued: dict[str, Any] = {}  # id -> the arguments as JSON gave them back
    with Queue(str(connection.settings_dict["NAME"]), "default") as q:
        plain = [str(q.put({"x": 1})), str(q.put("text"))]

    @given(
        args=st.lists(arguments, max_size=3),
        kwargs=st.dictionaries(st.text(min_size=1, max_size=4), arguments, max_size=2),
        priority=st.one_of(st.none(), st.integers(-120, 120)),
        queue=st.one_of(st.none(), st.sampled_from(["default", "emails", "nope"])),
        run_after=run_afters,
        options=backend_options,
        names=queues,
        looked_up=lookups,
    )
    @examples(60)
    def case(
        args: list[Any],
        kwargs: dict[str, Any],
        priority: int | None,
        queue: str | None,
        run_after: Any,
        options: Any,
        names: Any,
        looked_up: list[tuple[int, int, Any]],
    ) -> None:
        what = f"args {args!r:.80}, kwargs {kwargs!r:.80}, {priority}, {queue}, {run_after!r}"
        # TASKS settings: a backend "misuse" with these QUEUES and OPTIONS
        params: dict[str, Any] = {"BACKEND": "litegate.django.tasks.TaskBackend"}
        params["OPTIONS"] = options
        if names is not None:
            params["QUEUES"] = names
        with tasks_alias(params) as handler:
            made = attempt(lambda: handler["misuse"], f"TASKS {params!r}")
            if made.ok:
                assert all(isinstance(m.id, str) for m in made.value.check())  # never raised
                try:
                    enqueued[tasks.echo.using(backend="misuse").enqueue(1).id] = [1]
                except Exception as exc:
                    tasks_error(exc, f"enqueue through TASKS {params!r}")
        # enqueue() through the configured backend, with task options
        if isinstance(run_after, timedelta):
            run_after = dj_timezone.now() + run_after
        try:
            task = tasks.echo.using(priority=priority, queue_name=queue, run_after=run_after)
        except InvalidTask:
            task = tasks.echo  # Django refused the options itself
        try:
            result = task.enqueue(*args, **kwargs)
        except Exception as exc:
            tasks_error(exc, what)
        else:
            back = backend.get_result(result.id)
            assert back.args == json.loads(json.dumps(result.args)), what
            enqueued[result.id] = back.args
        # get_result() / aget_result() of anything
        for pick, how_spelled, other_id in looked_up:
            known = [*enqueued, *plain]
            result_id = spelled(known, pick, how_spelled) if other_id is None else other_id
            ours = isinstance(result_id, str) and result_id in enqueued
            for how in ("get_result", "aget_result"):
                try:
                    if how == "get_result":
                        found = backend.get_result(result_id)
                    else:
                        found = asyncio.run(backend.aget_result(result_id))
                except TaskResultDoesNotExist:
                    assert not ours, f"{how}({result_id!r}): lost"
                else:
                    assert ours, f"{how}({result_id!r}) found {found.id!r}"
                    assert (found.id, found.args) == (result_id, enqueued[result_id])
        ran("django tasks")

    try:
        case()
    finally:
        with connection.cursor() as cur:
            cur.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND "
                "(name LIKE 'litegate\\_queue\\_%' ESCAPE '\\' OR name = 'litegate_task_results')"
            )
            for (table,) in cur.fetchall():
                cur.execute(f"DROP TABLE IF EXISTS {table}")
        backend._ready.clear()
