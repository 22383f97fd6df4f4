"""The queue's behaviour, on every face (see conftest.py): order, leases and
their tokens, retries, dead letters, dedupe, inspection and bad input."""

from __future__ import annotations

import asyncio
import copy
import math
import sqlite3
import sys
import threading
import time
from contextlib import closing
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

import litegate
import litegate.queue.aio
from litegate.queue import (
    STATES,
    DuplicateJob,
    Job,
    JobNotFound,
    LeaseLost,
    PayloadError,
    Queue,
    _core,
)
from litegate.queue._pgdb import PgDatabase
from tests.litegate.queue.conftest import MakeQueue


def state_of(q: Any, jid: int) -> str:
    info = q.get(jid)
    assert isinstance(info.state, str)
    return info.state


def test_put_claim_ack_round_trip(make_queue: MakeQueue) -> None:
    q = make_queue()
    payload = {"to": "ada@example.org", "n": [1, 2.5, None, True], "s": "é"}
    jid = q.put(payload)
    assert state_of(q, jid) == "ready"
    (job,) = q.claim()
    assert (job.id, job.payload, job.attempt, job.priority, job.max_attempts) == (
        jid,
        payload,
        1,
        0,
        5,
    )
    assert job.lease_until == pytest.approx(time.time() + 30.0, abs=5)
    assert state_of(q, jid) == "leased"
    assert q.claim() == []  # nothing else to claim
    q.ack(job)
    info = q.get(jid)
    assert (info.state, info.attempts, info.payload) == ("done", 1, payload)
    assert info.done_at is not None
    assert q.counts() == {"ready": 0, "scheduled": 0, "leased": 0, "done": 1, "dead": 0}


def test_claim_order_priority_then_oldest(make_queue: MakeQueue) -> None:
    q = make_queue()
    low = q.put_many(["l1", "l2"], priority=0)
    high = q.put("h", priority=10)
    mid = q.put_many(["m1", "m2"], priority=5)
    jobs = q.claim(n=10)
    assert [j.id for j in jobs] == [high, *mid, *low]
    assert [j.payload for j in jobs] == ["h", "m1", "m2", "l1", "l2"]
    # every job of one claim carries the same fresh token; claims differ
    assert len({j.token for j in jobs}) == 1


def test_claims_of_n_take_exactly_the_next_n_in_order(make_queue: MakeQueue) -> None:
    """A claim of n takes the first n waiting jobs and leaves the rest, in
    order, for the next claim; the last claim gets what is left."""
    q = make_queue()
    low = q.put_many(["l1", "l2", "l3"], priority=0)
    high = q.put_many(["h1", "h2"], priority=7)
    taken = [[j.id for j in q.claim(n=2)] for _ in range(3)]
    assert taken == [high, low[:2], low[2:]]
    assert q.claim(n=2) == []
    assert q.counts() == {"ready": 0, "scheduled": 0, "leased": 5, "done": 0, "dead": 0}


def test_ack_many_across_claims_and_extended_leases(make_queue: MakeQueue) -> None:
    """One ack_many of jobs from two claims, some of them extended (a new
    lease end) and some not, finishes every one of them."""
    q = make_queue()
    ids = q.put_many(range(6))
    first, second = q.claim(n=3), q.claim(n=3)
    q.extend_many([first[0], second[2]], lease=120)
    q.ack_many([*second, *first])
    assert q.counts() == {"ready": 0, "scheduled": 0, "leased": 0, "done": 6, "dead": 0}
    assert {q.get(i).state for i in ids} == {"done"}


def test_ack_many_with_a_stale_lease_end_still_acks_every_job(make_queue: MakeQueue) -> None:
    """Job objects whose lease end is out of date for one of them (its
    extend was answered to another copy, as when an answer is lost): the
    one job is found by its id and token, the other two by their key."""
    q = make_queue()
    ids = q.put_many(range(3))
    jobs = q.claim(n=3)
    stale = [copy.copy(j) for j in jobs]
    q.extend(jobs[1], lease=120)
    assert stale[1].lease_until != jobs[1].lease_until
    q.ack_many(stale)
    assert [state_of(q, i) for i in ids] == ["done", "done", "done"]
    assert q.counts() == {"ready": 0, "scheduled": 0, "leased": 0, "done": 3, "dead": 0}


def test_put_many_returns_ids_in_order(make_queue: MakeQueue) -> None:
    q = make_queue()
    first = q.put("a")
    ids = q.put_many([{"i": i} for i in range(250)])
    assert ids == list(range(first + 1, first + 251))
    assert [q.get(i).payload for i in (ids[0], ids[137], ids[-1])] == [
        {"i": 0},
        {"i": 137},
        {"i": 249},
    ]
    assert q.put_many([]) == []
    assert q.put_many(iter(["x"])) == [ids[-1] + 1]


# Objects and arrays (put_many's one-array path) and scalars among them (one
# body each): what comes back is what went in, in order.
ODD_PAYLOADS: list[Any] = [
    {"a": 1},
    [],
    {},
    {"é": 'ü\u2028"\\/', "n": None, "t": True, "f": False, "2": [2]},
    [1.5, 0.1 + 0.2, 10**40, -(2**63), 5e-324],
    {"deep": [[[{"x": [1, {"y": []}]}]]]},
    ["x" * 5000],
]


