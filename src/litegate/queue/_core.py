"""The queue's logic, written once for the sync and the asyncio faces.

Each operation is a generator: it validates and encodes its arguments, then
yields the database work it needs (:class:`Tx`, a function run inside
litegate's group commit; :class:`Query`, one read statement for the reader
pool), receives the result, and returns the answer. ``Queue`` drives it with
``db.transact`` / ``db.query``, ``litegate.queue.aio.Queue`` with their
awaitable twins, so the two faces cannot drift apart. Encoding and decoding
happen outside the database work, so the write gate is held only for SQL.
"""

from __future__ import annotations

import importlib
import json
import math
import random
import secrets
import sqlite3
import time
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any, NamedTuple, Protocol, TypeVar

from .._combine import shippable
from .._errors import ConfigError
from . import _model as sql  # the state numbers and KeyTaken, shared by every store
from . import _sqlite
from ._errors import DuplicateJob, JobNotFound, LeaseLost, PayloadError

R = TypeVar("R")

STATES = ("ready", "scheduled", "leased", "done", "dead")
"""Every state a job can be in, in the order of its life."""

_STATE_NAMES = {sql.LEASED: "leased", sql.DONE: "done", sql.DEAD: "dead"}

# purge() deletes in transactions of at most this many rows, so that it never
# holds the write gate for long however much there is to delete.
PURGE_CHUNK = 5000


class Tx(NamedTuple):
    """Run ``fn(conn)`` in the next group commit; its value comes back."""

    fn: Callable[[sqlite3.Connection], Any]


class Query(NamedTuple):
    """Run one read statement through the reader pool; its rows come back.
    Parameters go by name (``:queue`` in SQLite, ``%(queue)s`` in
    PostgreSQL); a statement uses the ones it needs."""

    sql: str
    params: dict[str, Any]


Step = Generator[Tx | Query, Any, R]

Also = Callable[[Any, list[int]], None]
"""``also(conn, job_ids)``: more SQL of the caller's, run in the same
transaction as a claim or an ack, after it, on the store's connection, with
the ids that were claimed or acked (never called with none). The gate is
held while it runs: keep it to a few statements. If it raises, the claim or
ack is rolled back with it."""


@dataclass(slots=True, eq=False)
class Job:
    """A claimed job. Hand it back to ``ack``, ``fail``, ``extend`` or
    ``release``: it carries the lease's ownership token."""

    id: int
    payload: Any
    attempt: int  # 1 on the first claim
    priority: int
    lease_until: float  # seconds since the epoch (time.time())
    max_attempts: int
    queue: str
    token: int = field(repr=False)
    # Set when a call finishing the job (ack, fail, release) raised instead
    # of answering: it may or may not have committed. The same call tried
    # again then accepts the job's own finished work as its success.
    _unsure: str | None = field(default=None, init=False, repr=False)

    @property
    def last_attempt(self) -> bool:
        """True if failing this attempt sends the job to the dead letters."""
        return self.attempt >= self.max_attempts


@dataclass(frozen=True, slots=True)
class JobInfo:
    """A job as stored, from ``q.get()`` or ``q.dead()``. Times are seconds
    since the epoch."""

    id: int
    queue: str
    state: str  # one of STATES
    payload: Any
    priority: int
    run_at: float
    attempts: int
    max_attempts: int
    lease_until: float | None
    key: str | None
    last_error: str | None
    created_at: float
    done_at: float | None


@dataclass(frozen=True, slots=True)
class UndecodablePayload:
    """``JobInfo.payload`` of a job whose stored payload this process cannot
    decode (an integer longer than ``sys.get_int_max_str_digits()`` allows,
    nesting deeper than the recursion limit: a producer with other limits
    stored it). ``text`` is the JSON as stored; ``reason`` says why."""

    text: str
    reason: str


# What json.loads raises for valid JSON this process cannot decode: the
# int-digits limit (ValueError) and nesting past the recursion limit.
_UNDECODABLE = (ValueError, RecursionError)


def _decode_or_mark(text: str) -> Any:
    """The payload, or an :class:`UndecodablePayload` saying why not: a
    listing must show every job, the ones it cannot decode included."""
    try:
        return json.loads(text)
    except _UNDECODABLE as exc:
        return UndecodablePayload(text, _reason(exc))


