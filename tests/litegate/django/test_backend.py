"""ENGINE "litegate.django": writes through the gate on every path, with
real threads and processes."""

from __future__ import annotations

import http.client
import multiprocessing as mp
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import closing, contextmanager, suppress
from functools import partial
from typing import Any

import pytest
from django.db import (
    IntegrityError,
    OperationalError,
    connection,
    connections,
    models,
    transaction,
)
from django.db.transaction import TransactionManagementError

import litegate
from litegate.django.base import GateTimeout
from tests.conftest import wait_until
from tests.litegate.django import procs
from tests.litegate.django.testapp.models import Counter, Entry


def db_path() -> str:
    return str(connection.settings_dict["NAME"])


def on_threads(n: int, body: Any) -> list[BaseException]:
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            body(k)
        except BaseException as exc:  # collected; the tests assert there are none
            errors.append(exc)
        finally:
            connections.close_all()  # this thread's connections

    ts = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return errors


@contextmanager
def another_thread_in_atomic() -> Iterator[None]:
    """Another thread holds the gate inside atomic() (one write done) for the
    body of the with-block."""
    inside, leave = threading.Event(), threading.Event()

    def holder() -> None:
        with transaction.atomic():
            Entry.objects.create(who="holder")
            inside.set()
            assert leave.wait(30)
        connection.close()

    h = threading.Thread(target=holder)
    h.start()
    assert inside.wait(30)
    try:
        yield
    finally:
        leave.set()
        h.join()


def test_connection_is_sqlite_with_the_profile() -> None:
    assert connection.vendor == "sqlite"
    assert type(connections["default"]).__module__ == "litegate.django.base"
    with connection.cursor() as cur:
        cur.execute("PRAGMA journal_mode")
        assert cur.fetchone()[0] == "wal"
        cur.execute("PRAGMA wal_autocheckpoint")
        assert cur.fetchone()[0] == 0  # litegate's checkpointer does it
        cur.execute("PRAGMA foreign_keys")
        assert cur.fetchone()[0] == 1


def test_atomic_read_then_write_from_threads_loses_nothing() -> None:
    Counter.objects.create(name="c")

    def body(_k: int) -> None:
        for _ in range(40):
            with transaction.atomic():
                c = Counter.objects.get(name="c")
                c.n += 1
                c.save(update_fields=["n"])

    assert on_threads(8, body) == []
    assert Counter.objects.get(name="c").n == 8 * 40


def test_autocommit_writes_wait_for_an_atomic_block() -> None:
    """save() in autocommit mode from many threads while another thread's
    atomic() holds the gate: they queue, then all land, no errors."""
    with another_thread_in_atomic():
        gate = connection.litegate_gate if connection.connection else None
        writers = threading.Thread(
            target=lambda: on_threads(6, lambda k: Entry.objects.create(who=f"w{k}"))
        )
        writers.start()
        # the writers queue behind the held gate (in this process's line)
        shared = litegate._gate._REGISTRY[os.path.abspath(db_path())]
        wait_until(lambda: shared.waiting == 6, what="6 writers to queue")
        assert Entry.objects.count() == 0  # nothing committed yet (the holder is still inside)
    writers.join()
    assert Entry.objects.count() == 7
    assert gate is None or gate is shared


def test_errors_and_close_give_the_gate_back() -> None:
    def raise_inside() -> None:
        with transaction.atomic():
            Entry.objects.create(who="rolled back")
            raise ZeroDivisionError

    def violate_inside() -> None:
        with transaction.atomic():
            Counter.objects.create(name="dup")
            Counter.objects.create(name="dup")

    with pytest.raises(ZeroDivisionError):
        raise_inside()
    assert not connection.litegate_held
    with pytest.raises(IntegrityError):
        violate_inside()
    assert not connection.litegate_held
    assert Entry.objects.count() == Counter.objects.count() == 0
    # close() inside atomic() (in a thread of its own): the gate goes with the
    # connection, and another thread writes at once
    held_then: list[bool] = []

    def close_inside(_k: int) -> None:
        transaction.atomic().__enter__()  # never exited: the thread just ends
        Entry.objects.create(who="lost with the connection")
        held_then.append(connection.litegate_held)
        connection.close()
        held_then.append(connection.litegate_held)

    assert on_threads(1, close_inside) == []
    assert held_then == [True, False]
    Entry.objects.create(who="after")
    assert list(Entry.objects.values_list("who", flat=True)) == ["after"]


