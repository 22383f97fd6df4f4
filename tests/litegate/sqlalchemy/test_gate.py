"""sqlite+litegate's write gate on every path, with real threads."""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event, exc, insert, select, text
from sqlalchemy.orm import Session

import litegate
from litegate._gate import _REGISTRY, FileGate
from litegate.sqlalchemy import GateTimeout
from tests.conftest import collect_dropped, wait_until
from tests.litegate.sqlalchemy.models import Counter, Entry


def gate_of(engine: Engine) -> FileGate:
    return _REGISTRY[os.path.abspath(str(engine.url.database))]


def held(engine: Engine) -> bool:
    """The file's gate is held (the registry's gate: a new one is made when
    every connection had closed)."""
    gate = _REGISTRY.get(os.path.abspath(str(engine.url.database)))
    return gate is not None and gate.held


def on_threads(n: int, body: Callable[[int], None]) -> list[BaseException]:
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            body(k)
        except BaseException as exc:  # collected; the tests assert on them
            errors.append(exc)

    ts = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return errors


@contextmanager
def held_by_another_thread(engine: Engine) -> Iterator[None]:
    """Another thread is inside a transaction that wrote (so holds the gate)
    for the body of the with-block."""
    inside, leave = threading.Event(), threading.Event()

    def holder() -> None:
        with Session(engine) as s, s.begin():
            s.add(Entry(who="holder"))
            s.flush()
            inside.set()
            assert leave.wait(30)

    h = threading.Thread(target=holder)
    h.start()
    assert inside.wait(30)
    try:
        yield
    finally:
        leave.set()
        h.join()


def whos(engine: Engine) -> list[str]:
    with Session(engine) as s:
        return sorted(s.scalars(select(Entry.who)))


def test_a_transaction_takes_the_gate_at_its_first_statement(engine: Engine) -> None:
    with engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA foreign_keys = ON")  # before BEGIN: takes effect
        assert not held(engine)
        assert conn.exec_driver_sql("SELECT n FROM counter").scalar() == 0  # BEGIN IMMEDIATE
        assert held(engine)
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        conn.commit()
        assert not held(engine)
        conn.exec_driver_sql("SELECT 1")  # the next transaction
        assert held(engine)
    assert not held(engine)  # close() rolled it back


def test_autocommit_writes_queue_for_a_transaction_and_reads_do_not(engine: Engine) -> None:
    auto = engine.execution_options(isolation_level="AUTOCOMMIT")
    with held_by_another_thread(engine):
        with auto.connect() as conn:  # reads outside a transaction never wait
            assert conn.execute(select(Entry.who)).all() == []
        writers = threading.Thread(
            target=lambda: on_threads(
                5, lambda k: auto.connect().execute(insert(Entry).values(who=f"w{k}")).close()
            )
        )
        writers.start()
        wait_until(lambda: gate_of(engine).waiting == 5, what="5 autocommit writers to queue")
        assert whos(auto) == []
    writers.join()
    assert whos(engine) == ["holder", "w0", "w1", "w2", "w3", "w4"]
    assert not held(engine)


def test_every_path_gives_the_gate_back(engine: Engine) -> None:
    def fail_inside() -> None:
        with engine.begin() as conn:
            conn.execute(insert(Entry).values(who="rolled back"))
            raise ZeroDivisionError

    def violate_inside() -> None:
        with Session(engine) as s, s.begin():
            s.add_all([Counter(id=2), Counter(id=2)])

    with pytest.raises(ZeroDivisionError):  # an exception inside the block: rollback
        fail_inside()
    assert not held(engine)
    with pytest.raises(exc.IntegrityError):  # a constraint violation
        violate_inside()
    assert not held(engine)
    # close() inside a transaction
    conn = engine.connect()
    conn.execute(insert(Entry).values(who="closed"))
    assert held(engine)
    conn.close()
    assert not held(engine)
    # invalidated inside a transaction
    conn = engine.connect()
    conn.execute(insert(Entry).values(who="invalidated"))
    conn.invalidate()
    assert not held(engine)
    conn.close()
    # returned to the pool without commit: the pool's reset
    raw = engine.raw_connection()
    raw.cursor().execute("INSERT INTO entry (who) VALUES ('raw, reset')")
    assert held(engine)
    raw.close()
    assert not held(engine)

    # dropped without close(): garbage collection
    def drop() -> None:
        c = engine.connect()
        c.execute(insert(Entry).values(who="dropped"))
        assert held(engine)

    drop()
    collect_dropped()
    assert not held(engine)
    assert whos(engine) == []
    with engine.begin() as conn:
        conn.execute(insert(Entry).values(who="after"))
    assert whos(engine) == ["after"]