def _reason(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "it is nested deeper than this process's recursion limit"
    return str(exc).split(";")[0]


def _info(row: Sequence[Any]) -> JobInfo:
    # A store may add its clock as a 14th column (PostgreSQL: the server's),
    # by which a waiting job is "ready" or "scheduled"; else the host's.
    now = row[13] if len(row) > 13 else time.time()
    state = row[2]
    name = _STATE_NAMES.get(state) or ("ready" if row[4] <= now else "scheduled")
    return JobInfo(
        id=row[0],
        queue=row[1],
        state=name,
        payload=_decode_or_mark(row[5]),
        priority=row[3],
        run_at=row[4],
        attempts=row[6],
        max_attempts=row[7],
        lease_until=row[8],
        key=row[9],
        last_error=row[10],
        created_at=row[11],
        done_at=row[12],
    )


# -- argument checks: each says what to do -----------------------------------


def _seconds(name: str, value: object, *, zero_ok: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name} must be a number of seconds, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v < 0 or (v == 0 and not zero_ok):
        bound = "zero or more" if zero_ok else "greater than zero"
        raise ConfigError(f"{name} must be a finite number of seconds, {bound}; got {value!r}")
    return v


# The longest lease a claim, extend or worker takes: a year. Longer leases
# overflow the clocks that time them (a worker's heartbeat waits a third of
# the lease), and a job that runs longer should have its lease extended
# (q.extend, as the worker's heartbeat does) rather than taken for ever.
MAX_LEASE = 366 * 86400.0


def _lease(value: object) -> float:
    lease = _seconds("lease", value, zero_ok=False)
    if lease > MAX_LEASE:
        raise ConfigError(
            f"lease must be at most {MAX_LEASE:.0f} s (a year), got {value!r}; for a job that "
            "runs longer, extend its lease while it runs (q.extend, or the worker's heartbeat)"
        )
    return lease


def _whole(name: str, value: object, *, minimum: int | None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be a whole number, got {value!r}")
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, got {value!r}")
    if not -(2**63) <= value < 2**63:
        raise ConfigError(f"{name} must fit in 64 bits, got {value!r}")
    return value


# One encoder for every payload: json.dumps() with options builds a new
# encoder per call, which costs as much as encoding a small payload.
_ENCODE = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def _decode_many(bodies: list[str]) -> list[Any]:
    """Decode stored payloads in one call (each is valid JSON by construction,
    so joining them makes a valid JSON array): a claim of 100 decodes 4x
    faster than with one json.loads per payload."""
    if len(bodies) == 1:
        return [json.loads(bodies[0])]
    decoded: list[Any] = json.loads("[" + ",".join(bodies) + "]")
    return decoded


def _encode(payload: Any) -> str:
    try:
        return _ENCODE(payload)
    except (TypeError, ValueError) as exc:
        raise PayloadError(
            f"the payload must be JSON-serialisable ({exc}); pass dicts, lists, strings, "
            "numbers, booleans or None (encode other values yourself, e.g. as strings)"
        ) from None
    except RecursionError:
        raise PayloadError(
            "the payload is nested too deeply to encode (or refers to itself); pass a "
            "flatter structure (a few hundred levels at most)"
        ) from None


def _timestamp(name: str, value: object) -> float:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ConfigError(
                f"{name} must be an aware datetime (naive ones are ambiguous); "
                "use datetime.now(timezone.utc) - timedelta(...)"
            )
        return value.timestamp()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ConfigError(
            f"{name} must be an aware datetime or seconds since the epoch, got {value!r}"
        )
    return float(value)


def _check_jobs(jobs: Iterable[Job], what: str) -> list[Job]:
    out = list(jobs)
    for job in out:
        if not isinstance(job, Job):
            raise ConfigError(f"{what} takes Job objects from q.claim(), got {job!r}")
    return out


class Store(Protocol):
    """The seam between the queue's logic and a database: the functions
    and read statements a store module provides (``_sqlite.py``,
    ``_postgres.py``). Each function runs inside a transaction the driver
    opened, on the store's own connection (``conn``); the rest of each
    call is keyword arguments, so the stores may order them as they like."""

    NEXT_DUE: str
    SELECT_FINISHED: str
    SELECT_JOB: str
    SELECT_DEAD: str
    COUNTS: str

    def create_schema(self, conn: Any, /) -> int: ...
    def insert_one(self, conn: Any, /, *, row: Any) -> int: ...
    def insert_many(self, conn: Any, /, *, rows: Sequence[Any]) -> list[int]: ...
    def insert_batch(self, conn: Any, /, *, batch: sql.Batch) -> list[int]: ...
    def claim(
        self, conn: Any, /, *, queue: str, n: int, lease: float, token: int
    ) -> tuple[list[Any], float]: ...
    def bury(
        self, conn: Any, /, *, owned: Sequence[sql.Owned], errors: dict[int, str], queue: str
    ) -> int: ...
    def ack(
        self, conn: Any, /, *, now: float, owned: Sequence[sql.Owned], queue: str
    ) -> list[int]: ...
    def fail(
        self,
        conn: Any,
        /,
        *,
        jid: int,
        token: int,
        until: float,
        now: float,
        retry_at: float,
        error: str,
        queue: str,
    ) -> int | None: ...
    def extend(
        self, conn: Any, /, *, owned: Sequence[sql.Owned], lease: float, queue: str
    ) -> tuple[list[int], float]: ...
    def release(self, conn: Any, /, *, owned: Sequence[sql.Owned], queue: str) -> list[int]: ...
    def recount(self, conn: Any, /) -> None: ...
    def retry_dead(
        self, conn: Any, /, *, queue: str, ids: Sequence[int] | None, now: float
    ) -> tuple[int, list[tuple[int, int | None]]]: ...
    def purge(
        self, conn: Any, /, *, queue: str, state: int, before: float, limit: int, after: int
    ) -> tuple[int, int | None]: ...


class Core:
    """The operations of one named queue. Not tied to a connection or a
    thread; safe to share.

    ``store`` is the seam to the database (:class:`Store`). Everything that is not
    SQL (validation, encoding, tokens, back-off, errors) lives here, once.
    """

    def __init__(
        self, name: str, *, retry_base: float, retry_max: float, store: Store = _sqlite
    ) -> None:
        self.store: Store = store
        if not isinstance(name, str) or not name:
            raise ConfigError(f"name must be a non-empty string, got {name!r}")
        self.name = name
        self.retry_base = _seconds("retry_base", retry_base, zero_ok=False)
        self.retry_max = _seconds("retry_max", retry_max, zero_ok=False)
        if self.retry_max < self.retry_base:
            raise ConfigError(
                f"retry_max ({retry_max!r}) must not be below retry_base ({retry_base!r})"
            )

    # -- putting ----------------------------------------------------------------
    def put(
        self, payload: Any, priority: int, delay: float, max_attempts: int, key: str | None
    ) -> Step[int]:
        priority = _whole("priority", priority, minimum=None)
        delay = _seconds("delay", delay, zero_ok=True)
        max_attempts = _whole("max_attempts", max_attempts, minimum=1)
        if key is not None and (not isinstance(key, str) or not key):
            raise ConfigError(f"key must be a non-empty string or None, got {key!r}")
        body = _encode(payload)
        now = time.time()
        row = (self.name, priority, now + delay, body, max_attempts, key, now)
        try:
            jid: int = yield Tx(partial(self.store.insert_one, row=row))
        except sql.KeyTaken as taken:
            raise DuplicateJob(
                f"a job with key {taken.key!r} is already in queue {self.name!r} and not done "
                f"(job {taken.existing_id}); nothing was stored. Keys dedupe until that job is "
                "done: drop the key, or wait for it",
                taken.key,
                taken.existing_id,
            ) from None
        return jid

    def put_many(
        self, payloads: Iterable[Any], priority: int, delay: float, max_attempts: int
    ) -> Step[list[int]]:
        priority = _whole("priority", priority, minimum=None)
        delay = _seconds("delay", delay, zero_ok=True)
        max_attempts = _whole("max_attempts", max_attempts, minimum=1)
        if isinstance(payloads, (str, bytes, dict)):
            raise ConfigError(
                "put_many takes an iterable of payloads (a list); for one payload use put()"
            )
        todo = list(payloads)
        if not todo:
            return []
        ids: list[int]
        if all(isinstance(p, (dict, list)) for p in todo):
            try:
                bodies = _ENCODE(todo)
            except (TypeError, ValueError, RecursionError):
                pass  # (encoded one by one below, for the error naming the culprit)
            else:
                now = time.time()
                batch = (self.name, priority, now + delay, max_attempts, now, bodies, len(todo))
                ids = yield Tx(partial(self.store.insert_batch, batch=batch))
                return ids
        # Scalars among them (SQLite's json_each gives a scalar's value, not
        # its JSON text), or one that does not encode: one body each.
        encoded = [_encode(p) for p in todo]
        now = time.time()
        run_at, name = now + delay, self.name
        rows = [(name, priority, run_at, b, max_attempts, None, now) for b in encoded]
        ids = yield Tx(partial(self.store.insert_many, rows=rows))
        return ids

    # -- claiming -----------------------------------------------------------------
    def claim(self, n: int, lease: float, also: Also | None = None) -> Step[list[Job]]:
        """Up to ``n`` due jobs, leased for ``lease`` seconds."""
        n = _whole("n", n, minimum=1)
        lease = _lease(lease)
        # One token per claim: (id, token) is what proves ownership later.
        token = secrets.randbits(sql.TOKEN_BITS)
        claim = partial(self.store.claim, queue=self.name, n=n, lease=lease, token=token)
        rows, until = yield Tx(claim if also is None else partial(_claim_also, claim, also))
        if not rows:
            return []
        jobs: list[Job] = yield from self._jobs(rows, until, token)
        return jobs

    def _bury_undecodable(
        self, rows: list[Any], payloads: list[Any], token: int, until: float
    ) -> Step[tuple[list[Any], list[Any]]]:
        """Claimed jobs whose payload this process cannot decode go to the
        dead letters at once, each with a PayloadError naming it (running
        them is impossible here, and retrying would only fail again); the
        others are returned to the claimer as usual."""
        bad = [(r[0], p) for r, p in zip(rows, payloads, strict=True)
               if isinstance(p, UndecodablePayload)]  # fmt: skip
        errors = {jid: f"PayloadError: {_undecodable_message(self.name, jid, p)}" for jid, p in bad}
        owned = [(jid, token, until) for jid, _ in bad]
        yield Tx(partial(self.store.bury, owned=owned, errors=errors, queue=self.name))
        keep = [i for i, p in enumerate(payloads) if not isinstance(p, UndecodablePayload)]
        return [rows[i] for i in keep], [payloads[i] for i in keep]

    def next_due(self) -> Step[float | None]:
        """When the next job can be claimed (epoch seconds; in the past if one
        can be now), None if the queue has nothing waiting or leased. A read:
        waiting claimers ask this before they take the write gate."""
        rows = yield Query(self.store.NEXT_DUE, {"queue": self.name, "now": time.time()})
        due = rows[0][0]
        return None if due is None else float(due)

    # -- finishing ------------------------------------------------------------
    def _mine(self, jobs: Iterable[Job], what: str) -> list[Job]:
        """The Job objects, checked before anything is sent: each must come
        from a claim of this queue. A job of another queue is refused whole
        (nothing changes), though its token would match: acking it here would
        change the other queue's job behind its name's back."""
        todo = _check_jobs(jobs, what)
        foreign = [j for j in todo if j.queue != self.name]
        if foreign:
            names = sorted({j.queue for j in foreign})
            where = " and ".join(repr(n) for n in names)
            raise JobNotFound(
                f"cannot {what} job(s) {_ids([j.id for j in foreign])}: they belong to queue "
                f"{where}, not {self.name!r}; nothing was changed. Use the queue that claimed "
                f"them: Queue(db, {names[0]!r}).{what}(...)",
                [j.id for j in foreign],
            )
        return todo

    def ack(self, jobs: Iterable[Job], also: Also | None = None) -> Step[int]:
        todo = self._mine(jobs, "ack")
        if not todo:
            return 0
        owned, lost, hint = yield from self._finish(
            todo, "ack", partial(self.store.ack, now=time.time(), queue=self.name), also
        )
        if lost:
            done = len(owned) - len(lost)
            raise LeaseLost(
                f"job(s) {_ids(lost)} of queue {self.name!r} are no longer held by this worker "
                "(the lease expired and another worker claimed them, or they were already "
                f"acked, failed or released); they were not changed"
                + (f", and the other {done} were acked" if done else "")
                + ". Raise lease= or call extend() while working"
                + hint,
                lost,
            )
        return len(owned)

    def _finish(
        self, todo: list[Job], what: str, op: Callable[..., Any], also: Also | None
    ) -> Step[tuple[list[sql.Owned], list[int], str]]:
        """Ack or release ``todo`` (``op``: the store's, given the owned
        pairs), each job once, with ``also`` in the same transaction; a
        call whose answer was lost is resolved by its tokens. Returns the
        owned pairs, the jobs no longer ours, and the hint for a retry."""
        owned = _owned(todo)
        call = partial(op, owned=owned)
        try:
            lost: list[int] = yield Tx(
                call if also is None else partial(_ack_also, call, owned, also)
            )
        except BaseException:
            _unsure(todo, what)
            raise
        if lost:
            lost = yield from self._own_work(todo, lost, what)
        hint = _retry_hint(todo, lost, what)
        _settled(todo)
        return owned, lost, hint

    def _own_work(self, todo: list[Job], lost: list[int], what: str) -> Step[list[int]]:
        """Of ``lost``, the ids that are really lost. A job whose earlier
        ``what`` raised instead of answering (``Job._unsure``) and that the
        database shows finished that way by this job's token was finished by
        that earlier try: it committed, only the answer was lost. Its retry
        reports success (and runs no ``also`` again: that committed with it)."""
        gone = set(lost)
        retried = {j.id: j.token for j in todo if j.id in gone and j._unsure == what}
        if not retried:
            return lost
        ids = list(retried)
        rows = yield Query(self.store.SELECT_FINISHED, {"ids": ids, "ids_json": json.dumps(ids)})
        mine = {int(r[0]) for r in rows if _finished_by(what, r[1], r[2], retried[int(r[0])])}
        return [jid for jid in lost if jid not in mine]

    def backoff(self, attempt: int) -> float:
        """Seconds before retry number ``attempt``: doubling from
        ``retry_base``, capped at ``retry_max``, with ±25 % jitter so that
        jobs that failed together do not retry together."""
        base = min(self.retry_max, self.retry_base * 2.0 ** min(max(attempt - 1, 0), 64))
        return min(self.retry_max, base * random.uniform(0.75, 1.25))

    def fail(self, job: Job, error: str, retry_in: float | None) -> Step[str]:
        (job,) = self._mine([job], "fail")
        delay = (
            self.backoff(job.attempt)
            if retry_in is None
            else _seconds("retry_in", retry_in, zero_ok=True)
        )
        try:
            state = yield Tx(self._fail_call(job, error, delay, time.time()))
        except BaseException:
            _unsure([job], "fail")
            raise
        state = yield from self._fail_outcome(job, state)
        hint = _retry_hint([job], [job.id] if state is None else [], "fail")
        _settled([job])
        if state is None:
            raise self._lost(job, "fail", hint)
        return _fail_state(state, delay)

    def _fail_call(self, job: Job, error: object, delay: float, now: float) -> Callable[..., Any]:
        return partial(self.store.fail, **self._fail_args(job, error, delay, now))

    def _fail_args(self, job: Job, error: object, delay: float, now: float) -> dict[str, Any]:
        return {
            "jid": job.id,
            "token": job.token,
            "until": job.lease_until,
            "now": now,
            "retry_at": now + delay,
            "error": error if isinstance(error, str) else repr(error),
            "queue": self.name,
        }

    def _fail_outcome(self, job: Job, state: int | None) -> Step[int | None]:
        """The state a fail left ``job`` in; None if not ours. A try whose
        answer was lost earlier may have failed it already: its mark says."""
        if state is None and job._unsure == "fail":
            rows = yield Query(
                self.store.SELECT_FINISHED, {"ids": [job.id], "ids_json": f"[{job.id}]"}
            )
            if rows and _finished_by("fail", rows[0][1], rows[0][2], job.token):
                state = int(rows[0][1])
        return state

    def finish_and_claim(
        self,
        acks: Iterable[Job],
        fails: Iterable[tuple[Job, str]],
        n: int,
        lease: float,
        also: Also | None = None,
        ack_also: Also | None = None,
    ) -> Step[Finished]:
        """A worker's step in one transaction (one turn of the write gate):
        ack ``acks`` (with ``ack_also``), fail each ``(job, error)`` of
        ``fails`` (retried after the back-off, or dead), then claim up to
        ``n`` jobs (none if ``n`` is 0) leased for ``lease`` seconds (with
        ``also``). Jobs no longer held are not changed and are reported in
        ``Finished.lost``, not raised: the claim is not given up for them."""
        acked = self._mine(acks, "ack")
        failing = [(job, error) for job, error in _check_fails(fails)]
        self._mine([job for job, _ in failing], "fail")
        n = _whole("n", n, minimum=0)
        lease = _lease(lease)
        now = time.time()
        owned = _owned(acked)
        delays = [self.backoff(job.attempt) for job, _ in failing]
        fails_args = [
            self._fail_args(job, error, delay, now)
            for (job, error), delay in zip(failing, delays, strict=True)
        ]
        token = secrets.randbits(sql.TOKEN_BITS)
        ack_args: dict[str, Any] | None = None
        if owned:
            ack_args = {"now": now, "queue": self.name, "owned": owned}
        claim_args: dict[str, Any] | None = None
        if n:
            claim_args = {"queue": self.name, "n": n, "lease": lease, "token": token}
        store = getattr(self.store, "__name__", None)
        step: Callable[..., Any]
        if also is None and ack_also is None and store in _STORES:
            # Plain data only: a combiner of another process can run it by name.
            step = partial(
                finish_then_claim,
                store=store,
                ack=ack_args,
                fails=fails_args,
                claim=claim_args,
            )
        else:
            ack_call: Callable[..., Any] | None = None
            if ack_args is not None:
                ack_call = partial(self.store.ack, **ack_args)
                if ack_also is not None:
                    ack_call = partial(_ack_also, ack_call, owned, ack_also)
            claim_call: Callable[..., Any] | None = None
            if claim_args is not None:
                claim_call = partial(self.store.claim, **claim_args)
                if also is not None:
                    claim_call = partial(_claim_also, claim_call, also)
            fail_calls: list[Callable[..., int | None]] = [
                partial(self.store.fail, **args) for args in fails_args
            ]
            step = partial(_finish_then_claim, ack_call, fail_calls, claim_call)
        finishing = acked + [job for job, _ in failing]
        try:
            lost, states, (rows, until) = yield Tx(step)
        except BaseException:
            _unsure(acked, "ack")
            _unsure([job for job, _ in failing], "fail")
            raise
        if lost:
            lost = yield from self._own_work(acked, lost, "ack")
        outcomes: dict[int, str] = {}
        for (job, _), state, delay in zip(failing, states, delays, strict=True):
            state = yield from self._fail_outcome(job, state)
            if state is None:
                lost.append(job.id)
            else:
                outcomes[job.id] = _fail_state(state, delay)
        _settled(finishing)
        jobs = (yield from self._jobs(rows, until, token)) if rows else []
        return Finished(jobs, lost, outcomes)

    def _jobs(self, rows: list[Any], until: float, token: int) -> Step[list[Job]]:
        """Claimed rows as Jobs; those whose payload this process cannot
        decode go to the dead letters instead (see _bury_undecodable)."""
        name = self.name
        try:
            payloads = _decode_many([r[1] for r in rows])
        except _UNDECODABLE:
            payloads = [_decode_or_mark(r[1]) for r in rows]
            rows, payloads = yield from self._bury_undecodable(rows, payloads, token, until)
        return [
            Job(r[0], body, r[2], r[3], until, r[5], name, token)
            for r, body in zip(rows, payloads, strict=True)
        ]

    def extend(self, jobs: Iterable[Job], lease: float) -> Step[float]:
        todo = self._mine(jobs, "extend")
        lease = _lease(lease)
        if not todo:
            return time.time() + lease
        owned = _owned(todo)
        lost, until = yield Tx(
            partial(self.store.extend, owned=owned, lease=lease, queue=self.name)
        )
        for job in todo:
            if job.id not in lost:
                job.lease_until = until
        if lost:
            if len(owned) == 1:
                raise self._lost(todo[0], "extend")
            raise LeaseLost(
                f"job(s) {_ids(lost)} of queue {self.name!r} are no longer held by this worker; "
                f"their leases were not extended (the other {len(owned) - len(lost)} were). "
                "Stop working on them: whoever holds them now will finish them",
                lost,
            )
        return float(until)

    def release(self, jobs: Iterable[Job], also: Also | None = None) -> Step[int]:
        todo = self._mine(jobs, "release")
        if not todo:
            return 0
        owned, lost, hint = yield from self._finish(
            todo, "release", partial(self.store.release, queue=self.name), also
        )
        if lost:
            raise LeaseLost(
                f"job(s) {_ids(lost)} of queue {self.name!r} are no longer held by this worker; "
                "they were not released (someone else holds them or they are finished). "
                "Stop working on them: whoever holds them now will finish them" + hint,
                lost,
            )
        return len(owned)

    def _lost(self, job: Job, what: str, hint: str = "") -> LeaseLost:
        return LeaseLost(
            f"cannot {what} job {job.id} of queue {self.name!r}: this worker no longer holds "
            "it (the lease expired and another worker claimed it, or it was already acked, "
            "failed or released); nothing was changed. Raise lease= or call extend() while "
            "working" + hint,
            [job.id],
        )

    # -- looking ----------------------------------------------------------------
    def get(self, jid: int) -> Step[JobInfo]:
        jid = _whole("job id", jid, minimum=None)
        rows = yield Query(self.store.SELECT_JOB, {"id": jid})
        if not rows or rows[0][1] != self.name:
            raise JobNotFound(
                f"no job {jid} in queue {self.name!r} (never put, purged, or in another queue)",
                [jid],
            )
        return _info(rows[0])

    def counts(self) -> Step[dict[str, int]]:
        rows = yield Query(self.store.COUNTS, {"queue": self.name, "now": time.time()})
        return dict(zip(STATES, (int(v) for v in rows[0]), strict=True))

    def recount(self) -> Step[dict[str, int]]:
        """Rebuild the counts of every queue in the database from the jobs
        themselves (one pass over them), then this queue's counts."""
        yield Tx(self.store.recount)
        counts: dict[str, int] = yield from self.counts()
        return counts

    def dead(self, limit: int) -> Step[list[JobInfo]]:
        limit = _whole("limit", limit, minimum=1)
        rows = yield Query(self.store.SELECT_DEAD, {"queue": self.name, "limit": limit})
        return [_info(r) for r in rows]

    def retry_dead(self, ids: Iterable[int] | None) -> Step[int]:
        if ids is not None and (
            isinstance(ids, (str, bytes, dict)) or not isinstance(ids, Iterable)
        ):
            raise ConfigError(
                f"retry_dead takes a list of job ids, got {ids!r}: pass a list "
                f"(retry_dead([{ids!r}]) for one), or nothing to revive every dead job of "
                "the queue"
            )
        wanted = None if ids is None else [_whole("job id", i, minimum=None) for i in ids]
        revived, refused = yield Tx(
            partial(self.store.retry_dead, queue=self.name, ids=wanted, now=time.time())
        )
        if refused:
            raise JobNotFound(
                f"retry_dead revives dead jobs only, and {_states(refused)} of queue "
                f"{self.name!r}; nothing was revived. Pass ids from q.dead() (q.get(id).state "
                "says where a job is)",
                [jid for jid, _ in refused],
            )
        return int(revived)

    def purge(self, done_before: object, dead_before: object, limit: object = None) -> Step[int]:
        """Delete finished jobs, in chunks of PURGE_CHUNK per transaction,
        at most ``limit`` of them (None: all)."""
        left = math.inf if limit is None else _whole("limit", limit, minimum=1)
        targets = []
        if done_before is not None:
            targets.append((sql.DONE, _timestamp("done_before", done_before)))
        if dead_before is not None:
            targets.append((sql.DEAD, _timestamp("dead_before", dead_before)))
        if not targets:
            raise ConfigError(
                "purge needs done_before= (and/or dead_before=): a datetime or epoch seconds; "
                "jobs that finished before it are deleted"
            )
        total = 0
        for state, before in targets:
            after: int | None = 0  # where the store goes on from (None: done)
            while after is not None and left > 0:
                n, after = yield Tx(
                    partial(
                        self.store.purge,
                        queue=self.name,
                        state=state,
                        before=before,
                        limit=int(min(PURGE_CHUNK, left)),
                        after=after,
                    )
                )
                total += n
                left -= n
        return total


class Finished(NamedTuple):
    """What ``q.finish_and_claim()`` did: the jobs it claimed, the ids of the
    jobs given to ack or fail that were no longer held (not changed), and
    each failed job's new state (``"ready"``, ``"scheduled"`` or ``"dead"``)
    by id."""

    jobs: list[Job]
    lost: list[int]
    failed: dict[int, str]


def _fail_state(state: int, delay: float) -> str:
    return "dead" if state == sql.DEAD else ("ready" if delay == 0 else "scheduled")


def _check_fails(fails: Iterable[tuple[Job, str]]) -> list[tuple[Job, str]]:
    out = []
    for item in fails:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], Job)):
            raise ConfigError(
                f"fail= takes (job, error) pairs, a Job from q.claim() and its error text; "
                f"got {item!r}"
            )
        out.append((item[0], item[1] if isinstance(item[1], str) else repr(item[1])))
    return out


