"""counts() and next_due() read a counts table and two index seeks, not
every job (schema version 2). They must stay exact: after every kind of
write, lease expiry and sweep, killed processes, and a migration from a
database made by schema version 1. The truth they are compared with is the
full count over the jobs table that counts() used to be."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import random
import signal
import sqlite3
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import litegate
from litegate.queue import STATES, Queue, _postgres, _sqlite
from litegate.queue._pgdb import is_url
from tests.litegate.queue import procs
from tests.litegate.queue.conftest import MakeQueue

_TRUTH_SQLITE = """
SELECT (SELECT count(*) FROM litegate_jobs WHERE queue = :queue AND state = 0 AND run_at <= :now),
       (SELECT count(*) FROM litegate_jobs WHERE queue = :queue AND state = 0 AND run_at > :now),
       (SELECT count(*) FROM litegate_jobs WHERE queue = :queue AND state = 1),
       (SELECT count(*) FROM litegate_jobs WHERE queue = :queue AND state = 2),
       (SELECT count(*) FROM litegate_jobs WHERE queue = :queue AND state = 3)
"""
_TRUTH_PG = _TRUTH_SQLITE.replace(":queue", "%(queue)s").replace(":now", "now()")


def truth(where: str, name: str) -> dict[str, int]:
    """Every job of the queue, counted by state the slow way."""
    if is_url(where):
        import psycopg

        with psycopg.connect(where, autocommit=True) as pconn:
            row = pconn.execute(_TRUTH_PG, {"queue": name}).fetchone()
    else:
        with sqlite3.connect(where) as conn:
            row = conn.execute(_TRUTH_SQLITE, {"queue": name, "now": time.time()}).fetchone()
        conn.close()
    assert row is not None
    return dict(zip(STATES, (int(v) for v in row), strict=True))


def settle(where: str) -> None:
    """On PostgreSQL, wait until no other backend runs a statement: a killed
    client's last statement may still be committing on the server."""
    if not is_url(where):
        return
    import psycopg

    with psycopg.connect(where, autocommit=True) as pconn:
        for _ in range(1000):
            row = pconn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND state NOT IN ('idle')"
            ).fetchone()
            if row is not None and row[0] == 0:
                return
            time.sleep(0.01)
    raise AssertionError("a killed client's backend is still busy after 10 s")


def check(q: Any, where: str, name: str = "default") -> dict[str, int]:
    counts: dict[str, int] = q.counts()
    assert counts == truth(where, name)
    return counts


