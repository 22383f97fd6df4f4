"""Combined writes across processes (connect(combine=True)): one process, the
combiner, commits every process's single-statement writes in its own
transactions; each caller gets its own outcome; a batch is applied exactly
once, whatever step the combiner dies at."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import re
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest

import litegate
from litegate import _combine

CRASH_STEPS = ["received", "mid_batch", "committed", "answering"]


@pytest.fixture(autouse=True)
def always_ship(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The protocol's tests: a client ships every write (by default a lone
    write takes a free gate at home while the combiner is quiet; the tests
    of that say so with ``adaptive``)."""
    if "adaptive" not in request.keywords:
        monkeypatch.setattr(_combine, "ALWAYS_SHIP", True)
        monkeypatch.setenv("LITEGATE_COMBINE_QUIET_MS", "inf")  # (spawned clients)


def _combiner(path: str, ready: Any, stop: Any, hold: Any, out: Any, profile: str) -> None:
    """A process that opens the file first, so it combines, and serves until
    told to stop (``hold``: it holds the write gate until ``hold`` clears)."""
    db = litegate.connect(path, combine=True, timeout=30, profile=profile)
    db.execute("INSERT INTO t(v) VALUES ('combiner')")  # its own writes go in too
    ready.put(db.stats()["writes"]["combined"]["this_process_combines"])
    while not stop.wait(0.01):
        if hold.is_set():
            with db.write():
                ready.put("holding")
                while hold.is_set():
                    stop.wait(0.01)
    with db.write() as conn:  # (its writer's own level, after every turn)
        level = conn.execute("PRAGMA synchronous").fetchone()[0]
    out.put({**db.stats()["writes"]["combined"], "synchronous": level})
    db.close()


@contextmanager
def combiner(
    path: str, method: str = "spawn", crash: str = "", profile: str = "default"
) -> Iterator[dict[str, Any]]:
    ctx: Any = mp.get_context(method)
    ready, out = ctx.Queue(), ctx.Queue()
    stop, hold = ctx.Event(), ctx.Event()
    env = os.environ.copy()
    if crash:
        os.environ["LITEGATE_COMBINER_CRASH"] = crash
    try:
        proc = ctx.Process(
            target=_combiner, args=(path, ready, stop, hold, out, profile), daemon=True
        )
        proc.start()
    finally:
        os.environ.clear()
        os.environ.update(env)
    assert ready.get(timeout=60) is True
    handle: dict[str, Any] = {"proc": proc, "hold": hold, "ready": ready}
    try:
        yield handle
    finally:
        # (a process SIGKILLed while it waited on ``stop`` leaves the Event's
        # lock taken for good: a dead combiner's Event is not touched again)
        if proc.is_alive():
            stop.set()
            handle["stats"] = out.get(timeout=30)
        proc.join(30)


@pytest.fixture
def path(db_path: str) -> str:
    with closing(sqlite3.connect(db_path)) as conn, conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT UNIQUE)")
    return db_path