# The stores a worker's step may name (finish_then_claim: the name travels).
_STORES = ("litegate.queue._sqlite", "litegate.queue._postgres")


@shippable
def finish_then_claim(
    conn: Any,
    store: str,
    ack: dict[str, Any] | None,
    fails: list[dict[str, Any]],
    claim: dict[str, Any] | None,
) -> tuple[list[int], list[int | None], tuple[list[Any], float]]:
    """A worker's step, as plain data: ``store``'s ack with ``ack``'s
    arguments, its fail with each of ``fails``', then its claim with
    ``claim``'s (each None or empty: not done). Registered with
    ``shippable``, so another process's combiner runs it by name, in one of
    its transactions, as it runs the store's own functions."""
    if store not in _STORES:
        raise ConfigError(f"finish_then_claim: {store!r} is not one of the queue's stores")
    module = importlib.import_module(store)
    return _finish_then_claim(
        None if ack is None else partial(module.ack, **ack),
        [partial(module.fail, **args) for args in fails],
        None if claim is None else partial(module.claim, **claim),
        conn,
    )


def _finish_then_claim(
    ack: Callable[..., list[int]] | None,
    fails: list[Callable[..., int | None]],
    claim: Callable[..., tuple[list[Any], float]] | None,
    conn: Any,
) -> tuple[list[int], list[int | None], tuple[list[Any], float]]:
    lost = [] if ack is None else ack(conn)
    states = [fail(conn) for fail in fails]
    claimed = ([], 0.0) if claim is None else claim(conn)
    return lost, states, claimed