def test_a_connection_collected_without_close_gives_its_gate_use_back(url: str) -> None:
    """A connection its user dropped in a reference cycle comes back to the
    pool from the garbage collector, after Engine.dispose() replaced that
    pool: it stays idle there (QueuePool's way) until the old pool is itself
    collected, and then the file's gate gets its use back (the gate and its
    threads would otherwise stay for the rest of the process)."""
    eng = create_engine(url)
    path = os.path.abspath(str(eng.url.database))
    kept = eng.connect()
    dropped = eng.connect()
    dropped.execute(text("SELECT 1"))  # its transaction points back at it: a cycle
    del dropped
    gate = _REGISTRY[path]
    assert gate._users == 2
    gc.disable()  # (so the cycles go only when this test collects them)
    try:
        eng.dispose()
        collect_dropped()  # the dropped connection comes back, idle in the old pool
        assert gate._users == 2
        kept.close()  # idle in the old pool too
        assert gate._users == 2
        del kept
        collect_dropped()  # the old pool, and both connections in it
    finally:
        gc.enable()
    wait_until(lambda: path not in _REGISTRY, what="the gate's last use to be given back")
    assert gate._users == 0
    assert gate._ckpt is None  # its checkpointer stopped
    with eng.connect() as conn:  # the engine's new pool works
        conn.execute(text("SELECT 1"))
    eng.dispose()


def test_gate_timeout_is_sqlalchemys_operational_error_and_litegates(
    url: str, engine: Engine
) -> None:
    impatient = create_engine(url + "?timeout=0.2")
    caught: list[BaseException] = []

    def body(_k: int) -> None:
        try:
            with Session(impatient) as s, s.begin():
                s.add(Entry(who="late"))
        except exc.OperationalError as e:
            caught.append(e)

    with held_by_another_thread(engine):
        assert on_threads(1, body) == []
    impatient.dispose()
    (err,) = caught
    assert isinstance(err, GateTimeout)
    assert isinstance(err, litegate.WriteTimeout)
    assert "no write gate on" in str(err)
    assert "within 0.2 s" in str(err)
    assert whos(engine) == ["holder"]


def test_nested_transactions_of_one_thread_read_and_refuse_writes(engine: Engine) -> None:
    """A thread whose transaction holds the gate opens another on the same
    file: waiting would wait for itself, so the second one reads a snapshot
    and refuses writes at once."""
    with engine.begin() as outer:
        outer.execute(insert(Entry).values(who="outer"))
        with engine.connect() as inner:
            assert inner.execute(select(Counter.n)).scalar() == 0
            with pytest.raises(litegate.NestedWriteError, match="can only read"):
                inner.execute(insert(Entry).values(who="inner"))
        auto = engine.execution_options(isolation_level="AUTOCOMMIT")
        with auto.connect() as inner, pytest.raises(litegate.NestedWriteError):
            inner.execute(insert(Entry).values(who="inner, autocommit"))
    assert whos(engine) == ["outer"]
    with engine.connect() as conn:  # the same connections, back to normal
        conn.execute(insert(Entry).values(who="later"))
        conn.commit()
    assert whos(engine) == ["later", "outer"]