def test_put_many_gives_back_every_payload_as_put(make_queue: MakeQueue) -> None:
    q = make_queue()
    ids = q.put_many(ODD_PAYLOADS)
    mixed = q.put_many(["s", 7, None, {"a": [1]}, 2.5])
    jobs = q.claim(n=20)
    assert [j.id for j in jobs] == ids + mixed
    assert [j.payload for j in jobs] == [*ODD_PAYLOADS, "s", 7, None, {"a": [1]}, 2.5]


def test_put_many_stores_the_text_put_would(db_path: str) -> None:
    """put_many encodes its payloads as one array and lets SQLite split it:
    each row's text must be exactly the payload's own encoding (what put()
    stores), not a re-rendering."""
    from litegate.queue._core import _ENCODE

    q = Queue(db_path)
    # (PostgreSQL's jsonb keeps numbers as numerics: 1e300 comes back an int.)
    payloads = [*ODD_PAYLOADS, [1e300, -0.0, 1e-7]]
    ids = q.put_many(payloads) + [q.put(p) for p in payloads]
    q.close()
    with closing(sqlite3.connect(db_path)) as conn:
        texts = [
            conn.execute("SELECT payload FROM litegate_queue_jobs WHERE id = ?", (i,)).fetchone()[0]
            for i in ids
        ]
    assert texts == [_ENCODE(p) for p in payloads] * 2


def test_claim_n_takes_at_most_n(make_queue: MakeQueue) -> None:
    q = make_queue()
    q.put_many(list(range(7)))
    assert [j.payload for j in q.claim(n=3)] == [0, 1, 2]
    assert [j.payload for j in q.claim(n=10)] == [3, 4, 5, 6]
    assert q.counts()["leased"] == 7


def test_queues_are_separate(make_queue: MakeQueue) -> None:
    a, b = make_queue("a"), make_queue("b")
    ja = a.put("for a")
    b.put("for b")
    assert [j.payload for j in b.claim(n=5)] == ["for b"]
    with pytest.raises(JobNotFound):
        b.get(ja)
    assert a.counts()["ready"] == 1


def test_delay_schedules(make_queue: MakeQueue) -> None:
    q = make_queue()
    later = q.put("later", delay=0.4)
    now = q.put("now")
    assert state_of(q, later) == "scheduled"
    assert q.counts()["scheduled"] == 1
    assert [j.id for j in q.claim(n=5)] == [now]
    time.sleep(0.45)
    assert state_of(q, later) == "ready"
    assert [j.id for j in q.claim(n=5)] == [later]


def test_claim_wait_is_woken_by_a_put_in_this_process(make_queue: MakeQueue) -> None:
    q = make_queue()
    timer = threading.Timer(0.2, lambda: q.put("late"))
    timer.start()
    # Without a wake-up the claim would return [] after 30 s; it gets the job.
    jobs = q.claim(wait=30)
    timer.join()
    assert [j.payload for j in jobs] == ["late"]


def test_claim_wait_returns_empty_after_wait(make_queue: MakeQueue) -> None:
    q = make_queue()
    t0 = time.monotonic()
    assert q.claim(wait=0.2) == []
    assert time.monotonic() - t0 >= 0.19


def test_claim_wait_sleeps_until_a_scheduled_job_is_due(make_queue: MakeQueue) -> None:
    q = make_queue()
    jid = q.put("soon", delay=0.3)
    assert [j.id for j in q.claim(wait=30)] == [jid]


def test_stale_ack_after_reclaim_raises_and_changes_nothing(make_queue: MakeQueue) -> None:
    q = make_queue()
    jid = q.put("x")
    (old,) = q.claim(lease=0.1)
    time.sleep(0.15)
    (new,) = q.claim(lease=30)  # the lease ran out: somebody else has it now
    assert (new.id, new.attempt) == (jid, 2)
    for call in (q.ack, q.extend, q.fail, q.release):
        with pytest.raises(LeaseLost) as info:
            call(old)
        assert info.value.job_ids == [jid]
        assert "no longer" in str(info.value)
    after = q.get(jid)
    assert (after.state, after.attempts, after.last_error) == ("leased", 2, after.last_error)
    q.ack(new)  # the new holder is unaffected
    assert state_of(q, jid) == "done"
    with pytest.raises(LeaseLost):
        q.ack(new)  # never acked twice


def test_late_ack_of_an_expired_lease_nobody_took_succeeds(make_queue: MakeQueue) -> None:
    q = make_queue()
    jid = q.put("x")
    (job,) = q.claim(lease=0.1)
    time.sleep(0.15)
    q.ack(job)  # expired, but nobody claimed it since: the work is not lost
    assert state_of(q, jid) == "done"
    # The same after a sweep has sent it back to the queue, unclaimed.
    jid2 = q.put("y")
    (job2,) = q.claim(lease=0.1)
    time.sleep(0.15)
    urgent = q.put("urgent", priority=9)
    (first,) = q.claim(n=1)  # sweeps job2 back to ready, but takes the urgent one
    assert first.id == urgent
    assert state_of(q, jid2) == "ready"
    q.ack(job2)  # its token is still the latest
    assert state_of(q, jid2) == "done"
    with pytest.raises(LeaseLost):
        q.ack(job2)


