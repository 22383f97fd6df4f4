"""What only the PostgreSQL backend has: opening errors, a server restart
mid-run, the worker CLI on a URL, a caller's own psycopg pool. (Everything
else is the shared suite, run on both backends through ``queue_db``.)"""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import litegate
from litegate.queue import CommitUnknown, LeaseLost, PayloadError, Queue, ServerUnavailable, aio
from tests.litegate.queue import procs


def test_an_unreachable_server_is_a_typed_error_that_says_what_to_check(tmp_path: Path) -> None:
    url = f"postgresql://nobody@/none?host={tmp_path}&port=5999"
    with pytest.raises(ServerUnavailable, match="check that the server is running"):
        Queue(url)
    assert issubclass(ServerUnavailable, litegate.OpenError)


def test_wrong_credentials_are_a_typed_error(pg_server: Any) -> None:
    url = pg_server.url_for(password="not-the-password")
    with pytest.raises(litegate.OpenError, match="refused the login") as caught:
        Queue(url)
    assert "not-the-password" not in str(caught.value)  # never echo a password


def test_a_missing_database_is_a_typed_error(pg_server: Any) -> None:
    with pytest.raises(litegate.OpenError, match="create the database"):
        Queue(pg_server.url_for(dbname="no_such_db"))


def test_no_rights_to_create_the_tables_is_a_typed_error_and_changes_nothing(
    pg_server: Any,
) -> None:
    url = pg_server.create_database("no_rights")
    role_url = pg_server.create_role("visitor", "visitor-pw")
    visitor = role_url.replace("/litegate?", "/no_rights?")
    with pytest.raises(litegate.OpenError, match="cannot create the queue's tables"):
        Queue(visitor)
    # Once an owner has created them (and granted use), the visitor's queue works.
    Queue(url).close()
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO visitor"
        )
    with Queue(visitor) as q:
        jid = q.put("hello")
        assert q.get(jid).state == "ready"


def test_a_users_own_pool_is_used_and_left_open(pg_empty: str) -> None:
    from psycopg_pool import ConnectionPool

    pool = ConnectionPool(pg_empty, min_size=1, max_size=2, open=True)
    try:
        with Queue(pool, "mine") as q:
            jid = q.put({"a": 1})
            (job,) = q.claim()
            assert job.id == jid
            q.ack(job)
        with pool.connection() as conn:  # still open after the queue closed
            assert conn.execute("SELECT count(*) FROM litegate_done_jobs").fetchone() == (1,)
    finally:
        pool.close()


def test_claim_wait_is_woken_by_a_put_in_another_process_through_notify(pg_empty: str) -> None:
    """A waiting claimer is woken by LISTEN/NOTIFY, not by its own timer: a
    put from another process reaches it long before its wait runs out."""
    q = Queue(pg_empty, "notify")
    ctx = mp.get_context("spawn")
    p = ctx.Process(target=procs.put_after, args=(pg_empty, "notify", 1.0))
    p.start()
    started = time.monotonic()
    jobs = q.claim(wait=30)
    waited = time.monotonic() - started
    p.join(30)
    assert [j.payload for j in jobs] == ["late"]
    assert waited < 15  # woken by the notification, not the 30 s deadline
    q.close()


def test_the_queue_rides_out_a_server_restart(
    pg_server: Any, pg_empty: str, tmp_path: Path
) -> None:
    """Producers and workers in other processes; the server restarts
    (``pg_ctl restart -m fast``) in the middle. They reconnect and carry on:
    every put that returned ends done, none acked twice."""
    Queue(pg_empty).close()
    ctx = mp.get_context("spawn")
    outs = {
        "p": [tmp_path / f"p{k}.jsonl" for k in range(2)],
        "w": [tmp_path / f"w{k}.jsonl" for k in range(2)],
    }
    ps = [
        ctx.Process(target=procs.produce_forever, args=(pg_empty, str(o), k))
        for k, o in enumerate(outs["p"])
    ] + [
        ctx.Process(target=procs.work_forever, args=(pg_empty, str(o), k))
        for k, o in enumerate(outs["w"])
    ]
    for p in ps:
        p.start()
    try:
        _wait_for_lines(outs["w"], 20)
        before = pg_server.pid
        pg_server.restart()
        assert pg_server.pid != before
        seen = _lines(outs["w"])
        _wait_for_lines(outs["w"], seen + 20)  # workers ack again after the restart
        produced = _lines(outs["p"])
        _wait_for_lines(outs["p"], produced + 5)  # and producers put again
    finally:
        for p in ps:
            if p.pid is not None:
                os.kill(p.pid, signal.SIGKILL)
            p.join(10)
    put_ids = [i for o in outs["p"] for ids in _read(o) for i in ids]
    acked = Counter(i for o in outs["w"] for ids in _read(o) for i in ids)
    q = Queue(pg_empty)
    procs.drain(q, acked)
    assert max(acked.values()) == 1  # nothing acked twice
    assert {i for i in set(put_ids) if q.get(i).state == "done"} == set(put_ids)
    assert q.counts()["dead"] == 0
    q.close()


