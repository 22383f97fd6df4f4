"""The queues under test, one class per side, as each is used in a worker
process.

Every side offers the same small interface (``put``, ``put_many``,
``claim``, ``ack``, ``ack_many``) on a *client*; a process opens its side
once (``_backends.open_side``) and asks it for one client per thread (sides that share
one object between threads, litegate and huey, hand out the same one).
Payloads are JSON objects ``{"job": k, ...}`` with a job number unique in the
cell; ``claim`` returns ``(handle, k)`` pairs so the harness can check that
every job put was processed exactly once.

The PostgreSQL sides (``--backend postgres``) live in ``_pgsides.py``, which
builds on this module; their names and titles are here, with the SQLite ones.
``_backends.py`` picks the module for a backend (this one never imports
``_pgsides``).

This module is imported by spawned children: standard library and litegate
only at the top; huey, litequeue, ``litegate.queue`` and the PostgreSQL
sides are imported when a side is opened.
"""

from __future__ import annotations

import importlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.synchronize import Event
from typing import Any

from litegate import PROFILES

BACKENDS = ("sqlite", "postgres")

SIDES = (
    "bare",
    "seed",
    "litegate",
    "litegate-worker",
    "litegate-bounded",
    "litegate-combined",
    "huey",
    "litequeue",
)
"""Every side on SQLite, in report order."""

LITEGATE_FAIR: dict[str, bool | str | None] = {
    "litegate": None,
    "litegate-worker": None,
    "litegate-bounded": True,
    "litegate-combined": None,
}
"""The SQLite sides that are ``litegate.queue`` and the write gate's policy
each opens its database with: ``litegate`` the one a Queue opened from a path
uses (``Queue.FAIR``, None here: read from the queue, so the bench follows
it), ``litegate-bounded`` ``fair=True``, ``connect()``'s default, so the
report shows both policies side by side; ``litegate-worker`` is ``litegate``
consumed by its own Worker. All share litegate's write gate (its figures,
``--grant-log``); the targets are judged on ``litegate``."""

E2E_ONLY_SIDES = ("litegate-worker",)
"""Sides that differ from another only in how they consume (their own worker
loop): planned in the end-to-end rows only, whatever ``--sides`` says (in
the other scenarios they would be that other side again)."""

PG_SIDES = ("litegate", "litegate-worker", "procrastinate", "pgqueuer")
"""Every side on PostgreSQL, in report order."""

SIDES_BY_BACKEND = {"sqlite": SIDES, "postgres": PG_SIDES}
ALL_SIDES = tuple(dict.fromkeys(SIDES + PG_SIDES))

SIDE_TITLES = {
    "bare": "bare batched sqlite3 (no leases, attempts or priorities)",
    "seed": "seed 004's approach (plain sqlite3 + execute_with_retry)",
    "litegate": 'litegate.queue (its default policy for a path, Queue.FAIR: fair="strict")',
    "litegate-worker": "litegate.queue consumed by its own Worker (concurrency = the row's "
    "threads, prefetch = the claim size - concurrency; each worker step settles the jobs it "
    "finished and claims in one transaction: the batch completer)",
    "litegate-bounded": "litegate.queue, fair=True (bounded, connect()'s default)",
    "litegate-combined": "litegate.queue with connect(combine=True): one process commits every "
    "process's puts, claims and acks (combined writes across processes)",
    "huey": "huey SqliteHuey storage (enqueue/dequeue; no lease, no ack)",
    "litequeue": "litequeue LiteQueue (put/pop/done)",
}

PG_SIDE_TITLES = {
    "litegate": "litegate.queue on PostgreSQL (Queue(url): SKIP LOCKED claims, leases, attempts)",
    "litegate-worker": "the same queue, its consumers litegate's own Worker (finished jobs "
    "settled with the next claim, one transaction per step)",
    "procrastinate": "procrastinate (App + PsycopgConnector: defer_async, batch_defer_async; "
    "claim = job_manager.fetch_job + finish_job, the calls its worker makes)",
    "pgqueuer": "pgqueuer (asyncpg driver: Queries.enqueue; claim = Queries.dequeue + "
    "log_jobs, the calls its QueueManager makes)",
}