def test_gate_timeout_is_djangos_operational_error_and_litegates() -> None:
    caught: list[BaseException] = []

    def impatient(_k: int) -> None:
        connection.ensure_connection()
        connection.litegate_timeout = 0.2  # (OPTIONS["timeout"] sets it per connection)
        try:
            with transaction.atomic():
                Entry.objects.create(who="late")
        except OperationalError as exc:
            caught.append(exc)

    with another_thread_in_atomic():
        assert on_threads(1, impatient) == []
    (exc,) = caught
    assert isinstance(exc, GateTimeout)
    assert isinstance(exc, litegate.WriteTimeout)
    assert "no write gate within 0.2 s" in str(exc)
    assert list(Entry.objects.values_list("who", flat=True)) == ["holder"]


def test_two_aliases_on_one_file_refuse_to_wait_for_themselves() -> None:
    with transaction.atomic(using="default"):
        Entry.objects.using("default").create(who="a")
        with pytest.raises(litegate.NestedWriteError):
            Entry.objects.using("other").create(who="b")
    assert list(Entry.objects.values_list("who", flat=True)) == ["a"]
    connections["other"].close()


@pytest.mark.slow
def test_processes_x_threads_read_then_write() -> None:
    """4 processes x 4 threads of atomic() read-then-write: zero errors,
    exact count."""
    Counter.objects.create(name="c")
    connections.close_all()
    ctx = mp.get_context("spawn")
    with ctx.Pool(4) as pool:
        results = pool.starmap(procs.read_then_write, [(db_path(), "litegate.django", 4, 1.5)] * 4)
    done = sum(r[0] for r in results)
    assert sum(r[1] for r in results) == 0
    assert done > 0
    assert Counter.objects.get(name="c").n == done


def test_sigkill_inside_atomic_holding_the_gate() -> None:
    connections.close_all()
    ctx = mp.get_context("spawn")
    holding = ctx.Event()
    p = ctx.Process(target=procs.hold_in_atomic, args=(db_path(), "litegate.django", holding))
    p.start()
    assert holding.wait(60)
    t0 = time.monotonic()
    os.kill(p.pid, signal.SIGKILL)  # type: ignore[arg-type]
    p.join(10)
    Entry.objects.create(who="after")  # the gate came back with the process's death
    assert time.monotonic() - t0 < 10
    assert list(Entry.objects.values_list("who", flat=True)) == ["after"]
    with closing(sqlite3.connect(db_path())) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_read_only_scope_takes_no_gate_and_refuses_writes() -> None:
    from litegate.django import ReadOnlyScopeError, read_only

    Entry.objects.create(who="before")
    seen: list[int] = []

    def reader(_k: int) -> None:
        connection.ensure_connection()
        connection.litegate_timeout = 0.2  # would time out if it waited for the gate
        with read_only():
            seen.append(Entry.objects.count())
        with pytest.raises(ReadOnlyScopeError) as info, read_only():
            Entry.objects.create(who="refused")
        assert isinstance(info.value, litegate.Error)
        assert isinstance(info.value, OperationalError)
        assert "nothing was changed" in str(info.value)

    with another_thread_in_atomic():  # the gate is held the whole time
        assert on_threads(1, reader) == []
    assert seen == [1]
    assert sorted(Entry.objects.values_list("who", flat=True)) == ["before", "holder"]
    with transaction.atomic(), pytest.raises(TransactionManagementError), read_only():
        pass  # pragma: no cover - read_only() must be outermost


def test_forked_children_drop_the_parents_connection() -> None:
    """A fork while this process's connection (and the file's gate and
    checkpointer) are open, as under gunicorn --preload: each child starts
    with none of them, opens its own, and children and parent write with no
    errors and nothing lost."""
    Counter.objects.create(name="c")
    mine = connection.connection
    assert mine is not None
    assert connection.litegate_gate is not None
    ctx = mp.get_context("fork")
    with warnings.catch_warnings():
        # Python >= 3.12 warns about fork() with threads running (the
        # checkpointer's): that hazard is what the after-fork hooks handle.
        warnings.simplefilter("ignore", DeprecationWarning)
        with ctx.Pool(3) as pool:
            results = pool.starmap(procs.forked_read_then_write, [(3, 1.0)] * 3)
    assert [r[0] for r in results] == [True, True, True]
    assert sum(r[2] for r in results) == 0
    done = sum(r[1] for r in results)
    with transaction.atomic():  # the parent's own connection still works
        Counter.objects.filter(name="c").update(n=models.F("n") + 1)
    assert connection.connection is mine
    assert Counter.objects.get(name="c").n == done + 1