def test_counts_stay_exact_through_every_kind_of_write(
    make_queue: MakeQueue, queue_db: str
) -> None:
    """A seeded mix of put, put_many, keyed puts, delays (this hour, the next
    hours, days ahead), claims (some leases left to run out and be swept),
    ack, fail (retry and dead), release, extend, retry_dead and purge, on two
    queues; counts() equals the full count after every step."""
    rnd = random.Random(21)
    # Retries back off 67 s or more: no job turns due during the test, so
    # counts() and the full count, a moment apart, agree on "ready".
    qs = {name: make_queue(name, retry_base=90, retry_max=90) for name in ("default", "other")}
    held: dict[str, list[Any]] = {name: [] for name in qs}
    to_hour_end = 3600 - time.time() % 3600
    # Delays never within a minute of now: no job turns due during the test.
    delays = [0.0, 0.0, 0.0, 120.0, 2 * 3600.0, 3 * 86400.0]
    if to_hour_end > 200:
        delays.append(to_hour_end - 30)  # later this hour: counted from the table
    seen: set[str] = set()
    for step in range(160):
        name = rnd.choice(sorted(qs))
        q = qs[name]
        op = rnd.choice(
            [
                *("put", "put", "put_many", "key", "claim", "claim", "short", "ack"),
                *("ack_many", "fail", "fail_retry", "release", "extend", "retry_dead", "purge"),
            ]
        )
        jobs = held[name]
        if op == "put":
            q.put(step, delay=rnd.choice(delays), max_attempts=rnd.choice([1, 2, 5]))
        elif op == "put_many":
            q.put_many(range(rnd.randint(2, 30)), delay=rnd.choice(delays))
        elif op == "key":
            with contextlib.suppress(litegate.queue.DuplicateJob):
                q.put(step, key=f"k{rnd.randint(0, 5)}")
        elif op in ("claim", "short"):
            lease = 0.05 if op == "short" else 30.0
            jobs.extend(q.claim(n=rnd.randint(1, 8), lease=lease))
            if op == "short":
                time.sleep(0.1)  # these leases run out; the next claim sweeps them
        elif jobs and op in ("ack", "ack_many", "fail", "fail_retry", "release", "extend"):
            rnd.shuffle(jobs)
            job = jobs.pop()
            try:
                if op == "ack":
                    q.ack(job)
                elif op == "ack_many":
                    batch = [job, *jobs[: rnd.randint(0, 4)]]
                    del jobs[: len(batch) - 1]
                    q.ack_many(batch)
                elif op == "fail":
                    q.fail(job, "boom")
                elif op == "fail_retry":
                    q.fail(job, "boom", retry_in=rnd.choice([0.0, 120.0]))
                elif op == "release":
                    q.release(job)
                else:
                    q.extend(job, lease=30.0)
                    jobs.append(job)
            except litegate.queue.LeaseLost:
                pass  # its lease ran out and somebody claimed it: still exact
        elif op == "retry_dead":
            q.retry_dead()
        elif op == "purge":
            q.purge(done_before=time.time() + 1, dead_before=time.time() + 1)
        seen.update(state for state, n in check(q, queue_db, name).items() if n)
    assert seen == set(STATES)  # every state was counted at some point


def test_counts_split_ready_and_scheduled_around_the_hour(
    make_queue: MakeQueue, queue_db: str
) -> None:
    """Jobs due later this hour, at the next hour's start and after it, and
    jobs that turn due while nobody writes: counted on the right side."""
    q = make_queue()
    now = time.time()
    to_hour_end = 3600 - now % 3600
    q.put("now")
    q.put("soon", delay=0.3)  # turns due without any write
    q.put("this hour", delay=max(to_hour_end - 5, 1.0))
    q.put("next hour", delay=to_hour_end + 1)
    q.put("days", delay=5 * 86400)
    assert check(q, queue_db)["scheduled"] == 4
    time.sleep(0.4)
    counts = check(q, queue_db)
    assert (counts["ready"], counts["scheduled"]) == (2, 3)


def test_next_due_is_the_earliest_waiting_or_leased(queue_db: str) -> None:
    """What waiting claimers read before they take the write gate: the
    earliest run_at of a waiting job (whatever its priority), else the
    earliest end of a lease."""
    q = Queue(queue_db)

    def next_due() -> float | None:
        due: float | None = q._run(q._core.next_due())
        return due

    assert next_due() is None
    q.put("far", delay=86400, priority=9)
    q.put("near", delay=60, priority=-5)
    assert next_due() == pytest.approx(time.time() + 60, abs=5)
    q.put("now", priority=-9)
    due = next_due()
    assert due is not None
    assert due <= time.time()
    (job,) = q.claim(lease=300)
    assert job.payload == "now"
    assert next_due() == pytest.approx(time.time() + 60, abs=5)  # "near", before the lease
    q.ack(job)
    q.purge(done_before=time.time() + 1)
    assert next_due() == pytest.approx(time.time() + 60, abs=5)
    other = Queue(queue_db, "other")
    other.put("x")
    other.claim(lease=20)
    assert other._run(other._core.next_due()) == pytest.approx(time.time() + 20, abs=5)
    other.close()
    q.close()