def test_extend_keeps_the_job(make_queue: MakeQueue) -> None:
    q = make_queue()
    q.put("long")
    (job,) = q.claim(lease=0.2)
    until = q.extend(job, lease=30)
    assert until == job.lease_until
    assert until == pytest.approx(time.time() + 30, abs=5)
    time.sleep(0.25)
    assert q.claim() == []  # not handed to anybody else
    q.ack(job)


def test_fail_backs_off_then_dead_letters(make_queue: MakeQueue) -> None:
    q = make_queue(retry_base=0.05, retry_max=0.1)
    jid = q.put({"task": 1}, max_attempts=3)
    for attempt in (1, 2):
        (job,) = q.claim(wait=5)
        assert (job.attempt, job.last_attempt) == (attempt, False)
        assert q.fail(job, error=f"boom {attempt}") == "scheduled"
        info = q.get(jid)
        assert (info.state, info.last_error) == ("scheduled", f"boom {attempt}")
        # back-off: base * 2**(attempt-1), capped, +-25 %
        wanted = min(0.1, 0.05 * 2 ** (attempt - 1))
        assert 0.75 * wanted - 0.05 <= info.run_at - time.time() <= 1.25 * wanted
    (job,) = q.claim(wait=5)
    assert (job.attempt, job.last_attempt) == (3, True)
    assert q.fail(job, error="final") == "dead"
    (dead,) = q.dead()
    assert (dead.id, dead.state, dead.attempts, dead.last_error) == (jid, "dead", 3, "final")
    assert q.counts()["dead"] == 1
    assert q.claim(wait=0.2) == []
    assert q.retry_dead([jid]) == 1
    (job,) = q.claim()
    assert (job.id, job.attempt) == (jid, 1)
    q.ack(job)


def test_fail_retry_in_and_zero(make_queue: MakeQueue) -> None:
    q = make_queue()
    jid = q.put("x")
    (job,) = q.claim()
    assert q.fail(job, "again now", retry_in=0) == "ready"
    (job,) = q.claim()
    assert job.attempt == 2
    assert q.fail(job, "in a minute", retry_in=60) == "scheduled"
    assert q.get(jid).run_at == pytest.approx(time.time() + 60, abs=5)


def test_backoff_is_exponential_capped_and_jittered() -> None:
    core = _core.Core("q", retry_base=1.0, retry_max=30.0)
    for attempt, base in ((1, 1.0), (2, 2.0), (3, 4.0), (5, 16.0), (6, 30.0), (500, 30.0)):
        delays = [core.backoff(attempt) for _ in range(200)]
        assert all(0.75 * base <= d <= min(30.0, 1.25 * base) for d in delays)
        if base < 30:
            assert len(set(delays)) > 100  # jittered


def test_expired_lease_on_last_attempt_goes_dead(make_queue: MakeQueue) -> None:
    q = make_queue()
    jid = q.put("x", max_attempts=1)
    (job,) = q.claim(lease=0.1)
    time.sleep(0.15)
    assert q.claim() == []  # the sweep: out of attempts, so dead, not ready
    info = q.get(jid)
    assert info.state == "dead"
    assert "lease expired" in (info.last_error or "")
    # Dead is final for the late worker: ack and extend agree that it lost it.
    with pytest.raises(LeaseLost):
        q.extend(job)
    with pytest.raises(LeaseLost):
        q.ack(job)
    assert q.get(jid).state == "dead"


def test_release_does_not_count_the_attempt_and_keeps_the_place(
    make_queue: MakeQueue,
) -> None:
    q = make_queue()
    ids = q.put_many(["a", "b", "c"])
    jobs = q.claim(n=2)
    q.release(jobs)
    assert q.counts()["ready"] == 3
    again = q.claim(n=3)
    assert [j.id for j in again] == ids
    assert [j.attempt for j in again] == [1, 1, 1]
    q.release(again[0])
    with pytest.raises(LeaseLost):
        q.release(again[0])


def test_ack_many_acks_the_rest_and_reports_the_lost(make_queue: MakeQueue) -> None:
    q = make_queue()
    ids = q.put_many(range(4))
    jobs = q.claim(n=4, lease=0.1)
    time.sleep(0.15)
    (taken,) = q.claim(n=1, lease=30)  # ids[0] is someone else's now
    assert taken.id == ids[0]
    with pytest.raises(LeaseLost) as info:
        q.ack_many(jobs)
    assert info.value.job_ids == [ids[0]]
    assert "the other 3 were acked" in str(info.value)
    assert [state_of(q, i) for i in ids] == ["leased", "done", "done", "done"]
    q.ack_many([])  # nothing to do


def test_dedupe_key_while_not_done(make_queue: MakeQueue) -> None:
    q = make_queue()
    first = q.put("a", key="user-7")
    with pytest.raises(DuplicateJob) as info:
        q.put("b", key="user-7")
    assert (info.value.key, info.value.existing_id) == ("user-7", first)
    assert "user-7" in str(info.value)
    assert q.counts()["ready"] == 1  # nothing stored
    other = q.put("c", key="user-8")
    (job, job2) = q.claim(n=2)
    q.ack(job)
    again = q.put("d", key="user-7")  # done: the key is free again
    assert again not in (first, other)
    q.fail(job2, "x", retry_in=0)  # user-8 stays taken through retries
    with pytest.raises(DuplicateJob):
        q.put("e", key="user-8")
    assert make_queue("other-queue").put("f", key="user-7") > 0  # keys are per queue