@pytest.mark.slow
def test_gunicorn_preload_workers_share_the_gate(tmp_path: Any) -> None:
    """A real gunicorn --preload, 3 workers x 2 threads, whose master opened
    a connection before forking: 120 requests of atomic() read-then-write,
    every one answered 200, the count exact."""
    pytest.importorskip("gunicorn", reason="pip install -e '.[dev]'")
    Counter.objects.create(name="c")
    connections.close_all()
    sock = str(tmp_path / "g.sock")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    env = {
        **os.environ,
        "LITEGATE_DJANGO_DB": db_path(),
        "PYTHONPATH": os.pathsep.join([root, os.path.join(root, "src")]),
        # a shutdown that hangs shows every thread's stack (see _stop_gunicorn)
        "PYTHONFAULTHANDLER": "1",
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "--preload", "--workers", "3", "--threads", "2",
         "--bind", f"unix:{sock}", "--log-level", "warning",
         "tests.litegate.django.wsgiapp:application"],
        cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        # the socket file appears at bind(), a moment before listen(): wait until it answers
        wait_until(lambda: _accepts(sock) or server.poll() is not None, 30, "gunicorn")
        assert server.poll() is None, server.stdout.read() if server.stdout else ""
        answers: list[tuple[int, str]] = []
        lock = threading.Lock()

        def client(_k: int) -> None:
            for _ in range(20):
                conn = _UnixHTTPConnection(sock)
                conn.request("POST", "/")
                resp = conn.getresponse()
                with lock:
                    answers.append((resp.status, resp.read().decode()))
                conn.close()

        assert on_threads(6, client) == []
    finally:
        out = _stop_gunicorn(server)
    assert [status for status, _ in answers] == [200] * 120, out
    assert sorted(int(body.split()[1]) for _, body in answers) == list(range(1, 121))
    assert len({body.split()[0] for _, body in answers}) >= 2  # several workers served
    assert Counter.objects.get(name="c").n == 120
    assert server.returncode == 0, out


def _stop_gunicorn(server: subprocess.Popen[str]) -> str:
    """SIGTERM, then gunicorn's own 30 s graceful timeout. A server still up
    after 45 s is a shutdown that hangs: SIGABRT to its workers and itself
    makes faulthandler print every thread's stack, and the test fails with them."""
    server.send_signal(signal.SIGTERM)
    try:
        out, _ = server.communicate(timeout=45)
        return out
    except subprocess.TimeoutExpired:
        try:
            with open(f"/proc/{server.pid}/task/{server.pid}/children") as f:
                workers = [int(p) for p in f.read().split()]
        except OSError:
            workers = []
        for pid in [*workers, server.pid]:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGABRT)
        try:
            out, _ = server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            out, _ = server.communicate()
        pytest.fail(f"gunicorn did not stop within 45 s of SIGTERM; stacks:\n{out}")


def _accepts(path: str) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
    except OSError:
        return False
    finally:
        s.close()
    return True


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=30)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(30)
        s.connect(self._path)
        self.sock = s


# -- settings litegate.django cannot use -------------------


def wrapper_for(name: str, options: object) -> Any:
    """A litegate.django connection of its own (alias "misuse"), not in
    Django's settings."""
    from django.db.utils import ConnectionHandler

    handler = ConnectionHandler(
        {
            "default": {"ENGINE": "django.db.backends.dummy"},  # never opened
            "misuse": {"ENGINE": "litegate.django", "NAME": name, "OPTIONS": options},
        }
    )
    return handler["misuse"]


