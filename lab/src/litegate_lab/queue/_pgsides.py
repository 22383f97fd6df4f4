"""The queues under test on PostgreSQL (``--backend postgres``), with the
client interface of ``_sides.py``.

- ``litegate``: ``litegate.queue.Queue(url)``, one per process, shared by its
  threads, as on SQLite.
- ``procrastinate``: an ``App`` on a ``PsycopgConnector`` per process; put =
  ``Task.defer_async``, put_many = ``Task.batch_defer_async``. It has no
  claim call for applications: its ``Worker`` fetches a job with
  ``App.job_manager.fetch_job`` (one job per query) and records the outcome
  with ``finish_job``; ``claim``/``ack`` make those same calls, for a
  registered worker id, without its task runner around them.
- ``pgqueuer``: ``Queries`` over an asyncpg connection per thread (pgqueuer's
  main driver; a connection runs one query at a time); put =
  ``Queries.enqueue``, put_many = ``enqueue`` with lists; claim/ack =
  ``Queries.dequeue``/``log_jobs``, the calls its ``QueueManager`` makes.

Both peers are asyncio-first: each process has one event loop
(:class:`ProcessLoop`), where the side opens its connections. With one
harness thread (most roles) the loop runs in that thread, each call until
its coroutine is done; with several (the one-job producers) it runs on a
thread of its own and the harness's threads hand it coroutines, a hop that
costs about 0.1 ms a call here. In the end-to-end rows the peers'
workers are their own loops (``App.run_worker_async``, ``PgQueuer.run``),
run as their documentation runs them (:meth:`Side.work`).

Imported by spawned children: procrastinate, pgqueuer and asyncpg are
imported only when their side is opened.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Sequence
from datetime import timedelta
from multiprocessing.synchronize import Event
from typing import Any, TypeVar

from ._sides import Client, Job, LitegateClient, Side, WorkerLoop

T = TypeVar("T")

TASK = "bench"
"""procrastinate's task name and queue; pgqueuer's entrypoint."""

LEASE_S = 300.0
"""How long a claimed job stays the claimer's: litegate's lease in every
scenario, pgqueuer's heartbeat timeout in claims (nothing beats in them)."""


def _poll_until(done: Event, deadline: float) -> bool:
    return done.is_set() or time.monotonic() >= deadline


async def wait_for_event(done: Event, deadline: float, watch: asyncio.Task[Any]) -> bool:
    """Until the parent's ``done`` is set (True) or the ``deadline`` passes
    (False); raises at once if ``watch`` (the worker) ended first."""
    while not _poll_until(done, deadline):
        if watch.done():
            watch.result()  # its exception, if it raised
            raise RuntimeError("the worker stopped before the producers were done")
        await asyncio.sleep(0.005)
    return done.is_set()


class ProcessLoop:
    """A process's one asyncio event loop for an asyncio-first peer.
    ``call`` runs a coroutine on it and returns its result. It runs in the
    caller's thread (``run_until_complete``: nothing between the harness and
    the library) until :meth:`share` moves it to a thread of its own, for
    several harness threads at once."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None

    def share(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self.loop.run_forever, name=f"{self.name}-loop", daemon=True
            )
            self._thread.start()

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._thread is None:
            return self.loop.run_until_complete(coro)
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        if self.loop.is_closed():
            return
        if self._thread is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=30)
            if self._thread.is_alive():
                return  # stuck in a call: leave it to the process's exit
        else:
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()


class LoopSide(Side):
    """A side for an asyncio-first peer, driven through the process's one
    :class:`ProcessLoop`. A subclass says what its client is and what closing
    the library takes."""

    own_worker = True

    def __init__(self, path: str, profile: str) -> None:
        super().__init__(path, profile)
        self.loop = ProcessLoop(self.name)

    def _client(self) -> Client:
        raise NotImplementedError

    def _new_client(self) -> Client:
        if self._clients:
            self.loop.share()  # a second harness thread: the loop needs one of its own
        return self._client()

    async def _close_async(self) -> None:
        """The library's own shutdown, run on the loop (none by default)."""

    def close(self) -> None:
        try:
            super().close()
            self.loop.call(self._close_async())
        finally:
            self.loop.close()


