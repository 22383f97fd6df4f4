"""The worker processes of ``bench queue`` (imported under ``spawn``: light
modules only).

A child opens its side, starts its threads, waits on the cell's start
barrier with every other process, runs its role, reports to the parent and
then stays idle until the parent says every process is done (a finished
process shutting down would take CPU from the others on a small machine).

Roles:

- ``put``: ``count`` puts, one at a time (single writer, concurrent writers),
  or puts until ``seconds`` have passed when ``count`` is 0 (mixed writers);
- ``claim``: claim one job and ack it, until ``seconds`` have passed (mixed
  claimers); an empty queue is polled every millisecond;
- ``cycle``: put, claim one, ack, until ``seconds`` have passed (stress);
- ``produce``: ``count`` jobs with ``put`` (``batch`` 1) or ``put_many``
  (e2e producers);
- ``consume``: claim ``batch`` jobs and ack them (``ack`` or ``ack_many``)
  until the producers are done and the queue is empty (e2e workers); for a
  side with a worker loop of its own (the PostgreSQL peers,
  ``litegate-worker``), that loop runs instead, ``threads`` jobs at a time
  (:class:`WorkerRunner`);
- ``frames``: ``backlog`` jobs put (in batches where the side can), then
  ``count`` single-job puts, ``count`` claims of one job and ``count`` acks,
  the WAL-index header read before and after each: the WAL frames each
  operation appended (``_frames``). One process, one thread.

Every role stops at the cell's deadline whatever it is doing.
"""

from __future__ import annotations

import contextlib
import threading
import time
import traceback
from array import array
from dataclasses import dataclass, field
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier, Event
from typing import Any

from ._backends import open_side
from ._sides import FRAMES_NA, Client, Job, Side, busy_error, payload

POLL_S = 0.001
"""How long a claimer sleeps when it found the queue empty."""

JOB_STRIDE = 1_000_000_000
"""Job numbers: process index x stride + thread index x (stride / 1000) + n."""


@dataclass(frozen=True)
class Role:
    kind: str  # put | claim | cycle | produce | consume | frames
    index: int = 0  # process index in the cell (unique job numbers)
    count: int = 0  # jobs per process (put, produce; frames: of each op); 0 = until ``seconds``
    seconds: float = 0.0
    threads: int = 1
    batch: int = 1
    backlog: int = 0  # frames: jobs put before the operations measured


@dataclass(frozen=True)
class Spec:
    side: str
    path: str  # the database file; on PostgreSQL, the cell's database URL
    profile: str
    role: Role
    limit_s: float  # the cell's bound: every thread stops this long after the start
    backend: str = "sqlite"


@dataclass
class ThreadResult:
    latencies_ms: array[float] = field(default_factory=lambda: array("d"))
    put: array[int] = field(default_factory=lambda: array("q"))  # job numbers put
    done: array[int] = field(default_factory=lambda: array("q"))  # job numbers acked
    claim_ms: array[float] = field(default_factory=lambda: array("d"))
    ops: int = 0
    errors: int = 0
    busy: int = 0
    empty_claims: int = 0
    messages: dict[str, int] = field(default_factory=dict)
    start: float = 0.0
    end: float = 0.0
    timed_out: bool = False
    # frames: WAL frames appended by each operation measured, per operation
    frames: dict[str, array[int]] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)  # ... of which saw the log restart

    def error(self, exc: BaseException) -> None:
        self.errors += 1
        if busy_error(exc):
            self.busy += 1
        msg = f"{type(exc).__name__}: {exc}"[:200]
        self.messages[msg] = self.messages.get(msg, 0) + 1


def _split(count: int, parts: int, i: int) -> int:
    """Share ``i`` of ``count`` split into ``parts`` near-equal shares."""
    return count // parts + (1 if i < count % parts else 0)


