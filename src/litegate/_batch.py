"""Group commit: concurrent ``db.execute()`` calls share one transaction.

Callers put a :class:`Request` in a FIFO queue. A caller that finds nobody
leading becomes the leader: it takes the write gate like any writer, then
drains the queue into one IMMEDIATE transaction, each statement after the
first inside its own SAVEPOINT, COMMITs, and wakes the members. Requests that
arrived meanwhile form the next batch, led by the first of them that has a
thread to lead with (asyncio requests have none; a helper thread leads for
them). So no caller leads for longer than one batch, and a lone caller pays
for nothing but the queue check.

Bounds: a batch stops taking members when it holds ``max_batch`` statements
or has spent ``max_time`` seconds executing them. A caller therefore waits
for at most the batch in progress, then its own, each bounded by those
limits plus one COMMIT.

Outcomes:
- a failing statement rolls back only its own SAVEPOINT and raises to its
  own caller;
- every caller returns only after the COMMIT that holds its write;
- a failed COMMIT fails every member of the batch and leaves nothing of it;
- a caller whose timeout passes while its request still waits in the queue
  leaves the queue with ``WriteTimeout``; once its request has been taken
  into a running batch it gets the batch's outcome (committed or not, never
  half), even if that comes after its timeout.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from ._busy import is_busy
from ._errors import ConfigError, TransactionError
from ._guard import RELEASE, ROLLBACK, ROLLBACK_TO, SAVEPOINT, WriterConnection
from ._statements import TX, VACUUM
from ._statements import kind as statement_kind
from ._stats import nearest_rank
from ._time import acquire_until, deadline_of

T = TypeVar("T")
_PENDING, _TAKEN, _LEAD, _DONE = range(4)


def _copy_for_member(exc: BaseException) -> BaseException:
    """A batch-wide failure, as a separate exception object per member (each
    member raises it in its own thread; one shared object would have its
    traceback rewritten by all of them at once)."""
    try:
        copy = type(exc)(*exc.args)
    except Exception:
        return exc
    copy.__dict__.update(exc.__dict__)  # e.g. sqlite_errorcode, sqlite_errorname
    copy.__cause__ = exc
    return copy


def refusal(sql: str) -> Exception | None:
    """Why ``db.execute()`` does not run ``sql`` (a typed error), or None."""
    what = statement_kind(sql)
    if what == TX:
        return TransactionError(
            f"db.execute() runs one statement inside litegate's own transaction, so it "
            f"does not run {sql.strip()[:40]!r}; for several statements in one "
            "transaction use db.write() or db.transact(fn)"
        )
    if what == VACUUM:
        return ConfigError(
            "VACUUM cannot run inside a transaction, and db.execute() runs in one; use "
            "db.vacuum() (or db.vacuum(into=path)), which takes the write gate without one"
        )
    return None


class Request:
    __slots__ = (
        "error",
        "fn",
        "many",
        "on_done",
        "params",
        "result",
        "sql",
        "state",
        "value",
        "wake",
    )

    def __init__(
        self,
        sql: str,
        params: Any,
        many: bool,
        on_done: Callable[[Request], None] | None = None,
        fn: Callable[[sqlite3.Connection], Any] | None = None,
    ) -> None:
        self.sql = sql
        self.params = params
        self.many = many
        # A member may be a function of the write connection instead of one
        # statement (``db.transact``): several statements, one SAVEPOINT.
        self.fn = fn
        self.value: Any = None
        self.state = _PENDING
        self.result: tuple[int, int | None, list[Any]] | None = None
        self.error: BaseException | None = None
        self.on_done = on_done  # asyncio: called on the leader's thread when done
        # A thread that must wait sleeps on ``wake``, made (under the queue's
        # mutex) only when it does: a caller that leads at once needs none.
        self.wake: threading.Lock | None = None


class Ship(Protocol):
    """``GroupCommit.ship``: offered each batch before the gate is taken
    (``_combine.Ship``); settles it elsewhere and returns True, or returns
    False to run it here. ``in_turn(fn, deadline)`` runs ``fn(conn)`` in a
    transaction of its own with the gate held, if the batch must be settled
    here after all."""

    def __call__(
        self,
        batch: list[Request],
        deadline: float | None,
        in_turn: Callable[[Callable[[WriterConnection], Any], float | None], Any],
    ) -> bool: ...


class SizeHistogram:
    """Batch sizes: exact counts per size (sizes are bounded by max_batch)."""

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}

    def record(self, n: int) -> None:
        self.counts[n] = self.counts.get(n, 0) + 1

    def summary(self) -> dict[str, float | int]:
        items = sorted(self.counts.items())
        total = sum(c for _, c in items)
        if not total:
            return {"batches": 0, "statements": 0, "mean": 0.0, "p50": 0, "p99": 0, "max": 0}

        def pct(q: float) -> int:
            rank, seen = nearest_rank(q * 100, total), 0
            for size, c in items:
                seen += c
                if seen >= rank:
                    return size
            return items[-1][0]

        statements = sum(s * c for s, c in items)
        return {
            "batches": total,
            "statements": statements,
            "mean": round(statements / total, 2),
            "p50": pct(0.50),
            "p99": pct(0.99),
            "max": items[-1][0],
        }


class Writer(Protocol):
    """What group commit needs of the writer (the engine's, for one process)."""

    def begin(self, timeout: float | None) -> WriterConnection:
        """The write connection with the gate held and no transaction open
        (``timeout`` None: the default)."""

    def begin_again(self, conn: WriterConnection, timeout: float | None) -> None:
        """``BEGIN IMMEDIATE`` with the gate held, within ``timeout``."""

    def end(self, conn: WriterConnection, commit: bool, resync: int | None = None) -> None:
        """COMMIT an open transaction (raising if that fails) or ROLLBACK
        it, count an autocommit statement that committed, and release the
        gate. ``resync``: the level of PRAGMA synchronous to set again
        first (what :meth:`raise_sync` returned)."""

    def sync_level(self) -> int:
        """The writer's PRAGMA synchronous (0 OFF .. 3 EXTRA)."""

    def raise_sync(self, conn: WriterConnection, level: int) -> int | None:
        """The gate held, no transaction open: commit the next transaction
        with synchronous ``level`` if that is more than the writer's own;
        the level to set back, or None if nothing changed."""

    def timeout_error(self, limit: float) -> BaseException:
        """The error of a write still queued when its ``limit`` passed."""


def autocommit(
    conn: WriterConnection, sql: str, params: Any
) -> tuple[int, int | None, list[Any]] | None:
    """Run one plain statement in autocommit mode, the gate held and no
    transaction open: SQLite's write lock and the commit in one step. None
    (nothing done) if a writer outside litegate holds SQLite's lock: run it
    in a transaction then, whose BEGIN IMMEDIATE waits with the busy
    strategy. Raises the statement's error, typed by the writer's guard."""
    try:
        cur = conn.execute(sql, params)
        return cur.rowcount, cur.lastrowid, cur.fetchall()
    except Exception as exc:
        if isinstance(exc, sqlite3.OperationalError) and is_busy(exc) and not conn.in_transaction:
            return None
        typed = conn.guard.typed(exc)
        if typed is exc:
            raise
        raise typed from exc


class _Batch:
    """The batch a leader runs: its members, those whose writes are in the
    open transaction, and whether the transaction was ended (committed or
    rolled back), so a failure does not end it twice."""

    __slots__ = ("ended", "live", "members")

    def __init__(self) -> None:
        self.members: list[Request] = []
        self.live: list[Request] = []
        self.ended = False


class GroupCommit:
    """The queue and the leader protocol, over a :class:`Writer`."""

    def __init__(
        self,
        writer: Writer,
        *,
        max_batch: int,
        max_time: float,
        default_timeout: float,
    ) -> None:
        self._writer = writer
        self.max_batch = max_batch
        self.max_time = max_time
        self._default_timeout = default_timeout
        self._mutex = threading.Lock()  # guards the queue and the leader flag; no I/O
        self._pending: deque[Request] = deque()
        self._leading = False
        self._last_size = 0  # members of the last batch (1: writes come one at a time)
        self._flusher_wake = threading.Lock()
        self._flusher_wake.acquire()
        self._flusher: threading.Thread | None = None
        self._closed = False
        self.sizes = SizeHistogram()
        # Set on a process that combines its writes with other processes'
        # (_combine.Ship): offered each batch before the gate is taken;
        # True if it settled the batch elsewhere, False to run it here.
        self.ship: Ship | None = None

    def timeout_error(self, limit: float) -> BaseException:
        """The error of a write still queued when its ``limit`` passed (for
        a face that times its writes out itself, as asyncio does)."""
        return self._writer.timeout_error(limit)

    @property
    def queued(self) -> int:
        """Requests waiting for a batch (not yet taken)."""
        return len(self._pending)

    # -- callers ------------------------------------------------------------
    def run(self, req: Request, timeout: float) -> Request:
        """Submit from a thread that waits for the outcome; returns ``req`` done."""
        deadline = deadline_of(timeout)
        with self._mutex:
            lead = not self._leading
            if lead:
                self._leading = True
                req.state = _LEAD
            else:
                req.wake = threading.Lock()
                req.wake.acquire()
            self._pending.append(req)
        while True:
            if lead:
                self._lead(req, deadline)
                if req.state == _DONE:
                    return req
                lead = False  # our request went to a batch someone else leads
                with self._mutex:
                    if req.wake is None:  # we led at once, so we had none: wait on one now
                        req.wake = threading.Lock()
                        req.wake.acquire()
            assert req.wake is not None
            got = acquire_until(req.wake, deadline)
            with self._mutex:
                state = req.state
                if state == _LEAD:
                    lead = True
                    continue
                if state == _PENDING and not got:
                    self._pending.remove(req)
                    raise self._writer.timeout_error(timeout)
            if state == _TAKEN:  # in a running batch: its outcome is ours, however late
                req.wake.acquire()
            if req.state == _DONE:
                return req

    def submit(self, req: Request) -> None:
        """Submit without a waiting thread (asyncio); ``req.on_done`` reports."""
        with self._mutex:
            if self._closed:
                raise RuntimeError("closed")
            self._pending.append(req)
            if self._leading:
                return
            self._leading = True
        self._kick_flusher()

    def cancel(self, req: Request) -> bool:
        """Take a request back if no batch has taken it yet."""
        with self._mutex:
            if req.state == _PENDING and req in self._pending:
                self._pending.remove(req)
                return True
            return False

    # -- leading --------------------------------------------------------------
    def _take(self, most: int) -> tuple[list[Request], bool]:
        """Up to ``most`` queued requests, taken into the batch; and whether
        the queue is empty after them."""
        with self._mutex:
            n = min(len(self._pending), most)
            take = [self._pending.popleft() for _ in range(n)]
            for r in take:
                r.state = _TAKEN
            return take, not self._pending

    def _lead(self, me: Request | None, deadline: float | None) -> None:
        """Lead one batch: offer it to ``ship`` (combining), else take the
        gate, fill the batch and commit it; every member gets its outcome."""
        first: list[Request] = []
        if self.ship is not None:
            first, _ = self._take(self.max_batch)
            if first and self._shipped(first, me, deadline):
                return
        conn = self._gate_for_batch(first, me, deadline)
        if conn is None:
            return
        batch = _Batch()
        try:
            self._run_batch(conn, batch, first, deadline)
        except BaseException as exc:
            self._fail_batch(conn, batch, exc)
        finally:
            self._finish(batch.members, me)

    def _gate_for_batch(
        self, first: list[Request], me: Request | None, deadline: float | None
    ) -> WriterConnection | None:
        """The gate and the writer for a batch. If they do not come, only the
        leader's own request fails (raised to it; a flusher fails the asyncio
        requests) and what was taken goes back to the queue: None."""
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            return self._writer.begin(remaining)
        except BaseException as exc:
            self._give_back(first, me)
            self._leader_failed(me, exc)
            if me is not None:
                raise
            return None

    def _run_batch(
        self,
        conn: WriterConnection,
        batch: _Batch,
        first: list[Request],
        deadline: float | None,
    ) -> None:
        """Take members until the batch is full (``max_batch`` statements or
        ``max_time`` spent running them) or the queue is empty, run each,
        and end the transaction."""
        started = time.monotonic()
        begun = False  # BEGIN IMMEDIATE run
        while len(batch.members) < self.max_batch and time.monotonic() - started < self.max_time:
            if first:
                take, first = first, []
                with self._mutex:
                    alone = not self._pending
            else:
                take, alone = self._take(self.max_batch - len(batch.members))
            if not take:
                break
            batch.members.extend(take)  # from here on, every outcome reaches them
            if not begun:
                # Only while writes come one at a time: under contention the
                # BEGIN lets the next callers queue up and join.
                solo = alone and len(take) == 1 and self._last_size <= 1
                if solo and self._committed_alone(conn, batch, take[0]):
                    return
                # BEGIN IMMEDIATE, the gate held, within the leader's deadline.
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                self._writer.begin_again(conn, left)
                begun = True
            self._run_members(conn, batch, take)
        batch.ended = True
        self._writer.end(conn, bool(batch.live))
        self._last_size = len(batch.members)
        if batch.live:
            self.sizes.record(len(batch.live))

    def _committed_alone(self, conn: WriterConnection, batch: _Batch, r: Request) -> bool:
        """One plain statement and nobody else queued: it runs as one
        autocommit statement under the gate, which takes SQLite's write lock
        and commits in one step; no BEGIN, no COMMIT round trip. False if it
        must run in a transaction after all (nothing done)."""
        if not self._run_alone(conn, r):
            return False
        batch.ended = True
        done = r.error is None
        self._writer.end(conn, done)
        if done:
            self.sizes.record(1)
        self._last_size = 1
        return True

    def _run_members(self, conn: WriterConnection, batch: _Batch, take: list[Request]) -> None:
        """Run the members just taken inside the open transaction."""
        todo = deque(take)
        while todo:
            r = todo.popleft()
            self._run_one(conn, r, first=not batch.live)
            if r.error is None:
                batch.live.append(r)
            elif not conn.in_transaction:
                # The transaction is gone: a failed first member rolled it
                # back, or SQLite did (disk full, I/O error). Those that ran
                # before lost their writes before anyone was told: run them
                # again in a fresh transaction.
                todo.extendleft(reversed(batch.live))
                for q in batch.live:
                    q.result = None
                batch.live = []
                self._writer.begin_again(conn, None)

    def _fail_batch(self, conn: WriterConnection, batch: _Batch, exc: BaseException) -> None:
        """COMMIT failed (disk full, I/O error) or the leader was interrupted:
        the transaction is rolled back, so no member's write survives."""
        if not batch.ended:
            with contextlib.suppress(BaseException):
                self._writer.end(conn, False)
        for r in batch.members:
            if r.error is None:
                r.error = _copy_for_member(exc)
                r.result = None

    def _shipped(self, take: list[Request], me: Request | None, deadline: float | None) -> bool:
        """Offer the batch to ``ship``; True if it was settled elsewhere (each
        member has its outcome, and is woken)."""
        assert self.ship is not None
        try:
            shipped = self.ship(take, deadline, self.in_turn)
        except BaseException as exc:  # the batch as a whole failed (or timed out)
            for r in take:
                if r.error is None and r.result is None:
                    r.error = _copy_for_member(exc)
            shipped = True
        if shipped:
            done = [r for r in take if r.error is None]
            if done:
                self.sizes.record(len(done))
            self._last_size = len(take)
            self._finish(take, me)
        return shipped

    def lead_alone(self) -> bool:
        """Lead at once, with no request queued, if no thread of this process
        leads or waits: a lone caller's write then ships without the
        queue (``_combine.Ship.one``). True: the caller leads, and ends with
        :meth:`end_alone`."""
        with self._mutex:
            if self._leading or self._pending or self._closed:
                return False
            self._leading = True
            return True

    def end_alone(self, done: bool) -> None:
        """The end of :meth:`lead_alone`'s write: counted, and the lead goes
        to whoever queued meanwhile."""
        if done:
            self.sizes.record(1)
        self._last_size = 1
        self._hand_on()

    def _give_back(self, take: list[Request], me: Request | None) -> None:
        """Requests taken but never run (the leader got no gate): back to the
        front of the queue, in order, for the next leader."""
        with self._mutex:
            for r in reversed(take):
                if r is not me:
                    r.state = _PENDING
                    self._pending.appendleft(r)

    def in_turn(
        self,
        fn: Callable[[WriterConnection], T],
        deadline: float | None,
        *,
        sync_level: int = 0,
    ) -> T:
        """``fn(conn)`` in a transaction of its own, the gate held: the
        combiner's turns, and a shipped batch whose outcome must be settled
        here. ``WriteTimeout`` if the gate did not come by ``deadline``.
        ``sync_level``: commit with at least this PRAGMA synchronous (a
        combiner's turn for processes that ask for more than its own), the
        writer's own level set back before the gate goes."""
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        conn = self._writer.begin(remaining)
        level = None
        try:
            if sync_level:
                level = self._writer.raise_sync(conn, sync_level)
            self._writer.begin_again(conn, None)
            value = fn(conn)
        except BaseException:
            with contextlib.suppress(BaseException):
                self._writer.end(conn, False, level)
            raise
        self._writer.end(conn, True, level)
        return value

    @property
    def sync_level(self) -> int:
        """This process's writer's PRAGMA synchronous (0 OFF .. 3 EXTRA)."""
        return self._writer.sync_level()

    @staticmethod
    def _refused(r: Request) -> bool:
        """Statements db.execute() does not run (``r.error`` says why)."""
        if r.fn is not None:
            return False
        r.error = refusal(r.sql)
        return r.error is not None

    def _run_alone(self, conn: WriterConnection, r: Request) -> bool:
        """Run a lone plain statement in autocommit mode (the gate is held,
        no transaction is open). False if it must run in a transaction after
        all: ``executemany`` (its rows commit together), ``transact``
        functions (several statements), or SQLite's write lock held by a
        writer outside litegate (BEGIN IMMEDIATE then waits for it with the
        busy strategy)."""
        if r.fn is not None or r.many:
            return False
        if self._refused(r):
            return True
        try:
            r.result = autocommit(conn, r.sql, r.params)
        except Exception as exc:
            r.error = exc
            return True
        return r.result is not None

    def _run_one(self, conn: WriterConnection, r: Request, first: bool) -> None:
        """Run one member; on failure set ``r.error`` and undo only its work
        (the caller checks whether SQLite dropped the whole transaction)."""
        if self._refused(r):
            return
        if first or (r.fn is None and not r.many):
            # No SAVEPOINT for the first member (the transaction holds nothing
            # else: if it fails, it is rolled back and begun again), nor for
            # one plain statement: SQLite undoes a failing statement on its own
            # and keeps the transaction. Only a statement that fails part way
            # and keeps its first changes (ON CONFLICT FAIL) leaves anything
            # behind; the change counter tells, and then the whole transaction
            # is rolled back and the members before it run again.
            before = conn.total_changes
            try:
                self._execute(conn, r)
            except Exception as exc:
                r.error = conn.guard.typed(exc)
                if conn.in_transaction and (first or conn.total_changes != before):
                    conn.control(ROLLBACK)
            return
        conn.control(SAVEPOINT)
        try:
            self._execute(conn, r)
        except Exception as exc:
            r.error = conn.guard.typed(exc)
            if conn.in_transaction:
                conn.control(ROLLBACK_TO)
                conn.control(RELEASE)
            return
        conn.control(RELEASE)

    @staticmethod
    def _execute(conn: WriterConnection, r: Request) -> None:
        if r.fn is not None:
            value = r.fn(conn)
            if hasattr(value, "__await__"):
                GroupCommit.refuse_awaitable(value)
            r.value = value
            r.result = (0, None, [])
            return
        cur = conn.executemany(r.sql, r.params) if r.many else conn.execute(r.sql, r.params)
        rows = cur.fetchall()
        r.result = (cur.rowcount, cur.lastrowid, rows)

    @staticmethod
    def refuse_awaitable(value: Any) -> None:
        """An async def fn (caught up front when it can be) returned an
        awaitable: it did not run, and it never will on this thread."""
        close = getattr(value, "close", None)
        if callable(close):  # a coroutine: closed, so no "never awaited" warning
            close()
        raise ConfigError(
            "db.transact() got a function that returned an awaitable: it runs fn "
            "synchronously on litegate's thread and cannot await it. Pass a plain "
            "(def) function of the connection"
        )

    def _finish(self, batch: list[Request], me: Request | None) -> None:
        for r in batch:
            r.state = _DONE
            if r is me:
                continue
            if r.wake is not None:
                r.wake.release()
            elif r.on_done is not None:
                r.on_done(r)
        self._hand_on()

    def _leader_failed(self, me: Request | None, exc: BaseException) -> None:
        """The leader could not get the gate: only its own request fails (an
        asyncio batch's flusher fails the asyncio requests waiting)."""
        failed: list[Request] = []
        with self._mutex:
            if me is not None:
                if me in self._pending:
                    self._pending.remove(me)
            else:
                failed = [r for r in self._pending if r.on_done is not None]
                for r in failed:
                    self._pending.remove(r)
        for r in failed:
            r.error = exc
            r.state = _DONE
            assert r.on_done is not None
            r.on_done(r)
        self._hand_on()

    def _hand_on(self) -> None:
        """Pass leadership to the first queued caller with a thread, else to
        the flusher, else nobody."""
        wake = None
        with self._mutex:
            if not self._pending:  # (the common case: nobody came meanwhile)
                self._leading = False
                return
            nxt = next((r for r in self._pending if r.on_done is None), None)
            if nxt is not None:
                nxt.state = _LEAD
                if nxt.wake is None:  # a leader whose own request is still queued
                    nxt.wake = threading.Lock()
                    nxt.wake.acquire()
                wake = nxt.wake
        if wake is not None:
            wake.release()
        else:
            self._kick_flusher()

    # -- the flusher: leads for asyncio requests ---------------------------------
    def _kick_flusher(self) -> None:
        if self._flusher is None:
            self._flusher = threading.Thread(
                target=self._flusher_loop, name="litegate-group-commit", daemon=True
            )
            self._flusher.start()
        with contextlib.suppress(RuntimeError):  # already awake
            self._flusher_wake.release()

    def _flusher_loop(self) -> None:
        while True:
            self._flusher_wake.acquire()
            if self._closed:
                return
            self._lead(None, time.monotonic() + self._default_timeout)

    def close(self) -> None:
        with self._mutex:
            self._closed = True
        if self._flusher is not None:
            with contextlib.suppress(RuntimeError):
                self._flusher_wake.release()


# Plain functions already checked (module-level ones repeat: the queue's
# store functions, in a new partial each call): the check costs more than a
# small write's SQL otherwise.
_SYNC_FUNCTIONS: set[object] = set()


def check_transact_fn(fn: object) -> None:
    """``db.transact(fn)`` runs ``fn(conn)`` synchronously on a litegate thread:
    refuse what could never run there, before it is queued."""
    target = fn.func if isinstance(fn, functools.partial) else fn
    if target in _SYNC_FUNCTIONS:
        return
    import inspect  # (here: a module the core's import need not pay for)

    if inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(
        getattr(target, "__call__", None)  # noqa: B004 - an object with async __call__
    ):
        raise ConfigError(
            f"db.transact() got an async function ({getattr(target, '__name__', target)!r}); "
            "it runs fn synchronously on litegate's thread and cannot await it. Pass a plain "
            "(def) function of the connection; with litegate.aio, await db.transact(fn) with "
            "such a function"
        )
    if not callable(fn):
        raise ConfigError(
            f"db.transact() needs a function of the write connection, got {fn!r}; e.g. "
            "db.transact(lambda conn: conn.execute(...).rowcount)"
        )
    # (module-level functions only, so the set stays a bounded few)
    module_level = inspect.isfunction(target) and target.__qualname__ == target.__name__
    if module_level and len(_SYNC_FUNCTIONS) < 1024:
        _SYNC_FUNCTIONS.add(target)