def test_counts_every_state(make_queue: MakeQueue) -> None:
    q = make_queue()
    q.put_many(["r1", "r2"])
    q.put("s", delay=60)
    q.put("to-lease", priority=9)
    q.put("to-ack", priority=8)
    q.put("to-kill", priority=7, max_attempts=1)
    leased, to_ack, to_kill = q.claim(n=3)
    q.ack(to_ack)
    q.fail(to_kill, "x")
    counts = q.counts()
    assert counts == {"ready": 2, "scheduled": 1, "leased": 1, "done": 1, "dead": 1}
    assert tuple(counts) == STATES
    assert leased.payload == "to-lease"


def test_purge_done_and_dead(make_queue: MakeQueue, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_core, "PURGE_CHUNK", 7)  # several transactions
    q = make_queue()
    q.put_many(range(20))
    q.ack_many(q.claim(n=20))
    dead = q.put("d", max_attempts=1)
    q.fail(q.claim()[0], "x")
    keep = q.put("still here")
    assert q.purge(done_before=time.time() - 3600) == 0  # none that old
    cutoff = datetime.now(timezone.utc) + timedelta(seconds=1)
    assert q.purge(done_before=cutoff) == 20
    assert q.counts() == {"ready": 1, "scheduled": 0, "leased": 0, "done": 0, "dead": 1}
    assert q.purge(dead_before=time.time() + 1) == 1
    with pytest.raises(JobNotFound):
        q.get(dead)
    assert state_of(q, keep) == "ready"
    with pytest.raises(litegate.ConfigError, match="done_before"):
        q.purge()
    with pytest.raises(litegate.ConfigError, match="aware"):
        q.purge(done_before=datetime.now())


def test_purge_with_a_limit_deletes_at_most_that_many(
    make_queue: MakeQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_core, "PURGE_CHUNK", 4)  # a limit across several transactions
    q = make_queue()
    q.put_many(range(11))
    q.ack_many(q.claim(n=11))
    q.put("newest")  # (the table's newest row is never purged)
    later = time.time() + 1
    assert q.purge(done_before=later, limit=6) == 6
    assert q.counts()["done"] == 5
    assert q.purge(done_before=later, limit=1) == 1
    assert q.purge(done_before=later, limit=100) == 4
    assert q.counts()["done"] == 0
    for bad in (0, -1, 2.5, True, "3"):
        with pytest.raises(litegate.ConfigError, match="limit"):
            q.purge(done_before=later, limit=bad)


def test_next_due_says_when_the_next_job_can_be_claimed(make_queue: MakeQueue) -> None:
    q = make_queue()
    assert q.next_due() is None  # nothing waiting
    q.put("later", delay=120)
    due = q.next_due()
    assert due is not None
    assert time.time() + 110 < due < time.time() + 130
    q.put("now")
    now_due = q.next_due()
    assert now_due is not None
    assert now_due <= time.time()
    q.claim()
    q.claim(n=5)  # (the delayed one is not due: claims nothing)
    assert q.next_due() is not None  # the leased job's lease and the delayed job remain


def test_retry_dead_unknown_ids_change_nothing(make_queue: MakeQueue) -> None:
    q = make_queue()
    jid = q.put("x", max_attempts=1)
    q.fail(q.claim()[0], "x")
    with pytest.raises(JobNotFound) as info:
        q.retry_dead([jid, 999_999])
    assert info.value.job_ids == [999_999]
    assert "999999" in str(info.value)
    assert state_of(q, jid) == "dead"
    assert q.retry_dead() == 1  # all of them
    assert state_of(q, jid) == "ready"


def _nested(depth: int) -> list[Any]:
    deep: list[Any] = []
    for _ in range(depth):
        deep = [deep]
    return deep


def _self_referring() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


BAD_PUTS: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"payload": _nested(100_000)}, PayloadError, "nested too deeply"),
    ({"payload": _self_referring()}, PayloadError, "JSON|nested"),
    ({"payload": {1, 2}}, PayloadError, "JSON"),
    ({"payload": math.nan}, PayloadError, "JSON"),
    ({"payload": b"bytes"}, PayloadError, "JSON"),
    ({"payload": 1, "delay": -1}, litegate.ConfigError, "delay"),
    ({"payload": 1, "delay": math.nan}, litegate.ConfigError, "delay"),
    ({"payload": 1, "delay": math.inf}, litegate.ConfigError, "delay"),
    ({"payload": 1, "delay": "5"}, litegate.ConfigError, "delay"),
    ({"payload": 1, "max_attempts": 0}, litegate.ConfigError, "max_attempts"),
    ({"payload": 1, "priority": 1.5}, litegate.ConfigError, "priority"),
    ({"payload": 1, "priority": 2**70}, litegate.ConfigError, "priority"),
    ({"payload": 1, "key": ""}, litegate.ConfigError, "key"),
]