def test_an_unknown_options_key_is_a_typed_error_naming_the_allowed_ones(tmp_path: Any) -> None:
    """It reached sqlite3.connect(): TypeError: 'timout' is an invalid
    keyword argument."""
    from django.core.exceptions import ImproperlyConfigured

    from litegate.django import SettingsError

    path = str(tmp_path / "x.db")
    conn = wrapper_for(path, {"timout": 5, "bogus": 1})
    with pytest.raises(SettingsError) as info:
        conn.ensure_connection()
    assert isinstance(info.value, ImproperlyConfigured)
    assert isinstance(info.value, litegate.ConfigError)
    message = str(info.value)
    assert "settings.DATABASES['misuse']['OPTIONS'] has unknown key(s)" in message
    assert "'timout' (did you mean 'timeout'?), 'bogus'" in message
    assert "takes profile, pragmas," in message
    assert not os.path.exists(path)  # refused before anything was opened
    for key in ("database", "autocommit"):
        with pytest.raises(SettingsError, match=rf"\[{key!r}\] is not allowed"):
            wrapper_for(path, {key: True}).ensure_connection()
    with pytest.raises(SettingsError, match="must be a dict"):
        wrapper_for(path, [("timeout", 5)]).ensure_connection()


def test_the_allowed_options_still_work(tmp_path: Any) -> None:
    path = str(tmp_path / "x.db")
    options: dict[str, Any] = {
        "profile": "default",
        "pragmas": {"cache_size": -1000},
        "timeout": 5,
        "cached_statements": 16,
        "detect_types": 0,
    }
    if hasattr(connection, "transaction_modes"):  # Django >= 5.1
        options.update(transaction_mode="IMMEDIATE", init_command="PRAGMA temp_store = MEMORY")
    conn = wrapper_for(path, options)
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE t (x)")
            cur.execute("INSERT INTO t VALUES (1)")
            cur.execute("PRAGMA cache_size")
            assert cur.fetchone() == (-1000,)
    finally:
        conn.close()
    with closing(sqlite3.connect(path)) as check:
        assert check.execute("SELECT x FROM t").fetchall() == [(1,)]


def test_a_missing_directory_is_litegates_open_error_and_djangos(tmp_path: Any) -> None:
    """It was Django's "unable to open database file"."""
    from litegate.django import DatabaseOpenError

    missing = str(tmp_path / "nope" / "x.db")
    with pytest.raises(DatabaseOpenError) as info:
        wrapper_for(missing, {}).ensure_connection()
    assert isinstance(info.value, OperationalError)
    assert isinstance(info.value, litegate.OpenError)
    assert "database 'misuse': directory" in str(info.value)
    assert "does not exist; create it first" in str(info.value)
    folder = tmp_path / "folder"
    folder.mkdir()
    with pytest.raises(DatabaseOpenError, match="is a directory; pass the path of a database"):
        wrapper_for(str(folder), {}).ensure_connection()
    path = str(tmp_path / "x.db")
    os.mkdir(path + "-litegate")
    conn = wrapper_for(path, {})
    with pytest.raises(DatabaseOpenError, match="-litegate' is a directory"):
        conn.ensure_connection()
    assert conn.connection is None  # nothing left open


def test_options_fair_sets_the_write_gates_policy(tmp_path: Any) -> None:
    """OPTIONS["fair"] takes what connect(fair=...) takes; the grant log
    records each grant's budget: strict (0, 0), bounded (16, 2 ms)."""
    from litegate import _grantlog
    from litegate.django import SettingsError

    for fair, budget in (
        ("strict", (0, 0)),
        (True, (16, 2000)),
        (litegate.Bounded(4, 0.5), (4, 500000)),
    ):
        folder = str(tmp_path / f"grants-{fair}")
        path = str(tmp_path / f"{fair}.db")
        with _grantlog.logging_to(folder):
            conn = wrapper_for(path, {"fair": fair})
            try:
                with conn.cursor() as cur:
                    cur.execute("CREATE TABLE t (x)")
                    cur.execute("INSERT INTO t VALUES (1)")
            finally:
                conn.close()
        grants = _grantlog.read(folder)
        assert len(grants) == 2, fair  # one per autocommit write
        assert {(g.overtakes, g.budget_us) for g in grants} == {budget}, fair
    path = str(tmp_path / "bad.db")
    with pytest.raises(SettingsError) as info:
        wrapper_for(path, {"fair": "fifo"}).ensure_connection()
    message = str(info.value)
    assert message.startswith("settings.DATABASES['misuse']['OPTIONS']['fair']: fair must be True")
    assert "'strict', False or litegate.Bounded(overtakes, seconds), got 'fifo'" in message
    assert not os.path.exists(path)  # refused before anything was opened


# -- PRAGMAs that break the file for everyone else ------------------------------

