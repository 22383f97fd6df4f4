"""The seams other code builds on: ``put_on`` (a job inside your own
transaction), ``also=`` on claim and ack (your SQL in the queue's
transaction), and the worker's ``on_claim`` / ``on_ack``."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from litegate.queue import DuplicateJob, Job, Queue, Worker, put_on
from litegate.queue._pgdb import PgDatabase
from tests.conftest import wait_until
from tests.litegate.queue.conftest import MakeQueue, job_recorder


def test_put_on_commits_and_rolls_back_with_the_callers_transaction(db_path: str) -> None:
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO orders DEFAULT VALUES")
    kept = put_on(conn, {"order": 1}, queue="mail", priority=3)
    conn.execute("COMMIT")
    conn.execute("BEGIN IMMEDIATE")
    put_on(conn, {"order": 2}, queue="mail")
    conn.execute("ROLLBACK")
    put_on(conn, {"order": 3}, queue="mail", key="k")  # autocommit: commits by itself
    with pytest.raises(DuplicateJob):  # the queue's own checks and errors
        put_on(conn, {}, queue="mail", key="k")
    conn.close()
    with Queue(db_path, "mail") as q:
        jobs = q.claim(n=10)
        assert (jobs[0].id, jobs[0].payload, jobs[0].priority) == (kept, {"order": 1}, 3)
        assert [j.payload for j in jobs] == [{"order": 1}, {"order": 3}]


def test_also_runs_in_the_claims_and_the_acks_transaction(make_queue: MakeQueue) -> None:
    q = make_queue()
    pg = isinstance(q.db, PgDatabase)  # also= gets the store's own connection
    mark = "%s" if pg else "?"
    key = "n serial PRIMARY KEY" if pg else "n INTEGER PRIMARY KEY"
    q.db.transact(lambda c: c.execute(f"CREATE TABLE log ({key}, what TEXT, job BIGINT)"))
    ids = q.put_many(["a", "b", "c"])

    def claimed(conn: Any, job_ids: list[int]) -> None:
        conn.cursor().executemany(
            f"INSERT INTO log (what, job) VALUES ('claimed', {mark})", [(i,) for i in job_ids]
        )

    def refuse(conn: Any, job_ids: list[int]) -> None:
        conn.execute("INSERT INTO log (what, job) VALUES ('refused', 0)")
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        q.claim(n=3, also=refuse)  # rolled back together: nothing claimed, nothing logged
    assert q.counts()["ready"] == 3
    jobs = q.claim(n=3, also=claimed)
    other = q.claim(n=1, also=refuse)  # nothing to claim: also is not called
    assert other == []
    q.release(jobs[2:])
    acked: list[list[int]] = []

    def done(conn: Any, job_ids: list[int]) -> None:
        acked.append(job_ids)
        conn.cursor().executemany(
            f"INSERT INTO log (what, job) VALUES ('acked', {mark})", [(i,) for i in job_ids]
        )

    q.ack_many(jobs[:2], also=done)
    rows = q.db.query("SELECT what, job FROM log ORDER BY n")
    assert [tuple(r) for r in rows] == [("claimed", i) for i in ids] + [
        ("acked", ids[0]),
        ("acked", ids[1]),
    ]
    assert acked == [ids[:2]]


def test_worker_on_claim_and_on_ack_see_the_handlers_values(db_path: str) -> None:
    with Queue(db_path) as q:
        q.db.execute("CREATE TABLE results (job INTEGER PRIMARY KEY, value TEXT)")
        q.db.execute("CREATE TABLE started (job INTEGER)")
        ids = q.put_many([1, 2, 3, 4])
        q.put("boom", max_attempts=1)

        def handler(payload: Any) -> Any:
            if payload == "boom":
                raise ValueError("boom")
            return payload * 10

        def on_claim(conn: Any, job_ids: list[int]) -> None:
            conn.executemany("INSERT INTO started VALUES (?)", [(i,) for i in job_ids])

        def on_ack(conn: Any, done: list[tuple[Job, Any]]) -> None:
            conn.executemany("INSERT INTO results VALUES (?, ?)", [(j.id, str(v)) for j, v in done])

        w = Worker(q, handler, concurrency=2, burst=True, on_claim=on_claim, on_ack=on_ack)
        w.run()
        results = dict(q.db.query("SELECT job, value FROM results"))
        assert results == {ids[0]: "10", ids[1]: "20", ids[2]: "30", ids[3]: "40"}
        assert q.db.query("SELECT count(*) FROM started")[0][0] == 5
        assert q.counts()["dead"] == 1  # a raising handler fails as before; no on_ack


def test_also_runs_in_the_releases_transaction(make_queue: MakeQueue) -> None:
    """``release(jobs, also=...)``: the seam a claim's ``also`` needs to undo
    what it recorded for jobs given back unstarted (the Django tasks backend
    uses it through ``Worker(on_release=...)``)."""
    q = make_queue()
    back = job_recorder(q, "given_back")
    ids = q.put_many(["a", "b", "c"])
    jobs = q.claim(n=3)

    def refuse(conn: Any, job_ids: list[int]) -> None:
        back(conn, job_ids)
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        q.release(jobs[0], also=refuse)  # rolled back together
    assert q.get(ids[0]).state == "leased"
    q.release(jobs[:2], also=back)
    rows = q.db.query("SELECT job FROM given_back")
    assert sorted(r[0] for r in rows) == ids[:2]
    assert [q.get(i).state for i in ids] == ["ready", "ready", "leased"]


def test_worker_on_release_runs_for_jobs_given_back_unstarted(db_path: str) -> None:
    import threading

    with Queue(db_path) as q:
        q.db.execute("CREATE TABLE given_back (job INTEGER)")
        ids = q.put_many(["hold", "x", "y"])
        go = threading.Event()

        def handler(payload: Any) -> None:
            go.wait(30)

        def on_release(conn: Any, job_ids: list[int]) -> None:
            conn.executemany("INSERT INTO given_back VALUES (?)", [(i,) for i in job_ids])

        w = Worker(q, handler, concurrency=1, prefetch=2, on_release=on_release)
        runner = threading.Thread(target=w.run)
        runner.start()
        try:
            wait_until(lambda: w.stats()["pending"] == 2, what="two jobs claimed ahead")
            w.stop()
            wait_until(lambda: w.stats()["released"] == 2, what="the two given back")
        finally:
            go.set()
            runner.join(30)
        assert sorted(r[0] for r in q.db.query("SELECT job FROM given_back")) == ids[1:]