@pytest.mark.parametrize(("kwargs", "error", "words"), BAD_PUTS)
def test_bad_put_is_a_typed_error_and_stores_nothing(
    make_queue: MakeQueue, kwargs: dict[str, Any], error: type[Exception], words: str
) -> None:
    q = make_queue()
    q.put("kept")
    with pytest.raises(error, match=words) as info:
        q.put(**kwargs)
    assert isinstance(info.value, litegate.Error)
    if "key" not in kwargs:  # put_many takes no key; the rest the same way
        rest = {k: v for k, v in kwargs.items() if k != "payload"}
        bad = kwargs["payload"]
        # (objects only take put_many's one-array path; with a scalar, one by one)
        for batch in (["fine", bad], [{"fine": 1}, {"in": bad}]):
            with pytest.raises(error, match=words):
                q.put_many(batch if error is PayloadError else batch[:1], **rest)
    assert q.counts()["ready"] == 1


def test_a_payload_the_claimer_cannot_decode_fails_alone(make_queue: MakeQueue) -> None:
    """A payload stored by a producer with other limits (here: no limit on
    integer digits) that the claiming process cannot decode: the claim
    returns the healthy jobs it took with it, the bad one goes to the dead
    letters with a PayloadError naming it, and every listing still works
    (the payload shows as UndecodablePayload). It once failed the whole
    claim, after the commit, and both jobs died of "lease expired"."""
    from litegate.queue import UndecodablePayload

    q = make_queue()
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        bad = q.put({"n": 10**5000}, max_attempts=3)
    finally:
        sys.set_int_max_str_digits(limit)
    ok = q.put({"ok": 1})
    jobs = q.claim(n=10)
    assert [(j.id, j.payload) for j in jobs] == [(ok, {"ok": 1})]
    q.ack(jobs[0])
    assert q.counts() == {"ready": 0, "scheduled": 0, "leased": 0, "done": 1, "dead": 1}
    (dead,) = q.dead()
    assert dead.id == bad
    assert isinstance(dead.payload, UndecodablePayload)
    assert dead.payload.text.replace(" ", "").startswith('{"n":1000')  # (jsonb adds a space)
    assert "digits" in dead.payload.reason
    assert dead.last_error is not None
    assert dead.last_error.startswith(f"PayloadError: the payload of job {bad} ")
    assert f"q.retry_dead([{bad}])" in dead.last_error
    assert dead.attempts == 1
    assert isinstance(q.get(bad).payload, UndecodablePayload)
    assert q.retry_dead([bad]) == 1  # a process with the producer's limits can take it
    sys.set_int_max_str_digits(0)
    try:
        (again,) = q.claim()
    finally:
        sys.set_int_max_str_digits(limit)
    assert again.id == bad
    assert again.payload == {"n": 10**5000}


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"n": 0}, "n must be at least 1"),
        ({"n": 1.0}, "n must be a whole number"),
        ({"lease": 0}, "lease"),
        ({"lease": -1}, "lease"),
        ({"lease": math.nan}, "lease"),
        ({"lease": 1e12}, "lease must be at most"),
        ({"wait": -1}, "wait"),
    ],
)
def test_bad_claim_is_a_typed_error(
    make_queue: MakeQueue, kwargs: dict[str, Any], words: str
) -> None:
    q = make_queue()
    q.put("kept")
    with pytest.raises(litegate.ConfigError, match=words):
        q.claim(**kwargs)
    assert q.counts()["ready"] == 1


def test_unknown_ids_and_foreign_objects(make_queue: MakeQueue) -> None:
    q = make_queue()
    with pytest.raises(JobNotFound, match="no job 12345") as info:
        q.get(12345)
    assert isinstance(info.value, KeyError)
    assert isinstance(info.value, litegate.Error)
    with pytest.raises(litegate.ConfigError, match="Job objects"):
        q.ack({"id": 1})
    with pytest.raises(litegate.ConfigError, match="list"):
        q.put_many({"not": "a list"})
    with pytest.raises(litegate.ConfigError, match="extend"):
        q.extend(None)


def test_bad_construction(db_path: str, tmp_path: Any) -> None:
    with pytest.raises(litegate.ConfigError, match="name"):
        Queue(db_path, name="")
    with pytest.raises(litegate.ConfigError, match="retry_max"):
        Queue(db_path, retry_base=10, retry_max=1)
    with (
        closing(sqlite3.connect(":memory:")) as conn,
        pytest.raises(litegate.ConfigError, match=r"litegate\.Database"),
    ):
        Queue(conn)  # type: ignore[arg-type]
    with pytest.raises(litegate.OpenError, match="does not exist"):
        Queue(str(tmp_path / "missing" / "q.db"))


def test_a_queue_opened_from_a_path_uses_the_strict_gate(db_path: str) -> None:
    """Queue(path) opens its database with Queue.FAIR (strict FIFO, measured
    faster for queue calls); a Database passed in keeps its own policy."""
    assert Queue.FAIR == "strict"
    q = Queue(db_path)
    assert q.db.stats()["gate"]["policy"] == "strict"
    q.close()
    with litegate.connect(db_path) as db:
        q = Queue(db)
        assert db.stats()["gate"]["policy"] == "bounded"
        q.close()