REFUSED_PRAGMAS = [
    ("PRAGMA journal_mode = DELETE", "PRAGMA journal_mode = 'DELETE'"),
    ("pragma main.journal_mode='truncate'", "PRAGMA journal_mode = 'truncate'"),
    ("/* c */ PRAGMA journal_mode(persist)", "PRAGMA journal_mode = 'persist'"),
    ("PRAGMA locking_mode = EXCLUSIVE", "PRAGMA locking_mode = 'EXCLUSIVE'"),
    ("PRAGMA query_only = 1", "PRAGMA query_only = '1'"),
    ("PRAGMA writable_schema = ON", "PRAGMA writable_schema = 'ON'"),
    ("PRAGMA schema_version = 7", "PRAGMA schema_version = '7'"),
]


def test_pragmas_the_core_refuses_are_refused_through_a_django_cursor() -> None:
    """journal_mode=DELETE through connection.cursor() left the file out of
    WAL, and locking_mode=EXCLUSIVE kept every other connection out: both
    were accepted. Now each PRAGMA the core refuses on its writer is refused
    before it runs, with litegate.ConfigError (not a sqlite3 error, so
    Django's error wrapper lets it through as it is), in autocommit mode and
    inside atomic(), whose transaction goes on."""
    for sql, named in REFUSED_PRAGMAS:
        for many in (False, True):
            message = _refusal(sql, many)
            assert message.startswith(f"database 'default': {named}: "), message
            assert message.endswith(". Refused before it ran, nothing was changed: remove it")
        with transaction.atomic():
            Entry.objects.create(who=f"before {sql}")
            with pytest.raises(litegate.ConfigError), connection.cursor() as cur:
                cur.execute(sql)
            Entry.objects.create(who=f"after {sql}")
    assert Entry.objects.count() == 2 * len(REFUSED_PRAGMAS)
    assert "litegate.django.read_only()" in _refusal("PRAGMA query_only = 1")
    # Reading them, and the values litegate itself uses, are fine.
    with connection.cursor() as cur:
        for sql, want in [
            ("PRAGMA journal_mode", "wal"),
            ("PRAGMA journal_mode = WAL", "wal"),
            ("PRAGMA locking_mode = NORMAL", "normal"),
            ("PRAGMA query_only = 0", None),
            ("PRAGMA writable_schema = OFF", None),
            ("PRAGMA schema_version", None),
        ]:
            cur.execute(sql)
            row = cur.fetchone()
            if want is not None:
                assert row == (want,), sql
    # The file is still WAL and open to everyone: another connection writes.
    with closing(sqlite3.connect(db_path(), timeout=5)) as other:
        assert other.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        with other:
            other.execute("INSERT INTO testapp_entry (who) VALUES ('other connection')")
    assert Entry.objects.count() == 2 * len(REFUSED_PRAGMAS) + 1


def _refusal(sql: str, many: bool = False) -> str:
    """The message of the ConfigError that running ``sql`` raises."""
    from django.db import DatabaseError

    with connection.cursor() as cur:
        run = partial(cur.executemany, sql, []) if many else partial(cur.execute, sql)
        with pytest.raises(litegate.ConfigError) as info:
            run()
    assert not isinstance(info.value, DatabaseError)
    return str(info.value)


@pytest.mark.skipif(
    not hasattr(connection, "transaction_modes"), reason="OPTIONS['init_command']: Django >= 5.1"
)
def test_a_refused_pragma_in_init_command_is_a_settings_error(tmp_path: Any) -> None:
    """Django runs OPTIONS["init_command"] as it connects: the same PRAGMAs
    are refused there, as a SettingsError naming the option; the connection
    is not left open."""
    from litegate.django import SettingsError

    path = str(tmp_path / "x.db")
    command = "PRAGMA temp_store = MEMORY; PRAGMA locking_mode = EXCLUSIVE"
    conn = wrapper_for(path, {"init_command": command})
    with pytest.raises(SettingsError) as info:
        conn.ensure_connection()
    assert str(info.value).startswith(
        "settings.DATABASES['misuse']['OPTIONS']['init_command']: PRAGMA locking_mode = "
        "'EXCLUSIVE': EXCLUSIVE locking keeps every other connection"
    )
    assert conn.connection is None
    with closing(sqlite3.connect(path, timeout=1)) as other, other:
        other.execute("CREATE TABLE t (x)")  # not locked out