def side_title(backend: str, side: str) -> str:
    return (PG_SIDE_TITLES if backend == "postgres" else SIDE_TITLES)[side]


PEER_MODULES = {
    "huey": "huey",
    "litequeue": "litequeue",
    "procrastinate": "procrastinate",
    "pgqueuer": "pgqueuer,asyncpg",  # its asyncpg driver (the pgqueuer[asyncpg] extra)
}
"""Sides that need third-party modules (the ``queue`` extra), comma-separated."""

BATCH_SIDES = ("bare", "litegate", "litegate-worker", "litegate-bounded", "litegate-combined")
"""Sides with a batch API (put many, claim many, ack many in one transaction)."""

NO_BATCH = {
    "seed": "n/a: one job per call",
    "huey": "n/a: no batch API",
    "litequeue": "n/a: no batch API",
}

FRAMES_NA = {"huey": {"ack": "n/a: no ack (dequeue deleted the task)"}}
"""Single-job operations of the frames scenario a side cannot do, and why
(the others it does, and their WAL frames are measured)."""

Job = tuple[Any, int]
"""``(handle for ack, job number)``."""


def worker_shape(threads: int, batch: int) -> tuple[int, int]:
    """``(concurrency, prefetch)`` of a Worker standing for a consumer of
    ``threads`` threads that claims ``batch`` jobs at a time: one job running
    per thread, and the rest of a claim waiting (a Worker claims as many as
    it has free slots, ``concurrency + prefetch``)."""
    return threads, max(0, batch - threads)


def payload(k: int) -> dict[str, Any]:
    """A small JSON job, like a task queue's: the job number and a body."""
    return {"job": k, "kind": "bench", "args": [k % 97, "x" * 16]}


PG_CONFLICTS = frozenset({"40001", "40P01", "55P03"})
"""PostgreSQL's SQLSTATEs for losing to a concurrent transaction: serialization
failure, deadlock, lock not available (psycopg and asyncpg both say ``sqlstate``)."""


def busy_error(exc: BaseException) -> bool:
    """True for SQLite's "database is locked" / "busy" errors and PostgreSQL's
    lock conflicts: the errors of contention, counted apart from the others."""
    if getattr(exc, "sqlstate", None) in PG_CONFLICTS:
        return True
    text = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text)


def profile_pragmas(profile: str) -> dict[str, Any]:
    return dict(PROFILES[profile])


def apply_pragmas(conn: sqlite3.Connection, profile: str) -> None:
    """The seed's ``get_connection()``: every PRAGMA of the profile, in order."""
    for pragma, value in profile_pragmas(profile).items():
        conn.execute(f"PRAGMA {pragma}={value}")


def busy_seconds(profile: str) -> float:
    return int(profile_pragmas(profile).get("busy_timeout", 5000)) / 1000.0


# -- seed 004's retry helper, verbatim but for the counter ---------------------


class RetryCounter:
    """How many SQLITE_BUSY / locked errors ``execute_with_retry`` caught."""

    def __init__(self) -> None:
        self.busy = 0
        self._lock = threading.Lock()

    def add(self) -> None:
        with self._lock:
            self.busy += 1


def execute_with_retry(
    conn: sqlite3.Connection,
    sql: str,
    params: Sequence[Any] = (),
    max_retries: int = 3,
    counter: RetryCounter | None = None,
) -> sqlite3.Cursor:
    """Execute SQL with exponential backoff retry (seed 004, "Retry Strategy";
    only ``counter`` is added, to count the BUSY errors it sees)."""
    for attempt in range(max_retries):
        try:
            return conn.execute(sql, params)
        except sqlite3.OperationalError as e:
            if "locked" in str(e).lower() or "busy" in str(e).lower():
                if counter is not None:
                    counter.add()
                if attempt < max_retries - 1:
                    wait_time = 0.1 * (2**attempt)  # Exponential backoff
                    time.sleep(wait_time)
                else:
                    raise  # Final attempt failed
            else:
                raise  # Different error, don't retry
    raise AssertionError("unreachable")  # pragma: no cover


# -- the clients ------------------------------------------------------------------


