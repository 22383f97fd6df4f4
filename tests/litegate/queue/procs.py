"""Process entry points for the queue's multi-process tests (importable
under spawn). Each writes what it observed to a file, one JSON line per
event, flushed after the event: a line means the call had returned."""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from multiprocessing.synchronize import Event

from litegate.queue import CommitUnknown, Queue
from tests.litegate.workers import on_threads


def claim_and_record(path: str, out: str, threads: int, lease: float, seed: int) -> None:
    """Claim until the queue is empty; record every claim's (id, start, end
    of lease) and ack. Work takes random time, sometimes past the lease, so
    some leases expire and their jobs are claimed again."""
    q = Queue(path, poll=0.002)
    lock = threading.Lock()
    with open(out, "a") as f:

        def run(k: int) -> None:
            rnd = random.Random(seed * 100 + k)
            idle = 0
            while idle < 3:
                jobs = q.claim(n=rnd.randint(1, 5), lease=lease, wait=0.3)
                if not jobs:
                    idle += 1
                    continue
                idle = 0
                with lock:
                    for j in jobs:
                        f.write(json.dumps(["claim", j.id, j.lease_until - lease, j.lease_until]))
                        f.write("\n")
                    f.flush()
                time.sleep(rnd.choice([0.0, 0.0, 0.0, lease * 0.5, lease * 1.5]))
                for j in jobs:
                    try:
                        q.ack(j)
                        event = "ack"
                    except Exception as exc:  # LeaseLost: recorded, the test checks
                        event = f"{type(exc).__name__}: {exc}"[:200]
                        if type(exc).__name__ == "LeaseLost":
                            event = "LeaseLost"
                    with lock:
                        f.write(json.dumps([event, j.id, 0, 0]) + "\n")
                        f.flush()

        on_threads(threads, run)
    q.close()


def hold_a_job(path: str, lease: float, holding: Event) -> None:
    """Claim one job, say so, then hang until SIGKILLed."""
    q = Queue(path)
    (job,) = q.claim(lease=lease, wait=10)
    holding.set()
    time.sleep(600)
    q.ack(job)  # never reached


def produce_forever(path: str, out: str, seed: int) -> None:
    """put / put_many in a loop; each returned id is recorded after the call."""
    q = Queue(path)
    rnd = random.Random(seed)
    with open(out, "a") as f:
        i = 0
        while True:
            try:
                if rnd.random() < 0.5:
                    ids = [q.put({"p": seed, "i": i})]
                else:
                    ids = q.put_many([{"p": seed, "i": i + k} for k in range(rnd.randint(2, 20))])
            except CommitUnknown:
                # PostgreSQL went away during the COMMIT (a restart): the put may
                # or may not be in; it returned no id, so nothing is recorded and
                # whatever did commit is worked off like any job. Carry on.
                continue
            i += len(ids)
            f.write(json.dumps(ids) + "\n")
            f.flush()
            time.sleep(rnd.uniform(0, 0.004))  # a few thousand jobs per second, not all it can


def work_forever(path: str, out: str, seed: int) -> None:
    """claim → (tiny work) → ack_many in a loop; acked ids recorded after the call."""
    q = Queue(path, poll=0.002)
    rnd = random.Random(seed)
    with open(out, "a") as f:
        while True:
            jobs = q.claim(n=rnd.randint(1, 10), lease=1.0, wait=0.5)
            if not jobs:
                continue
            if rnd.random() < 0.3:
                time.sleep(0.01)
            try:
                q.ack_many(jobs)
            except CommitUnknown:  # (as above: not recorded; an ack that did not commit
                continue  # leaves its jobs to come back when their leases run out)
            f.write(json.dumps([j.id for j in jobs]) + "\n")
            f.flush()


def put_after(url: str, name: str, delay: float) -> None:
    """Open the queue, wait ``delay`` seconds, put one job ("late")."""
    q = Queue(url, name)
    time.sleep(delay)
    q.put("late")
    q.close()


def drain(q: Queue, acked: Counter[int]) -> None:
    """Claim and ack whatever killed workers left (it comes back when the
    leases run out), counting each ack in ``acked``."""
    while True:
        counts = q.counts()
        if counts["ready"] + counts["leased"] + counts["scheduled"] == 0:
            return
        jobs = q.claim(n=100, wait=1.5)
        if jobs:
            q.ack_many(jobs)
            acked.update(j.id for j in jobs)