# -- the gate follows every transaction, however it was begun --------------------


def other_writer(db: litegate.Database) -> str:
    """What a writer in another thread (a Database of its own, 0.3 s to
    wait) gets right now: "wrote", or its WriteTimeout's message."""
    out: list[str] = []

    def write() -> None:
        try:
            db.execute("INSERT INTO testapp_entry (who) VALUES ('other writer')")
            out.append("wrote")
        except litegate.WriteTimeout as exc:
            out.append(str(exc))

    t = threading.Thread(target=write)
    t.start()
    t.join(30)
    return out[0]


WAITED_FOR_THE_GATE = "no write gate within"
OUTSIDE = "by a writer outside litegate"


@pytest.fixture
def other_db() -> Iterator[litegate.Database]:
    db = litegate.connect(db_path(), timeout=0.3)
    yield db
    db.close()


def test_a_write_in_a_transaction_without_the_gate_takes_it_until_the_end(
    other_db: litegate.Database,
) -> None:
    """Django's manual transactions (set_autocommit(False), AUTOCOMMIT
    False), BEGIN sent as SQL and transaction_mode="DEFERRED" open a
    transaction without the gate. Their first write took the gate for that
    statement only and gave it back with SQLite's write lock still held, so
    the next writer of the file waited on SQLite ("a writer outside
    litegate", or "database is locked") instead of the gate. Now the write
    keeps the gate until the transaction ends, and the end gives it back."""
    # Django's manual transactions
    transaction.set_autocommit(False)
    try:
        Entry.objects.create(who="manual")
        assert connection.litegate_held
        assert WAITED_FOR_THE_GATE in other_writer(other_db)
        transaction.commit()
        assert not connection.litegate_held
        assert other_writer(other_db) == "wrote"
        Entry.objects.create(who="manual, then back to autocommit")
        assert connection.litegate_held
    finally:
        transaction.set_autocommit(True)  # sqlite3 commits what is open
    assert not connection.litegate_held
    assert other_writer(other_db) == "wrote"
    # BEGIN sent as SQL: DEFERRED takes the gate at its first write,
    # IMMEDIATE / EXCLUSIVE at BEGIN; COMMIT / ROLLBACK / END give it back
    for begin, end in [
        ("BEGIN", "COMMIT"),
        ("BEGIN IMMEDIATE", "ROLLBACK"),
        ("BEGIN EXCLUSIVE", "END"),
    ]:
        with connection.cursor() as cur:
            cur.execute(begin)
            assert connection.litegate_held == (begin != "BEGIN")
            cur.execute("INSERT INTO testapp_entry (who) VALUES (%s)", [begin])
            assert connection.litegate_held
            assert WAITED_FOR_THE_GATE in other_writer(other_db)
            cur.execute(end)
        assert not connection.litegate_held
        assert other_writer(other_db) == "wrote"
    # PRAGMAs that write the file are writes too
    with connection.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute("PRAGMA user_version = 7")
        assert connection.litegate_held
        assert WAITED_FOR_THE_GATE in other_writer(other_db)
        cur.execute("COMMIT")
    assert not connection.litegate_held
    assert sorted(Entry.objects.values_list("who", flat=True)) == [
        "BEGIN",
        "BEGIN EXCLUSIVE",
        "manual",
        "manual, then back to autocommit",
        *["other writer"] * 5,
    ]


@pytest.mark.skipif(
    not hasattr(connection, "transaction_modes"), reason="transaction_mode: Django >= 5.1"
)
def test_transaction_mode_deferred_takes_the_gate_at_its_first_write(tmp_path: Any) -> None:
    """OPTIONS["transaction_mode"] = "DEFERRED": atomic() takes no gate at
    BEGIN (a block that only reads never waits for writers), but its first
    write takes it; it ran outside the gate until the commit."""
    path = str(tmp_path / "x.db")
    conn = wrapper_for(path, {"transaction_mode": "DEFERRED"})
    db = litegate.connect(path, timeout=0.3)
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE testapp_entry (who)")
        conn.set_autocommit(False, force_begin_transaction_with_broken_autocommit=True)
        conn.in_atomic_block = True  # what atomic() does for an outermost block
        try:
            assert not conn.litegate_held
            assert other_writer(db) == "wrote"
            with conn.cursor() as cur:
                cur.execute("INSERT INTO testapp_entry (who) VALUES ('deferred')")
                assert conn.litegate_held
                assert WAITED_FOR_THE_GATE in other_writer(db)
            conn.in_atomic_block = False
            conn.commit()
        finally:
            conn.in_atomic_block = False
            conn.set_autocommit(True)
        assert not conn.litegate_held
        assert other_writer(db) == "wrote"
    finally:
        db.close()
        conn.close()