def test_counts_stay_exact_when_processes_are_killed(queue_db: str, tmp_path: Path) -> None:
    """Producers killed mid put / put_many, workers killed holding leases and
    mid ack: counts() equals the full count after the kills, while the dead
    workers' leases are still on, and after they are swept and drained."""
    q = Queue(queue_db)
    q.put_many(range(200))
    ctx = mp.get_context("fork")
    rnd = random.Random(7)
    procs_started: list[Any] = []
    for k in range(6):
        role = k % 3
        if role == 0:
            p = ctx.Process(target=procs.produce_forever, args=(queue_db, str(tmp_path / "p"), k))
        elif role == 1:
            p = ctx.Process(target=procs.work_forever, args=(queue_db, str(tmp_path / "w"), k))
        else:
            # a job for it to hold: the worker before it may have claimed them all
            q.put("to hold")
            holding = ctx.Event()
            p = ctx.Process(target=procs.hold_a_job, args=(queue_db, 1.0, holding))
        p.start()
        procs_started.append(p)
        time.sleep(rnd.uniform(0.2, 0.5))
        if role == 2:
            assert holding.wait(30)
        assert p.pid is not None
        os.kill(p.pid, signal.SIGKILL)
        p.join(10)
    settle(queue_db)
    counts = check(q, queue_db)
    assert sum(counts.values()) >= 200
    # Then all at once: two producers and two workers writing together
    # (on PostgreSQL, in different counting slots), killed together.
    together = [
        ctx.Process(target=procs.produce_forever, args=(queue_db, str(tmp_path / "p"), 10 + k))
        for k in range(2)
    ] + [
        ctx.Process(target=procs.work_forever, args=(queue_db, str(tmp_path / "w"), 20 + k))
        for k in range(2)
    ]
    for p in together:
        p.start()
    time.sleep(1.5)
    for p in together:
        assert p.pid is not None
        os.kill(p.pid, signal.SIGKILL)
    for p in together:
        p.join(10)
    settle(queue_db)
    check(q, queue_db)
    time.sleep(1.1)  # every killed worker's lease has run out
    check(q, queue_db)  # expired, not yet swept: still "leased", in both
    procs.drain(q, Counter())
    counts = check(q, queue_db)
    assert counts["ready"] == counts["leased"] == counts["scheduled"] == 0
    q.close()


# -- migration from schema version 1 -------------------------------------------


def _v1_sqlite(path: str) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    for statement in _sqlite._statements(_sqlite.MIGRATIONS[1]):
        conn.execute(statement)
    conn.execute("INSERT INTO litegate_queue_schema (version) VALUES (1)")
    conn.execute("COMMIT")
    conn.close()


def _v1_pg(url: str) -> None:
    import psycopg

    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE litegate_queue_schema (version integer NOT NULL)")
        for statement in _postgres.MIGRATIONS[1]:
            conn.execute(statement)
        conn.execute("INSERT INTO litegate_queue_schema (version) VALUES (1)")


def _schema_version(where: str) -> int:
    if is_url(where):
        import psycopg

        with psycopg.connect(where) as pconn:
            row = pconn.execute("SELECT max(version) FROM litegate_queue_schema").fetchone()
    else:
        with sqlite3.connect(where) as conn:
            row = conn.execute("SELECT max(version) FROM litegate_queue_schema").fetchone()
        conn.close()
    assert row is not None
    return int(row[0])


