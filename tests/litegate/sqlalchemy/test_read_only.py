"""The read-only scope: no gate, never behind writers, writes refused."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, create_engine, exc, insert, select, text
from sqlalchemy.orm import Session, sessionmaker

import litegate
from litegate.sqlalchemy import ReadOnlyScopeError, read_only
from tests.litegate.sqlalchemy.models import Counter, Entry
from tests.litegate.sqlalchemy.test_gate import held, held_by_another_thread, on_threads, whos


def refused(err: BaseException) -> None:
    assert isinstance(err, ReadOnlyScopeError)
    assert isinstance(err, exc.OperationalError)
    assert isinstance(err, litegate.Error)
    assert "nothing was changed" in str(err)


def test_read_only_engine_option_never_waits_and_refuses_writes(url: str, engine: Engine) -> None:
    # a short gate timeout: it would fail if a read-only transaction waited
    ro = create_engine(url + "?timeout=0.2").execution_options(litegate_read_only=True)
    ReadOnlySession = sessionmaker(ro)
    seen: list[object] = []
    errors: list[BaseException] = []

    def body(_k: int) -> None:
        with ReadOnlySession() as s:
            seen.append(s.get(Counter, 1).n)  # type: ignore[union-attr]
            seen.append(s.scalar(text("WITH x AS (SELECT 2 AS v) SELECT v FROM x")))
            try:
                s.add(Entry(who="refused"))
                s.commit()
            except ReadOnlyScopeError as e:
                errors.append(e)

    with held_by_another_thread(engine):
        assert on_threads(1, body) == []
    ro.engine.dispose()
    assert seen == [0, 2]
    (err,) = errors
    refused(err)
    assert whos(engine) == ["holder"]


def test_read_only_session_connection_and_engine_blocks(engine: Engine) -> None:
    with Session(engine) as s:
        with read_only(s):
            assert s.get(Counter, 1).n == 0  # type: ignore[union-attr]
            assert not held(engine)
        s.add(Entry(who="after the block: a normal transaction"))
        s.commit()
        with pytest.raises(ReadOnlyScopeError) as info, read_only(s):
            s.add(Entry(who="refused"))
        refused(info.value)
    with engine.connect() as conn:
        with read_only(conn):
            assert conn.execute(select(Counter.n)).scalar() == 0
        conn.execute(insert(Entry).values(who="same connection, writes again"))
        conn.commit()
    with read_only(engine) as conn:
        assert conn.execute(select(Entry.who)).scalars().all() != []
        with pytest.raises(ReadOnlyScopeError):
            conn.execute(insert(Entry).values(who="refused"))
    assert whos(engine) == ["after the block: a normal transaction",
                            "same connection, writes again"]  # fmt: skip


def test_read_only_must_open_the_transaction(engine: Engine) -> None:
    with Session(engine) as s:
        s.get(Counter, 1)  # the session's transaction has begun
        with pytest.raises(exc.InvalidRequestError, match="must begin the transaction"):
            read_only(s).__enter__()
    with pytest.raises(TypeError, match="takes a Session, Connection or Engine"):
        read_only("app.db").__enter__()


def test_the_option_is_reset_when_the_connection_goes_back(engine: Engine) -> None:
    """A pooled connection that served a read-only transaction writes again
    for the next user (PRAGMA query_only is turned off on return)."""
    small = create_engine(str(engine.url), pool_size=1, max_overflow=0)
    with small.execution_options(litegate_read_only=True).connect() as conn:
        dbapi = conn.connection.dbapi_connection
        assert conn.exec_driver_sql("PRAGMA query_only").scalar() == 1
    with small.begin() as conn:
        assert conn.connection.dbapi_connection is dbapi
        assert conn.exec_driver_sql("PRAGMA query_only").scalar() == 0
        conn.execute(insert(Entry).values(who="writes again"))
    small.dispose()
    assert whos(engine) == ["writes again"]


def test_an_engine_of_readers_has_its_own_pool(url: str, engine: Engine) -> None:
    readers = create_engine(url + "?timeout=0.2", execution_options={"litegate_read_only": True})
    seen: list[int] = []

    def body(_k: int) -> None:
        with Session(readers) as s:
            seen.append(s.get(Counter, 1).n)  # type: ignore[union-attr]

    with held_by_another_thread(engine):
        assert on_threads(3, body) == []
    readers.dispose()
    assert seen == [0, 0, 0]