def test_transaction_control_sent_as_sql_inside_atomic_is_refused(
    other_db: litegate.Database,
) -> None:
    """COMMIT inside atomic() committed the block's writes so far, and the
    next write then failed with NestedWriteError ("through another
    connection") while atomic() still held the gate; ROLLBACK threw the
    block's writes away. Now BEGIN, COMMIT, END and ROLLBACK sent as SQL
    inside atomic() are refused before they run (a TransactionControlError:
    Django's TransactionManagementError and litegate.TransactionError), and
    the block commits or rolls back as one. Savepoints stay SQLite's."""
    from django.db.transaction import TransactionManagementError

    from litegate.django import TransactionControlError

    def refused_then_rolled_back(sql: str) -> None:
        with transaction.atomic():
            Entry.objects.create(who="undone")
            with pytest.raises(TransactionControlError) as info, connection.cursor() as cur:
                cur.execute(sql)
            assert isinstance(info.value, TransactionManagementError)
            assert isinstance(info.value, litegate.TransactionError)
            assert "through a cursor inside atomic() on 'default' was refused" in str(info.value)
            Entry.objects.create(who="undone too")
            raise RuntimeError("roll back")

    for sql in ("COMMIT", "end transaction", "ROLLBACK", "/* c */ BEGIN", "-- c\nROLLBACK"):
        with pytest.raises(RuntimeError, match="roll back"):
            refused_then_rolled_back(sql)
        assert Entry.objects.count() == 0
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute("SAVEPOINT mine")
        Entry.objects.create(who="rolled back to the savepoint")
        cur.execute("ROLLBACK TO mine")
        cur.execute("RELEASE mine")
        Entry.objects.create(who="kept")
    assert list(Entry.objects.values_list("who", flat=True)) == ["kept"]
    # atomic() with a transaction begun with SQL still open: refused before
    # its BEGIN IMMEDIATE, which would have taken SQLite's lock for it
    with connection.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute("SELECT 1")
        with pytest.raises(TransactionControlError, match="End it with COMMIT or ROLLBACK"):
            transaction.atomic().__enter__()
        assert not connection.litegate_held
        assert other_writer(other_db) == "wrote"  # the lock was not taken
        cur.execute("ROLLBACK")


def test_closing_with_a_cursor_alive_lets_go_of_sqlites_lock_with_the_gate(
    other_db: litegate.Database,
) -> None:
    """A connection closed inside a transaction while one of its statements
    is live (a cursor with rows not fetched yet, still referenced by a
    variable or an exception's traceback) stays open in SQLite as a zombie,
    transaction and write lock included, until the cursor goes: the gate
    was given back, so the next writer waited for "a writer outside
    litegate". Now the transaction is rolled back before the close."""
    Entry.objects.bulk_create([Entry(who="before"), Entry(who="before")])
    live: list[Any] = []

    def close_inside_atomic() -> None:
        with transaction.atomic():
            Entry.objects.create(who="never committed")
            cur = connection.cursor()
            cur.execute("SELECT who FROM testapp_entry")
            assert cur.fetchone() == ("before",)  # more rows pending: the statement is live
            live.append(cur)
            connection.close()
            raise RuntimeError("leave the block")

    with pytest.raises(RuntimeError, match="leave the block"):
        close_inside_atomic()
    assert other_writer(other_db) == "wrote"
    live.clear()
    assert sorted(Entry.objects.values_list("who", flat=True)) == [
        "before",
        "before",
        "other writer",
    ]