def test_litegate_database_and_sqlalchemy_share_the_files_gate(engine: Engine) -> None:
    db = litegate.connect(str(engine.url.database), timeout=5)
    quick = create_engine(str(engine.url) + "?timeout=0.2")

    def too_early(_k: int) -> None:
        with quick.begin() as c:
            c.execute(insert(Entry).values(who="sqlalchemy, too early"))

    try:
        with db.write() as conn:
            conn.execute("INSERT INTO entry (who) VALUES ('litegate')")
            (err,) = on_threads(1, too_early)
            assert isinstance(err, GateTimeout)
        with engine.begin() as c:
            c.execute(insert(Entry).values(who="sqlalchemy"))
    finally:
        db.close()
        quick.dispose()
    assert whos(engine) == ["litegate", "sqlalchemy"]


def test_raw_dbapi_writes_take_the_gate(engine: Engine) -> None:
    raw = engine.raw_connection()
    try:
        with held_by_another_thread(engine):
            done = threading.Event()

            def write() -> None:
                cur = raw.cursor()
                cur.execute("INSERT INTO entry (who) VALUES ('raw')")
                raw.commit()
                done.set()

            t = threading.Thread(target=write)
            t.start()
            wait_until(lambda: gate_of(engine).waiting == 1, what="the raw write to queue")
            assert not done.is_set()
        t.join()
    finally:
        raw.close()
    assert whos(engine) == ["holder", "raw"]


def test_savepoints_work(engine: Engine) -> None:
    def fail_in_savepoint(s: Session) -> None:
        with s.begin_nested():
            s.add(Entry(who="rolled back to the savepoint"))
            s.flush()
            raise ZeroDivisionError

    with Session(engine) as s, s.begin():
        s.add(Entry(who="kept"))
        with pytest.raises(ZeroDivisionError):
            fail_in_savepoint(s)
        s.add(Entry(who="kept too"))
    assert whos(engine) == ["kept", "kept too"]


def test_pragmas_profile_and_timeout_from_the_url_and_connect_args(tmp_path: Path) -> None:
    path = tmp_path / "p.db"

    def pragma(engine: Engine, name: str) -> object:
        with engine.connect() as conn:
            value = conn.exec_driver_sql(f"PRAGMA {name}").scalar()
        engine.dispose()
        return value

    assert pragma(create_engine(f"sqlite+litegate:///{path}?profile=default"), "foreign_keys") == 1
    url = f"sqlite+litegate:///{path}?pragmas=synchronous=FULL,cache_size=-4000"
    assert pragma(create_engine(url), "synchronous") == 2
    assert pragma(create_engine(url), "cache_size") == -4000
    eng = create_engine(f"sqlite+litegate:///{path}",
                        connect_args={"profile": "conservative", "pragmas": {"cache_size": -3000},
                                      "timeout": 7})  # fmt: skip
    assert pragma(eng, "synchronous") == 2  # conservative
    assert pragma(eng, "cache_size") == -3000
    assert pragma(eng, "busy_timeout") == 7000


@pytest.mark.parametrize(
    ("url", "connect_args", "message"),
    [
        ("?profile=fast", {}, "unknown profile 'fast'"),
        ("?pragmas=synchronous", {}, "must be NAME=VALUE items"),
        ("?pragmas=synchronous=FULL;DROP", {}, "bad value"),
        ("?timeout=0", {}, "timeout must be greater than zero"),
        ("", {"pragmas": ["synchronous"]}, "pragmas must be a mapping"),
        ("", {"timeout": "soon"}, "timeout must be a number"),
        ("?fair=fifo", {}, r"fair must be True .* got 'fifo' \(in a URL: \?fair=true"),
        ("", {"fair": 2}, "fair must be True"),
    ],
)
def test_bad_settings_are_typed_errors(tmp_path: Path, url: str, connect_args: dict[str, object],
                                       message: str) -> None:  # fmt: skip
    from litegate.sqlalchemy import ConfigError

    def open_one() -> None:
        engine = create_engine(f"sqlite+litegate:///{tmp_path / 'x.db'}{url}",
                               connect_args=connect_args)  # fmt: skip
        try:
            engine.connect().close()
        finally:
            engine.dispose()

    with pytest.raises(ConfigError, match=message) as info:
        open_one()
    assert isinstance(info.value, exc.ArgumentError)
    assert isinstance(info.value, litegate.ConfigError)


