"""sqlite+litegate with real processes: spawned, forked, SIGKILLed; and 200
asyncio tasks on one loop. The stock drivers' figures on the same workload
are printed beside litegate's (reported, never asserted: they vary)."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sqlite3
import time
import warnings
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, select
from sqlalchemy.orm import Session

from tests.litegate.sqlalchemy import procs
from tests.litegate.sqlalchemy.models import Base, Counter, Entry

PROCS, THREADS, EACH = 4, 4, 60  # 960 transactions: the stock engine loses updates at this size
TASKS, TASK_EACH = 200, 5  # 1,000 transactions on one event loop


def fresh(url: str) -> None:
    engine = create_engine(url)
    Base.metadata.create_all(engine)
    with Session(engine) as s, s.begin():
        s.add(Counter(id=1, n=0))
    engine.dispose()


@contextmanager
def shown(request: pytest.FixtureRequest) -> Iterator[None]:
    """Print straight to the terminal, past pytest's capture."""
    capman = request.config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled():
        yield


def report(request: pytest.FixtureRequest, what: str, committed: int, errors: int,
           count: int, messages: list[str]) -> None:  # fmt: skip
    with shown(request):
        print(f"\n  {what}: {committed} committed, {errors} errors, counter {count} "
              f"({committed - count} updates lost)"
              + (f"; e.g. {messages[0]}" if messages else ""))  # fmt: skip


def run_processes(url: str, threads: int = THREADS) -> tuple[int, int, list[str]]:
    ctx = mp.get_context("spawn")
    with ctx.Pool(PROCS) as pool:
        results = pool.starmap(procs.read_then_write, [(url, threads, EACH)] * PROCS)
    messages = [m for r in results for m in r[2]]
    return sum(r[0] for r in results), sum(r[1] for r in results), messages


@pytest.mark.slow
def test_processes_x_threads_orm_read_then_write(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """4 spawned processes x 4 threads x 60 ORM read-then-write transactions:
    with litegate every one commits and the counter is exact; the stock
    engine's figures on the same workload are reported beside them."""
    url = f"sqlite+litegate:///{tmp_path / 'lg.db'}"
    fresh(url)
    committed, errors, messages = run_processes(url)
    count = procs.counter(url)
    report(request, "sqlite+litegate, 4 processes x 4 threads", committed, errors, count, messages)
    assert (committed, errors) == (PROCS * THREADS * EACH, 0), messages
    assert count == committed

    stock = f"sqlite:///{tmp_path / 'stock.db'}"
    fresh(stock)
    s_committed, s_errors, s_messages = run_processes(stock)
    report(request, "stock sqlite:// (pysqlite), same workload", s_committed, s_errors,
           procs.counter(stock), s_messages)  # fmt: skip


@pytest.mark.slow
def test_asyncio_tasks_on_one_loop(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """200 tasks x 5 ORM read-then-write transactions on one event loop:
    exact with litegate; the stock aiosqlite engine's figures reported."""
    url = f"sqlite+litegate:///{tmp_path / 'lg.db'}"
    fresh(url)
    committed, errors = procs.asyncio_read_then_write(url, TASKS, TASK_EACH)
    count = procs.counter(url)
    report(request, "sqlite+litegate, asyncio, 200 tasks", committed, errors, count, [])
    assert (committed, errors) == (TASKS * TASK_EACH, 0)
    assert count == committed

    pytest.importorskip("aiosqlite", reason="the stock asyncio driver: pip install -e '.[dev]'")
    stock = f"sqlite+aiosqlite:///{tmp_path / 'stock.db'}"
    fresh(stock.replace("+aiosqlite", ""))
    s_committed, s_errors = procs.asyncio_read_then_write(stock, TASKS, TASK_EACH)
    report(request, "stock sqlite+aiosqlite, same workload", s_committed, s_errors,
           procs.counter(stock.replace("+aiosqlite", "")), [])  # fmt: skip


def test_sigkill_inside_a_transaction_holding_the_gate(tmp_path: Path) -> None:
    """A process SIGKILLed inside a transaction that holds the gate: the
    kernel gives the gate back, the others write at once, and its write is
    not there."""
    url = f"sqlite+litegate:///{tmp_path / 'app.db'}"
    fresh(url)
    ctx = mp.get_context("spawn")
    holding = ctx.Event()
    p = ctx.Process(target=procs.hold_in_transaction, args=(url, holding))
    p.start()
    assert holding.wait(60)
    engine = create_engine(url + "?timeout=2")  # would time out if the gate stayed taken
    try:
        with pytest.raises(Exception, match="no write gate"), Session(engine) as s, s.begin():
            s.add(Entry(who="while held"))
        t0 = time.monotonic()
        assert p.pid is not None
        os.kill(p.pid, signal.SIGKILL)
        p.join(10)
        with Session(engine) as s, s.begin():
            s.add(Entry(who="after"))
        assert time.monotonic() - t0 < 10
        with Session(engine) as s:
            assert s.scalars(select(Entry.who)).all() == ["after"]
        procs.on_threads(engine, 4, 10)  # the others go on, in threads too
        assert procs.counter(url) == 40
    finally:
        engine.dispose()
    with closing(sqlite3.connect(tmp_path / "app.db")) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_forked_children_start_with_an_empty_pool(tmp_path: Path) -> None:
    """A fork while the engine has pooled connections open (and the file's
    gate and checkpointer), as under gunicorn --preload: each child starts
    with none of the parent's connections, opens its own, and children and
    parent write with no errors and nothing lost."""
    url = f"sqlite+litegate:///{tmp_path / 'app.db'}"
    fresh(url)
    engine: Engine = create_engine(url)
    held = [engine.connect() for _ in range(3)]  # three connections, then idle in the pool
    for conn in held:
        conn.close()
    procs.increment(engine)
    assert engine.pool.checkedin() == 3  # type: ignore[attr-defined]
    procs.INHERITED["engine"] = engine
    ctx = mp.get_context("fork")
    try:
        with warnings.catch_warnings():
            # Python >= 3.12 warns about fork() with threads running (the
            # checkpointer's): that hazard is what the after-fork hooks handle.
            warnings.simplefilter("ignore", DeprecationWarning)
            with ctx.Pool(3) as pool:
                results = pool.starmap(procs.forked_read_then_write, [(3, 20)] * 3)
        assert [r[0] for r in results] == [0, 0, 0]  # nothing of the parent's pool
        assert [r[2] for r in results] == [0, 0, 0], [r[3] for r in results]
        procs.increment(engine)  # the parent's pool still works, with its own connections
        assert engine.pool.checkedin() == 3  # type: ignore[attr-defined]
        assert procs.counter(url) == 1 + sum(r[1] for r in results) + 1 == 182
    finally:
        procs.INHERITED.clear()
        engine.dispose()
