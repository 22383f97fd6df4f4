"""The synchronous :class:`Queue`."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .._database import Database, connect
from .._errors import Closed, ConfigError
from . import _postgres
from . import _sqlite as sql
from ._core import Also, Core, Finished, Job, JobInfo, Step, Store, _seconds, drive
from ._errors import LeaseLost
from ._pgdb import PgDatabase, PgWaker, is_url
from ._waker import Waker

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

# How often a waiting claimer looks for commits from other processes.
DEFAULT_POLL = 0.005


class Stats:
    """Counters of one Queue object in this process, exact under threads."""

    FIELDS = ("put", "claimed", "acked", "failed", "dead", "released", "lease_lost")

    def __init__(self) -> None:
        self._lock = threading.Lock()  # a few additions under it, no I/O
        self._counts = dict.fromkeys(self.FIELDS, 0)

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] += n

    def as_dict(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


def open_db(db: Any, what: str) -> tuple[Any, bool]:
    """``db`` as given, or opened (then the queue owns it): a path opens a
    litegate database; a ``postgresql://`` URL or a psycopg_pool
    ConnectionPool, a pool for the PostgreSQL store."""
    if is_url(db):
        return PgDatabase(db), True
    if isinstance(db, (str, os.PathLike)):
        return connect(db, fair=QueueFace.FAIR), True
    if isinstance(db, (Database, PgDatabase)):
        return db, False
    if type(db).__module__.split(".")[0] == "psycopg_pool":
        return PgDatabase(pool=db), True  # ours to close; the pool stays the caller's
    raise ConfigError(
        f"{what} takes a litegate.Database (litegate.connect(path)), a path, a "
        f"postgresql:// URL or a psycopg_pool.ConnectionPool; got {db!r}"
    )


def store_and_waker(db: Any, name: str, poll: float) -> tuple[Store, Any]:
    """The SQL and the claim waker for the database behind ``db`` (a litegate
    or a PgDatabase, or an asyncio wrapper of one, which has ``.sync``)."""
    sync = getattr(db, "sync", db)
    if isinstance(sync, PgDatabase):
        return _postgres, PgWaker(sync, name)
    return sql, Waker(sync.path, poll)


class QueueFace:
    """What the sync and the asyncio queue share beyond the logic in
    :class:`Core`: the counters, the claim waker, :meth:`wake`, ``repr``,
    and the bookkeeping after each call (one place, so the faces agree)."""

    KIND = "litegate.queue.Queue"
    # The write gate's policy of a database the queue opens from a path.
    # Queue calls are short writes from many threads of many processes; there
    # strict FIFO gave more jobs per second than the bounded default, for one
    # job per call and for batches alike (bench queue e2e; docs/results/queue.md).
    # Pass your own Database to choose another.
    FAIR = "strict"

    def _setup(self, name: str, db: Any, retry_base: float, retry_max: float, poll: float) -> None:
        poll = _seconds("poll", poll, zero_ok=False)
        store, self._waker = store_and_waker(db, name, poll)
        self._core = Core(name, retry_base=retry_base, retry_max=retry_max, store=store)
        self._sync_db = getattr(db, "sync", db)
        self._path = self._sync_db.path
        self.name = name
        self.stats_counters = Stats()
        self._closed = False
        self._interrupts = 0  # wake() counts up; waiting claims compare

    def __repr__(self) -> str:
        c = self.stats_counters.as_dict()
        return (
            f"<{self.KIND} {self.name!r} db={self._path!r} put={c['put']} "
            f"claimed={c['claimed']} acked={c['acked']} failed={c['failed']} "
            f"waiting_claimers={self._waker.waiting}>"
        )

    def wake(self) -> None:
        """Make every ``claim(wait=...)`` now waiting on this object return at
        once (with ``[]`` if there is no work): to stop a worker promptly."""
        self._interrupts += 1
        self._waker.notify()

    def _ended(self) -> Closed | None:
        """The error for a claim that finds this queue or its database closed
        (close() wakes waiting claims: they raise this instead of sleeping on)."""
        if self._closed:
            return Closed(
                f"queue {self.name!r} was closed while this claim waited for work; stop "
                "claiming from it (open a new Queue to go on)"
            )
        if self._sync_db.closed:
            return Closed(
                f"the database of queue {self.name!r} ({self._path}) was closed while this "
                "claim waited for work; stop claiming from it (open it again to go on)"
            )
        return None

    # -- bookkeeping after a call (counters, and waking claimers of this process)
    def _made_ready(self, counter: str | None, n: int) -> None:
        """``n`` jobs became claimable (put, released, revived): count them
        under ``counter`` (if any) and wake this process's waiting claimers."""
        if counter is not None:
            self.stats_counters.add(counter, n)
        if n:
            self._waker.notify()

    def _failed(self, state: str) -> None:
        self.stats_counters.add("failed", 1)
        if state == "dead":
            self.stats_counters.add("dead", 1)
        elif state == "ready":
            self._waker.notify()

    def _finished(self, done: Finished, acks: list[Job]) -> None:
        """Count what a finish_and_claim did with ``acks`` and the rest."""
        counters = self.stats_counters
        counters.add("claimed", len(done.jobs))
        counters.add("lease_lost", len(done.lost))
        counters.add("acked", len({j.id for j in acks} - set(done.lost)))
        for state in done.failed.values():
            self._failed(state)

    def _count_lost(self, exc: LeaseLost) -> None:
        self.stats_counters.add("lease_lost", len(exc.job_ids))

    def _stats(self, counts: dict[str, int], db: dict[str, Any]) -> dict[str, Any]:
        return {
            "queue": self.name,
            "counters": self.stats_counters.as_dict(),
            "counts": counts,
            "waiting_claimers": self._waker.waiting,
            "db": db,
        }