def _undecodable_message(queue: str, jid: int, payload: UndecodablePayload) -> str:
    return (
        f"the payload of job {jid} of queue {queue!r} cannot be decoded in the claiming process "
        f"({payload.reason}), so it was sent to the dead letters without running; fix the "
        "producer (or raise the limit in the workers: sys.set_int_max_str_digits, "
        f"sys.setrecursionlimit), then q.retry_dead([{jid}])"
    )


def _claim_also(claim: Callable[..., Any], also: Also, conn: Any) -> Any:
    rows, until = claim(conn)
    if rows:
        also(conn, [r[0] for r in rows])
    return rows, until


def _owned(jobs: list[Job]) -> list[sql.Owned]:
    """What the stores take back: (id, token, lease_until), each job once."""
    return list(dict.fromkeys((j.id, j.token, j.lease_until) for j in jobs))


def _ack_also(
    ack: Callable[..., list[int]], owned: list[sql.Owned], also: Also, conn: Any
) -> list[int]:
    """``ack(conn)`` (or a release: same shape), then ``also`` with the ids
    it changed, in the same transaction."""
    lost = ack(conn)
    gone = set(lost)
    acked = [o[0] for o in owned if o[0] not in gone]
    if acked:
        also(conn, acked)
    return lost


def _states(refused: Sequence[tuple[int, int | None]]) -> str:
    """'job 4 is done, job 9 does not exist here', for retry_dead's refusal."""
    parts = []
    for jid, state in refused[:10]:
        if state is None:
            parts.append(f"job {jid} does not exist here")
        else:
            parts.append(f"job {jid} is {_STATE_NAMES.get(state, 'waiting to run')}")
    more = f" (and {len(refused) - 10} more are not dead)" if len(refused) > 10 else ""
    return ", ".join(parts) + more


