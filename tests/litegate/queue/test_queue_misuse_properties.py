"""The misuse suite for queue calls: sequences of ``ack``,
``ack_many``, ``fail``, ``extend``, ``extend_many``, ``release`` and
``retry_dead`` made through the wrong queue, twice, after the lease ran
out, with odd arguments (and some answers lost after their commit, then
tried again).

The contract, per call: success, or a typed litegate.Error that says what
to do; never an untyped exception, and never a change to the jobs of a
queue other than the one called (the other queue's rows are compared
before and after every call). After each case every job is in a state the
calls made explain: put, claimed, finished at most once."""

from __future__ import annotations

import asyncio
import sys
from functools import partial
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

import litegate
import litegate.aio
from litegate.queue import Job, Queue, UndecodablePayload, aio
from tests.litegate.misuse import attempt, examples, ran

OPS = ("ack", "ack_many", "fail", "extend", "extend_many", "release", "retry_dead")
ODD = st.sampled_from([0, -1, 0.001, 1e12, float("nan"), "5", None, 5, [5], [10**30]])

step = st.tuples(
    st.sampled_from(OPS),
    st.sampled_from(["a", "b"]),  # the queue called
    st.lists(st.integers(0, 5), min_size=1, max_size=3),  # which claimed jobs
    st.one_of(st.none(), ODD),  # an odd argument for the call, or none
    st.booleans(),  # lose the answer after the commit (then try again)
)


class LostAnswer(Exception):
    """The answer of a call that committed (stands for an interrupt)."""


def snapshot(db: litegate.Database, name: str) -> list[tuple[Any, ...]]:
    """Every job of the queue as stored: its row, and its lease if it has one."""
    return [
        tuple(r)
        for r in db.query(
            "SELECT j.id, j.state, j.attempts, j.token, j.run_at, j.last_error, j.done_at, "
            "l.token, l.lease_until, l.attempts FROM litegate_queue_jobs AS j "
            "LEFT JOIN litegate_queue_leased AS l ON l.queue = j.queue AND l.id = j.id "
            "WHERE j.queue = ? ORDER BY j.id",
            (name,),
        )
    ]


def call(q: Queue, op: str, jobs: list[Job], odd: Any) -> Any:
    if op == "ack":
        return q.ack(jobs[0])
    if op == "ack_many":
        return q.ack_many(jobs)
    if op == "fail":
        return q.fail(jobs[0], "boom", retry_in=odd if odd is not None else 0)
    if op == "extend":
        return q.extend(jobs[0], lease=odd if odd is not None else 30)
    if op == "extend_many":
        return q.extend_many(jobs)
    if op == "release":
        return q.release(jobs)
    return q.retry_dead(odd if odd is not None else [j.id for j in jobs])


def test_queue_calls_never_touch_another_queue_and_fail_typed(tmp_path: Path) -> None:
    db = litegate.connect(str(tmp_path / "app.db"))
    counter = [0]

    @given(st.lists(step, min_size=1, max_size=8))
    @examples(40)
    def case(steps: list[tuple[str, str, list[int], Any, bool]]) -> None:
        counter[0] += 1
        names = {k: f"{k}{counter[0]}" for k in ("a", "b")}
        queues = {k: Queue(db, names[k]) for k in names}
        try:
            claimed: list[Job] = []
            for k, q in queues.items():
                q.put_many([f"{k}{i}" for i in range(3)], max_attempts=2)
                claimed += q.claim(n=3, lease=30)
            for op, which, picks, odd, lose in steps:
                q = queues[which]
                other = names["b" if which == "a" else "a"]
                jobs = [claimed[i % len(claimed)] for i in picks]
                before = snapshot(db, other)
                if lose:
                    real = db.transact

                    def lost(fn: Any, real: Any = real, **kw: Any) -> Any:
                        del db.transact  # once
                        real(fn, **kw)
                        raise LostAnswer

                    db.transact = lost  # type: ignore[method-assign]
                    try:
                        try:
                            call(q, op, jobs, odd)
                        except LostAnswer:
                            pass
                        except litegate.Error:
                            pass  # refused before the write: checked below, again
                    finally:
                        db.__dict__.pop("transact", None)
                attempt(partial(call, q, op, jobs, odd), f"{op} via {which} {odd!r}")
                assert snapshot(db, other) == before, f"{op} via {which} changed {other}"
                ran("queue calls")
            for name in names.values():
                for row in snapshot(db, name):
                    assert row[1] in (0, 2, 3)  # live, done, dead
                    attempts = row[2] if row[9] is None else row[9]
                    assert 0 <= attempts <= 2  # attempts: claims made, never more
        finally:
            for q in queues.values():
                q.close()

    try:
        case()
    finally:
        db.close()


def _payload(kind: str, size: int) -> Any:
    if kind == "deep":
        deep: Any = []
        for _ in range(size):
            deep = [deep]
        return deep
    if kind == "big int":
        return {"n": 10**size}
    if kind == "loop":
        loop: list[Any] = []
        loop.append(loop)
        return loop
    if kind == "set":
        return {size}
    if kind == "nan":
        return float("nan")
    return {"k": "x" * size}


payloads = st.tuples(
    st.sampled_from(["plain", "deep", "big int", "loop", "set", "nan"]),
    st.integers(0, 20_000),
    st.booleans(),  # put with no limit on integer digits (a producer with other limits)
)


def test_payloads_a_claimer_may_not_decode_never_take_other_jobs_down(tmp_path: Path) -> None:
    """Any payloads, some put by a "producer" whose limits differ from the
    claimer's (no limit on integer digits): each put works or is a typed
    PayloadError; each claim works (through both faces), returns exactly the
    stored jobs it can decode and sends the others to the dead letters; every
    listing (get, dead, counts) works; no job is lost or left leased."""
    db = litegate.connect(str(tmp_path / "app.db"))
    adb = litegate.aio.AsyncDatabase(db)
    counter = [0]
    limit = sys.get_int_max_str_digits()

    @given(st.lists(payloads, min_size=1, max_size=6), st.booleans())
    @examples(30)
    def case(drawn: list[tuple[str, int, bool]], use_aio: bool) -> None:
        counter[0] += 1
        q = Queue(db, f"p{counter[0]}")
        try:
            stored = []
            for kind, size, unlimited in drawn:
                if unlimited:
                    sys.set_int_max_str_digits(0)
                try:
                    put = attempt(partial(q.put, _payload(kind, size)), f"put {kind} {size}")
                finally:
                    sys.set_int_max_str_digits(limit)
                if put.ok:
                    stored.append(put.value)
                ran("queue payloads")
            if use_aio:

                async def claim_all() -> list[Job]:
                    return await aio.Queue(adb, q.name).claim(n=10)

                claimed = attempt(lambda: asyncio.run(claim_all()), "aio claim")
            else:
                claimed = attempt(partial(q.claim, n=10), "claim")
            assert claimed.ok, claimed
            got = {j.id for j in claimed.value}
            dead = attempt(q.dead, "dead")
            assert dead.ok, dead
            buried = {info.id for info in dead.value}
            assert got | buried == set(stored)
            assert not got & buried
            for info in dead.value:
                assert isinstance(info.payload, UndecodablePayload)
                assert info.last_error is not None
                assert "PayloadError" in info.last_error
            for jid in stored:
                assert attempt(partial(q.get, jid), "get").ok
            counts = q.counts()
            assert (counts["leased"], counts["dead"]) == (len(got), len(buried))
        finally:
            q.close()

    try:
        case()
    finally:
        asyncio.run(adb.close())
