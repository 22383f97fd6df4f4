"""counts() and next_due() read a counts table and two index seeks, not
every job (schema version 2). They must stay exact: after every kind of
write, lease expiry and sweep, killed processes, and a migration from a
database made by schema version 1. The truth they are compared with is the
full count over the jobs table that counts() used to be."""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import random
import secrets
import signal
import sqlite3
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import litegate
from litegate.queue import STATES, DuplicateJob, Job, JobNotFound, Queue, _postgres, _sqlite
from litegate.queue._pgdb import is_url
from tests.litegate.queue import procs, schema3
from tests.litegate.queue.conftest import MakeQueue

# SQLite: a waiting job is in the ready or scheduled table, a leased one in
# the lease table; the job row says done or dead.
_TRUTH_SQLITE = """
SELECT (SELECT count(*) FROM litegate_queue_ready WHERE queue = :queue)
       + (SELECT count(*) FROM litegate_queue_scheduled WHERE queue = :queue AND run_at <= :now),
       (SELECT count(*) FROM litegate_queue_scheduled WHERE queue = :queue AND run_at > :now),
       (SELECT count(*) FROM litegate_queue_leased WHERE queue = :queue),
       (SELECT count(*) FROM litegate_queue_jobs WHERE queue = :queue AND state = 2),
       (SELECT count(*) FROM litegate_queue_jobs WHERE queue = :queue AND state = 3)
"""
# Every live job is in exactly one of the three tables, and nothing else is.
_ONE_PLACE_SQLITE = """
WITH placed AS (
    SELECT id FROM litegate_queue_ready WHERE queue = :queue
    UNION ALL SELECT id FROM litegate_queue_scheduled WHERE queue = :queue
    UNION ALL SELECT id FROM litegate_queue_leased WHERE queue = :queue)
SELECT (SELECT count(*) FROM (SELECT id FROM placed GROUP BY id HAVING count(*) > 1)),
       (SELECT count(*) FROM litegate_queue_jobs WHERE queue = :queue AND state = 0
          AND id NOT IN (SELECT id FROM placed)),
       (SELECT count(*) FROM placed WHERE id NOT IN
          (SELECT id FROM litegate_queue_jobs WHERE queue = :queue AND state = 0))
"""
_TRUTH_PG = """
SELECT (SELECT count(*) FROM litegate_jobs WHERE queue = :queue AND state = 0 AND run_at <= :now),
       (SELECT count(*) FROM litegate_jobs WHERE queue = :queue AND state = 0 AND run_at > :now),
       (SELECT count(*) FROM litegate_jobs WHERE queue = :queue AND state = 1),
       (SELECT count(*) FROM litegate_done_jobs WHERE queue = :queue),
       (SELECT count(*) FROM litegate_jobs WHERE queue = :queue AND state = 3),
       (SELECT count(*) FROM litegate_jobs WHERE queue = :queue AND state = 2)
""".replace(":queue", "%(queue)s").replace(":now", "now()")
# (the last: done jobs left in the hot table, which schema 3 moves out)


def truth(where: str, name: str) -> dict[str, int]:
    """Every job of the queue, counted by state the slow way."""
    if is_url(where):
        import psycopg

        with psycopg.connect(where, autocommit=True) as pconn:
            got = pconn.execute(_TRUTH_PG, {"queue": name}).fetchone()
        assert got is not None
        assert got[5] == 0, f"{got[5]} done jobs left in the hot table"
        row = got[:5]
    else:
        with contextlib.closing(sqlite3.connect(where)) as conn:
            conn.execute("BEGIN")  # one snapshot for both
            row = conn.execute(_TRUTH_SQLITE, {"queue": name, "now": time.time()}).fetchone()
            misplaced = conn.execute(_ONE_PLACE_SQLITE, {"queue": name}).fetchone()
        assert misplaced == (0, 0, 0), (
            f"(in two tables, live in none, placed but not live) {misplaced}"
        )
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
        with contextlib.closing(sqlite3.connect(where)) as conn:
            row = conn.execute("SELECT max(version) FROM litegate_queue_schema").fetchone()
    assert row is not None
    return int(row[0])