def in_threads(fn: Callable[[int], None], n: int) -> None:
    """``fn(k)`` on ``n`` threads at once, k = 0 .. n - 1; back when all are."""
    threads = [threading.Thread(target=fn, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)


def raw_client(nonce: int, message: Any) -> socket.socket:
    """A socket to the combiner published as ``nonce`` that has sent
    ``message`` (bytes: as they are; else framed as litegate frames it, a
    length and then the marshalled message), for the tests that play a
    client by hand."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(_combine.address(nonce))
    sock.sendall(message if isinstance(message, bytes) else _combine._frame(message))
    return sock


def rows(path: str) -> list[tuple[int, str]]:
    with closing(sqlite3.connect(path)) as conn:
        return [(int(i), str(v)) for i, v in conn.execute("SELECT id, v FROM t ORDER BY id")]


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_writes_of_another_process_commit_in_the_combiners_transactions(
    path: str, method: str
) -> None:
    """Eight threads of this process write through the combiner (another
    process): every call returns its own row's id (RETURNING rows too), a
    statement that fails raises to its caller only, and the others of its
    batch commit."""
    with combiner(path, method) as c:
        db = litegate.connect(path, combine=True, timeout=30)
        got: dict[str, Any] = {}
        errors: list[BaseException] = []

        def writer(k: int) -> None:
            for i in range(40):
                v = f"w{k}-{i}"
                try:
                    if i % 10 == 9:  # a duplicate: fails alone
                        db.execute("INSERT INTO t(v) VALUES (?)", (f"w{k}-{i - 1}",))
                    elif i % 2:
                        got[v] = db.execute("INSERT INTO t(v) VALUES (?) RETURNING id", (v,)).rows
                    else:
                        got[v] = db.execute("INSERT INTO t(v) VALUES (?)", (v,)).lastrowid
                except sqlite3.IntegrityError as exc:
                    errors.append(exc)

        in_threads(writer, 8)
        db.executemany("INSERT INTO t(v) VALUES (?)", [("many-1",), ("many-2",)])
        stats = db.stats()["writes"]["combined"]
        db.close()
    assert len(errors) == 8 * 4
    assert all("UNIQUE" in str(e) for e in errors)
    ids = {v: i for i, v in rows(path)}
    assert len(ids) == 1 + 8 * 36 + 2
    for v, answer in got.items():
        assert answer == ([(ids[v],)] if isinstance(answer, list) else ids[v]), v
    assert stats["this_process_combines"] is False
    assert stats["shipped_batches"] > 0
    assert stats["settled_at_home"] == 0
    # every batch of ours went through the combiner's turns; its own one write,
    # made before anyone else's batch waited in its line, ran at home
    assert c["stats"]["served_batches"] == stats["shipped_batches"]
    assert c["stats"]["served_statements"] == 8 * 40 + 1  # (an executemany is one)
    assert c["stats"]["turns"] <= c["stats"]["served_batches"]


@pytest.mark.parametrize(
    ("theirs", "ours", "in_turn"),
    [("default", "conservative", 2), ("default", "default", 1), ("conservative", "default", 2)],
)
def test_a_turn_commits_as_durably_as_its_most_demanding_process_asks(
    path: str, theirs: str, ours: str, in_turn: int
) -> None:
    """A client on synchronous=FULL (the conservative profile) whose batch
    goes to a combiner on NORMAL: the turn that commits it runs with FULL
    (its COMMIT syncs the WAL), so the write that returns is as durable as
    the client's own settings say; the combiner's writer is back at its own
    level after. (It was committed with the combiner's NORMAL: acknowledged,
    and lost to a power cut.) A NORMAL client's batch in a FULL combiner's
    turn gets FULL, as everything that combiner commits."""
    with combiner(path, profile=theirs) as c:
        db = litegate.connect(path, combine=True, timeout=30, profile=ours)
        seen = db.execute("PRAGMA synchronous").rows  # (read in the turn that runs it)
        db.execute("INSERT INTO t(v) VALUES ('x')")
        stats = db.stats()["writes"]["combined"]
        db.close()
    assert seen == [(in_turn,)]
    assert stats["shipped_batches"] == c["stats"]["served_batches"] == 2
    assert c["stats"]["synchronous"] == (2 if theirs == "conservative" else 1)
    assert [v for _, v in rows(path)] == ["combiner", "x"]


@pytest.mark.parametrize("profile", ["default", "conservative"])
def test_a_turn_raises_the_sync_level_for_itself_and_gives_it_back(path: str, profile: str) -> None:
    """GroupCommit.in_turn(sync_level=2) on a writer with less (NORMAL): the
    transaction runs with FULL and the writer is back at NORMAL before the
    gate goes, also when the turn fails; a writer with as much already
    (FULL) runs as it is."""
    db = litegate.connect(path, profile=profile)
    batcher = db._process_state().batcher
    own = 2 if profile == "conservative" else 1

    def synchronous(conn: Any) -> int:
        return int(conn.execute("PRAGMA synchronous").fetchone()[0])

    def fails(conn: Any) -> None:
        conn.execute("INSERT INTO t(v) VALUES ('x')")
        raise ZeroDivisionError

    try:
        assert batcher.sync_level == own
        assert batcher.in_turn(synchronous, None, sync_level=2) == 2
        with db.write() as conn:
            assert synchronous(conn) == own
        with pytest.raises(ZeroDivisionError):
            batcher.in_turn(fails, None, sync_level=2)
        with db.write() as conn:
            assert synchronous(conn) == own
        assert batcher.in_turn(synchronous, None, sync_level=1) == own  # (never lowered)
    finally:
        db.close()
    assert rows(path) == []


def test_a_lone_threads_writes_ship_without_the_group_commits_queue(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client process's thread writing alone ships each write at once, as
    a batch of one (no request queued, no leader's hand-off): its own
    outcome (rowid, RETURNING rows, a failing statement's own typed error),
    and the lead given back every time, error or not, so that the next
    write, of this thread or another, does not wait for it."""
    from litegate._batch import GroupCommit

    queued: list[int] = []
    real_run = GroupCommit.run

    def run(self: GroupCommit, req: Any, timeout: float) -> Any:
        queued.append(1)
        return real_run(self, req, timeout)

    monkeypatch.setattr(GroupCommit, "run", run)
    with combiner(path) as c:
        db = litegate.connect(path, combine=True, timeout=30)
        first = db.execute("INSERT INTO t(v) VALUES ('a')").lastrowid
        assert first is not None
        assert db.execute("INSERT INTO t(v) VALUES ('b') RETURNING id").rows == [(first + 1,)]
        with pytest.raises(sqlite3.IntegrityError, match="UNIQUE"):
            db.execute("INSERT INTO t(v) VALUES ('a')")
        assert db.execute("UPDATE t SET v = 'c' WHERE v = 'b'", timeout=5).rowcount == 1
        other: list[int | None] = []
        t = threading.Thread(
            target=lambda: other.append(
                db.execute("INSERT INTO t(v) VALUES ('d')", timeout=5).lastrowid
            )
        )
        t.start()
        t.join(30)
        stats = db.stats()["writes"]["combined"]
        db.close()
    assert queued == []  # not one write took the queue
    assert stats["shipped_batches"] == 5
    assert c["stats"]["served_batches"] == 5
    assert rows(path) == [(1, "combiner"), (first, "a"), (first + 1, "c"), (first + 2, "d")]
    assert other == [first + 2]


def test_a_write_inside_db_write_of_a_client_is_refused(path: str) -> None:
    """Shipping does not hide a write that would wait for its own thread's
    gate: NestedWriteError, as without combining; nothing shipped."""
    with combiner(path):
        db = litegate.connect(path, combine=True, timeout=30)
        db.execute("INSERT INTO t(v) VALUES ('a')")
        with db.write() as conn:
            with pytest.raises(litegate.NestedWriteError, match=r"inside db\.write"):
                db.execute("INSERT INTO t(v) VALUES ('nested')")
            conn.execute("INSERT INTO t(v) VALUES ('b')")
        stats = db.stats()["writes"]["combined"]
        db.close()
    assert [v for _, v in rows(path)] == ["combiner", "a", "b"]
    assert stats["shipped_batches"] == 1


@pytest.mark.parametrize(
    ("theirs", "ours"),
    [("default", "default"), ("conservative", "conservative"), ("default", "conservative")],
)
@pytest.mark.parametrize("step", CRASH_STEPS)
def test_a_combiner_killed_at_any_step_applies_each_write_exactly_once(
    path: str, step: str, theirs: str, ours: str
) -> None:
    """The combiner SIGKILLs itself at one step of the protocol (request
    received; statements run, not committed; committed, not answered; half
    answered), on either profile and with a client on FULL whose batches
    raise a NORMAL combiner's turns to FULL. The client settles its batch at
    home through the gate, once:
    the record says whether it committed. Every write is in the file
    exactly once and every call got its own row's id; once the dead
    combiner is reaped, the client's next write takes the role.

    (Not sooner for sure: the kernel releases a SIGKILLed process's files
    one by one, and the client may read the end of its socket while the
    role's lock is still held, for milliseconds: after 82 of 300 kills
    here, for up to 8 ms, lab/probes/kill_release_order.py. Every write
    that finds no combiner tries the role again.)"""
    with combiner(path, crash=step, profile=theirs) as c:
        db = litegate.connect(path, combine=True, timeout=30, profile=ours)
        answers = {f"x{i}": db.execute("INSERT INTO t(v) VALUES (?)", (f"x{i}",)).lastrowid
                   for i in range(20)}  # fmt: skip
        c["proc"].join(30)
        assert c["proc"].exitcode == -signal.SIGKILL
        answers["after"] = db.execute("INSERT INTO t(v) VALUES ('after')").lastrowid
        stats = db.stats()["writes"]["combined"]
        db.close()
    found = rows(path)
    values = [v for _, v in found]
    assert sorted(values) == sorted(["combiner", *answers])  # each exactly once
    assert {v: i for i, v in found if v != "combiner"} == answers
    assert stats["settled_at_home"] >= 1  # (2: it reached the dying combiner twice)
    assert stats["this_process_combines"] is True
    with closing(sqlite3.connect(path)) as conn:
        recorded = conn.execute("SELECT count(*) FROM litegate_combined").fetchone()[0]
    assert recorded >= 1


def test_a_write_that_times_out_at_the_combiner_is_withdrawn(path: str) -> None:
    """The combiner holds the gate (a db.write() of its own); a client's
    write times out while it waits there: WriteTimeout, and it never runs."""
    with combiner(path) as c:
        db = litegate.connect(path, combine=True, timeout=30)
        db.execute("INSERT INTO t(v) VALUES ('before')")
        c["hold"].set()
        assert c["ready"].get(timeout=30) == "holding"
        with pytest.raises(litegate.WriteTimeout, match=r"withdrawn: it never ran\. A turn"):
            db.execute("INSERT INTO t(v) VALUES ('late')", timeout=0.2)
        c["hold"].clear()
        db.execute("INSERT INTO t(v) VALUES ('after')")
        db.close()
    assert [v for _, v in rows(path)] == ["combiner", "before", "after"]


def test_when_the_combiner_closes_another_process_takes_over(path: str) -> None:
    with combiner(path, "fork"):
        db = litegate.connect(path, combine=True, timeout=30)
        db.execute("INSERT INTO t(v) VALUES ('shipped')")
        assert db.stats()["writes"]["combined"]["this_process_combines"] is False
    db.execute("INSERT INTO t(v) VALUES ('here')")  # the combiner closed: this one takes over
    stats = db.stats()["writes"]["combined"]
    assert stats["this_process_combines"] is True
    assert stats["combiner_pid"] == os.getpid()
    db.close()
    assert [v for _, v in rows(path)] == ["combiner", "shipped", "here"]


def test_queue_operations_ship_by_name(path: str) -> None:
    """litegate.queue's store functions run in the combiner by name (with
    plain data as arguments): a queue of this process puts, claims and acks
    through the other process's transactions, its typed errors intact."""
    from litegate.queue import DuplicateJob, Queue

    with combiner(path):
        db = litegate.connect(path, combine=True, timeout=30)
        q = Queue(db, "mail")
        ids = q.put_many([{"n": i} for i in range(5)])
        q.put("keyed", key="k")
        with pytest.raises(DuplicateJob) as info:
            q.put("again", key="k")
        jobs = q.claim(n=3)
        assert [j.id for j in jobs] == ids[:3]
        q.ack_many(jobs)
        assert q.counts() == {"ready": 3, "scheduled": 0, "leased": 0, "done": 3, "dead": 0}
        # a worker's step (ack, fail, claim in one transaction) travels too
        before = db.stats()["writes"]["combined"]["shipped_batches"]
        (a, b) = q.claim(n=2)
        step = q.finish_and_claim(ack=[a], fail=[(b, "boom")], n=1)
        assert [j.id for j in step.jobs] == [ids[-1] + 1]  # (the keyed job)
        assert (step.lost, step.failed) == ([], {b.id: "scheduled"})
        assert db.stats()["writes"]["combined"]["shipped_batches"] == before + 2
        assert q.get(a.id).state == "done"
        assert (q.get(b.id).state, q.get(b.id).last_error) == ("scheduled", "boom")
        stats = db.stats()["writes"]["combined"]
        q.close()
        db.close()
    assert info.value.existing_id == ids[-1] + 1
    assert stats["this_process_combines"] is False
    assert stats["shipped_batches"] >= 5  # (the schema, puts, the claim, the ack)


def test_the_combiners_own_writes_run_at_home_while_its_line_is_empty(path: str) -> None:
    """A process that combines and has nobody else's batch waiting writes
    through the gate itself (a turn would run its batch alone, after a hop to
    the combiner's thread and back): eight threads of writes, a queue's
    operations and an executemany, and not one turn."""
    from litegate.queue import Queue

    db = litegate.connect(path, combine=True, timeout=30)
    db.execute("INSERT INTO t(v) VALUES ('first')")
    assert db.stats()["writes"]["combined"]["this_process_combines"] is True

    def writer(k: int) -> None:
        for i in range(25):
            db.execute("INSERT INTO t(v) VALUES (?)", (f"w{k}-{i}",))

    in_threads(writer, 8)
    db.executemany("INSERT INTO t(v) VALUES (?)", [("many-1",), ("many-2",)])
    q = Queue(db, "mail")
    q.put_many([{"n": i} for i in range(3)])
    q.ack_many(q.claim(n=2))
    counts = q.counts()
    stats = db.stats()["writes"]
    q.close()
    db.close()
    assert len(rows(path)) == 1 + 8 * 25 + 2
    assert counts == {"ready": 1, "scheduled": 0, "leased": 0, "done": 2, "dead": 0}
    combined = stats["combined"]
    assert (combined["turns"], combined["served_batches"], combined["shipped_batches"]) == (0, 0, 0)
    assert stats["committed"] >= 1 + 2 + 3  # (group commit may join the threads' writes)


@pytest.mark.adaptive
def test_a_clients_lone_writes_run_at_home_while_the_combiner_is_quiet(path: str) -> None:
    """A client whose writes find the gate free and the combiner quiet (no
    batch in line, no turn for a while) writes at home: a turn would run its
    write alone, after a round trip to another process."""
    with combiner(path):
        db = litegate.connect(path, combine=True, timeout=30)
        for i in range(20):
            db.execute("INSERT INTO t(v) VALUES (?)", (f"quiet-{i}",))
        stats = db.stats()["writes"]["combined"]
        db.close()
    assert (stats["this_process_combines"], stats["shipped_batches"]) == (False, 0)
    assert len(rows(path)) == 1 + 20


@pytest.mark.adaptive
def test_a_client_that_ships_alone_turns_in_a_row_writes_at_home(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shipped batches that each had a turn to themselves, ALONE in a row,
    gained nothing: the client's next lone writes take the free gate at home
    (here the combiner never counts as quiet, so only that rule sends them
    home). The client commits with FULL: under NORMAL a one-row batch does
    not ship at all (the next test)."""
    monkeypatch.setattr(_combine, "QUIET_NS", 1 << 63)
    with combiner(path) as c:
        db = litegate.connect(path, combine=True, timeout=30, profile="conservative")
        for i in range(20):
            db.execute("INSERT INTO t(v) VALUES (?)", (f"alone-{i}",))
        stats = db.stats()["writes"]["combined"]
        db.close()
    assert stats["shipped_batches"] == _combine.ALONE
    assert c["stats"]["served_batches"] == _combine.ALONE
    assert len(rows(path)) == 1 + 20


@pytest.mark.adaptive
@pytest.mark.parametrize("profile", ["default", "conservative", "default-ship-one-always"])
def test_one_row_writes_ship_only_from_a_process_whose_commits_sync(
    path: str, profile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch of one single-row statement ships from a client on FULL
    (``conservative``: one turn's fsync serves every process) and takes its
    turn at the gate from a client on NORMAL (``default``: turns at the gate
    measured faster than shipping there); an executemany ships from
    either. The combiner never counts as quiet and a client never as alone
    here, so only that rule decides (``LITEGATE_COMBINE_SHIP_ONE=always``,
    the lab's ``shipped`` side, ships them from NORMAL too)."""
    monkeypatch.setattr(_combine, "QUIET_NS", 1 << 63)
    monkeypatch.setattr(_combine, "ALONE", 1 << 30)
    if profile.endswith("-ship-one-always"):
        monkeypatch.setattr(_combine, "SHIP_ONE_FROM", 0)  # (what the variable sets at import)
        profile = profile.removesuffix("-ship-one-always")
    ships = profile == "conservative" or _combine.SHIP_ONE_FROM == 0
    with combiner(path) as c:
        db = litegate.connect(path, combine=True, timeout=30, profile=profile)
        for i in range(10):
            db.execute("INSERT INTO t(v) VALUES (?)", (f"one-{i}",))
        one_row = db.stats()["writes"]["combined"]["shipped_batches"]
        db.executemany("INSERT INTO t(v) VALUES (?)", [("many-1",), ("many-2",)])
        stats = db.stats()["writes"]["combined"]
        db.close()
    assert one_row == (10 if ships else 0)
    assert stats["shipped_batches"] == one_row + 1  # (the executemany)
    assert c["stats"]["served_batches"] == one_row + 1
    assert len(rows(path)) == 1 + 10 + 2


@pytest.mark.parametrize(("value", "level"), [(None, 2), ("always", 0), ("sometimes", 2)])
def test_litegate_combine_ship_one_is_read_as_the_module_loads(
    value: str | None, level: int
) -> None:
    """``LITEGATE_COMBINE_SHIP_ONE=always`` makes one-row batches ship from
    every level; unset (or anything else), from FULL up."""
    env = {k: v for k, v in os.environ.items() if k != "LITEGATE_COMBINE_SHIP_ONE"}
    if value is not None:
        env["LITEGATE_COMBINE_SHIP_ONE"] = value
    got = subprocess.run(
        [sys.executable, "-c", "from litegate import _combine; print(_combine.SHIP_ONE_FROM)"],
        capture_output=True, text=True, env=env, timeout=60, check=True,
    )  # fmt: skip
    assert got.stdout.strip() == str(level)


def _hogging_combiner(path: str, ready: Any, stop: Any, out: Any) -> None:
    """A combiner (forked: it keeps the test's thresholds) whose process
    runs CPU-bound Python on another thread, so its turns wait for the GIL."""
    db = litegate.connect(path, combine=True, timeout=30)
    db.execute("INSERT INTO t(v) VALUES ('combiner')")

    def spin() -> None:
        x = 0
        while not stop.is_set():
            for i in range(10_000):
                x += i

    threading.Thread(target=spin, daemon=True).start()
    ready.put(db.stats()["writes"]["combined"]["this_process_combines"])
    stop.wait(60)
    out.put(db.stats()["writes"]["combined"])
    db.close()


def test_a_combiner_whose_turns_stall_resigns_and_another_process_takes_over(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A combiner whose statements keep waiting for its process's GIL
    (another thread there runs CPU-bound Python) gives the role up after
    STALLS such turns in a row: its client settles what was in flight at
    home, once, and takes the role; every write is there exactly once."""
    monkeypatch.setattr(_combine, "STALLED_S", 0.002)  # (the GIL changes hands every 5 ms)
    ctx: Any = mp.get_context("fork")
    ready, out = ctx.Queue(), ctx.Queue()
    stop = ctx.Event()
    proc = ctx.Process(target=_hogging_combiner, args=(path, ready, stop, out), daemon=True)
    proc.start()
    try:
        assert ready.get(timeout=60) is True
        db = litegate.connect(path, combine=True, timeout=30)
        # Until the role moves (a bounded number of writes): on a busy machine
        # the other thread is not always on a CPU, and a turn that did not
        # stall starts the count of STALLS again.
        n = 0
        while n < 40 or (
            n < 4000 and not db.stats()["writes"]["combined"]["this_process_combines"]
        ):
            db.execute("INSERT INTO t(v) VALUES (?)", (f"c{n}",))
            n += 1
        mine = db.stats()["writes"]["combined"]
        db.close()
    finally:
        stop.set()
        theirs = out.get(timeout=60)
        proc.join(30)
    assert theirs["resigned"] == 1
    assert theirs["this_process_combines"] is False
    assert mine["shipped_batches"] >= _combine.STALLS
    assert mine["this_process_combines"] is True  # it took the role over
    assert sorted(v for _, v in rows(path)) == sorted(["combiner"] + [f"c{i}" for i in range(n)])


def test_a_batch_whose_client_went_away_before_its_turn_does_not_run(path: str) -> None:
    """A client that closes its socket (it gave up: it settles its batch at
    home) before the combiner's turn has the gate must not find its batch
    run there too: the turn looks at the sockets with the gate held and
    skips it, whether it saw the end of the socket before the turn or in it.
    Another client's batch, in the same turn, runs."""
    import time

    with combiner(path) as handle:
        db = litegate.connect(path, combine=True, timeout=30)
        db.execute("INSERT INTO t(v) VALUES ('first')")
        nonce = db._process_state().filegate.combiner_nonce()
        assert nonce is not None
        handle["hold"].set()  # the combiner's process holds the gate: turns wait
        assert handle["ready"].get(timeout=30) == "holding"
        gone_insert = ("INSERT INTO t(v) VALUES ('gone')", (), False)
        gone = raw_client(nonce, ("run", 7, 1, [gone_insert], 1))
        stays = threading.Thread(target=db.execute, args=("INSERT INTO t(v) VALUES ('stays')",))
        stays.start()
        time.sleep(0.3)  # both in line; the turn waits for the gate
        gone.close()
        handle["hold"].clear()
        stays.join(30)
        db.execute("INSERT INTO t(v) VALUES ('after')")
        db.close()
    assert [v for _, v in rows(path)] == ["combiner", "first", "stays", "after"]


def _answered_meanwhile(db: litegate.Database, value: str) -> bool:
    """Another client's write, on a thread, is answered by the combiner
    (its shipped batches count one more) within 20 s; False if it still
    waits then (the combiner is held up)."""
    shipped = db.stats()["writes"]["combined"]["shipped_batches"]
    write = threading.Thread(
        target=db.execute, args=("INSERT INTO t(v) VALUES (?)", (value,)), daemon=True
    )
    write.start()
    write.join(20)
    return (
        not write.is_alive() and db.stats()["writes"]["combined"]["shipped_batches"] == shipped + 1
    )


def _whole_answer(sock: socket.socket) -> Any:
    sock.settimeout(30)
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack_from("!I", data)[0]:
        part = sock.recv(1 << 20)
        assert part, "the combiner closed the connection"
        data += part
    return _combine._decode(data[4:])


def test_a_client_that_stops_half_way_through_a_message_holds_up_nobody(path: str) -> None:
    """A client sends half of a large request and stops there (stopped,
    slow, or stuck): the combiner goes on serving everyone else (before
    2026-11-29 its thread waited for the rest, and every process's combined
    writes with it, past their timeouts); the rest, when it comes, makes a
    whole request, which runs."""
    big = "x" * 1_000_000
    request = _combine._frame(("run", 7, 1, [("INSERT INTO t(v) VALUES (?)", (big,), False)], 1))
    with combiner(path):
        db = litegate.connect(path, combine=True, timeout=30)
        db.execute("INSERT INTO t(v) VALUES ('first')")
        nonce = db._process_state().filegate.combiner_nonce()
        assert nonce is not None
        stuck = raw_client(nonce, request[: len(request) // 2])
        assert _answered_meanwhile(db, "meanwhile")
        stuck.sendall(request[len(request) // 2 :])
        kind, seq, outcomes, _ = _whole_answer(stuck)
        assert (kind, seq, outcomes[0][:2]) == ("done", 1, ("ok", 1))
        stuck.close()
        db.close()
    assert [v[:10] for _, v in rows(path)] == ["combiner", "first", "meanwhile", "x" * 10]


def test_a_client_that_does_not_read_its_answer_holds_up_nobody(path: str) -> None:
    """A client's answer is larger than its socket takes (4 MB of RETURNING)
    and the client does not read it: the combiner sends what the socket
    takes and the rest as the client reads, serving everyone else
    meanwhile (before 2026-11-29 its thread waited in the send); the
    client then reads its whole answer."""
    big = "y" * 4_000_000
    insert = ("INSERT INTO t(v) VALUES (?) RETURNING v", (big,), False)
    with combiner(path):
        db = litegate.connect(path, combine=True, timeout=30)
        db.execute("INSERT INTO t(v) VALUES ('first')")
        nonce = db._process_state().filegate.combiner_nonce()
        assert nonce is not None
        slow = raw_client(nonce, ("run", 7, 1, [insert], 1))
        with closing(sqlite3.connect(path, timeout=30)) as reader:
            for _ in range(600):  # (committed, its answer begun)
                if reader.execute("SELECT count(*) FROM t WHERE v = ?", (big,)).fetchone()[0]:
                    break
                threading.Event().wait(0.05)
        assert _answered_meanwhile(db, "meanwhile")
        kind, seq, outcomes, _ = _whole_answer(slow)
        assert (kind, seq, outcomes[0][0], outcomes[0][3]) == ("done", 1, "ok", [(big,)])
        slow.close()
        db.close()
    assert [v[:10] for _, v in rows(path)] == ["combiner", "first", "y" * 10, "meanwhile"]


def _wait_stopped(pid: int) -> None:
    """Until every thread of ``pid`` is stopped: a process's stop begins when
    one of its threads takes the signal, and its other threads run on until
    then (a busy machine may take milliseconds to schedule that thread)."""
    import time

    tasks = Path(f"/proc/{pid}/task")
    for _ in range(500):
        states = [(t / "stat").read_text().rsplit(")", 1)[1].split()[0] for t in tasks.iterdir()]
        if all(state in "tT" for state in states):
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} did not stop: {states}")


@pytest.mark.parametrize(
    ("size", "timeout", "message"),
    [
        (10, 0.5, r"did not answer: it never ran"),
        (1_000_000, 0.5, r"which did not read it: it never ran"),
        (10, None, None),  # (the Database's 30 s: time to run it at home)
    ],
)
def test_a_stopped_combiner_holds_no_write_past_its_timeout(
    path: str, size: int, timeout: float | None, message: str | None
) -> None:
    """The combiner's process is stopped (SIGSTOP) while it holds no gate: a
    client's write that times out meanwhile gets WriteTimeout and never
    runs, not even once the combiner goes on (before 2026-11-29 it waited
    for the combiner to answer its withdrawal, or to read the rest of a
    request larger than the socket takes, for as long as the process stayed
    stopped); a write with time left runs at home, once, after a standing
    look (``Shipper.LOOK``) sees the process stopped; the client's next
    writes run at home meanwhile."""
    import time

    with combiner(path) as handle:
        db = litegate.connect(path, combine=True, timeout=30)
        db.execute("INSERT INTO t(v) VALUES ('first')")
        shipped = db.stats()["writes"]["combined"]["shipped_batches"]
        assert shipped == 1
        # (past the combiner's keeping of the idle gate after its turn, which
        # a stopped process would go on keeping: that gate is the process's
        # own, stopped or not, as with any holder)
        time.sleep(0.2)
        pid = handle["proc"].pid
        os.kill(pid, signal.SIGSTOP)
        try:
            _wait_stopped(pid)
            failed: list[BaseException] = []

            def late() -> None:
                try:
                    db.execute("INSERT INTO t(v) VALUES (?)", ("late" * size,), timeout=timeout)
                except BaseException as exc:
                    failed.append(exc)

            write = threading.Thread(target=late, daemon=True)
            t0 = time.monotonic()
            write.start()
            write.join(10)
            assert not write.is_alive(), "the write waits past its timeout"
            assert time.monotonic() - t0 < 0.5 + _combine.CANCEL_WAIT + 3
            if message is None:
                assert failed == []
            else:
                (error,) = failed
                assert isinstance(error, litegate.WriteTimeout)
                assert re.search(message, str(error))
            db.execute("INSERT INTO t(v) VALUES ('at home')", timeout=5)
            combined = db.stats()["writes"]["combined"]
            assert (combined["shipped_batches"], combined["unanswered"]) == (shipped, 1)
        finally:
            os.kill(pid, signal.SIGCONT)
        db.close()
    ran = [] if message else ["late" * size]
    assert [v for _, v in rows(path)] == ["combiner", "first", *ran, "at home"]


def test_a_client_that_closed_with_bytes_unread_is_gone() -> None:
    """A client that gave up on an unanswered withdrawal closes with that
    withdrawal unread at the combiner: its socket still has bytes to read,
    and it is gone all the same (a peek at a byte, before 2026-11-29, took
    it for a client still waiting, and its batch ran after it had been
    told it never would)."""
    here, there = socket.socketpair()
    with here:
        assert _combine._open(here)
        there.sendall(_combine._frame(("cancel", 7, 1)))
        assert _combine._open(here)  # (still there, with something to read)
        there.close()
        assert not _combine._open(here)


def _record(path: str) -> dict[int, tuple[int, float, int | None]]:
    with closing(sqlite3.connect(path)) as conn:
        got = conn.execute(f"SELECT client, seq, at, pid FROM {_combine.RECORD}").fetchall()
    return {client: (seq, at, pid) for client, seq, at, pid in got}


def test_the_record_keeps_a_row_only_while_its_client_may_ask_for_it(path: str) -> None:
    """The exactly-once record has a row per client process; a combiner's
    first turn (and one a minute after) deletes the rows older than an hour
    whose process is gone, and those without a pid (an older litegate's)
    older than a day. Before 2026-11-29 every process that ever shipped left
    its row for good."""
    import time

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    dead = int(gone.stdout)
    now = time.time()
    hour, day = _combine.PRUNE_AFTER_S, _combine.PRUNE_UNKNOWN_S
    fake = {
        11: (now - hour - 60, dead),  # old, its process gone: pruned
        12: (now - hour - 60, os.getpid()),  # old, its process alive: kept
        13: (now - hour - 60, None),  # no pid, not a day old: kept
        14: (now - day - 60, None),  # no pid, over a day old: pruned
        15: (now - 60, dead),  # its process gone, but recent: kept
    }
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(_combine._RECORD_SCHEMA)
        put = (
            f"INSERT INTO {_combine.RECORD} (client, seq, outcomes, at, pid) VALUES (?, 1, ?, ?, ?)"
        )
        conn.executemany(put, [(c, pickle.dumps([]), at, pid) for c, (at, pid) in fake.items()])
    with combiner(path):
        db = litegate.connect(path, combine=True, timeout=30)
        db.execute("INSERT INTO t(v) VALUES ('shipped')")  # (the combiner's first turn)
        me = db._process_state().ship.shipper.client  # type: ignore[union-attr]
        db.close()
    record = _record(path)
    assert set(record) == {12, 13, 15, me}
    assert record[me][2] == os.getpid()  # (its row names its process)


def test_a_record_without_pids_gets_the_column(path: str) -> None:
    """A record an older litegate made (no pid column): the combiner adds the
    column in the turn that first needs it; the old rows stay."""
    import time

    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(
            f"CREATE TABLE {_combine.RECORD} (client INTEGER PRIMARY KEY, seq INTEGER NOT NULL, "
            "outcomes BLOB NOT NULL, at REAL NOT NULL)"
        )
        conn.execute(
            f"INSERT INTO {_combine.RECORD} VALUES (21, 1, ?, ?)", (pickle.dumps([]), time.time())
        )
    with combiner(path):
        db = litegate.connect(path, combine=True, timeout=30)
        db.execute("INSERT INTO t(v) VALUES ('shipped')")
        me = db._process_state().ship.shipper.client  # type: ignore[union-attr]
        db.close()
    record = _record(path)
    assert record[21][2] is None
    assert record[me][2] == os.getpid()
    assert [v for _, v in rows(path)] == ["combiner", "shipped"]


def _stopping_client(path: str, k: int, seconds: float, out: Any) -> None:
    """Writes rows ``k * 10**6 + n`` for ``seconds``, shipping each (the
    environment says so), with short timeouts or none, some of them larger
    than a socket takes at once; reports which returned and which timed out."""
    import random
    import time

    rnd = random.Random(k)
    _combine.AWAY_S = 0.2  # (back to shipping soon after each stop: many stops met)
    db = litegate.connect(path, combine=True, timeout=30)
    acked, timed_out, n = [], [], 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        n += 1
        row = k * 10**6 + n
        v = "x" * (100_000 if rnd.random() < 0.1 else 10)
        try:
            db.execute(
                "INSERT INTO u(row, v) VALUES (?, ?)",
                (row, v),
                timeout=rnd.choice([0.05, 0.2, None]),
            )
        except litegate.WriteTimeout:
            timed_out.append(row)
            continue
        except Exception as exc:  # (a finding: reported, not a hang)
            out.put(repr(exc))
            return
        acked.append(row)
    out.put((acked, timed_out, db.stats()["writes"]["combined"]["unanswered"]))
    db.close()


def test_a_combiner_stopped_again_and_again_answers_each_write_once_or_never(path: str) -> None:
    """Three clients ship writes with short timeouts while the combiner's
    process is stopped and continued, again and again, for 0.05-1.2 s at
    any step: every write that returned is there once, every write that
    timed out is not there at all (WriteTimeout: it never ran), and clients
    did take the way a stopped combiner sends them (no answer to their
    withdrawal: the record read at home)."""
    import random
    import time

    rnd = random.Random(1129)
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("CREATE TABLE u(row INTEGER, v TEXT)")  # (no key: twice would show)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    with combiner(path) as handle:
        pid = handle["proc"].pid
        clients = [
            ctx.Process(target=_stopping_client, args=(path, k, 6.0, out)) for k in (1, 2, 3)
        ]
        for c in clients:
            c.start()
        time.sleep(1.0)
        end = time.monotonic() + 5.0
        stops = [0.9, *(rnd.uniform(0.05, 1.2) for _ in range(30))]
        for pause in stops:
            if time.monotonic() >= end:
                break
            os.kill(pid, signal.SIGSTOP)
            try:
                time.sleep(pause)
            finally:
                os.kill(pid, signal.SIGCONT)
            time.sleep(rnd.uniform(0.05, 0.3))
        got = [out.get(timeout=120) for _ in clients]
        for c in clients:
            c.join(60)
    assert all(isinstance(g, tuple) for g in got), got
    acked = [row for a, _, _ in got for row in a]
    timed_out = [row for _, t, _ in got for row in t]
    with closing(sqlite3.connect(path)) as conn:
        ids = [i for (i,) in conn.execute("SELECT row FROM u")]
    assert len(ids) == len(set(ids)), "a write ran twice"
    assert set(acked) <= set(ids), "an acknowledged write is missing"
    assert not set(timed_out) & set(ids), "a write that timed out ran"
    assert set(ids) == set(acked)
    assert sum(u for _, _, u in got) >= 2  # (the stopped combiner's way was taken)
    assert len(acked) > 100


def test_a_client_that_goes_away_while_the_turn_waits_for_the_gate_is_skipped(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same, when the combiner learns of it only in the turn: its turn
    waits for the gate without looking at the sockets meanwhile (a long
    ``GATE_LOOK``), the client closes, the gate comes; the look the turn
    takes with the gate held finds the socket's end."""
    import time

    monkeypatch.setattr(_combine.Combiner, "GATE_LOOK", 30.0)
    db = litegate.connect(path, combine=True, timeout=30)
    db.execute("INSERT INTO t(v) VALUES ('first')")  # this process combines
    state = db._process_state()
    combiner_ = state.filegate.combiner
    assert combiner_ is not None
    served, turns = combiner_.served, combiner_.turns
    with db.write():  # the turn waits for the gate
        gone = raw_client(
            combiner_.nonce, ("run", 7, 1, [("INSERT INTO t(v) VALUES ('gone')", (), False)], 1)
        )
        deadline = time.monotonic() + 10
        while not combiner_._remote_ns and time.monotonic() < deadline:
            time.sleep(0.01)  # until it has the batch
        time.sleep(0.1)  # taken from the line: its turn waits for the gate
        assert combiner_._remote_ns
        assert not combiner_._queue
        gone.close()
    deadline = time.monotonic() + 10
    while combiner_.turns == turns and time.monotonic() < deadline:
        time.sleep(0.01)
    db.execute("INSERT INTO t(v) VALUES ('after')")
    assert combiner_.served == served  # (the turn ran nothing)
    db.close()
    assert [v for _, v in rows(path)] == ["first", "after"]


class _Evil:
    def __init__(self, folder: str) -> None:
        self.folder = folder

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (self.folder,))


def _pickled_frame(message: Any) -> bytes:
    body = pickle.dumps(message)
    return struct.pack("!I", len(body)) + body


@pytest.mark.parametrize(
    "kind", ["pickle-that-calls", "code-object", "wrong-shape", "wrong-statement", "not-a-frame"]
)
def test_a_message_that_is_not_litegates_data_is_refused(
    path: str, tmp_path: Any, kind: str
) -> None:
    """What travels is data in litegate's shape: a pickle that would call a
    function (os.mkdir: the wire is marshal, so it is never unpickled), a
    code object (never run), a request of another shape, or bytes that
    are no frame at all: the connection is dropped, nothing of it runs, and
    the combiner goes on serving (the next write is answered by it)."""
    owned = str(tmp_path / "owned")
    insert = "INSERT INTO t(v) VALUES (?)"
    message: Any = {
        "pickle-that-calls": _pickled_frame(("run", 1, 1, [(insert, (_Evil(owned),), False)], 1)),
        "code-object": ("run", 1, 1, [(insert, (compile("1", "x", "eval"),), False)], 1),
        "wrong-shape": ("run", 1),
        "wrong-statement": ("run", 1, 1, [(insert, ("evil",), "many")], 1),
        "not-a-frame": struct.pack("!I", 5) + b"\xff\xff\xff\xff\xff",
    }[kind]
    with combiner(path):
        db = litegate.connect(path, combine=True, timeout=30)
        db.execute("INSERT INTO t(v) VALUES ('first')")
        nonce = db._process_state().filegate.combiner_nonce()
        assert nonce is not None
        evil = raw_client(nonce, message)
        evil.settimeout(10)
        if kind == "code-object":
            # (a well-formed request: the code object reaches SQLite as a
            # parameter, which refuses it; it is never run)
            answer = evil.recv(65536)
            assert _combine._decode(answer[4:])[0] == "done"
            outcome = _combine._decode(answer[4:])[2][0]
            assert outcome[0] == "error"
            # (sqlite3's error for a type it cannot bind: InterfaceError before 3.11)
            assert outcome[1][1] in ("ProgrammingError", "InterfaceError")
        else:
            assert evil.recv(10) == b""  # dropped
        evil.close()
        shipped = db.stats()["writes"]["combined"]["shipped_batches"]
        db.execute("INSERT INTO t(v) VALUES ('after')")
        # (answered by the combiner: its thread goes on serving; a request of
        # another shape ended it before 2026-11-29, and the write went home)
        assert db.stats()["writes"]["combined"]["shipped_batches"] == shipped + 1
        db.close()
    assert not (tmp_path / "owned").exists()
    assert [v for _, v in rows(path)] == ["combiner", "first", "after"]


_AS_NOBODY = """
import os, socket, sys, time
os.setuid(65534)
name = bytes.fromhex(sys.argv[2])
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
if sys.argv[1] == "serve":
    s.bind(name)
    s.listen(1)
    print("ready", flush=True)
    time.sleep(60)
else:
    s.connect(name)
    s.settimeout(10)
    try:
        s.sendall(bytes.fromhex(sys.argv[3]))
        print(s.recv(65536).hex() or "closed", flush=True)
    except (BrokenPipeError, ConnectionResetError):
        print("closed", flush=True)
"""

needs_root = pytest.mark.skipif(
    not hasattr(os, "getuid") or os.getuid() != 0,
    reason="playing another user takes root (setuid)",
)


@needs_root
def test_a_process_of_another_user_is_not_served(path: str) -> None:
    """The combiner's socket has an abstract name, which any user can reach:
    a process of another user that sends a well-formed request is dropped
    unserved (SO_PEERCRED), and nothing of it runs."""
    with combiner(path):
        db = litegate.connect(path, combine=True, timeout=30)
        db.execute("INSERT INTO t(v) VALUES ('first')")
        nonce = db._process_state().filegate.combiner_nonce()
        assert nonce is not None
        insert = ("INSERT INTO t(v) VALUES ('nobody')", (), False)
        frame = _combine._frame(("run", 9, 1, [insert], 1))
        name = _combine.address(nonce).encode()
        got = subprocess.run(
            [sys.executable, "-c", _AS_NOBODY, "send", name.hex(), frame.hex()],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        assert got.stdout.strip() == "closed"  # (no answer)
        db.execute("INSERT INTO t(v) VALUES ('after')")
        db.close()
    assert [v for _, v in rows(path)] == ["combiner", "first", "after"]


@needs_root
def test_a_client_does_not_ship_to_a_socket_of_another_user(path: str) -> None:
    """A client checks the combiner's credentials too: a process of another
    user listening on the published name gets no batch; the client's
    shipper refuses it and the write goes the way it would without a
    combiner."""
    nonce = 0x5EC0DE
    name = _combine.address(nonce).encode()
    squatter = subprocess.Popen(
        [sys.executable, "-c", _AS_NOBODY, "serve", name.hex()],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    shipper = _combine.Shipper()
    try:
        assert squatter.stdout is not None
        assert squatter.stdout.readline().strip() == "ready"
        assert shipper.connect(nonce) is False
    finally:
        shipper.close()
        squatter.kill()
        squatter.wait(30)
        if squatter.stdout is not None:
            squatter.stdout.close()


def test_a_turn_is_bounded_in_time_and_the_rest_waits_for_the_next(path: str) -> None:
    """Past the group commit's time bound a turn takes no more batches: they
    come back, not run and not recorded, for the next turn, in order."""
    from functools import partial

    from litegate import _combine
    from litegate._batch import refusal

    db = litegate.connect(path)
    batcher = db._process_state().batcher
    works = [
        _combine.Work(k + 1, 1, [("INSERT INTO t(v) VALUES (?)", (f"w{k}",), False)], print)
        for k in range(3)
    ]
    later = batcher.in_turn(
        partial(_combine.apply_all, works=works, refusal=refusal, max_time=0.0), None
    )
    assert later == works[1:]
    assert works[0].outcomes is not None
    assert [w.outcomes for w in works[1:]] == [None, None]
    assert [v for _, v in rows(path)] == ["w0"]
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT client FROM litegate_combined").fetchall() == [(1,)]
    db.close()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_combiner_whose_thread_ended_takes_no_batch_and_writes_to_no_reused_descriptor(
    path: str, tmp_path: Any
) -> None:
    """The combiner's thread ends (here: a turn raises): a batch offered
    after that gets Closed at once, not a wait for a turn that never comes;
    and stopping it later does not write its wake-up byte to the descriptor
    number its pipe had, which another file may have taken meanwhile (the
    database, whose first byte it would overwrite)."""
    import fcntl
    import time

    db = litegate.connect(path, combine=True, timeout=30)
    db.execute("INSERT INTO t(v) VALUES ('first')")  # this process combines
    combiner_ = db._process_state().filegate.combiner
    assert combiner_ is not None
    number = combiner_._wake_w

    def boom() -> None:
        raise RuntimeError("a turn failed")

    combiner_._turn = boom  # type: ignore[method-assign]
    os.write(number, b"x")  # (wakes the thread: its next turn raises)
    combiner_._thread.join(10)
    assert not combiner_._thread.is_alive()
    late: list[_combine.Statement] = [("INSERT INTO t(v) VALUES ('late')", (), False)]
    with pytest.raises(litegate.Closed):
        combiner_.submit_local(late, time.monotonic() + 2)
    with pytest.raises(OSError, match="Bad file descriptor"):  # free: another file may take it
        fcntl.fcntl(number, fcntl.F_GETFD)
    other = tmp_path / "other"
    fd = os.open(other, os.O_RDWR | os.O_CREAT, 0o600)
    if fd != number:
        os.dup2(fd, number)
        os.close(fd)
    try:
        db.close()  # stops the combiner
    finally:
        os.close(number)
    assert other.read_bytes() == b""
    assert [v for _, v in rows(path)] == ["first"]
