"""``litegate.queue`` for asyncio: the same queue, every method awaitable.

```python
from litegate.queue import aio

q = await aio.Queue.open("app.db", name="emails")   # or aio.Queue(adb, name=...)
await q.put({"to": "ada@example.org"})
for job in await q.claim(n=10, wait=1.0):
    await q.ack(job)
await q.close()
```

The logic is the sync queue's own (``_core.py``); only the driver differs:
writes go through ``AsyncDatabase.transact`` (group-committed with every
other waiting task and thread), reads through the reader pool. Nothing runs
on the event loop's thread but encoding and decoding.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterable
from typing import Any

from .._database import Database
from .._errors import ConfigError
from .._fair import set_done_soon
from ..aio import AsyncDatabase
from ..aio import connect as _aio_connect
from ._core import Also, Finished, Job, JobInfo, Query, Step, Tx, _seconds
from ._errors import LeaseLost
from ._pgdb import AsyncPgDatabase, PgDatabase, is_url
from ._queue import DEFAULT_POLL, QueueFace

__all__ = ["Queue"]


class Queue(QueueFace):
    """The asyncio face of :class:`litegate.queue.Queue` (same arguments and
    guarantees). ``db`` is a :class:`litegate.aio.AsyncDatabase` (or a sync
    :class:`litegate.Database`, which it wraps); to open a path, use
    ``await Queue.open(path, name)``. Tables are created on first use."""

    KIND = "litegate.queue.aio.Queue"

    def __init__(
        self,
        db: AsyncDatabase | Database | PgDatabase | AsyncPgDatabase,
        name: str = "default",
        *,
        retry_base: float = 1.0,
        retry_max: float = 600.0,
        poll: float = DEFAULT_POLL,
    ) -> None:
        if isinstance(db, Database):
            db = AsyncDatabase(db)
        elif isinstance(db, PgDatabase):
            db = AsyncPgDatabase(db)
        if not isinstance(db, (AsyncDatabase, AsyncPgDatabase)):
            raise ConfigError(
                "aio.Queue takes a litegate.aio.AsyncDatabase (await litegate.aio.connect(path))"
                "; to open a path or a postgresql:// URL use 'await aio.Queue.open(path)'. "
                f"Got {db!r}"
            )
        self.db = db
        self._setup(name, db, retry_base, retry_max, poll)
        self._owns_db = False
        self._schema_ready = False
        self._background: set[asyncio.Task[None]] = set()  # releases after a cancel

    @classmethod
    async def open(
        cls, path: str | os.PathLike[str], name: str = "default", **kwargs: Any
    ) -> Queue:
        """Open the database at ``path`` (``litegate.connect``'s defaults but
        the write gate's policy, ``Queue.FAIR``) and the queue ``name`` in
        it; ``close()`` closes both."""
        adb: AsyncDatabase | AsyncPgDatabase
        if is_url(path):
            loop = asyncio.get_running_loop()
            adb = AsyncPgDatabase(await loop.run_in_executor(None, PgDatabase, str(path)))
        else:
            adb = await _aio_connect(path, fair=cls.FAIR)
        try:
            q = cls(adb, name, **kwargs)
            await q._ensure_schema()
        except BaseException:
            await adb.close()
            raise
        q._owns_db = True
        return q

    # -- plumbing -----------------------------------------------------------------
    async def _ensure_schema(self) -> None:
        if not self._schema_ready:
            # idempotent; a race costs one no-op
            await self.db.transact(self._core.store.create_schema)
            self._schema_ready = True

    async def _run(self, step: Step[Any]) -> Any:
        if not self._schema_ready:
            await self._ensure_schema()
        try:
            op = next(step)
            while True:
                try:
                    if isinstance(op, Tx):
                        result = await self.db.transact(op.fn)
                    else:
                        assert isinstance(op, Query)
                        result = await self.db.query(op.sql, op.params)
                except BaseException as exc:
                    op = step.throw(exc)
                else:
                    op = step.send(result)
        except StopIteration as stop:
            return stop.value

    # -- putting ------------------------------------------------------------------
    async def put(
        self,
        payload: Any,
        priority: int = 0,
        delay: float = 0.0,
        max_attempts: int = 5,
        key: str | None = None,
    ) -> int:
        jid: int = await self._run(self._core.put(payload, priority, delay, max_attempts, key))
        self._made_ready("put", 1)
        return jid

    async def put_many(
        self,
        payloads: Iterable[Any],
        priority: int = 0,
        delay: float = 0.0,
        max_attempts: int = 5,
    ) -> list[int]:
        ids: list[int] = await self._run(
            self._core.put_many(payloads, priority, delay, max_attempts)
        )
        self._made_ready("put", len(ids))
        return ids

    # -- claiming -----------------------------------------------------------------
    async def claim(
        self, n: int = 1, lease: float = 30.0, wait: float = 0.0, *, also: Also | None = None
    ) -> list[Job]:
        wait = _seconds("wait", wait, zero_ok=True)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        interrupts = self._interrupts
        jobs = await self._claim_once(n, lease, also)
        while not jobs:
            ended = self._ended()
            if ended is not None:
                raise ended
            remaining = deadline - loop.time()
            if remaining <= 0 or self._interrupts != interrupts:
                return []
            woken: asyncio.Future[None] = loop.create_future()

            def wake(fut: asyncio.Future[None] = woken) -> None:  # any thread
                set_done_soon(loop, fut)

            self._waker.add(wake)
            unhook = self._sync_db.on_close(wake)
            try:
                if self._interrupts != interrupts:
                    return []
                due = await self._run(self._core.next_due())
                if due is None or due > time.time():
                    pause = remaining if due is None else min(remaining, due - time.time())
                    await asyncio.wait([woken], timeout=pause)
                    continue
            finally:
                self._waker.discard(wake)
                unhook()
            jobs = await self._claim_once(n, lease, also)
        self.stats_counters.add("claimed", len(jobs))
        return jobs

    async def finish_and_claim(
        self,
        ack: Iterable[Job] = (),
        fail: Iterable[tuple[Job, str]] = (),
        n: int = 1,
        lease: float = 30.0,
        wait: float = 0.0,
        *,
        also: Also | None = None,
        ack_also: Also | None = None,
    ) -> Finished:
        """:meth:`litegate.queue.Queue.finish_and_claim`, awaitable. Cancelled
        once the step is on its way, the jobs it claimed go back to the queue
        (the acks and failures stand, as they committed with it)."""
        wait = _seconds("wait", wait, zero_ok=True)
        ack, fail = list(ack), list(fail)
        if not ack and not fail:  # a claim (PostgreSQL merges those of many threads)
            return (
                Finished(await self.claim(n, lease, wait, also=also), [], {})
                if n
                else Finished([], [], {})
            )
        step = self._core.finish_and_claim(ack, fail, n, lease, also, ack_also)
        work = asyncio.ensure_future(self._run(step))
        try:
            done: Finished = await asyncio.shield(work)
        except asyncio.CancelledError:
            work.add_done_callback(self._give_back_finished)
            raise
        self._finished(done, ack)
        if not done.jobs and n and wait > 0:
            return done._replace(jobs=await self.claim(n, lease, wait, also=also))
        return done

    def _give_back_finished(self, work: asyncio.Future[Finished]) -> None:
        if work.cancelled() or work.exception() is not None or not work.result().jobs:
            return
        task = asyncio.ensure_future(self.release(work.result().jobs))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _claim_once(self, n: int, lease: float, also: Also | None) -> list[Job]:
        """One claim that a cancellation cannot lose: if the task is cancelled
        once the claim is on its way, the jobs it got go back to the queue
        (attempt not counted) instead of sitting leased to nobody."""
        work = asyncio.ensure_future(self._run(self._core.claim(n, lease, also)))
        try:
            jobs: list[Job] = await asyncio.shield(work)
        except asyncio.CancelledError:
            work.add_done_callback(self._give_back)
            raise
        return jobs

    def _give_back(self, work: asyncio.Future[list[Job]]) -> None:
        if work.cancelled() or work.exception() is not None or not work.result():
            return
        jobs = work.result()
        task = asyncio.ensure_future(self.release(jobs))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- finishing ----------------------------------------------------------------
    async def ack(self, job: Job) -> None:
        await self.ack_many([job])

    async def ack_many(self, jobs: Iterable[Job], *, also: Also | None = None) -> None:
        n_acked = await self._counting_lost(self._core.ack(jobs, also))
        self.stats_counters.add("acked", n_acked)

    async def fail(self, job: Job, error: str = "", retry_in: float | None = None) -> str:
        state: str = await self._counting_lost(self._core.fail(job, error, retry_in))
        self._failed(state)
        return state

    async def extend(self, job: Job, lease: float = 30.0) -> float:
        return await self.extend_many([job], lease)

    async def extend_many(self, jobs: Iterable[Job], lease: float = 30.0) -> float:
        until: float = await self._counting_lost(self._core.extend(jobs, lease))
        return until

    async def release(self, job: Job | Iterable[Job], *, also: Also | None = None) -> None:
        jobs = [job] if isinstance(job, Job) else job
        self._made_ready("released", await self._counting_lost(self._core.release(jobs, also)))

    async def _counting_lost(self, step: Step[Any]) -> Any:
        try:
            return await self._run(step)
        except LeaseLost as exc:
            self._count_lost(exc)
            raise

    # -- looking ------------------------------------------------------------------
    async def get(self, job_id: int) -> JobInfo:
        info: JobInfo = await self._run(self._core.get(job_id))
        return info

    async def counts(self) -> dict[str, int]:
        counts: dict[str, int] = await self._run(self._core.counts())
        return counts

    async def recount(self) -> dict[str, int]:
        counts: dict[str, int] = await self._run(self._core.recount())
        return counts

    async def dead(self, limit: int = 100) -> list[JobInfo]:
        jobs: list[JobInfo] = await self._run(self._core.dead(limit))
        return jobs

    async def retry_dead(self, ids: Iterable[int] | None = None) -> int:
        n: int = await self._run(self._core.retry_dead(ids))
        self._made_ready(None, n)
        return n

    async def purge(
        self, done_before: Any = None, *, dead_before: Any = None, limit: int | None = None
    ) -> int:
        n: int = await self._run(self._core.purge(done_before, dead_before, limit))
        return n

    async def next_due(self) -> float | None:
        due: float | None = await self._run(self._core.next_due())
        return due

    async def stats(self) -> dict[str, Any]:
        return self._stats(await self.counts(), self.db.stats())

    # -- closing ------------------------------------------------------------------
    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.get_running_loop().run_in_executor(None, self._waker.close)
        if self._owns_db:
            await self.db.close()

    async def __aenter__(self) -> Queue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