def test_odd_database_settings_are_settings_errors_that_say_what_to_pass(tmp_path: Any) -> None:
    """Found by the misuse suite. Each was untyped, or Django's own error
    without litegate's: NAME None or "" (ImproperlyConfigured; close() then
    raised TypeError), a NUL in NAME (ValueError), cached_statements=None
    and factory=str (TypeError), detect_types=2**70 (OverflowError),
    isolation_level="bogus" (ValueError), init_command=None and
    transaction_mode=5 (AttributeError), SQL in init_command that fails
    (OperationalError), and a write or BEGIN in init_command ran at every
    connect outside the gate. Now each is a SettingsError naming the key;
    nothing is opened for the ones known before connecting."""
    from litegate.django import SettingsError
    from tests.litegate.misuse import says_what_to_do

    path = str(tmp_path / "x.db")
    before_open: list[tuple[object, object, str]] = [
        (None, {}, "['NAME'] must be the path of the database file (a str or pathlib.Path)"),
        ("", {}, "['NAME'] must be the path of the database file"),
        (path + "\0", {}, "['NAME'] contains a NUL character"),
        (path, {"cached_statements": None}, "['cached_statements'] must be a whole number"),
        (path, {"detect_types": 2**70}, "['detect_types'] must be a whole number"),
        (path, {"isolation_level": "bogus"}, "['isolation_level'] must be None, '', 'DEFERRED'"),
        (path, {"factory": str}, "['factory'] must be a subclass of sqlite3.Connection"),
    ]
    at_open: list[tuple[object, object, str]] = []
    if hasattr(connection, "transaction_modes"):  # Django >= 5.1
        before_open += [
            (path, {"transaction_mode": 5}, "['transaction_mode'] must be None, 'DEFERRED'"),
            (path, {"transaction_mode": "bogus"}, "['transaction_mode'] is improperly configured"),
            (path, {"init_command": None}, "['init_command'] must be a string of SQL statements"),
            (path, {"init_command": "INSERT INTO t VALUES (1)"}, "would write or control a "),
            (path, {"init_command": "PRAGMA cache_size = 5; BEGIN IMMEDIATE"}, "in a migration"),
        ]
        at_open.append(
            (path, {"init_command": "SELECT nonsense"}, "'SELECT nonsense' failed: no such")
        )
    for name, options, message in before_open + at_open:
        conn = wrapper_for(name, options)  # type: ignore[arg-type]
        with pytest.raises(SettingsError) as info:
            conn.ensure_connection()
        assert message in str(info.value), (name, options, str(info.value))
        assert says_what_to_do(str(info.value)), str(info.value)
        assert conn.connection is None
        conn.close()  # never raises, whatever NAME is
        if (name, options, message) in before_open:
            assert not os.path.exists(path)
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database, " * 64)
    from litegate.django import DatabaseOpenError

    with pytest.raises(DatabaseOpenError, match="is not a SQLite database or is damaged"):
        wrapper_for(str(garbage), {}).ensure_connection()


@pytest.mark.parametrize(
    ("options", "given"),
    [
        ({"timeout": 0}, {"timeout": 0}),
        ({"timeout": "soon"}, {"timeout": "soon"}),
        ({"pragmas": {"busy_timeout": 0}}, {"pragmas": {"busy_timeout": 0}}),
    ],
)
def test_options_timeout_is_refused_with_connects_words(
    tmp_path: Any, options: dict[str, Any], given: dict[str, Any]
) -> None:
    """OPTIONS["timeout"] (or the profile's busy_timeout) is resolved as
    connect() resolves it: the same error, prefixed with where it was set."""
    from litegate.django import SettingsError

    path = str(tmp_path / "x.db")
    with pytest.raises(litegate.ConfigError) as core:
        litegate.connect(path, **given)
    with pytest.raises(SettingsError) as info:
        wrapper_for(path, options).ensure_connection()
    assert str(info.value) == f"settings.DATABASES['misuse']['OPTIONS']: {core.value}"
    assert not os.path.exists(path)  # refused before anything was opened


@pytest.mark.parametrize(("timeout", "busy_ms"), [(float("inf"), 2**31 - 1), (2.5, 2500)])
def test_options_timeout_is_sqlites_busy_timeout_even_without_a_limit(
    tmp_path: Any, timeout: float, busy_ms: int
) -> None:
    """OPTIONS["timeout"] = inf waits as long as SQLite can for a writer
    outside litegate: sqlite3 would turn inf into a busy timeout of 0 (no
    wait at all), so the longest SQLite takes is passed."""
    wrapper = wrapper_for(str(tmp_path / "x.db"), {"timeout": timeout})
    wrapper.ensure_connection()
    try:
        assert wrapper.connection.execute("PRAGMA busy_timeout").fetchone() == (busy_ms,)
    finally:
        wrapper.close()