def test_an_asyncio_queue_opened_from_a_path_uses_the_strict_gate(db_path: str) -> None:
    async def main() -> str:
        q = await litegate.queue.aio.Queue.open(db_path)
        try:
            policy: str = q.db.sync.stats()["gate"]["policy"]
            return policy
        finally:
            await q.close()

    assert asyncio.run(main()) == "strict"


def test_a_failing_statement_loses_nothing_committed(db_path: str) -> None:
    """A SQL error inside a claim or ack reaches its caller only: jobs stay."""
    q = Queue(db_path)
    ids = q.put_many(range(3))
    fake = Job(ids[0], None, 1, 0, time.time() + 30, 5, "default", token=123)
    with pytest.raises(LeaseLost):
        q.ack(fake)  # a token that never was ours
    assert q.counts()["ready"] == 3
    q.close()


def test_threads_each_job_once(db_path: str) -> None:
    """8 producer threads and 8 claiming threads on one Queue: every job is
    acked exactly once, none lost, and calls were group-committed."""
    q = Queue(db_path)
    per, threads = 150, 8
    acked: list[int] = []
    lock = threading.Lock()
    put_ids: list[int] = []
    producing = threading.Event()

    def produce(k: int) -> None:
        mine = [q.put({"k": k, "i": i}) for i in range(per)]
        with lock:
            put_ids.extend(mine)

    def consume() -> None:
        while True:
            jobs = q.claim(n=1, wait=0.2)
            if not jobs:
                if not producing.is_set():
                    return
                continue
            q.ack(jobs[0])
            with lock:
                acked.append(jobs[0].id)

    producing.set()
    consumers = [threading.Thread(target=consume) for _ in range(threads)]
    producers = [threading.Thread(target=produce, args=(k,)) for k in range(threads)]
    for t in consumers + producers:
        t.start()
    for t in producers:
        t.join()
    producing.clear()
    for t in consumers:
        t.join()
    assert len(put_ids) == per * threads == len(set(put_ids))
    assert sorted(acked) == sorted(put_ids)
    assert q.counts()["done"] == per * threads
    batches = q.db.stats()["writes"]["group_commit"]
    assert batches["max"] > 1  # concurrent calls shared transactions
    assert f"acked={per * threads}" in repr(q)
    assert q.stats()["counters"]["acked"] == per * threads
    q.close()


def test_claim_wait_keeps_the_due_time_across_unrelated_commits(make_queue: MakeQueue) -> None:
    """A commit that brings no work wakes the waiting claimer; it must still
    claim the scheduled job when it falls due, not sleep out its wait."""
    q, other = make_queue(), make_queue("other")
    jid = q.put("soon", delay=0.3)
    timer = threading.Timer(0.1, lambda: other.put("unrelated"))
    timer.start()
    jobs = q.claim(wait=1.0)
    timer.join()
    assert [j.id for j in jobs] == [jid]


def test_wake_ends_a_waiting_claim(make_queue: MakeQueue) -> None:
    q = make_queue()
    timer = threading.Timer(0.2, q.wake)
    timer.start()
    t0 = time.monotonic()
    assert q.claim(wait=30) == []  # without wake() this would take 30 s
    timer.join()
    assert time.monotonic() - t0 < 29