def test_a_version_1_database_is_migrated_with_exact_counts(
    queue_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database made by schema version 1 (its statements, kept verbatim
    as migration 1), filled by a litegate of that version (the jobs written
    with version 1's schema: no counts table, no triggers), is brought to
    the current version on open; its counts are exact at once and stay so."""
    if is_url(queue_db):
        _v1_pg(queue_db)
        store: Any = _postgres
    else:
        _v1_sqlite(queue_db)
        store = _sqlite
    # Jobs in every state, written while the schema is at version 1: the
    # queue opened with version 1's migrations only.
    monkeypatch.setattr(store, "SCHEMA_VERSION", 1)
    old = Queue(queue_db)
    old.put_many(range(10))
    old.put("later", delay=3600 * 5)
    jobs = old.claim(n=6)
    old.ack_many(jobs[:3])
    old.fail(jobs[3], "x", retry_in=600)
    dead = old.put("dead", max_attempts=1, priority=99)
    old.fail(old.claim()[0], "x")
    old.close()
    assert _schema_version(queue_db) == 1
    monkeypatch.undo()

    q = Queue(queue_db)
    assert _schema_version(queue_db) == store.SCHEMA_VERSION
    counts = check(q, queue_db)
    assert counts == {"ready": 4, "scheduled": 2, "leased": 2, "done": 3, "dead": 1}
    assert q.retry_dead([dead]) == 1
    q.ack_many(q.claim(n=3))
    check(q, queue_db)
    q.close()
    Queue(queue_db).close()  # at the current version already: nothing to do
    assert _schema_version(queue_db) == store.SCHEMA_VERSION


def _zero_rows(path: str) -> int:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        (n,) = conn.execute(f"SELECT count(*) FROM {_sqlite.COUNTS_TABLE} WHERE n = 0").fetchone()
    return int(n)


def test_a_version_2_database_keeps_exact_counts_without_deleting_empty_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 3 (SQLite) replaces version 2's triggers, which deleted a
    count that fell to zero in every claim and ack, with ones that leave it
    for purge() and an hourly claim to clear. A file written by version 2 is
    migrated on open with exact counts; afterwards empty counts stay until
    a purge or the next hour's first claim clears them, and counts() stays
    exact throughout."""
    path = str(tmp_path / "v2.db")
    monkeypatch.setattr(_sqlite, "SCHEMA_VERSION", 2)
    old = Queue(path)
    old.put_many(range(6))
    old.ack_many(old.claim(n=6))  # version 2 deleted the emptied "ready" count
    old.put_many(range(3))
    old.close()
    assert _schema_version(path) == 2
    assert _zero_rows(path) == 0
    monkeypatch.undo()

    q = Queue(path)
    assert _schema_version(path) == 3
    assert check(q, path) == {"ready": 3, "scheduled": 0, "leased": 0, "done": 6, "dead": 0}
    monkeypatch.setattr(_sqlite, "_pruned", [time.time()])  # this hour's prune is done
    q.ack_many(q.claim(n=3))
    assert _zero_rows(path) == 2  # the "ready" and "leased" counts stay, at zero
    assert check(q, path) == {"ready": 0, "scheduled": 0, "leased": 0, "done": 9, "dead": 0}
    q.put("x")
    assert _zero_rows(path) == 1  # the same "ready" row counts again
    q.ack(q.claim()[0])
    assert _zero_rows(path) == 2
    monkeypatch.setattr(_sqlite, "_pruned", [time.time() - 3600])  # an hour later
    assert q.claim() == []
    assert _zero_rows(path) == 0  # that claim cleared it
    q.put("y")
    q.ack(q.claim()[0])
    assert _zero_rows(path) == 2
    assert q.purge(done_before=time.time() + 1) == 10  # all but the newest row of the table
    assert _zero_rows(path) == 0
    assert check(q, path) == {"ready": 0, "scheduled": 0, "leased": 0, "done": 1, "dead": 0}
    q.close()


def test_a_database_from_a_newer_litegate_is_refused(queue_db: str) -> None:
    Queue(queue_db).close()
    if is_url(queue_db):
        import psycopg

        with psycopg.connect(queue_db) as pconn:
            pconn.execute("INSERT INTO litegate_queue_schema (version) VALUES (99)")
    else:
        with sqlite3.connect(queue_db) as conn:
            conn.execute("INSERT INTO litegate_queue_schema (version) VALUES (99)")
        conn.close()
    with pytest.raises(litegate.ConfigError, match=r"schema version 99.*upgrade litegate"):
        Queue(queue_db)