class OldWriter:
    """A litegate of an older schema version writing a SQLite file: the
    store of schema 3, verbatim (tests/litegate/queue/schema3.py), at
    ``version`` (1, 2 or 3), on a plain connection, each call its own
    IMMEDIATE transaction, as that litegate's queue ran them."""

    def __init__(self, path: str, version: int, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(schema3, "SCHEMA_VERSION", version)
        monkeypatch.setattr(schema3, "_pruned", [time.time()])  # (version 1 has no counts)
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.tx(schema3.create_schema)

    def tx(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            out = fn(self.conn, *args, **kwargs)
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")
        return out

    def put(self, payload: Any, delay: float = 0.0, priority: int = 0, attempts: int = 5) -> int:
        now = time.time()
        row = ("default", priority, now + delay, json.dumps(payload), attempts, None, now)
        return int(self.tx(schema3.insert_one, row))

    def claim(self, n: int, lease: float = 300.0) -> list[Job]:
        token = secrets.randbits(62)
        rows, until = self.tx(schema3.claim, "default", n, lease, token)
        return [
            Job(r[0], json.loads(r[1]), r[2], r[3], until, r[5], "default", token) for r in rows
        ]

    def ack(self, jobs: list[Job]) -> None:
        assert self.tx(schema3.ack, time.time(), [(j.id, j.token) for j in jobs]) == []

    def fail(self, job: Job, retry_in: float) -> None:
        now = time.time()
        self.tx(schema3.fail, job.id, job.token, now, now + retry_in, "x")

    def close(self) -> None:
        self.conn.close()


def _fill_old(path: str, version: int, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Jobs in every state, written by a litegate at schema ``version``."""
    old = OldWriter(path, version, monkeypatch)
    for i in range(10):
        old.put(i)
    old.put("later", delay=3600 * 5)
    jobs = old.claim(6)
    old.ack(jobs[:3])
    old.fail(jobs[3], retry_in=600)
    dead = old.put("dead", priority=99, attempts=1)
    (doomed,) = old.claim(1)
    assert doomed.id == dead
    old.fail(doomed, retry_in=0)
    old.close()
    monkeypatch.undo()
    assert _schema_version(path) == version
    return {"dead": dead, "leased": jobs[4:6]}


@pytest.mark.parametrize("version", [1, 2, 3])
def test_an_older_sqlite_database_is_migrated_with_exact_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int
) -> None:
    """A database written by a litegate at schema version 1, 2 or 3 (one
    table with partial indexes; counts by triggers from version 2) is moved
    to the current schema on open: every job in its state, exact counts, and
    the jobs leased under the old schema still held by their tokens and
    lease ends (their worker can ack them)."""
    path = str(tmp_path / f"v{version}.db")
    made = _fill_old(path, version, monkeypatch)
    q = Queue(path)
    assert _schema_version(path) == _sqlite.SCHEMA_VERSION
    counts = check(q, path)
    assert counts == {"ready": 4, "scheduled": 2, "leased": 2, "done": 3, "dead": 1}
    leased = made["leased"]
    assert [q.get(j.id).state for j in leased] == ["leased", "leased"]
    assert [q.get(j.id).lease_until for j in leased] == [j.lease_until for j in leased]
    q.ack_many(leased)  # the old claim's tokens and lease ends still hold them
    assert q.retry_dead([made["dead"]]) == 1
    claimed = q.claim(n=10)
    assert claimed[0].id == made["dead"]  # priority 99 first, as before
    assert len(claimed) == 5
    q.ack_many(claimed)
    assert check(q, path) == {"ready": 0, "scheduled": 2, "leased": 0, "done": 10, "dead": 0}
    with contextlib.closing(sqlite3.connect(path)) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert "litegate_jobs" not in tables
    q.close()
    Queue(path).close()  # at the current version already: nothing to do
    assert _schema_version(path) == _sqlite.SCHEMA_VERSION


# How versions 1 and 2 acknowledged a job on PostgreSQL (verbatim): the row
# stayed in litegate_jobs, marked done. Version 3 moves it out.
_V2_ACK_ONE = (
    "UPDATE litegate_jobs SET state = 2, done_at = now(), lease_until = NULL "
    "WHERE id = %s AND token = %s AND state <> 2 RETURNING id"
)
_V2_ACK = """
UPDATE litegate_jobs AS j SET state = 2, done_at = now(), lease_until = NULL
  FROM unnest(%s::bigint[], %s::bigint[]) AS o(id, token)
 WHERE j.id = o.id AND j.token = o.token AND j.state <> 2
RETURNING j.id
"""


def _old_pg_queue(monkeypatch: pytest.MonkeyPatch, version: int) -> None:
    """This process's PostgreSQL queue as the litegate of schema ``version``
    (1 or 2) ran: that version's schema, its acks (done jobs stay in place)."""
    monkeypatch.setattr(_postgres, "SCHEMA_VERSION", version)
    monkeypatch.setattr(_postgres, "_ACK_ONE", _V2_ACK_ONE)
    monkeypatch.setattr(_postgres, "_ACK", _V2_ACK)


def test_a_version_1_postgres_database_is_migrated_with_exact_counts(
    pg_empty: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL: a database made by schema version 1 (its statements, kept
    verbatim as migration 1), filled by the queue of that version, is brought
    to the current version on open; its counts are exact at once."""
    _v1_pg(pg_empty)
    _old_pg_queue(monkeypatch, 1)
    old = Queue(pg_empty)
    old.put_many(range(10))
    old.put("later", delay=3600 * 5)
    jobs = old.claim(n=6)
    old.ack_many(jobs[:3])
    old.fail(jobs[3], "x", retry_in=600)
    dead = old.put("dead", max_attempts=1, priority=99)
    old.fail(old.claim()[0], "x")
    old.close()
    assert _schema_version(pg_empty) == 1
    monkeypatch.undo()
    q = Queue(pg_empty)
    assert _schema_version(pg_empty) == _postgres.SCHEMA_VERSION
    counts = check(q, pg_empty)
    assert counts == {"ready": 4, "scheduled": 2, "leased": 2, "done": 3, "dead": 1}
    assert q.retry_dead([dead]) == 1
    q.ack_many(q.claim(n=3))
    check(q, pg_empty)
    q.close()


def test_a_version_2_postgres_database_moves_its_done_jobs_out_of_the_hot_table(
    pg_empty: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL, schema 2 to 3: the jobs already done move to
    litegate_done_jobs on open (counts exact at once, nothing done left in
    litegate_jobs), and stay readable by id; a done job's dedupe key is free;
    purge deletes done jobs from their table; later acks move their jobs."""
    _old_pg_queue(monkeypatch, 2)
    old = Queue(pg_empty)
    keyed = old.put("keyed", key="k1", priority=-1)  # (claimed last)
    old.put_many(range(10))
    jobs = old.claim(n=5)
    old.ack_many(jobs[:4])
    dead = old.put("dead", max_attempts=1, priority=99)
    old.fail(old.claim()[0], "x")
    old.close()
    import psycopg

    with psycopg.connect(pg_empty) as pconn:
        in_place = pconn.execute("SELECT count(*) FROM litegate_jobs WHERE state = 2").fetchone()
    assert in_place == (4,)  # (the old version kept them there)
    assert _schema_version(pg_empty) == 2
    monkeypatch.undo()
    q = Queue(pg_empty)
    assert _schema_version(pg_empty) == _postgres.SCHEMA_VERSION == 3
    counts = check(q, pg_empty)  # (and none done left in the hot table)
    assert counts == {"ready": 6, "scheduled": 0, "leased": 1, "done": 4, "dead": 1}
    done = q.get(jobs[0].id)
    assert (done.state, done.payload, done.attempts) == ("done", jobs[0].payload, 1)
    assert done.done_at is not None
    assert q.get(dead).state == "dead"
    with pytest.raises(JobNotFound, match=f"job {jobs[1].id} is done"):
        q.retry_dead([jobs[1].id])
    assert q.retry_dead([dead]) == 1
    with pytest.raises(DuplicateJob) as taken:  # still waiting: the key holds
        q.put("keyed", key="k1")
    assert taken.value.existing_id == keyed
    q.ack_many(q.claim(n=20))  # (jobs[4]'s lease, from the old version, still runs)
    counts = check(q, pg_empty)
    assert counts == {"ready": 0, "scheduled": 0, "leased": 1, "done": 11, "dead": 0}
    q.ack(jobs[4])  # its holder's token, taken to the new schema
    assert check(q, pg_empty)["done"] == 12
    again = q.put("keyed again", key="k1")  # its holder is done: the key is free
    assert again != keyed
    assert q.purge(done_before=time.time() + 60) == 12
    with pytest.raises(JobNotFound):
        q.get(jobs[0].id)
    check(q, pg_empty)
    q.close()


def _migrate(path: str) -> None:  # in a child process, killed at some point
    Queue(path).close()


def test_a_postgres_migration_killed_anywhere_leaves_version_2_or_3_whole(
    pg_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL, schema 2 to 3: the migration is one transaction (with the
    move of the done jobs), so a client SIGKILLed at any moment of it leaves
    version 2 as it was (no litegate_done_jobs, the done jobs in place) or
    version 3 whole (all of them moved); the next open finishes the job with
    exact counts."""
    import psycopg

    template = pg_server.create_database("queue_v2_template")
    _old_pg_queue(monkeypatch, 2)
    with Queue(template) as old:
        old.put_many(range(30_000))
        for _ in range(20):
            old.ack_many(old.claim(n=1000))
        old.claim(n=500)
    monkeypatch.undo()
    ctx = mp.get_context("spawn")  # (no PostgreSQL connection of ours in the child)

    def fresh(name: str) -> str:
        """A copy of the template (connected elsewhere: a template must be idle)."""
        with psycopg.connect(pg_server.url_for(dbname="postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE queue_v2_template")
        url: str = pg_server.url_for(dbname=name)
        return url

    timed = fresh("queue_v2_timed")
    t0 = time.monotonic()
    child = ctx.Process(target=_migrate, args=(timed,))
    child.start()
    child.join(60)
    took = time.monotonic() - t0  # the kills land from the child's start to past its end
    assert _schema_version(timed) == 3
    outcomes: Counter[int] = Counter()
    rnd = random.Random(7)
    for trial in range(6):
        url = fresh(f"queue_v2_trial{trial}")
        child = ctx.Process(target=_migrate, args=(url,))
        child.start()
        time.sleep(rnd.uniform(0.5 * took, 1.1 * took))
        if child.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGKILL)
        child.join(30)
        settle(url)
        version = _schema_version(url)
        outcomes[version] += 1
        with psycopg.connect(url) as conn:
            done_table = conn.execute("SELECT to_regclass('litegate_done_jobs')").fetchone()
            in_place = conn.execute("SELECT count(*) FROM litegate_jobs WHERE state = 2").fetchone()
            if version == 2:
                assert (done_table, in_place) == ((None,), (20_000,))
            else:
                assert version == 3
                assert in_place == (0,)
                moved = conn.execute("SELECT count(*) FROM litegate_done_jobs").fetchone()
                assert moved == (20_000,)
        with Queue(url) as q:  # finishes the move if the kill came first
            assert check(q, url) == {
                "ready": 9_500, "scheduled": 0, "leased": 500, "done": 20_000, "dead": 0,
            }  # fmt: skip
    assert sum(outcomes.values()) == 6
    print(f"PostgreSQL migrations killed: {dict(outcomes)} (version: trials)")


def test_a_migration_killed_anywhere_leaves_the_old_schema_or_the_new_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The move to the current schema is one transaction: a process SIGKILLed
    at any moment of it leaves the file at version 3, as it was, or at the
    current version, complete, never a mix; the next open finishes the job
    with exact counts. (Other processes wait for it at the write gate.)"""
    template = str(tmp_path / "v3.db")
    old = OldWriter(template, 3, monkeypatch)
    now = time.time()
    rows = [("default", 0, now, json.dumps(i), 5, None, now) for i in range(60_000)]
    old.tx(schema3.insert_many, rows)
    leased = old.claim(1000)
    old.ack(leased[:500])
    old.close()
    monkeypatch.undo()
    with contextlib.closing(sqlite3.connect(template)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    image = Path(template).read_bytes()
    timed = str(tmp_path / "timed.db")
    Path(timed).write_bytes(image)
    t0 = time.monotonic()
    _migrate(timed)
    took = time.monotonic() - t0  # the kills land from the child's start to past its end
    ctx = mp.get_context("fork")
    outcomes: Counter[int] = Counter()
    rnd = random.Random(5)
    for trial in range(8):
        path = str(tmp_path / f"trial{trial}.db")
        Path(path).write_bytes(image)
        child = ctx.Process(target=_migrate, args=(path,))
        child.start()
        time.sleep(rnd.uniform(0, 1.3 * took))
        if child.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGKILL)
        child.join(30)
        version = _schema_version(path)
        outcomes[version] += 1
        with contextlib.closing(sqlite3.connect(path)) as conn:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            if version == 3:
                assert "litegate_queue_jobs" not in tables, tables
                assert conn.execute("SELECT count(*) FROM litegate_jobs").fetchone() == (60_000,)
            else:
                assert version == _sqlite.SCHEMA_VERSION
                assert "litegate_jobs" not in tables, tables
        q = Queue(path)  # finishes the move if the kill came first
        assert check(q, path) == {
            "ready": 59_000, "scheduled": 0, "leased": 500, "done": 500, "dead": 0,
        }  # fmt: skip
        q.close()
    assert sum(outcomes.values()) == 8
    print(f"migrations killed: {dict(outcomes)} (version: trials)")


def test_empty_counts_stay_until_purge_and_counts_stay_exact(tmp_path: Path) -> None:
    """A count that falls to zero keeps its row (deleting it cost as much as
    the change); purge() clears such rows, and counts() is exact throughout."""
    path = str(tmp_path / "zero.db")
    q = Queue(path)
    q.put_many(range(6))
    q.ack_many(q.claim(n=6))
    assert _zero_rows(path) == 2  # the "ready" and "leased" counts, at zero
    assert check(q, path) == {"ready": 0, "scheduled": 0, "leased": 0, "done": 6, "dead": 0}
    q.put("x")
    assert _zero_rows(path) == 1  # the same "ready" row counts again
    q.ack(q.claim()[0])
    assert _zero_rows(path) == 2
    assert q.purge(done_before=time.time() + 1) == 6  # all but the newest row of the table
    assert _zero_rows(path) == 0
    assert check(q, path) == {"ready": 0, "scheduled": 0, "leased": 0, "done": 1, "dead": 0}
    q.close()


def _zero_rows(path: str) -> int:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        (n,) = conn.execute(f"SELECT count(*) FROM {_sqlite.COUNTS_TABLE} WHERE n = 0").fetchone()
    return int(n)


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


def test_recount_repairs_counts_after_hand_written_sql(
    make_queue: MakeQueue, queue_db: str
) -> None:
    """The queue counts in its own statements, so SQL of yours that moves
    jobs leaves counts() wrong (on SQLite; PostgreSQL's statement triggers
    count any SQL) until Queue.recount() rebuilds them from the jobs."""
    q = make_queue()
    other = make_queue("other")
    q.put_many(range(5))
    other.put("x")
    q.ack_many(q.claim(n=2))
    if is_url(queue_db):
        import psycopg

        with psycopg.connect(queue_db, autocommit=True) as pconn:
            pconn.execute("ALTER TABLE litegate_done_jobs DISABLE TRIGGER USER")
            pconn.execute("DELETE FROM litegate_done_jobs WHERE queue = 'default'")
            pconn.execute("ALTER TABLE litegate_done_jobs ENABLE TRIGGER USER")
    else:
        with contextlib.closing(sqlite3.connect(queue_db)) as conn, conn:
            conn.execute("DELETE FROM litegate_queue_jobs WHERE queue = 'default' AND state = 2")
    assert q.counts()["done"] == 2  # stale: hand-written SQL is not counted
    assert q.recount() == {"ready": 3, "scheduled": 0, "leased": 0, "done": 0, "dead": 0}
    check(q, queue_db)
    check(other, queue_db, "other")