def _read(path: Path) -> list[Any]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):  # a killed process's torn line
            out.append(json.loads(line))
    return out


def _lines(paths: list[Path]) -> int:
    return sum(len(_read(p)) for p in paths)


def _wait_for_lines(paths: list[Path], n: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while _lines(paths) < n:
        if time.monotonic() > deadline:
            pytest.fail(f"the processes wrote {_lines(paths)} lines, not {n}, in {timeout} s")
        time.sleep(0.05)


def test_server_gone_for_longer_than_reconnect_is_server_unavailable(pg_server: Any) -> None:
    """A call retries while the server is away, up to ``reconnect`` seconds,
    then raises ServerUnavailable; nothing half-done is left."""
    url = pg_server.create_database("gone")
    from litegate.queue._pgdb import PgDatabase

    db = PgDatabase(url, reconnect=1.0)
    q = Queue(db, "gone")
    jid = q.put("kept")
    pg_server.stop()
    try:
        started = time.monotonic()
        with pytest.raises(ServerUnavailable, match="unreachable for 1 s"):
            q.put("lost?")
        assert time.monotonic() - started >= 1.0
    finally:
        pg_server.start()
    assert q.get(jid).state == "ready"
    assert q.counts()["ready"] == 1  # the failed put stored nothing
    q.close()
    db.close()
    assert CommitUnknown.__doc__  # the other outcome of a broken connection is documented


def test_aio_queue_on_postgres_opens_from_a_url(pg_empty: str) -> None:
    import asyncio

    async def main() -> list[Any]:
        q = await aio.Queue.open(pg_empty, "a")
        try:
            await q.put_many([1, 2, 3])
            jobs = await q.claim(n=5)
            await q.ack_many(jobs)
            return [j.payload for j in jobs]
        finally:
            await q.close()

    assert asyncio.run(main()) == [1, 2, 3]


def test_the_worker_cli_runs_every_job_once_on_a_url(pg_empty: str, tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    with Queue(pg_empty, "cli") as q:
        q.put_many([{"n": i, "out": str(out)} for i in range(20)])
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "litegate",
            "worker",
            "tests.litegate.queue.handlers:record",
            "--db",
            pg_empty,
            "--queue",
            "cli",
            "--processes",
            "2",
            "--burst",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    seen = Counter(json.loads(line)["n"] for line in out.read_text().splitlines())
    assert seen == Counter(range(20))
    with Queue(pg_empty, "cli") as q:
        assert q.counts()["done"] == 20


def test_hot_statements_use_their_indexes(pg_empty: str) -> None:
    """With many finished jobs, claims, sweeps, acks, due times and dead
    letters go through their indexes: none scans the table."""
    import psycopg

    from litegate.queue import _postgres

    with Queue(pg_empty, "idx") as q:
        for _ in range(4):
            q.put_many(list(range(1000)))
            q.ack_many(q.claim(n=1000))
        q.put_many(list(range(10)))
    statements: list[tuple[str, Any]] = [
        (_postgres._claim_sql(10), {"queue": "idx", "tokens": [1] * 10, "lease": 30.0}),
        (_postgres._ACK, ([1, 2], [1, 1])),
        (_postgres._ACK_ONE, (1, 1)),
        (_postgres.NEXT_DUE, {"queue": "idx", "now": 1.0}),
        (_postgres.SELECT_DEAD, {"queue": "idx", "limit": 10}),
    ]
    with psycopg.connect(pg_empty, autocommit=True) as conn:
        conn.execute("ANALYZE litegate_jobs")
        for sql, params in statements:
            plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql, params))
            assert "Seq Scan" not in plan, plan