# -- litegate ----------------------------------------------------------------------


class LitegatePgSide(Side):
    name = "litegate"

    def __init__(self, path: str, profile: str, threads: int = 1) -> None:
        super().__init__(path, profile)
        self.queue = importlib.import_module("litegate.queue").Queue(path, name="default")
        self.shared = LitegateClient(self.queue)

    def _new_client(self) -> Client:
        return self.shared

    def details(self) -> dict[str, Any]:
        return {"pool": dict(self.queue.db.stats())}

    def close(self) -> None:
        self.queue.close()


class LitegateWorkerPgSide(WorkerLoop, LitegatePgSide):
    """``litegate`` on PostgreSQL consumed by its own Worker."""

    def details(self) -> dict[str, Any]:
        return {**LitegatePgSide.details(self), **self.worker_details()}


# -- procrastinate -----------------------------------------------------------------


class ProcrastinateClient(Client):
    """A thread's handle on the process's ``App`` (its connection pool is
    shared); a worker id of its own, registered at its first claim, as
    ``fetch_job`` wants one."""

    def __init__(self, side: ProcrastinateSide) -> None:
        self.side = side
        self.worker_id: int | None = None

    def put(self, job: dict[str, Any]) -> None:
        self.side.loop.call(self.side.task.defer_async(**job))

    def put_many(self, jobs: Sequence[dict[str, Any]]) -> None:
        self.side.loop.call(self.side.task.batch_defer_async(*jobs))

    def claim(self, n: int) -> list[Job]:
        if n != 1:
            raise NotImplementedError("procrastinate fetches one job per query")
        manager = self.side.app.job_manager
        if self.worker_id is None:
            self.worker_id = int(self.side.loop.call(manager.register_worker()))
        job = self.side.loop.call(manager.fetch_job(queues=[TASK], worker_id=self.worker_id))
        if job is None:
            return []
        return [(job, int(job.task_kwargs["job"]))]

    def ack(self, job: Job) -> None:
        status = self.side.status.SUCCEEDED
        # delete_job=False: the worker's default (delete_jobs="never")
        self.side.loop.call(
            self.side.app.job_manager.finish_job(job[0], status=status, delete_job=False)
        )

    def close(self) -> None:
        if self.worker_id is not None:
            with contextlib.suppress(Exception):
                self.side.loop.call(self.side.app.job_manager.unregister_worker(self.worker_id))
            self.worker_id = None


class ProcrastinateSide(LoopSide):
    name = "procrastinate"

    def __init__(self, path: str, profile: str, threads: int = 1) -> None:
        mod: Any = importlib.import_module("procrastinate")
        self.status: Any = importlib.import_module("procrastinate.jobs").Status
        super().__init__(path, profile)  # the loop: after the imports, which may fail
        # A pool big enough for every thread (or every concurrent job of its
        # worker) plus the worker's LISTEN connection: none waits for another.
        connector = mod.PsycopgConnector(conninfo=path, min_size=1, max_size=threads + 2)
        self.app: Any = mod.App(connector=connector)
        self._on_done: Callable[[int], None] | None = None

        async def bench(**job: Any) -> None:
            if self._on_done is not None:
                self._on_done(int(job["job"]))

        # app.task(...) is its decorator, applied by hand (the app is Any to mypy)
        self.task: Any = self.app.task(name=TASK, queue=TASK)(bench)
        try:
            self.loop.call(self._open())
        except BaseException:
            self.loop.close()
            raise

    async def _open(self) -> None:
        await self.app.open_async()

    def _client(self) -> Client:
        return ProcrastinateClient(self)

    def work(
        self,
        concurrency: int,
        batch: int,
        limit_s: float,
        producers_done: Event,
        on_done: Callable[[int], None],
    ) -> bool:
        self._on_done = on_done
        try:
            return self.loop.call(self._work(concurrency, limit_s, producers_done))
        finally:
            self._on_done = None

    async def _work(self, concurrency: int, limit_s: float, producers_done: Event) -> bool:
        deadline = time.monotonic() + limit_s
        options: dict[str, Any] = {
            "queues": [TASK],
            "concurrency": concurrency,
            "install_signal_handlers": False,  # the harness, not a signal, ends it
        }
        # Phase 1: the worker as it runs in production (wait=True: LISTEN/NOTIFY
        # plus polling), until every producer is done. Cancelling
        # run_worker_async is its documented graceful stop.
        first = asyncio.create_task(self.app.run_worker_async(wait=True, **options))
        try:
            in_time = await wait_for_event(producers_done, deadline, first)
        finally:
            first.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await first
        if not in_time:
            return True
        # Phase 2: wait=False, it stops once it finds the queue empty.
        try:
            await asyncio.wait_for(
                self.app.run_worker_async(wait=False, **options),
                timeout=max(0.0, deadline - time.monotonic()),
            )
        except asyncio.TimeoutError:  # not yet the builtin one on 3.10
            return True
        return False

    async def _close_async(self) -> None:
        await self.app.close_async()