@pytest.mark.parametrize("closing", ["queue", "database"])
def test_close_wakes_waiting_claims_with_closed(make_queue: MakeQueue, closing: str) -> None:
    """close() of the queue, or of its database, wakes every claim waiting
    for work with litegate.Closed at once (it once slept out its whole wait
    and returned []); nothing stored is touched."""
    q = make_queue()
    face: Any = getattr(q, "q", q)  # the aio queue behind the test's sync wrapper
    jid = q.put("kept", delay=3600)
    outcomes: list[tuple[str, float]] = []

    def claimer() -> None:
        t0 = time.monotonic()
        try:
            got = q.claim(wait=30)
        except litegate.Closed as exc:
            outcomes.append(("closed" if "closed" in str(exc) else str(exc), time.monotonic() - t0))
        else:
            outcomes.append((f"returned {got}", time.monotonic() - t0))

    threads = [threading.Thread(target=claimer) for _ in range(2)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while face._waker.waiting < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert face._waker.waiting == 2
    target = face if closing == "queue" else face.db
    close = target.close()
    if asyncio.iscoroutine(close):
        q._call(close)
    for t in threads:
        t.join(20)
    assert [o for o, _ in outcomes] == ["closed", "closed"]
    assert max(took for _, took in outcomes) < 15  # not the 30 s wait
    reopened = make_queue()
    assert reopened.get(jid).state == "scheduled"


def test_finish_and_claim_settles_and_claims_in_one_transaction(make_queue: MakeQueue) -> None:
    """A worker's step: acks, failures and the next claim in one transaction
    (one commit on SQLite); jobs no longer held are reported in ``lost``,
    not raised, and the claim stands; n=0 settles only."""
    q = make_queue(retry_base=60, retry_max=60)
    ids = q.put_many(range(6))
    ids.append(q.put("last", max_attempts=1))
    a, b, c = q.claim(n=3)
    sqlite_db = q.db if isinstance(q.db, litegate.Database) else None
    commits = sqlite_db.stats()["writes"]["committed"] if sqlite_db else 0
    done = q.finish_and_claim(ack=[a], fail=[(b, "boom")], n=2)
    if sqlite_db is not None:
        assert sqlite_db.stats()["writes"]["committed"] == commits + 1
    assert [j.id for j in done.jobs] == ids[3:5]
    assert (done.lost, done.failed) == ([], {b.id: "scheduled"})
    assert [state_of(q, i) for i in ids[:3]] == ["done", "scheduled", "leased"]
    info = q.get(b.id)
    assert (info.attempts, info.last_error) == (1, "boom")
    q.ack(c)
    later = q.finish_and_claim(ack=[c, done.jobs[0]], n=5)  # c: acked already
    assert later.lost == [c.id]
    assert [j.id for j in later.jobs] == ids[5:7]
    last = later.jobs[1]
    settled = q.finish_and_claim(ack=[done.jobs[1], later.jobs[0]], fail=[(last, "x")], n=0)
    assert settled == litegate.queue.Finished([], [], {last.id: "dead"})
    assert q.counts() == {"ready": 0, "scheduled": 1, "leased": 0, "done": 5, "dead": 1}
    counters = q.stats()["counters"]
    assert (counters["acked"], counters["failed"], counters["dead"]) == (5, 2, 1)


def test_finish_and_claim_is_all_or_nothing(make_queue: MakeQueue) -> None:
    """If the claim's ``also`` raises, the acks and failures of the step are
    rolled back with it; the same jobs settle in the next step."""
    q = make_queue()
    q.put_many(range(3))
    a, b = q.claim(n=2)

    def boom(conn: Any, job_ids: list[int]) -> None:
        raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        q.finish_and_claim(ack=[a], fail=[(b, "x")], n=1, also=boom)
    assert [state_of(q, j.id) for j in (a, b)] == ["leased", "leased"]
    assert q.counts()["ready"] == 1
    done = q.finish_and_claim(ack=[a], fail=[(b, "x")], n=1)
    assert len(done.jobs) == 1
    assert [state_of(q, j.id) for j in (a, b)] == ["done", "scheduled"]  # after its back-off
    with pytest.raises(litegate.ConfigError, match=r"\(job, error\) pairs"):
        q.finish_and_claim(fail=[a], n=0)


def test_extend_many(make_queue: MakeQueue) -> None:
    q = make_queue()
    ids = q.put_many(range(3))
    jobs = q.claim(n=3, lease=0.1)
    until = q.extend_many(jobs[1:], lease=60)
    assert [j.lease_until == until for j in jobs] == [False, True, True]
    time.sleep(0.15)
    (again,) = q.claim(n=3, lease=60)  # only the one not extended came back
    assert again.id == ids[0]
    with pytest.raises(LeaseLost) as info:
        q.extend_many(jobs, lease=60)
    assert info.value.job_ids == [ids[0]]
    assert "the other 2 were" in str(info.value)


def test_the_lease_starts_when_the_gate_is_taken(db_path: str) -> None:
    """Time spent waiting for the write gate does not eat into the lease."""
    from tests.conftest import gate_held_by_another_thread

    q = Queue(db_path)
    q.put("x")
    result: list[Job] = []
    with gate_held_by_another_thread(q.db):
        t = threading.Thread(target=lambda: result.extend(q.claim(lease=1.0)))
        t.start()
        time.sleep(0.4)  # the claim waits behind the held gate
    t.join()
    returned = time.time()
    (job,) = result
    assert job.lease_until - returned > 0.85  # not 1.0 - 0.4
    q.close()


def test_ids_are_never_reused_after_a_purge(make_queue: MakeQueue) -> None:
    q = make_queue()
    ids = q.put_many(range(5))
    q.ack_many(q.claim(n=5))
    if isinstance(q.db, PgDatabase):
        # An identity column never hands an id out twice: all can go.
        assert q.purge(done_before=time.time() + 1) == 5
    else:
        # Everything is done, but the newest row stays: it holds the largest id.
        assert q.purge(done_before=time.time() + 1) == 4
        assert q.counts()["done"] == 1
    assert q.put("new") == ids[-1] + 1
    assert q.put_many(["a", "b"]) == [ids[-1] + 2, ids[-1] + 3]


def test_every_hot_statement_uses_an_index(db_path: str) -> None:
    """No statement of the queue's hot path scans a table: claims, sweeps,
    promotions, acks, extends, dead letters, counts and next_due seek their
    primary keys or indexes. (Purging done jobs walks the job table in id
    order on purpose, a slice per transaction: see _sqlite.purge.)"""
    from litegate.queue import _sqlite

    q = Queue(db_path)
    q.close()
    conn = sqlite3.connect(db_path)
    statements: list[tuple[str, Any]] = [
        (_sqlite._NTH_READY, ("q", 9)),
        (_sqlite._LAST_READY, ("q",)),
        (_sqlite._LEASE_RUN, ("q", 0, 1.0, 10, 2.0, 1)),
        (_sqlite._CLAIMED, ("q", 0, 1.0, 10)),
        (_sqlite._TAKE_RUN, ("q", 0, 1.0, 10)),
        (_sqlite._FIRSTS, ("q",)),
        (_sqlite._READY_FROM_JOBS, (1, 10)),
        (_sqlite._DONE_MANY, (1.0, 1, "[1,2]")),
        (_sqlite._DUE, ("q", 1.0)),
        (_sqlite._EXPIRED, ("q", 1.0)),
        (_sqlite._UNLEASE_ONE, ("q", 1.0, 1, 1)),
        (_sqlite._UNLEASE_MANY, ("q", 1.0, "[1,2]", 1)),
        (_sqlite._DONE_ONE, (1.0, 1, 1, 1)),
        (_sqlite._DONE_NEXT, (1.0, 1, 1)),
        (_sqlite._UNLEASE_BY_ID, ("q", 1, 1)),
        (_sqlite.SELECT_JOB, {"id": 1}),
        (_sqlite.SELECT_DEAD, {"queue": "q", "limit": 10}),
        (_sqlite.COUNTS, {"queue": "q", "now": 1.0}),
        (_sqlite.NEXT_DUE, {"queue": "q", "now": 1.0}),
    ]
    for sql, params in statements:
        plan = " | ".join(r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params))
        for step in plan.split(" | "):
            if step.startswith("SCAN litegate_queue"):
                assert "USING" in step, f"{sql.strip()[:60]}...: {plan}"
    conn.close()