class Client:
    """One thread's handle on a queue. Subclasses implement what their
    library can do; the rest raises ``NotImplementedError`` (an "n/a" cell)."""

    def put(self, job: dict[str, Any]) -> None:
        raise NotImplementedError

    def put_many(self, jobs: Sequence[dict[str, Any]]) -> None:
        raise NotImplementedError

    def claim(self, n: int) -> list[Job]:
        raise NotImplementedError

    def ack(self, job: Job) -> None:
        raise NotImplementedError

    def ack_many(self, jobs: Sequence[Job]) -> None:
        for job in jobs:
            self.ack(job)

    def close(self) -> None:
        pass


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        conn.execute("ROLLBACK")


class BareClient(Client):
    """The least a batched queue can be: one table, ``executemany`` inserts in
    one transaction, claim by ``UPDATE … WHERE id IN (SELECT … LIMIT n)
    RETURNING``, ack by DELETE in one transaction. No leases, attempts or
    priorities; a worker that dies loses its claimed jobs."""

    def __init__(self, path: str, profile: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        apply_pragmas(self.conn, profile)

    def put(self, job: dict[str, Any]) -> None:
        self.conn.execute("INSERT INTO jobs(payload) VALUES (?)", (json.dumps(job),))

    def put_many(self, jobs: Sequence[dict[str, Any]]) -> None:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(
                "INSERT INTO jobs(payload) VALUES (?)", [(json.dumps(j),) for j in jobs]
            )
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise

    def claim(self, n: int) -> list[Job]:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            rows = conn.execute(
                "UPDATE jobs SET claimed = 1 WHERE id IN "
                "(SELECT id FROM jobs WHERE claimed = 0 ORDER BY id LIMIT ?) "
                "RETURNING id, payload",
                (n,),
            ).fetchall()
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
        return [(row[0], int(json.loads(row[1])["job"])) for row in rows]

    def ack(self, job: Job) -> None:
        self.conn.execute("DELETE FROM jobs WHERE id = ?", (job[0],))

    def ack_many(self, jobs: Sequence[Job]) -> None:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany("DELETE FROM jobs WHERE id = ?", [(j[0],) for j in jobs])
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise

    def close(self) -> None:
        self.conn.close()


_SEED_CLAIM = (
    "UPDATE tasks SET status = 'claimed', claimed_at = ?, attempts = attempts + 1 "
    "WHERE id = (SELECT id FROM tasks WHERE status = 'queued' "
    "ORDER BY priority DESC, id LIMIT 1) RETURNING id, payload"
)


class SeedClient(Client):
    """Seed 004's production pattern: one connection per worker with the
    profile's PRAGMAs (``get_connection``), every statement through
    ``execute_with_retry`` (3 tries, 0.1 s exponential back-off), autocommit
    inserts, one job claimed per ``BEGIN IMMEDIATE … UPDATE … RETURNING``,
    ack by UPDATE."""

    def __init__(self, path: str, profile: str, counter: RetryCounter) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        apply_pragmas(self.conn, profile)
        self.counter = counter

    def _x(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        return execute_with_retry(self.conn, sql, params, counter=self.counter)

    def put(self, job: dict[str, Any]) -> None:
        self._x(
            "INSERT INTO tasks(payload, priority, created_at) VALUES (?, 0, ?)",
            (json.dumps(job), time.time()),
        )

    def claim(self, n: int) -> list[Job]:
        if n != 1:
            raise NotImplementedError("the seed's approach claims one job at a time")
        self._x("BEGIN IMMEDIATE")
        try:
            rows = self._x(_SEED_CLAIM, (time.time(),)).fetchall()
            self._x("COMMIT")
        except BaseException:
            _rollback(self.conn)
            raise
        return [(row[0], int(json.loads(row[1])["job"])) for row in rows]

    def ack(self, job: Job) -> None:
        self._x(
            "UPDATE tasks SET status = 'done', completed_at = ? WHERE id = ?",
            (time.time(), job[0]),
        )

    def close(self) -> None:
        self.conn.close()


class LitegateClient(Client):
    """``litegate.queue.Queue`` shared by the threads of a process (its calls
    are thread-safe and group-committed)."""

    def __init__(self, queue: Any) -> None:
        self.q = queue

    def put(self, job: dict[str, Any]) -> None:
        self.q.put(job)

    def put_many(self, jobs: Sequence[dict[str, Any]]) -> None:
        self.q.put_many(list(jobs))

    def claim(self, n: int) -> list[Job]:
        jobs = self.q.claim(n=n, lease=300.0, wait=0.0)
        return [(j, int(j.payload["job"])) for j in jobs]

    def ack(self, job: Job) -> None:
        self.q.ack(job[0])

    def ack_many(self, jobs: Sequence[Job]) -> None:
        self.q.ack_many([j[0] for j in jobs])


class HueyClient(Client):
    """huey's ``SqliteStorage`` (what ``SqliteHuey`` enqueues to and its
    consumer dequeues from), shared by a process's threads behind huey's own
    lock. ``dequeue`` deletes the task: there is no lease and no ack, so a
    worker that dies after dequeue loses the job; ``ack`` does nothing."""

    def __init__(self, storage: Any) -> None:
        self.storage = storage

    def put(self, job: dict[str, Any]) -> None:
        self.storage.enqueue(json.dumps(job).encode())

    def claim(self, n: int) -> list[Job]:
        if n != 1:
            raise NotImplementedError("huey dequeues one task at a time")
        data = self.storage.dequeue()
        if data is None:
            return []
        return [(None, int(json.loads(bytes(data))["job"]))]

    def ack(self, job: Job) -> None:
        pass  # nothing to do: dequeue already deleted it


class LitequeueClient(Client):
    """``litequeue.LiteQueue`` on its own connection per thread (its
    transactions are per connection), put / pop / done."""

    def __init__(self, path: str, profile: str) -> None:
        mod: Any = importlib.import_module("litequeue")
        conn = sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, timeout=busy_seconds(profile)
        )
        self.q = mod.LiteQueue(conn, queue_name="jobs")
        apply_pragmas(conn, profile)  # over litequeue's own (synchronous, cache_size)

    def put(self, job: dict[str, Any]) -> None:
        self.q.put(json.dumps(job))

    def claim(self, n: int) -> list[Job]:
        if n != 1:
            raise NotImplementedError("litequeue pops one message at a time")
        msg = self.q.pop()
        if msg is None:
            return []
        return [(msg.message_id, int(json.loads(msg.data)["job"]))]

    def ack(self, job: Job) -> None:
        self.q.done(job[0])

    def close(self) -> None:
        self.q.close()


# -- a side as a process uses it ---------------------------------------------------


class Side:
    """One process's view of a side: ``client()`` per thread, ``busy()`` at
    the end, ``close()``. A side with ``own_worker`` consumes the end-to-end
    rows with its library's own worker loop (:meth:`work`) instead of the
    harness's claim/ack loop."""

    name = ""
    own_worker = False

    def __init__(self, path: str, profile: str) -> None:
        self.path = path
        self.profile = profile
        self._clients: list[Client] = []

    def _new_client(self) -> Client:
        raise NotImplementedError

    def client(self) -> Client:
        c = self._new_client()
        self._clients.append(c)
        return c

    def busy(self) -> int:
        """BUSY / locked errors this side saw and handled itself (retries);
        those that escaped to the caller are counted by the harness."""
        return 0

    def details(self) -> dict[str, Any]:
        """The side's own statistics for the JSON (litegate: its gate)."""
        return {}

    def work(
        self,
        concurrency: int,
        batch: int,
        limit_s: float,
        producers_done: Event,
        on_done: Callable[[int], None],
    ) -> bool:
        """Run the library's own worker (``concurrency`` jobs at a time,
        fetching ``batch`` per query where it can) until ``producers_done``
        is set and the queue is empty, calling ``on_done(job number)`` for
        every job it runs. True if it was stopped at ``limit_s`` instead."""
        raise NotImplementedError(f"{self.name} has no worker loop of its own here")

    def work_errors(self) -> dict[str, int]:
        """Errors the side's own worker loop met and handled itself (logged
        and retried) during :meth:`work`, by message: they count as the
        cell's errors, as those the harness's loop sees do."""
        return {}

    def close(self) -> None:
        for c in self._clients:
            c.close()


class BareSide(Side):
    name = "bare"

    def _new_client(self) -> Client:
        return BareClient(self.path, self.profile)


class SeedSide(Side):
    name = "seed"

    def __init__(self, path: str, profile: str) -> None:
        super().__init__(path, profile)
        self.counter = RetryCounter()

    def _new_client(self) -> Client:
        return SeedClient(self.path, self.profile, self.counter)

    def busy(self) -> int:
        return self.counter.busy


def _litegate_queue_module() -> Any:
    return importlib.import_module("litegate.queue")


class LitegateSide(Side):
    name = "litegate"
    combine = False  # connect(combine=...)

    def __init__(self, path: str, profile: str) -> None:
        super().__init__(path, profile)
        import litegate

        queue = _litegate_queue_module().Queue
        fair = LITEGATE_FAIR[self.name]
        self.db = litegate.connect(
            path,
            profile=profile,
            timeout=60.0,
            fair=queue.FAIR if fair is None else fair,
            combine=self.combine,
        )
        self.queue = queue(self.db, name="default")
        self.shared = LitegateClient(self.queue)

    def _new_client(self) -> Client:
        return self.shared

    def busy(self) -> int:
        return int(self.db.stats()["busy_retries"])

    def details(self) -> dict[str, Any]:
        st = self.db.stats()
        return {
            "gate": st["gate"],
            "group_commit": st["writes"]["group_commit"],
            "committed": st["writes"]["committed"],
            "checkpoints": st["checkpoints"],
        }

    def close(self) -> None:
        self.queue.close()
        self.db.close()


class LitegateBoundedSide(LitegateSide):
    """The same queue on a Database opened with the bounded policy."""

    name = "litegate-bounded"


class LitegateCombinedSide(LitegateSide):
    """The same queue with its writes combined across processes."""

    name = "litegate-combined"
    combine = True


class WorkerLoop:
    """Consumers that are litegate's own ``Worker`` on ``self.queue`` (on
    either backend), as users run it, instead of the harness's claim/ack
    loop: finished jobs are settled with the worker's next claim (one
    transaction per step), or by its acker after ``ack_delay``."""

    name = "litegate-worker"
    own_worker = True
    queue: Any

    DRAIN_POLL_S = 0.005
    """How often, once the producers are done, the harness looks whether the
    queue is empty (``counts()``: a read, never a turn of the write gate)."""

    worker_stats: list[dict[str, Any]]

    def work(
        self,
        concurrency: int,
        batch: int,
        limit_s: float,
        producers_done: Event,
        on_done: Callable[[int], None],
    ) -> bool:
        deadline = time.monotonic() + limit_s
        lock = threading.Lock()

        def handler(payload: dict[str, Any]) -> None:
            with lock:  # (the executors of one Worker call it at once)
                on_done(int(payload["job"]))

        threads, prefetch = worker_shape(concurrency, batch)
        worker = _litegate_queue_module().Worker(
            self.queue, handler, concurrency=threads, prefetch=prefetch
        )
        raised: list[BaseException] = []

        def run() -> None:
            try:
                self.worker_stats.append(worker.run())
            except BaseException as exc:  # handed to the caller below
                raised.append(exc)

        if not hasattr(self, "worker_stats"):
            self.worker_stats = []
        thread = threading.Thread(target=run, name=f"bench-{self.name}", daemon=True)
        thread.start()
        # The worker runs as in production (claim(wait=...) when idle) until
        # every producer is done and the queue is empty: nothing ready,
        # scheduled or leased (every job run, and its ack committed). Then
        # stop(), its graceful stop; it has nothing left to settle.
        late = not producers_done.wait(max(0.0, deadline - time.monotonic()))
        while not late and thread.is_alive():
            counts = self.queue.counts()
            if counts["ready"] + counts["scheduled"] + counts["leased"] == 0:
                break
            if time.monotonic() >= deadline:
                late = True
                break
            time.sleep(self.DRAIN_POLL_S)
        # At the deadline: at once (jobs still held run again after their
        # leases, outside the cell, and the accounting says so).
        worker.stop(grace=0 if late else None)
        thread.join(max(30.0, deadline - time.monotonic()))
        if raised:
            raise raised[0]
        return late or thread.is_alive()

    def work_errors(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for key, what in (
            ("errors", "database errors, logged and retried"),
            ("lease_lost", "leases lost"),
            ("abandoned", "jobs abandoned at stop"),
        ):
            n = sum(int(s.get(key, 0)) for s in self.worker_stats)
            if n:
                out[f"Worker: {what}"] = n
        return out

    def worker_details(self) -> dict[str, Any]:
        return {"worker": getattr(self, "worker_stats", [])}


class LitegateWorkerSide(WorkerLoop, LitegateSide):
    """``litegate`` (SQLite) consumed by its own Worker."""

    def details(self) -> dict[str, Any]:
        return {**LitegateSide.details(self), **self.worker_details()}


class HueySide(Side):
    name = "huey"

    def __init__(self, path: str, profile: str) -> None:
        super().__init__(path, profile)
        mod: Any = importlib.import_module("huey")
        self.huey = mod.SqliteHuey("bench", filename=path, timeout=busy_seconds(profile))
        storage = self.huey.storage
        apply_pragmas(storage.conn, profile)
        self.shared = HueyClient(storage)

    def _new_client(self) -> Client:
        return self.shared

    def close(self) -> None:
        self.huey.storage.close()


class LitequeueSide(Side):
    name = "litequeue"

    def _new_client(self) -> Client:
        return LitequeueClient(self.path, self.profile)


SIDE_CLASSES: dict[str, type[Side]] = {
    "bare": BareSide,
    "seed": SeedSide,
    "litegate": LitegateSide,
    "litegate-worker": LitegateWorkerSide,
    "litegate-bounded": LitegateBoundedSide,
    "litegate-combined": LitegateCombinedSide,
    "huey": HueySide,
    "litequeue": LitequeueSide,
}


def open_sqlite_side(name: str, path: str, profile: str) -> Side:
    """The SQLite side ``name`` on the file ``path``."""
    return SIDE_CLASSES[name](path, profile)


# -- the parent's set-up and final count -----------------------------------------


def create_sqlite(name: str, path: str, profile: str) -> None:
    """Create the SQLite side's schema on a fresh file (in the parent,
    before the children start, so they do not race on DDL)."""
    if name in ("bare", "seed"):
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            apply_pragmas(conn, profile)
            if name == "bare":
                conn.execute(
                    "CREATE TABLE jobs(id INTEGER PRIMARY KEY, payload TEXT NOT NULL, "
                    "claimed INTEGER NOT NULL DEFAULT 0)"
                )
            else:
                conn.execute(
                    "CREATE TABLE tasks(id INTEGER PRIMARY KEY AUTOINCREMENT, "
                    "payload TEXT NOT NULL, status TEXT NOT NULL DEFAULT 'queued', "
                    "priority INTEGER NOT NULL DEFAULT 0, attempts INTEGER NOT NULL DEFAULT 0, "
                    "created_at REAL, claimed_at REAL, completed_at REAL)"
                )
                conn.execute("CREATE INDEX tasks_claim ON tasks(status, priority DESC, id)")
        finally:
            conn.close()
        return
    side = open_sqlite_side(name, path, profile)
    try:
        if name == "litequeue":
            side.client()  # LiteQueue creates its table
    finally:
        side.close()


def remaining_sqlite(name: str, path: str, profile: str) -> int:
    """Jobs still in the SQLite side's queue (not acknowledged) after a cell."""
    if name in LITEGATE_FAIR:
        side = open_sqlite_side(name, path, profile)
        assert isinstance(side, LitegateSide)
        try:
            counts = side.queue.counts()
        finally:
            side.close()
        return sum(int(v) for k, v in dict(counts).items() if k not in DONE_STATES)
    sql = {
        "bare": "SELECT count(*) FROM jobs",
        "seed": "SELECT count(*) FROM tasks WHERE status != 'done'",
        "huey": "SELECT count(*) FROM task",
        "litequeue": "SELECT count(*) FROM [jobs] WHERE status NOT IN (2, 3)",
    }[name]
    conn = sqlite3.connect(path, timeout=30)
    try:
        (n,) = conn.execute(sql).fetchone()
        return int(n)
    finally:
        conn.close()


DONE_STATES = frozenset({"done", "acked", "completed", "succeeded", "dead", "failed", "total"})
"""States in ``Queue.counts()`` that are not waiting to be processed."""