def test_concurrent_one_job_calls_share_statements_and_stay_exact(pg_empty: str) -> None:
    """8 threads put, claim and ack one job per call. Calls that arrive
    together share a statement (group commit), and each still gets exactly
    its own result: every job put once, claimed by one claim, with that
    claim's own token, acked once."""
    import threading

    q = Queue(pg_empty, "merge")
    put_ids: list[int] = []
    claimed: list[Any] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def produce() -> None:
        start.wait()
        mine = [q.put({"n": i}) for i in range(60)]
        with lock:
            put_ids.extend(mine)

    def consume() -> None:
        start.wait()
        idle = 0
        while idle < 20:
            jobs = q.claim(n=1)
            if not jobs:
                idle += 1
                time.sleep(0.01)
                continue
            idle = 0
            q.ack(jobs[0])
            with lock:
                claimed.append(jobs[0])

    threads = [threading.Thread(target=produce) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    consumers = [threading.Thread(target=consume) for _ in range(8)]
    start.reset()
    for t in consumers:
        t.start()
    for t in consumers:
        t.join(60)
    assert len(put_ids) == len(set(put_ids)) == 480
    assert sorted(j.id for j in claimed) == sorted(put_ids)
    assert len({j.token for j in claimed}) == 480  # each claim its own token
    assert q.counts() == {"ready": 0, "scheduled": 0, "leased": 0, "done": 480, "dead": 0}
    merged = q.stats()["db"]["merged"]
    assert merged["put"]["calls"] == 480
    assert merged["ack"]["calls"] == 480
    assert merged["put"]["statements"] < 480  # some statements carried several puts
    with pytest.raises(LeaseLost):
        q.ack(claimed[0])  # acked once only
    q.close()


def test_a_payload_postgres_refuses_fails_alone_as_a_payload_error(pg_empty: str) -> None:
    """jsonb cannot hold the NUL character: that put fails with a
    PayloadError saying so; puts merged with it in one statement still land."""
    import threading

    q = Queue(pg_empty, "nul")
    errors: list[BaseException] = []
    ids: list[int] = []

    def put(payload: Any) -> None:
        try:
            ids.append(q.put(payload))
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=put, args=(p,)) for p in ["a", "b\x00", "c", "d"] * 5]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(ids) == 15
    assert len(errors) == 5
    assert all(isinstance(e, PayloadError) and "NUL" in str(e) for e in errors), errors
    assert q.counts()["ready"] == 15
    q.close()


def test_a_claim_dates_its_lease_from_when_it_ran_not_from_when_its_transaction_began(
    pg_empty: str,
) -> None:
    """A backend can stall between starting a statement's transaction (which
    fixes ``now()``) and taking its snapshot; meanwhile another claim may
    sweep an expired lease back to the line. A claim that then takes the job
    must not date its lease from before the previous lease ended, or two
    leases of one job overlap on the record. Here the stall is an open
    transaction, made deterministic."""
    import psycopg

    from litegate.queue import _postgres as store

    q = Queue(pg_empty, name="q")
    first_id = q.put("first")
    (first,) = q.claim(lease=0.2)
    with psycopg.connect(pg_empty, autocommit=False) as late:
        late.execute("SELECT now()")  # the transaction's now() is fixed here
        while time.time() < first.lease_until + 0.05:
            time.sleep(0.01)
        # Another claim sweeps the expired lease (it takes the urgent job instead).
        q.put("urgent", priority=10)
        (urgent,) = q.claim(lease=5)
        assert urgent.payload == "urgent"
        assert q.get(first_id).state == "ready"
        rows, until = store.claim(late, "q", 1, 0.2, token=7)
        late.commit()
    assert [r[0] for r in rows] == [first_id]
    assert until - 0.2 >= first.lease_until
    q.close()


def test_a_claim_runs_on_a_cached_plan(pg_empty: str) -> None:
    """psycopg prepares a statement run often; PostgreSQL then either reuses
    one generic plan or plans each execution anew. The claim must get the
    cached plan: planning it took twice as long as running it."""
    import psycopg

    from litegate.queue import _postgres as store

    with Queue(pg_empty, name="q") as q:  # a queue in use: jobs done, waiting, leased
        q.put_many(list(range(10_000)))
        q.ack_many(q.claim(n=5000))
        q.claim(n=8, lease=300)
    with psycopg.connect(pg_empty, autocommit=True) as conn:
        conn.execute("ANALYZE litegate_jobs")  # as autovacuum soon would
        for _ in range(20):  # psycopg prepares it at the 6th
            store.claim(conn, "q", 1, 30.0, token=1)
        plans = conn.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE '%clock_timestamp()%'"
        ).fetchall()
    assert len(plans) == 1
    generic, custom = plans[0]
    # PostgreSQL tries 5 custom plans before it weighs the generic one.
    assert (generic, custom) == (10, 5), plans