# -- pgqueuer ------------------------------------------------------------------------


class PgqueuerClient(Client):
    """``Queries`` on an asyncpg connection of its own (one query at a time
    per connection), on the process's loop."""

    def __init__(self, side: PgqueuerSide) -> None:
        self.side = side
        self.conn: Any = side.loop.call(side.connect())
        self.queries: Any = side.mod.Queries(side.mod.AsyncpgDriver(self.conn))
        self.manager_id = uuid.uuid4()  # what a QueueManager stamps on the jobs it picks

    def put(self, job: dict[str, Any]) -> None:
        self.side.loop.call(self.queries.enqueue(TASK, json.dumps(job).encode()))

    def put_many(self, jobs: Sequence[dict[str, Any]]) -> None:
        n = len(jobs)
        payloads = [json.dumps(j).encode() for j in jobs]
        self.side.loop.call(self.queries.enqueue([TASK] * n, payloads, [0] * n))

    def claim(self, n: int) -> list[Job]:
        jobs = self.side.loop.call(
            self.queries.dequeue(
                batch_size=n,
                entrypoints={TASK: self.side.entrypoint_params},
                queue_manager_id=self.manager_id,
                global_concurrency_limit=None,
                heartbeat_timeout=timedelta(seconds=LEASE_S),
            )
        )
        return [(j, int(json.loads(j.payload)["job"])) for j in jobs]

    def ack(self, job: Job) -> None:
        self.ack_many([job])

    def ack_many(self, jobs: Sequence[Job]) -> None:
        done = [(j[0], "successful", None) for j in jobs]
        self.side.loop.call(self.queries.log_jobs(done))

    def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.side.loop.call(self.conn.close())
            self.conn = None