def test_creator_must_give_litegates_connections(tmp_path: Path) -> None:
    import sqlite3

    from litegate.sqlalchemy import ConfigError, connect

    path = str(tmp_path / "c.db")
    plain = create_engine("sqlite+litegate://", creator=lambda: sqlite3.connect(path))
    with pytest.raises(ConfigError, match=r"litegate.sqlalchemy.connect\(path"):
        plain.connect()
    plain.dispose()
    ours = create_engine("sqlite+litegate://", creator=lambda: connect(path, timeout=3))
    with ours.begin() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    ours.dispose()


def test_in_memory_database_works_without_a_gate() -> None:
    engine = create_engine("sqlite+litegate://")
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (x)")
        conn.exec_driver_sql("INSERT INTO t VALUES (1)")
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT x FROM t").scalar() == 1
        assert conn.connection.dbapi_connection.litegate_gate is None  # type: ignore[union-attr]
    engine.dispose()


def test_connect_events_and_statements_see_the_stock_dialect(engine: Engine) -> None:
    seen: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda *a: seen.append(a[2]))
    with engine.begin() as conn:
        conn.execute(text("SELECT 1"))
    assert seen == ["SELECT 1"]  # BEGIN IMMEDIATE is the driver's, not a statement of ours
    assert engine.dialect.name == "sqlite"


def test_a_begin_of_the_callers_own_opens_the_transaction(engine: Engine) -> None:
    """SQLAlchemy's pysqlite recipe (BEGIN from a "begin" event) and raw
    BEGINs keep working: the caller's BEGIN takes the gate."""
    with engine.connect() as conn:
        conn.exec_driver_sql("BEGIN EXCLUSIVE")  # SQLAlchemy's transaction is pending
        assert held(engine)
        conn.execute(insert(Entry).values(who="exclusive"))
        conn.commit()
        assert not held(engine)
    recipe = create_engine(str(engine.url))

    @event.listens_for(recipe, "connect")
    def no_implicit(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None

    @event.listens_for(recipe, "begin")
    def begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN")

    with recipe.begin() as conn:
        assert held(engine)
        conn.execute(insert(Entry).values(who="recipe"))
    assert not held(engine)
    recipe.dispose()
    assert whos(engine) == ["exclusive", "recipe"]


def test_fair_sets_the_write_gates_policy_sync_and_asyncio(tmp_path: Path) -> None:
    """?fair= (or connect_args) is the gate's policy, as connect(fair=...)
    takes it; the grant log records each grant's budget."""
    import asyncio

    from sqlalchemy.ext.asyncio import create_async_engine

    from litegate import _grantlog

    def budgets(name: str, write: Callable[[str], None]) -> set[tuple[int, int]]:
        folder = str(tmp_path / f"grants-{name}")
        with _grantlog.logging_to(folder):
            write(str(tmp_path / f"{name}.db"))
        grants = _grantlog.read(folder)
        assert grants, name
        return {(g.overtakes, g.budget_us) for g in grants}

    def sync(url_tail: str, **connect_args: object) -> Callable[[str], None]:
        def write(path: str) -> None:
            engine = create_engine(
                f"sqlite+litegate:///{path}{url_tail}", connect_args=connect_args
            )
            with engine.begin() as conn:
                conn.exec_driver_sql("CREATE TABLE t (x)")
            engine.dispose()

        return write

    def on_asyncio(path: str) -> None:
        async def main() -> None:
            engine = create_async_engine(f"sqlite+litegate:///{path}?fair=strict")
            async with engine.begin() as conn:
                await conn.exec_driver_sql("CREATE TABLE t (x)")
            await engine.dispose()

        asyncio.run(main())

    assert budgets("url", sync("?fair=strict")) == {(0, 0)}
    assert budgets("default", sync("")) == {(16, 2000)}
    assert budgets("args", sync("", fair=litegate.Bounded(4, 0.5))) == {(4, 500000)}
    assert budgets("asyncio", on_asyncio) == {(0, 0)}
