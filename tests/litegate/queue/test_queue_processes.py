"""The queue's guarantees with real processes (fork and spawn) and SIGKILL,
on both backends (``queue_db``: SQLite and PostgreSQL)."""

from __future__ import annotations

import contextlib
import itertools
import json
import multiprocessing as mp
import os
import random
import signal
import sqlite3
import time
from collections import Counter, defaultdict
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from litegate.queue import Queue
from litegate.queue._pgdb import is_url
from tests.litegate.queue import procs

START_METHODS = ["fork", "spawn"]


def ctx_for(method: str) -> Any:
    return mp.get_context(method)


def read_lines(path: Path) -> list[Any]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        # A process killed mid-write leaves a torn last line: its call had
        # returned, but the line cannot be checked.
        with contextlib.suppress(json.JSONDecodeError):
            out.append(json.loads(line))
    return out


@pytest.mark.parametrize("method", START_METHODS)
def test_no_job_is_held_by_two_workers_under_a_valid_lease(
    queue_db: str, tmp_path: Path, method: str
) -> None:
    """4 processes x 3 threads; work sometimes outlasts the lease, so jobs are
    re-claimed. For every job, no claim starts before the previous claim's
    lease ended; every job ends done; a stale ack is refused."""
    q = Queue(queue_db)
    # Attempts enough that no job goes dead however often its lease expires
    # (a loaded machine makes even quick work outlast a 0.15 s lease).
    ids = q.put_many(range(300), max_attempts=10_000)
    lease = 0.15
    ctx = ctx_for(method)
    outs = [tmp_path / f"w{k}.jsonl" for k in range(4)]
    ps = [
        ctx.Process(target=procs.claim_and_record, args=(queue_db, str(o), 3, lease, k))
        for k, o in enumerate(outs)
    ]
    for p in ps:
        p.start()
    for p in ps:
        p.join(90)
    assert [p.exitcode for p in ps] == [0] * 4
    claims: dict[int, list[tuple[float, float]]] = defaultdict(list)
    events: Counter[str] = Counter()
    acks: Counter[int] = Counter()
    for o in outs:
        for event, jid, start, end in read_lines(o):
            events[event] += 1
            if event == "claim":
                claims[jid].append((start, end))
            elif event == "ack":
                acks[jid] += 1
    try:
        # The guarantees: nothing lost, every job done once.
        counts = q.counts()
        if counts["done"] != 300:
            left = [(i, q.get(i).state, q.get(i).attempts) for i in ids if q.get(i).state != "done"]
            pytest.fail(f"jobs not done: {left}; events: {dict(events)}")
        assert counts == {"ready": 0, "scheduled": 0, "leased": 0, "done": 300, "dead": 0}
        assert set(claims) == set(ids)
        for jid, spans in claims.items():
            spans.sort()
            for (_, prev_end), (start, _) in itertools.pairwise(spans):
                # A claim's start is recorded as lease_until - lease, a float
                # subtraction: at today's epoch its rounding is ~0.2 µs, and
                # PostgreSQL's clock (timestamptz) counts whole microseconds, so
                # a claim at the very microsecond the lease ended could read as
                # 0.2 µs early (it failed CI once so). One microsecond of slack.
                assert start >= prev_end - 1e-6, (
                    f"job {jid} claimed again while its lease was valid"
                )
        unexpected = {e: n for e, n in events.items() if e not in ("claim", "ack", "LeaseLost")}
        assert unexpected == {}, f"calls that failed otherwise: {unexpected}"
        assert max(acks.values()) == 1  # never acked twice
        # every job's ack is in some worker's log (a job done without one
        # would mean a late ack succeeded unlogged)
        assert set(acks) == set(ids), f"done, but no logged ack: {sorted(set(ids) - set(acks))}"
        assert events["LeaseLost"] == events["claim"] - len(ids)  # one refused ack per re-claim
        assert events["LeaseLost"] > 0  # the scenario did exercise expired leases
    finally:
        q.close()


@pytest.mark.parametrize("method", START_METHODS)
def test_sigkill_mid_job_the_job_comes_back_after_its_lease(queue_db: str, method: str) -> None:
    q = Queue(queue_db)
    jid = q.put({"work": 1})
    ctx = ctx_for(method)
    holding = ctx.Event()
    p = ctx.Process(target=procs.hold_a_job, args=(queue_db, 0.5, holding))
    p.start()
    assert holding.wait(30)
    killed_at = time.time()
    os.kill(p.pid, signal.SIGKILL)
    p.join(10)
    assert q.get(jid).state == "leased"
    (job,) = q.claim(wait=10)
    assert (job.id, job.attempt) == (jid, 2)
    assert time.time() >= killed_at  # reclaimed only once the lease had run out
    info = q.get(jid)
    assert info.lease_until == job.lease_until
    q.ack(job)
    assert q.get(jid).state == "done"
    q.close()


@pytest.mark.slow
def test_random_sigkills_lose_nothing_and_ack_nothing_twice(queue_db: str, tmp_path: Path) -> None:
    """Producers and workers SIGKILLed at random, again and again. Every put
    that returned ends done; no job is acked twice; the file is intact."""
    Queue(queue_db).close()  # create the tables before the chaos
    ctx = ctx_for("spawn")
    rnd = random.Random(7)
    roles = {f"p{k}": (procs.produce_forever, tmp_path / f"p{k}.jsonl") for k in range(2)} | {
        f"w{k}": (procs.work_forever, tmp_path / f"w{k}.jsonl") for k in range(3)
    }
    running: dict[str, Any] = {}
    seeds = iter(range(10_000))

    def start(role: str) -> None:
        fn, out = roles[role]
        p = ctx.Process(target=fn, args=(queue_db, str(out), next(seeds)))
        p.start()
        running[role] = p

    for role in roles:
        start(role)
    kills = 0
    end = time.monotonic() + 6.0
    give_up = end + 90.0

    def produced() -> int:
        return sum(len(ids) for k in range(2) for ids in read_lines(tmp_path / f"p{k}.jsonl"))

    # At least 6 s of kills, and on until the producers have put over 100
    # jobs: on a busy machine a spawned process (a PostgreSQL connection
    # included) can take longer to start than the kills leave it.
    while time.monotonic() < end or (produced() <= 100 and time.monotonic() < give_up):
        time.sleep(rnd.uniform(0.2, 0.5))
        role = rnd.choice(sorted(roles))
        os.kill(running[role].pid, signal.SIGKILL)
        running[role].join(10)
        kills += 1
        start(role)
    for p in running.values():
        os.kill(p.pid, signal.SIGKILL)
        p.join(10)
    assert kills >= 10

    put_ids = [i for k in range(2) for ids in read_lines(tmp_path / f"p{k}.jsonl") for i in ids]
    acked = Counter(
        i for k in range(3) for ids in read_lines(tmp_path / f"w{k}.jsonl") for i in ids
    )
    assert len(put_ids) > 100
    # Drain what the killed workers left (their leases run out after 1 s).
    q = Queue(queue_db)
    procs.drain(q, acked)
    assert max(acked.values()) == 1  # nothing acked twice
    done = {i for i in set(put_ids) if q.get(i).state == "done"}
    assert done == set(put_ids)  # every put that returned is done
    total = q.counts()
    assert total["done"] >= len(put_ids)
    assert total["dead"] == 0
    q.close()
    if not is_url(queue_db):
        with closing(sqlite3.connect(queue_db)) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