def test_aio_claim_cancelled_mid_flight_gives_its_jobs_back(
    db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task cancelled while its claim is being committed does not leave the
    jobs leased to nobody: they go back to the queue, attempt not counted."""
    import asyncio

    from litegate.queue import _sqlite, aio

    inside = threading.Event()
    real_claim = _sqlite.claim

    def slow_claim(conn: sqlite3.Connection, **kwargs: Any) -> Any:
        inside.set()
        time.sleep(0.3)  # the batch has taken the claim; the task is cancelled now
        return real_claim(conn, **kwargs)

    async def main() -> None:
        q = await aio.Queue.open(db_path)
        jid = await q.put("x")
        monkeypatch.setattr(_sqlite, "claim", slow_claim)
        task = asyncio.ensure_future(q.claim())
        while not inside.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        monkeypatch.setattr(_sqlite, "claim", real_claim)
        for _ in range(500):  # the release runs once the claim's commit is in
            if q.stats_counters.as_dict()["released"] == 1:
                break
            await asyncio.sleep(0.01)
        info = await q.get(jid)
        assert (info.state, info.attempts) == ("ready", 0)
        (job,) = await q.claim()
        assert job.attempt == 1
        await q.close()

    asyncio.run(main())


def test_a_job_of_another_queue_is_refused_and_left_alone(make_queue: MakeQueue) -> None:
    """``Queue(db, "b").ack(job_of_a)`` used to ack the job
    in queue a (its token matched). Every finishing call now refuses it
    before anything is sent, saying whose job it is."""
    a, b = make_queue("a"), make_queue("b")
    jid = a.put("x")
    (job,) = a.claim()
    mine = b.put("y")
    (other,) = b.claim()
    calls: list[tuple[str, Any]] = [
        ("ack", lambda: b.ack(job)),
        ("ack", lambda: b.ack_many([other, job])),  # mixed: refused whole
        ("fail", lambda: b.fail(job, "x")),
        ("extend", lambda: b.extend(job)),
        ("extend", lambda: b.extend_many([other, job])),
        ("release", lambda: b.release(job)),
        ("release", lambda: b.release([other, job])),
    ]
    for what, call in calls:
        with pytest.raises(JobNotFound) as info:
            call()
        assert info.value.job_ids == [jid]
        assert isinstance(info.value, litegate.Error)
        message = str(info.value)
        for words in (f"cannot {what}", "belong to queue 'a'", "Queue(db, 'a')", "nothing was"):
            assert words in message
    after = a.get(jid)
    assert (after.state, after.attempts) == ("leased", 1)
    assert b.get(mine).state == "leased"  # the other queue's job in the same call: untouched
    a.ack(job)  # its own queue still takes it
    b.ack(other)
    assert (a.get(jid).state, b.get(mine).state) == ("done", "done")


def test_retry_dead_of_jobs_that_are_not_dead_says_so_and_revives_nothing(
    make_queue: MakeQueue,
) -> None:
    """``retry_dead([id that is not dead])`` returned 0 as
    if there was nothing to do; ``retry_dead(5)`` raised an untyped error."""
    q = make_queue()
    dead = q.put("d", max_attempts=1)
    q.fail(q.claim()[0], "x")
    done, waiting = q.put("done"), q.put("waiting")
    q.ack(q.claim()[0])
    with pytest.raises(JobNotFound) as info:
        q.retry_dead([dead, done, waiting, 999_999])
    assert info.value.job_ids == [done, waiting, 999_999]
    message = str(info.value)
    for words in (
        f"job {done} is done",
        f"job {waiting} is waiting to run",
        "job 999999 does not exist here",
        "nothing was revived",
        "q.dead()",
    ):
        assert words in message
    assert (state_of(q, dead), state_of(q, done), state_of(q, waiting)) == (
        "dead",
        "done",
        "ready",
    )
    for bad in (5, "5", b"5", {"id": 5}):
        with pytest.raises(litegate.ConfigError, match=r"list of job ids, got .*: pass a list"):
            q.retry_dead(bad)
    assert state_of(q, dead) == "dead"
    assert q.retry_dead([dead]) == 1
    assert q.retry_dead() == 0  # none left: 0 means no dead jobs