class PgqueuerSide(LoopSide):
    name = "pgqueuer"

    def __init__(self, path: str, profile: str, threads: int = 1) -> None:
        self.mod: Any = importlib.import_module("pgqueuer")
        self.asyncpg: Any = importlib.import_module("asyncpg")
        params = importlib.import_module("pgqueuer.queries").EntrypointExecutionParameter
        self.entrypoint_params: Any = params(concurrency_limit=0)  # 0: no limit
        self.mode: Any = importlib.import_module("pgqueuer.types").QueueExecutionMode
        super().__init__(path, profile)  # the loop: after the imports, which may fail

    async def connect(self) -> Any:
        return await self.asyncpg.connect(self.path)

    def _client(self) -> Client:
        return PgqueuerClient(self)

    def work(
        self,
        concurrency: int,
        batch: int,
        limit_s: float,
        producers_done: Event,
        on_done: Callable[[int], None],
    ) -> bool:
        return self.loop.call(self._work(batch, limit_s, producers_done, on_done))

    def _app(self, conn: Any, on_done: Callable[[int], None]) -> Any:
        pgq = self.mod.PgQueuer.from_asyncpg_connection(conn)

        async def bench(job: Any) -> None:
            on_done(int(json.loads(job.payload)["job"]))

        pgq.entrypoint(TASK)(bench)  # its decorator, applied by hand (pgq is Any to mypy)
        return pgq

    async def _work(
        self, batch: int, limit_s: float, producers_done: Event, on_done: Callable[[int], None]
    ) -> bool:
        deadline = time.monotonic() + limit_s
        conn = await self.connect()
        try:
            # Phase 1: PgQueuer.run in its continuous mode (LISTEN/NOTIFY), as
            # `pgq run` runs it, until every producer is done; setting its
            # shutdown event is its graceful stop.
            pgq = self._app(conn, on_done)
            first = asyncio.create_task(pgq.run(batch_size=batch))
            try:
                in_time = await wait_for_event(producers_done, deadline, first)
            finally:
                pgq.shutdown.set()
                await first
            if not in_time:
                return True
            # Phase 2: its drain mode, which stops once the queue is empty.
            drain = self._app(conn, on_done)
            try:
                await asyncio.wait_for(
                    drain.run(batch_size=batch, mode=self.mode.drain),
                    timeout=max(0.0, deadline - time.monotonic()),
                )
            except asyncio.TimeoutError:  # not yet the builtin one on 3.10
                return True
            return False
        finally:
            await conn.close()


PG_SIDE_CLASSES: dict[str, type[Side]] = {
    "litegate": LitegatePgSide,
    "litegate-worker": LitegateWorkerPgSide,
    "procrastinate": ProcrastinateSide,
    "pgqueuer": PgqueuerSide,
}


def open_pg_side(name: str, url: str, profile: str, threads: int = 1) -> Side:
    cls: Any = PG_SIDE_CLASSES[name]
    side: Side = cls(url, profile, threads)
    return side


# -- the parent's set-up and final count -----------------------------------------


def create_pg(name: str, url: str) -> None:
    """Each library's own schema set-up, in the parent, on the cell's fresh
    database: litegate's Queue creates its tables; procrastinate's
    ``schema_manager.apply_schema_async``; pgqueuer's ``Queries.install``."""
    if name in ("litegate", "litegate-worker"):
        importlib.import_module("litegate.queue").Queue(url, name="default").close()
    elif name == "procrastinate":
        asyncio.run(_procrastinate_schema(url))
    elif name == "pgqueuer":
        asyncio.run(_pgqueuer_install(url))
    else:  # pragma: no cover - the parser only lets known names through
        raise ValueError(f"unknown side {name!r}")


async def _procrastinate_schema(url: str) -> None:
    mod: Any = importlib.import_module("procrastinate")
    app = mod.App(connector=mod.PsycopgConnector(conninfo=url, min_size=1, max_size=1))
    async with app.open_async():
        await app.schema_manager.apply_schema_async()


async def _pgqueuer_install(url: str) -> None:
    mod: Any = importlib.import_module("pgqueuer")
    conn = await importlib.import_module("asyncpg").connect(url)
    try:
        await mod.Queries(mod.AsyncpgDriver(conn)).install()
    finally:
        await conn.close()


REMAINING_SQL = {
    # todo: never fetched; doing: fetched, not finished
    "procrastinate": "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')",
    # log_jobs moves a finished job out of the queue table into the log
    "pgqueuer": "SELECT count(*) FROM pgqueuer",
}


def remaining_pg(name: str, url: str, done_states: frozenset[str]) -> int:
    """Jobs still in the queue (not finished) after a cell."""
    if name in ("litegate", "litegate-worker"):
        q = importlib.import_module("litegate.queue").Queue(url, name="default")
        try:
            counts = dict(q.counts())
        finally:
            q.close()
        return sum(int(v) for k, v in counts.items() if k not in done_states)
    import psycopg

    with psycopg.connect(url, connect_timeout=30) as conn:
        row = conn.execute(REMAINING_SQL[name]).fetchone()
    return int(row[0]) if row else 0