def _unsure(jobs: list[Job], what: str) -> None:
    """``what`` on these jobs raised: it may or may not have committed."""
    for job in jobs:
        job._unsure = what


def _settled(jobs: list[Job]) -> None:
    """A call on these jobs got its answer: nothing is unsure any more."""
    for job in jobs:
        job._unsure = None


def _finished_by(what: str, state: int, row_token: int | None, token: int) -> bool:
    """Does a job's row (its state and token column) show that ``what`` by
    the holder of ``token`` finished it? An ack leaves the job DONE with the
    token; fail and release leave their marks (see ``_model``)."""
    if what == "ack":
        return state == sql.DONE and row_token == token
    if what == "fail":
        return row_token == sql.failed_mark(token)
    return state == sql.READY and row_token == sql.released_mark(token)


def _retry_hint(jobs: list[Job], lost: list[int], what: str) -> str:
    """For a LeaseLost after a try whose answer was lost: say that the truth
    for those jobs is no longer knowable from the job itself."""
    gone = set(lost)
    if not any(j.id in gone and j._unsure == what for j in jobs):
        return ""
    return (
        f". An earlier {what} of this job raised before it answered and may have been "
        "recorded before the job moved on (another worker claimed it since, or it was "
        "purged): q.get(id) shows where it is now"
    )


def _ids(ids: Sequence[int]) -> str:
    shown = ", ".join(str(i) for i in ids[:10])
    return shown + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")


def drive(step: Step[R], transact: Callable[[Any], Any], query: Callable[..., Any]) -> R:
    """Run an operation synchronously."""
    try:
        op = next(step)
        while True:
            try:
                result = transact(op.fn) if isinstance(op, Tx) else query(op.sql, op.params)
            except BaseException as exc:
                op = step.throw(exc)
            else:
                op = step.send(result)
    except StopIteration as stop:
        value: R = stop.value
        return value
