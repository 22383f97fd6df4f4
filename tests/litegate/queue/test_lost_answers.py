"""Exactly-once edges: an ack, fail, extend or release
whose COMMIT happened but whose answer never reached the caller.

The answer is lost on purpose, after the commit:

- on PostgreSQL, the connection is closed as the statement's answer comes
  back (the statement ran in autocommit, so it is committed): the queue's own
  error path turns that into :class:`CommitUnknown`, as for a server that
  went away at that moment. A call with ``also=`` runs in a transaction; its
  answer is lost after the COMMIT returned, with the same error;
- on SQLite, a commit cannot be half-answered by the database, but its
  caller can still miss the answer (a KeyboardInterrupt, or an asyncio task
  cancelled, after the group commit ran its write): the write commits and
  the call raises :class:`LostAnswer` instead of returning.

The same call tried again with the same Job must report what happened: the
work was done, so it succeeds (before, ack, fail and release said LeaseLost).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest

from litegate.queue import CommitUnknown, Job, LeaseLost, Queue, Worker, aio
from litegate.queue._pgdb import PgDatabase
from tests.conftest import wait_until
from tests.litegate.queue.conftest import job_recorder


class LostAnswer(Exception):
    """What a SQLite caller gets instead of the answer of a write that
    committed (stands for a KeyboardInterrupt or a cancellation)."""


def op_of(fn: Any) -> str:
    """Which queue operation a write is: the store function the logic hands
    to ``transact`` (maybe wrapped with the caller's ``also=``), or, inside
    PgDatabase, the merged statement a merger runs (``lambda conn:
    self._run(conn, calls)``)."""
    if isinstance(fn, partial):
        if fn.func.__name__ == "_ack_also":  # ack or release with also=
            return op_of(fn.args[0])
        if fn.func.__name__ == "_finish_then_claim":  # a worker's step: what it settles first
            ack, fails, claim = fn.args
            return op_of(ack) if ack is not None else ("fail" if fails else op_of(claim))
        if fn.func.__name__ == "finish_then_claim":  # the same step, as plain data
            kw = fn.keywords
            return "ack" if kw["ack"] else ("fail" if kw["fails"] else "claim")
        if fn.func.__name__ == "_claim_also":
            return op_of(fn.args[0])
        return str(fn.func.__name__)
    for cell in getattr(fn, "__closure__", None) or ():
        run = getattr(cell.cell_contents, "_run", None)
        if run is not None:
            return str(run.__name__).removesuffix("_merged")
    return ""


@contextlib.contextmanager
def next_answer_lost(q: Queue, op: str, *, committed: bool = True) -> Iterator[type[BaseException]]:
    """The next write of ``q`` that is ``op`` ("ack", "fail", "extend",
    "release") commits (or, with ``committed=False``, does not) and its
    caller gets an error instead of the answer; yields the error's type."""
    db: Any = q.db
    armed = [True]

    def mine(fn: Any) -> bool:
        if armed[0] and op_of(fn) == op:
            armed[0] = False
            return True
        return False

    if isinstance(db, PgDatabase):
        import psycopg

        real_attempt = db._attempt

        def attempt(fn: Callable[[Any], Any], alone: bool, timeout: Any, **kw: Any) -> Any:
            if not mine(fn):
                return real_attempt(fn, alone, timeout, **kw)

            def broken(conn: Any) -> Any:
                if committed:
                    fn(conn)  # autocommit: committed when it returns
                conn.close()  # the answer is lost with the connection
                raise psycopg.OperationalError("server closed the connection unexpectedly")

            if alone:
                return real_attempt(broken, alone, timeout, **kw)
            if committed:  # a transaction: lost after its COMMIT returned
                real_attempt(fn, alone, timeout, **kw)
            raise CommitUnknown("the answer was lost (test)")

        db._attempt = attempt  # type: ignore[method-assign]
        try:
            yield CommitUnknown
        finally:
            del db._attempt
        return

    real_transact = db.transact

    def transact(fn: Callable[[Any], Any], **kw: Any) -> Any:
        if not mine(fn):
            return real_transact(fn, **kw)
        if committed:
            real_transact(fn, **kw)
        raise LostAnswer

    db.transact = transact
    try:
        yield LostAnswer
    finally:
        del db.transact


@pytest.fixture
def q(queue_db: str) -> Iterator[Queue]:
    with Queue(queue_db, "lost") as queue:
        yield queue


def claim_one(q: Queue, **kwargs: Any) -> Job:
    (job,) = q.claim(**kwargs)
    return job


def test_a_retried_ack_whose_answer_was_lost_succeeds(q: Queue) -> None:
    jid = q.put("x")
    job = claim_one(q)
    with next_answer_lost(q, "ack") as lost, pytest.raises(lost):
        q.ack(job)
    assert q.get(jid).state == "done"  # it did commit
    q.ack(job)  # the retry: success, not LeaseLost
    assert q.get(jid).state == "done"
    with pytest.raises(LeaseLost):
        q.ack(job)  # once answered, another ack is a second ack, as before


def test_a_retried_ack_many_runs_its_also_once(q: Queue) -> None:
    record = job_recorder(q, "results")
    ids = q.put_many(["a", "b", "c"])
    jobs = q.claim(n=3)
    with next_answer_lost(q, "ack") as lost, pytest.raises(lost):
        q.ack_many(jobs[:2], also=record)
    q.ack_many(jobs, also=record)  # two done by the lost try, one now
    rows = q.db.query("SELECT job FROM results")
    assert sorted(r[0] for r in rows) == ids  # each result once
    assert [q.get(i).state for i in ids] == ["done"] * 3


@pytest.mark.parametrize(("max_attempts", "state"), [(5, "scheduled"), (1, "dead")])
def test_a_retried_fail_whose_answer_was_lost_reports_the_state(
    q: Queue, max_attempts: int, state: str
) -> None:
    jid = q.put("x", max_attempts=max_attempts)
    job = claim_one(q)
    with next_answer_lost(q, "fail") as lost, pytest.raises(lost):
        q.fail(job, "boom", retry_in=60)
    info = q.get(jid)
    assert (info.state, info.attempts, info.last_error) == (state, 1, "boom")
    assert q.fail(job, "boom", retry_in=60) == state  # recorded once
    info = q.get(jid)
    assert (info.state, info.attempts, info.last_error) == (state, 1, "boom")
    with pytest.raises(LeaseLost):
        q.fail(job, "again")  # once answered, a second fail is refused, as before
    with pytest.raises(LeaseLost):
        q.ack(job)  # a failed job is not acked by its former holder


def test_a_retried_release_whose_answer_was_lost_succeeds(q: Queue) -> None:
    ids = q.put_many(["a", "b"])
    jobs = q.claim(n=2)
    with next_answer_lost(q, "release") as lost, pytest.raises(lost):
        q.release(jobs)
    assert [q.get(i).state for i in ids] == ["ready", "ready"]
    q.release(jobs)  # the retry: success
    with pytest.raises(LeaseLost):
        q.release(jobs[0])
    with pytest.raises(LeaseLost):
        q.fail(jobs[0], "x")  # released is not failed: the marks differ
    again = q.claim(n=2)
    assert [(j.id, j.attempt) for j in again] == [(ids[0], 1), (ids[1], 1)]  # not counted


def test_a_retried_extend_whose_answer_was_lost_succeeds(q: Queue) -> None:
    jid = q.put("x")
    job = claim_one(q, lease=5)
    with next_answer_lost(q, "extend") as lost, pytest.raises(lost):
        q.extend(job, lease=600)
    assert (q.get(jid).lease_until or 0) > job.lease_until + 60  # it did commit
    until = q.extend(job, lease=600)
    assert until == job.lease_until
    q.ack(job)


def test_a_retry_of_a_call_that_did_not_commit_does_the_work(q: Queue) -> None:
    jid = q.put("x")
    job = claim_one(q)
    with next_answer_lost(q, "ack", committed=False) as lost, pytest.raises(lost):
        q.ack(job)
    assert q.get(jid).state == "leased"  # nothing happened
    q.ack(job)
    assert q.get(jid).state == "done"


def test_a_retry_after_the_job_moved_on_is_lease_lost_and_says_why(q: Queue) -> None:
    """The limit of what a job's row can tell: a lost-answer ack that did
    not commit, after which the lease ran out and another worker claimed the
    job, is LeaseLost (true). A lost-answer fail that did commit, after which
    another worker claimed the job: on PostgreSQL the claim overwrote the
    row's token, so the row no longer says who failed it and the retry is
    LeaseLost, with a message that says the earlier try may have been
    recorded, and where to look; on SQLite a claim leaves the job's row as it
    is (the lease has its own table), so the retry finds its committed fail
    and succeeds."""
    jid = q.put("x")
    job = claim_one(q, lease=0.2)
    with next_answer_lost(q, "ack", committed=False) as lost, pytest.raises(lost):
        q.ack(job)
    time.sleep(0.3)
    other = claim_one(q)
    assert other.id == jid
    with pytest.raises(LeaseLost, match="may have been recorded"):
        q.ack(job)
    with next_answer_lost(q, "fail") as lost, pytest.raises(lost):
        q.fail(other, "boom", retry_in=0)
    third = claim_one(q)
    if isinstance(q.db, PgDatabase):
        with pytest.raises(LeaseLost, match=r"q.get\(id\) shows where it is now"):
            q.fail(other, "boom", retry_in=0)
    else:
        assert q.fail(other, "boom", retry_in=0) == "ready"  # what it did when it committed
    info = q.get(jid)
    assert (info.state, info.attempts, info.last_error) == ("leased", 3, "boom")
    q.ack(third)


def test_the_worker_counts_an_ack_whose_answer_was_lost_as_acked(q: Queue) -> None:
    """The worker tries a failed ack again: that retry used to find the jobs
    done and report them as lease lost."""
    ids = q.put_many(list(range(5)))
    with next_answer_lost(q, "ack"):
        w = Worker(q, lambda payload: None, concurrency=5, burst=True, ack_delay=0.05)
        stats = w.run()
    assert [q.get(i).state for i in ids] == ["done"] * 5
    assert (stats["acked"], stats["lease_lost"], stats["errors"]) == (5, 0, 1)


def test_an_aio_ack_cancelled_after_its_commit_is_resolved_on_retry(queue_db: str) -> None:
    """The asyncio face, where a lost answer is ordinary: the task awaiting
    ``ack`` is cancelled after the write committed (the commit runs on
    another thread and does not stop for the cancellation)."""
    import asyncio

    async def main() -> None:
        q = await aio.Queue.open(queue_db, "lost")
        try:
            jid = await q.put("x")
            (job,) = await q.claim()
            db: Any = q.db
            real = db.transact

            async def transact(fn: Callable[[Any], Any], **kw: Any) -> Any:
                del db.transact  # once
                await real(fn, **kw)
                raise asyncio.CancelledError

            db.transact = transact
            with pytest.raises(asyncio.CancelledError):
                await q.ack(job)
            assert (await q.get(jid)).state == "done"
            await q.ack(job)  # the retry: success
            with pytest.raises(LeaseLost):
                await q.ack(job)
        finally:
            await q.close()

    asyncio.run(main())


def test_the_worker_records_a_failure_whose_answer_was_lost_once(queue_db: str) -> None:
    """The worker tries a failed ``fail`` again (while the lease lasts): the
    retry finds the failure recorded, and counts it, once. (Before, it logged
    that recording the failure failed, though it was recorded.)"""

    def handler(payload: Any) -> None:
        raise ValueError("boom")

    with Queue(queue_db, "lost", retry_base=60, retry_max=60) as q:
        jid = q.put("x", max_attempts=3)
        done: dict[str, Any] = {}
        with next_answer_lost(q, "fail"):
            w = Worker(q, handler, concurrency=1)
            runner = threading.Thread(target=lambda: done.update(w.run()))
            runner.start()
            try:
                wait_until(lambda: w.stats()["failed"] == 1, what="the failure recorded")
            finally:
                w.stop()
                runner.join(30)
        info = q.get(jid)
        assert (info.state, info.attempts) == ("scheduled", 1)
        assert (info.last_error or "").startswith("ValueError: boom")
    assert (done["failed"], done["lease_lost"], done["errors"]) == (1, 0, 1)