class Runner:
    """One thread's loop for its role."""

    def __init__(
        self, spec: Spec, client: Client, thread: int, producers_done: Event | None
    ) -> None:
        self.spec = spec
        self.role = spec.role
        self.client = client
        self.thread = thread
        self.producers_done = producers_done
        self.r = ThreadResult()
        self.next_job = spec.role.index * JOB_STRIDE + thread * (JOB_STRIDE // 1000)

    def _job(self) -> dict[str, Any]:
        k = self.next_job
        self.next_job += 1
        return payload(k)

    def run(self) -> ThreadResult:
        r = self.r
        r.start = time.monotonic()
        limit = r.start + self.spec.limit_s
        until = r.start + self.role.seconds if self.role.seconds > 0 else limit
        stop = min(limit, until)
        kind = self.role.kind
        try:
            if kind == "put":
                self._put(stop, limit)
            elif kind == "claim":
                self._claim(stop)
            elif kind == "cycle":
                self._cycle(stop)
            elif kind == "produce":
                self._produce(limit)
            elif kind == "consume":
                self._consume(limit)
            elif kind == "frames":
                self._frames(limit)
            else:
                raise ValueError(f"unknown role {kind!r}")
        finally:
            r.end = time.monotonic()
        return r

    def _put_one(self) -> None:
        r = self.r
        job = self._job()
        t0 = time.perf_counter()
        try:
            self.client.put(job)
        except Exception as exc:
            r.error(exc)
            return
        r.latencies_ms.append((time.perf_counter() - t0) * 1e3)
        r.put.append(int(job["job"]))
        r.ops += 1

    def _put(self, stop: float, limit: float) -> None:
        n = _split(self.role.count, self.role.threads, self.thread)
        if self.role.count:
            for _ in range(n):
                if time.monotonic() >= limit:
                    self.r.timed_out = True
                    return
                self._put_one()
        else:
            while time.monotonic() < stop:
                self._put_one()

    def _claim_once(self, n: int) -> int:
        """Claim up to ``n`` jobs and ack them; the number claimed, -1 on error."""
        r = self.r
        t0 = time.perf_counter()
        try:
            jobs = self.client.claim(n)
        except Exception as exc:
            r.error(exc)
            return -1
        t1 = time.perf_counter()
        if not jobs:
            r.empty_claims += 1
            return 0
        r.claim_ms.append((t1 - t0) * 1e3)
        try:
            if len(jobs) == 1:
                self.client.ack(jobs[0])
            else:
                self.client.ack_many(jobs)
        except Exception as exc:
            r.error(exc)
            return -1
        r.latencies_ms.append((time.perf_counter() - t0) * 1e3)
        r.done.extend(k for _, k in jobs)
        r.ops += len(jobs)
        return len(jobs)

    def _claim(self, stop: float) -> None:
        while time.monotonic() < stop:
            if self._claim_once(1) == 0:
                time.sleep(POLL_S)

    def _cycle(self, stop: float) -> None:
        r = self.r
        while time.monotonic() < stop:
            job = self._job()
            t0 = time.perf_counter()
            try:
                self.client.put(job)
                r.put.append(int(job["job"]))
                t1 = time.perf_counter()
                jobs = self.client.claim(1)
                t2 = time.perf_counter()
                for j in jobs:
                    self.client.ack(j)
            except Exception as exc:
                r.error(exc)
                continue
            if not jobs:
                r.empty_claims += 1
                continue
            r.claim_ms.append((t2 - t1) * 1e3)
            r.latencies_ms.append((time.perf_counter() - t0) * 1e3)
            r.done.extend(k for _, k in jobs)
            r.ops += 1

    def _produce(self, limit: float) -> None:
        r = self.r
        n = _split(self.role.count, self.role.threads, self.thread)
        batch = max(1, self.role.batch)
        if batch == 1:
            for _ in range(n):
                if time.monotonic() >= limit:
                    r.timed_out = True
                    return
                self._put_one()
            return
        left = n
        while left > 0:
            if time.monotonic() >= limit:
                r.timed_out = True
                return
            jobs = [self._job() for _ in range(min(batch, left))]
            left -= len(jobs)
            t0 = time.perf_counter()
            try:
                self.client.put_many(jobs)
            except Exception as exc:
                r.error(exc)
                continue
            r.latencies_ms.append((time.perf_counter() - t0) * 1e3)
            r.put.extend(int(j["job"]) for j in jobs)
            r.ops += len(jobs)

    def _consume(self, limit: float) -> None:
        assert self.producers_done is not None
        batch = max(1, self.role.batch)
        while True:
            if time.monotonic() >= limit:
                self.r.timed_out = True
                return
            finished = self.producers_done.is_set()  # before the claim: see _child docstring
            got = self._claim_once(batch)
            if got == 0:
                if finished:
                    return
                time.sleep(POLL_S)

    def _frames(self, limit: float) -> None:
        from ._frames import OPS, appended, read_header

        r = self.r
        path = self.spec.path
        na = FRAMES_NA.get(self.spec.side, {})
        left = self.role.backlog
        batch = 500
        while left > 0:  # the backlog: batches where the side has them
            if time.monotonic() >= limit:
                r.timed_out = True
                return
            jobs = [self._job() for _ in range(min(batch, left))]
            try:
                if batch > 1:
                    self.client.put_many(jobs)
                else:
                    self.client.put(jobs[0])
            except NotImplementedError:
                batch = 1  # one at a time, these first ones included
                for job in jobs:
                    self.client.put(job)
            left -= len(jobs)
            r.put.extend(int(j["job"]) for j in jobs)
        claimed: list[Job] = []

        def put() -> None:
            job = self._job()
            self.client.put(job)
            r.put.append(int(job["job"]))

        def claim() -> None:
            got = self.client.claim(1)
            if not got:
                r.empty_claims += 1
            claimed.extend(got)

        def ack() -> None:
            job = claimed.pop(0)
            self.client.ack(job)
            r.done.append(job[1])

        for name, op in zip(OPS, (put, claim, ack), strict=True):
            frames = r.frames.setdefault(name, array("q"))
            for _ in range(self.role.count):
                if time.monotonic() >= limit:
                    r.timed_out = True
                    return
                if name == "ack" and not claimed:
                    break
                before = read_header(path)
                try:
                    op()
                except Exception as exc:
                    r.error(exc)
                    continue
                after = read_header(path)
                r.ops += 1
                if name in na:
                    continue  # done (every job is accounted for), not measured
                if before is None or after is None:
                    raise RuntimeError(
                        f"no WAL index in {path}-shm: the {self.spec.side} side's database "
                        "is not in WAL mode"
                    )
                frames.append(appended(before, after))
                if after.salt != before.salt:
                    r.restarts[name] = r.restarts.get(name, 0) + 1


class WorkerRunner:
    """A consumer that is the side's own worker loop (``Side.work``): it
    runs, ``role.threads`` jobs at a time, until the producers are done and
    the queue is empty; every job its handler runs counts as done. There is
    no claim call to time, so no claim latency."""

    def __init__(self, spec: Spec, side: Side, producers_done: Event | None) -> None:
        self.spec = spec
        self.side = side
        self.producers_done = producers_done
        self.r = ThreadResult()

    def run(self) -> ThreadResult:
        assert self.producers_done is not None
        r = self.r
        r.start = time.monotonic()
        role = self.spec.role
        try:
            r.timed_out = self.side.work(
                role.threads, role.batch, self.spec.limit_s, self.producers_done, r.done.append
            )
        except Exception as exc:
            r.error(exc)
        finally:
            r.end = time.monotonic()
        for msg, n in self.side.work_errors().items():
            r.errors += n
            r.messages[msg] = r.messages.get(msg, 0) + n
        r.ops = len(r.done)
        return r


def _merge(results: list[ThreadResult]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "latencies_ms": array("d"),
        "claim_ms": array("d"),
        "put": array("q"),
        "done": array("q"),
        "messages": {},
        "per_thread_done": [],
        "frames": {},
        "restarts": {},
    }
    for key in ("ops", "errors", "busy", "empty_claims"):
        out[key] = sum(int(getattr(r, key)) for r in results)
    for r in results:
        out["latencies_ms"].extend(r.latencies_ms)
        out["claim_ms"].extend(r.claim_ms)
        out["put"].extend(r.put)
        out["done"].extend(r.done)
        out["per_thread_done"].append(len(r.done))
        for m, n in r.messages.items():
            out["messages"][m] = out["messages"].get(m, 0) + n
        for op, frames in r.frames.items():
            out["frames"].setdefault(op, array("q")).extend(frames)
        for op, n in r.restarts.items():
            out["restarts"][op] = out["restarts"].get(op, 0) + n
    out["start"] = min((r.start for r in results), default=0.0)
    out["end"] = max((r.end for r in results), default=0.0)
    out["timed_out"] = any(r.timed_out for r in results)
    return out


def child_main(
    spec: Spec,
    ready: Barrier,
    results: Queue[Any],
    producers_done: Event | None,
    all_done: Event,
) -> None:
    """Entry point of one worker process (importable under ``spawn``)."""
    out: dict[str, Any] = {"role": spec.role.kind, "index": spec.role.index, "error": None}
    side: Side | None = None
    reported = False
    try:
        side = open_side(
            spec.side, spec.path, spec.profile, backend=spec.backend, threads=spec.role.threads
        )
        runners: list[Runner | WorkerRunner]
        if spec.role.kind == "consume" and side.own_worker:
            runners = [WorkerRunner(spec, side, producers_done)]
        else:
            clients = [side.client() for _ in range(spec.role.threads)]
            runners = [Runner(spec, c, i, producers_done) for i, c in enumerate(clients)]
        local = threading.Barrier(len(runners) + 1)
        done: list[ThreadResult] = []
        lock = threading.Lock()

        def body(runner: Runner | WorkerRunner) -> None:
            local.wait()
            res = runner.run()
            with lock:
                done.append(res)

        threads = [
            threading.Thread(target=body, args=(r,), name=f"bench-{i}", daemon=True)
            for i, r in enumerate(runners)
        ]
        for t in threads:
            t.start()
        ready.wait()
        local.wait()
        for t in threads:
            t.join()
        out.update(_merge(done))
        out["busy_handled"] = side.busy()
        out["details"] = side.details()
        results.put(out)
        reported = True
        all_done.wait(timeout=spec.limit_s + 60)
    except BaseException:
        out["error"] = traceback.format_exc(limit=4)
        with contextlib.suppress(Exception):
            ready.abort()
    finally:
        if not reported:
            results.put(out)
        if side is not None:
            with contextlib.suppress(Exception):
                side.close()