class Queue(QueueFace):
    """A durable job queue named ``name`` in a litegate database.

    ``db`` is a :class:`litegate.Database` or a path (then the queue opens
    it, with the write gate's strict policy, ``Queue.FAIR``, and
    :meth:`close` closes it). Tables are created on first use. Every
    method is thread-safe and goes through litegate's write path: calls from
    many threads are group-committed, calls from many processes queue fairly
    for the write gate. The guarantees: ``docs/guides/queue.md``.

    ``db`` may also be a ``postgresql://`` URL or a psycopg_pool
    ``ConnectionPool`` (the ``postgres`` extra): the same queue, methods and
    guarantees on PostgreSQL, for workers on several machines. Claims use
    ``SKIP LOCKED``, times come from the server's clock, idle claimers wake
    on ``LISTEN``/``NOTIFY``, and calls ride out a server restart.

    - ``retry_base``, ``retry_max``: a failed job is retried after
      ``retry_base * 2 ** (attempt - 1)`` seconds (±25 % jitter), at most
      ``retry_max``.
    - ``poll``: how often a claimer waiting for work (``claim(wait=...)``)
      looks for commits of other processes; puts of this process wake it at
      once.
    """

    def __init__(
        self,
        db: Database | str | os.PathLike[str] | PgDatabase | ConnectionPool[Any],
        name: str = "default",
        *,
        retry_base: float = 1.0,
        retry_max: float = 600.0,
        poll: float = DEFAULT_POLL,
    ) -> None:
        self.db, self._owns_db = open_db(db, "Queue")
        try:
            self._setup(name, self.db, retry_base, retry_max, poll)
        except BaseException:
            if self._owns_db:
                self.db.close()
            raise
        try:
            self.db.transact(self._core.store.create_schema)
        except BaseException:
            self.close()
            raise

    # -- plumbing -----------------------------------------------------------------
    def _run(self, step: Step[Any]) -> Any:
        return drive(step, self.db.transact, self.db.query)

    def _counting_lost(self, step: Step[Any]) -> Any:
        try:
            return self._run(step)
        except LeaseLost as exc:
            self._count_lost(exc)
            raise

    # -- putting ------------------------------------------------------------------
    def put(
        self,
        payload: Any,
        priority: int = 0,
        delay: float = 0.0,
        max_attempts: int = 5,
        key: str | None = None,
    ) -> int:
        """Store one job; return its id once it is committed.

        ``priority``: higher is claimed first. ``delay``: seconds before it
        may be claimed. ``key``: while a job with this key is not done,
        another ``put`` with it raises :class:`DuplicateJob`.
        """
        jid: int = self._run(self._core.put(payload, priority, delay, max_attempts, key))
        self._made_ready("put", 1)
        return jid

    def put_many(
        self,
        payloads: Iterable[Any],
        priority: int = 0,
        delay: float = 0.0,
        max_attempts: int = 5,
    ) -> list[int]:
        """Store several jobs in one transaction; return their ids in order."""
        ids: list[int] = self._run(self._core.put_many(payloads, priority, delay, max_attempts))
        self._made_ready("put", len(ids))
        return ids

    # -- claiming -----------------------------------------------------------------
    def claim(
        self, n: int = 1, lease: float = 30.0, wait: float = 0.0, *, also: Also | None = None
    ) -> list[Job]:
        """Lease up to ``n`` due jobs: highest priority first, then oldest.

        Each job is this worker's until ``job.lease_until``; then it goes back
        to the queue (or to the dead letters if its attempts are used up).
        ``wait``: block up to this many seconds for work; returns ``[]`` if
        none came, or at once after :meth:`wake`. ``also(conn, job_ids)``:
        SQL of yours in the claim's transaction (see ``litegate.queue.Also``).
        """
        wait = _seconds("wait", wait, zero_ok=True)
        deadline = time.monotonic() + wait
        interrupts = self._interrupts
        jobs: list[Job] = self._run(self._core.claim(n, lease, also))
        while not jobs:
            ended = self._ended()
            if ended is not None:
                raise ended
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._interrupts != interrupts:
                return []
            woken = threading.Event()
            self._waker.add(woken.set)
            unhook = self._sync_db.on_close(woken.set)
            try:
                # Registered first, then looked: a put or wake() landing in
                # between still wakes us. The look is a read, not a gate turn.
                if self._interrupts != interrupts:
                    return []
                due = self._run(self._core.next_due())
                if due is None or due > time.time():
                    pause = remaining if due is None else min(remaining, due - time.time())
                    woken.wait(pause)
                    continue
            finally:
                self._waker.discard(woken.set)
                unhook()
            jobs = self._run(self._core.claim(n, lease, also))
        self.stats_counters.add("claimed", len(jobs))
        return jobs

    def finish_and_claim(
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
        """A worker's step in one transaction, one turn of the write gate:
        ack the jobs in ``ack`` (``ack_also``: as ``ack_many``'s ``also``),
        fail each ``(job, error)`` in ``fail`` (retried after the back-off,
        or dead), then claim up to ``n`` jobs (``n=0``: none), as
        :meth:`claim` with ``lease``, ``wait`` and ``also`` (a wait for work
        happens after the acks and failures are committed).

        Returns :class:`Finished`: the claimed ``jobs``, the ids of the jobs
        given to ack or fail that were no longer held (``lost``: not changed,
        not raised, so that the claim stands), and each failed job's new
        state. A call that raised instead of answering is tried again with
        the same Jobs, as for ``ack``/``fail``."""
        wait = _seconds("wait", wait, zero_ok=True)
        ack, fail = list(ack), list(fail)
        if not ack and not fail:  # a claim (PostgreSQL merges those of many threads)
            return (
                Finished(self.claim(n, lease, wait, also=also), [], {})
                if n
                else Finished([], [], {})
            )
        done: Finished = self._run(self._core.finish_and_claim(ack, fail, n, lease, also, ack_also))
        self._finished(done, ack)
        if not done.jobs and n and wait > 0:
            return done._replace(jobs=self.claim(n, lease, wait, also=also))
        return done

    # -- finishing ----------------------------------------------------------------
    def ack(self, job: Job) -> None:
        """Mark the job done. :class:`LeaseLost` (and nothing changed) if this
        worker no longer holds it.

        If an ``ack``, ``fail``, ``extend`` or ``release`` raised instead of
        answering (:class:`CommitUnknown`, an interrupt), call it again with
        the same Job: a first try that did commit is found by the job's
        token, and the retry reports success instead of LeaseLost."""
        self.ack_many([job])

    def ack_many(self, jobs: Iterable[Job], *, also: Also | None = None) -> None:
        """Mark jobs done in one transaction. Jobs no longer held are left
        alone and reported in one :class:`LeaseLost` (``.job_ids``) after the
        others are committed. ``also(conn, acked_ids)``: SQL of yours in the
        same transaction (a job's result, say)."""
        self.stats_counters.add("acked", self._counting_lost(self._core.ack(jobs, also)))

    def fail(self, job: Job, error: str = "", retry_in: float | None = None) -> str:
        """Record a failed attempt with its error. The job is retried after
        an exponential back-off (or ``retry_in`` seconds), or goes to the dead
        letters once ``max_attempts`` is reached. Returns the job's new state
        (``"scheduled"``, ``"ready"`` or ``"dead"``)."""
        state: str = self._counting_lost(self._core.fail(job, error, retry_in))
        self._failed(state)
        return state

    def extend(self, job: Job, lease: float = 30.0) -> float:
        """Heartbeat: the lease now ends ``lease`` seconds from now (returned,
        also in ``job.lease_until``). :class:`LeaseLost` if no longer ours."""
        return self.extend_many([job], lease)

    def extend_many(self, jobs: Iterable[Job], lease: float = 30.0) -> float:
        """``extend`` for several jobs in one transaction. Jobs no longer held
        are reported in one :class:`LeaseLost` after the others are extended."""
        until: float = self._counting_lost(self._core.extend(jobs, lease))
        return until

    def release(self, job: Job | Iterable[Job], *, also: Also | None = None) -> None:
        """Give back claimed jobs that were not started: they return to their
        place in the queue and the attempt is not counted. ``also(conn,
        released_ids)``: SQL of yours in the same transaction (undo what
        your claim's ``also`` recorded, say)."""
        jobs = [job] if isinstance(job, Job) else job
        self._made_ready("released", self._counting_lost(self._core.release(jobs, also)))

    # -- looking ------------------------------------------------------------------
    def get(self, job_id: int) -> JobInfo:
        """The job as stored: ``.state`` (one of ``STATES``), attempts, last
        error, … :class:`JobNotFound` if there is no such job in this queue."""
        info: JobInfo = self._run(self._core.get(job_id))
        return info

    def counts(self) -> dict[str, int]:
        """How many jobs are in each state: ready, scheduled, leased, done, dead."""
        counts: dict[str, int] = self._run(self._core.counts())
        return counts

    def recount(self) -> dict[str, int]:
        """Rebuild the counts behind :meth:`counts` (of every queue in the
        database) from the jobs themselves, and return this queue's. The
        queue keeps its counts in its own statements; SQL of yours that
        changes the queue's tables (an UPDATE, a DELETE, rows copied in) must
        be followed by this. It reads every job once, holding the write gate."""
        counts: dict[str, int] = self._run(self._core.recount())
        return counts

    def dead(self, limit: int = 100) -> list[JobInfo]:
        """The dead letters, most recent first, with their last error."""
        jobs: list[JobInfo] = self._run(self._core.dead(limit))
        return jobs

    def retry_dead(self, ids: Iterable[int] | None = None) -> int:
        """Send dead jobs (these ids, or all of this queue's) back to the
        queue with fresh attempts; returns how many were revived.

        All or nothing: if any id is not a dead job of this queue (no such
        job, or it is ready, scheduled, leased or done), :class:`JobNotFound`
        names each such id with its state (``.job_ids``) and nothing is
        revived, so a count of 0 always means "no dead jobs", never "wrong
        ids". ``ids`` must be a list (or other iterable) of ints: a bare
        ``retry_dead(5)`` raises :class:`litegate.ConfigError`."""
        n: int = self._run(self._core.retry_dead(ids))
        self._made_ready(None, n)
        return n

    def purge(
        self, done_before: Any = None, *, dead_before: Any = None, limit: int | None = None
    ) -> int:
        """Delete done jobs that finished before ``done_before`` (and dead
        ones before ``dead_before``): aware datetimes or epoch seconds.
        Returns how many were deleted. It deletes in transactions of a few
        thousand jobs, so writers go on between them; ``limit``: delete at
        most that many, to spread a large purge out over time."""
        n: int = self._run(self._core.purge(done_before, dead_before, limit))
        return n

    def next_due(self) -> float | None:
        """When this queue's next job can be claimed (epoch seconds; in the
        past if one can be now), None if no job is waiting or leased. A
        read, through the reader pool: what a waiting worker asks before it
        takes the write gate."""
        due: float | None = self._run(self._core.next_due())
        return due

    def stats(self) -> dict[str, Any]:
        """This object's counters, the queue's counts and the database's stats."""
        return self._stats(self.counts(), self.db.stats())

    # -- closing ------------------------------------------------------------------
    def close(self) -> None:
        """Stop the waker; close the database if the queue opened it."""
        if self._closed:
            return
        self._closed = True
        self._waker.close()
        if self._owns_db:
            self.db.close()

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def put_on(
    conn: sqlite3.Connection,
    payload: Any,
    *,
    queue: str = "default",
    priority: int = 0,
    delay: float = 0.0,
    max_attempts: int = 5,
    key: str | None = None,
) -> int:
    """Store a job with a ``sqlite3`` connection of your own, inside the
    transaction it has open: the job commits, or rolls back, with the rest
    of that transaction (an order and the job that emails it, say). Returns
    the job's id. Outside a transaction the insert commits by itself.

    Nothing waits here for a write gate beyond the one your transaction
    holds; litegate's Django backend uses this to enqueue inside
    ``atomic()``. Claimers in other connections see the job once it commits.
    Same arguments and errors as :meth:`Queue.put`.
    """
    step = Core(queue, retry_base=1.0, retry_max=1.0).put(
        payload, priority, delay, max_attempts, key
    )

    def transact(fn: Any) -> Any:
        try:
            return fn(conn)
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc):
                raise
            sql.create_schema(conn)  # first job in this file: the tables, then again
            return fn(conn)

    jid: int = drive(step, transact, _no_reads)
    return jid


def _no_reads(*_args: Any) -> Any:  # pragma: no cover - put issues no reads
    raise AssertionError("put_on runs no read queries")
