"""The queue's connection to PostgreSQL: a psycopg pool with the two calls
the queue's logic needs (``transact`` and ``query``, as on a litegate
:class:`~litegate.Database`), and :class:`PgWaker`, which wakes waiting
claimers on ``LISTEN``/``NOTIFY`` instead of polling.

psycopg 3 and psycopg_pool come with the ``postgres`` extra
(``pip install 'litegate[postgres]'``); they are imported only when a queue
is opened on a ``postgresql://`` URL.

Failures, and what the caller sees:

- the server cannot be reached at open, or for ``reconnect`` seconds later:
  :class:`~litegate.queue.ServerUnavailable`;
- wrong credentials, no such database, no rights to create the queue's
  tables: :class:`litegate.OpenError`, saying which;
- the connection breaks (a server restart) before a transaction is sent for
  commit: the transaction is run again on a new connection, so producers and
  workers carry on by themselves;
- it breaks while COMMIT is on its way: :class:`~litegate.queue.CommitUnknown`
  (the change may or may not be in); never retried blindly, since a put
  run twice would store its job twice. The caller may retry an ack, fail,
  extend or release: the queue's logic resolves it by the job's token.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from .._closing import CloseHooks
from .._errors import Closed, ConfigError, OpenError
from . import _postgres
from ._errors import CommitUnknown, ServerUnavailable
from ._postgres import CHANNEL
from ._waker import Waiters

T = TypeVar("T")

URL_SCHEMES = ("postgresql://", "postgres://")

# SQLSTATEs that mean "this login will never work": retrying cannot help.
_AUTH_STATES = {"28000", "28P01"}  # invalid authorization / password
_NO_DATABASE = "3D000"


def is_url(value: object) -> bool:
    return isinstance(value, str) and value.startswith(URL_SCHEMES)


def redact(url: str) -> str:
    """The URL without its password, for messages, repr and stats."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = (parts.username or "") + ":***"
    return urlunsplit(parts._replace(netloc=f"{user}@{netloc[1]}"))


def _psycopg() -> tuple[Any, Any]:
    try:
        import psycopg
        import psycopg_pool
    except ImportError:
        raise ConfigError(
            "a queue on PostgreSQL needs psycopg 3 and psycopg_pool: "
            "pip install 'litegate[postgres]'"
        ) from None
    return psycopg, psycopg_pool


def _configure(conn: Any) -> None:
    # Autocommit: a one-statement write is its own transaction (one round
    # trip); transact() opens a transaction for anything else.
    conn.autocommit = True


class PgDatabase:
    """A pool of connections to one PostgreSQL database, for the queue.

    ``url``: a ``postgresql://`` URL (libpq's; ``?host=/path`` for a Unix
    socket), or ``pool``: a ``psycopg_pool.ConnectionPool`` of yours (then
    :meth:`close` leaves it open). ``max_size``: connections at most (one per
    thread in a transaction). ``reconnect``: how long calls keep retrying
    while the server is unreachable before they raise ServerUnavailable.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        pool: Any = None,
        max_size: int = 10,
        reconnect: float = 30.0,
        connect_timeout: float = 5.0,
    ) -> None:
        psycopg, psycopg_pool = _psycopg()
        self._psycopg = psycopg
        self._pool_errors = psycopg_pool.PoolTimeout
        self.reconnect = reconnect
        self._pid = os.getpid()
        self._closed = False
        self._close_hooks = CloseHooks()
        self._lock = threading.Lock()  # guards _mergers; no I/O under it
        self._mergers: dict[str, _Merger] = {}
        if pool is not None:
            if not isinstance(pool, psycopg_pool.ConnectionPool):
                raise ConfigError(
                    f"pool must be a psycopg_pool.ConnectionPool, got {pool!r}; or pass a "
                    "postgresql:// URL"
                )
            self.url = str(pool.conninfo)
            self.pool, self._owns_pool = pool, False
        else:
            if not is_url(url):
                raise ConfigError(f"expected a postgresql:// URL, got {url!r}")
            assert url is not None
            self.url = url
            self._probe(url, connect_timeout)
            self.pool = psycopg_pool.ConnectionPool(
                url,
                min_size=1,
                max_size=max_size,
                open=False,
                configure=_configure,
                kwargs={"connect_timeout": max(1, round(connect_timeout))},
                reconnect_timeout=max(reconnect, 1.0),
                name="litegate-queue",
            )
            self.pool.open(wait=True, timeout=connect_timeout)
            self._owns_pool = True
        self.path = redact(self.url)

    # -- opening: one direct connection, to tell the user what is wrong --------
    def _probe(self, url: str, timeout: float) -> None:
        psycopg = self._psycopg
        try:
            conn = psycopg.connect(url, connect_timeout=max(1, round(timeout)), autocommit=True)
        except psycopg.OperationalError as exc:
            raise self._open_error(exc) from None
        except psycopg.ProgrammingError as exc:  # a malformed URL
            raise ConfigError(f"bad PostgreSQL URL {redact(url)!r}: {exc}") from None
        conn.close()

    def _open_error(self, exc: Any) -> Exception:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        where = redact(self.url)
        state = getattr(exc, "sqlstate", None)
        lowered = text.lower()
        if state in _AUTH_STATES or "authentication failed" in lowered or "password" in lowered:
            return OpenError(
                f"PostgreSQL at {where} refused the login ({text}); check the user and password "
                "in the URL (or PGPASSWORD / ~/.pgpass)"
            )
        if state == _NO_DATABASE or "does not exist" in lowered:
            return OpenError(
                f"PostgreSQL at {where}: {text}; create the database (createdb) or fix the URL"
            )
        return ServerUnavailable(
            f"cannot reach PostgreSQL at {where} ({text}); check that the server is running "
            "and the URL's host, port or socket directory"
        )

    def _check(self) -> None:
        if self._closed:
            raise Closed(f"the queue's PostgreSQL pool for {self.path} is closed")
        if os.getpid() != self._pid:
            raise ConfigError(
                "this PostgreSQL queue was opened in a parent process; connections cannot be "
                "shared across fork: open the Queue again in the child"
            )

    # -- the two calls of the queue's logic ---------------------------------------
    def transact(self, fn: Callable[[Any], T], *, timeout: float | None = None) -> T:
        """Run ``fn(conn)`` atomically and commit. One-job puts, claims and
        acks from concurrent threads share statements (:class:`_Merger`);
        the store's other one-statement writes run in autocommit (one round
        trip); anything else in a transaction. Retried on a new connection
        when the server went away before the work could have been committed."""
        self._check()
        merged = _postgres.merged_form(fn)
        if merged is not None:
            run, kind, kwargs = merged
            with self._lock:
                merger = self._mergers.get(kind)
                if merger is None:
                    merger = self._mergers[kind] = _Merger(self, run)
            value: T = merger.submit(kwargs, timeout)
            return value
        return self._attempt(fn, _postgres.runs_alone(fn), timeout)

    def _attempt(
        self,
        fn: Callable[[Any], T],
        alone: bool,
        timeout: float | None,
        *,
        repeatable: bool = False,
    ) -> T:
        """``fn(conn)`` in autocommit (``alone``: each of its statements is
        atomic on its own) or in a transaction, with the retries. A broken
        connection after the work was sent is CommitUnknown, unless the
        work is ``repeatable`` (a read) or the server said it aborted it."""
        psycopg = self._psycopg
        deadline: float | None = None
        pause = 0.02
        while True:
            sent = False
            try:
                with self.pool.connection(timeout=self._checkout(timeout)) as conn:
                    if alone:
                        sent = True  # from here on, the statement may commit
                        return fn(conn)
                    with conn.transaction():
                        result = fn(conn)
                        sent = True  # leaving the block sends COMMIT
                    return result
            except psycopg.OperationalError as exc:
                if not _broken(exc):
                    raise
                if sent and not repeatable and not _aborted(exc):
                    raise CommitUnknown(
                        f"the connection to PostgreSQL at {self.path} broke while the work was "
                        f"being committed ({_first_line(exc)}); it may or may not be committed. "
                        "Check (q.get / q.counts) before doing it again"
                    ) from exc
                deadline = self._wait(deadline, exc, pause)
                pause = min(pause * 2, 0.5)
            except self._pool_errors as exc:
                deadline = self._wait(deadline, exc, pause)
                pause = min(pause * 2, 0.5)

    def query(self, sql: str, params: Any = (), *, timeout: float | None = None) -> list[Any]:
        """Run one read statement (autocommit) and return its rows; retried
        on a new connection while the server is away (reads are safe to
        repeat)."""
        self._check()

        def read(conn: Any) -> list[Any]:
            rows: list[Any] = conn.execute(sql, params).fetchall()
            return rows

        return self._attempt(read, True, timeout, repeatable=True)

    def _checkout(self, timeout: float | None) -> float:
        return self.reconnect if timeout is None else timeout

    def _wait(self, deadline: float | None, exc: BaseException, pause: float) -> float:
        """Sleep before the next try; ServerUnavailable once ``reconnect``
        seconds have passed since the first failure."""
        if self._closed:  # (close() came meanwhile: the pool refuses, the server is fine)
            raise Closed(
                f"the queue's PostgreSQL pool for {self.path} was closed during this call; "
                "open the queue again to go on"
            ) from exc
        now = time.monotonic()
        if deadline is None:
            deadline = now + self.reconnect
        if now >= deadline:
            raise ServerUnavailable(
                f"PostgreSQL at {self.path} has been unreachable for {self.reconnect:g} s "
                f"({_first_line(exc)}); nothing was changed. Check the server, then try again"
            ) from exc
        time.sleep(pause)
        return deadline

    def stats(self) -> dict[str, Any]:
        pool = self.pool.get_stats()
        with self._lock:
            mergers = dict(self._mergers)
        return {
            "merged": {
                k: {"calls": m.calls, "statements": m.statements} for k, m in mergers.items()
            },
            "backend": "postgresql",
            "url": self.path,
            "pool_size": pool.get("pool_size", 0),
            "pool_available": pool.get("pool_available", 0),
            "requests_waiting": pool.get("requests_waiting", 0),
            "connections_lost": pool.get("connections_lost", 0),
        }

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._owns_pool and os.getpid() == self._pid:
                self.pool.close()
        finally:
            self._close_hooks.fire()

    @property
    def closed(self) -> bool:
        return self._closed

    def on_close(self, fn: Callable[[], None]) -> Callable[[], None]:
        """As :meth:`litegate.Database.on_close`."""
        return self._close_hooks.add(fn)

    def __repr__(self) -> str:
        return f"<litegate.queue PgDatabase {self.path!r}{' closed' if self._closed else ''}>"


class _Call:
    __slots__ = ("error", "finished", "kwargs", "value", "wake")

    def __init__(self, kwargs: dict[str, Any]) -> None:
        self.kwargs = kwargs
        self.wake = threading.Lock()
        self.wake.acquire()  # released when done, or when it is this call's turn to lead
        self.finished = False
        self.value: Any = None
        self.error: BaseException | None = None


class _Merger:
    """Group commit for one kind of call (puts, claims or acks), for the
    threads of one process: the first caller leads, runs every call waiting
    at that moment as one statement (the store's merged function), hands
    each its own result, and passes the lead to the first call that arrived
    meanwhile. A lone caller runs at once; under load, a statement carries
    as many calls as arrived while the previous one ran. The results are
    each call's own (see ``_postgres.claim_merged``)."""

    MAX = 512  # calls per statement: keeps one statement's work bounded

    def __init__(self, db: PgDatabase, run: Callable[[Any, list[dict[str, Any]]], list[Any]]):
        self._db = db
        self._run = run
        self._lock = threading.Lock()  # guards the two fields below; no I/O under it
        self._pending: list[_Call] = []
        self._leading = False
        self.calls = 0  # counters for stats(): calls run, statements they took
        self.statements = 0

    def submit(self, kwargs: dict[str, Any], timeout: float | None) -> Any:
        call = _Call(kwargs)
        with self._lock:
            self._pending.append(call)
            lead = not self._leading
            self._leading = True
        if not lead:
            call.wake.acquire()  # done, or our turn to lead
        if not call.finished:
            self._lead(timeout)
        if call.error is not None:
            raise call.error
        return call.value

    def _lead(self, timeout: float | None) -> None:
        # We are first in line (a new leader finds nobody waiting; a promoted
        # one was first), so our call is in this batch.
        with self._lock:
            batch = self._pending[: self.MAX]
            del self._pending[: self.MAX]
            self.calls += len(batch)
            self.statements += 1
        self._execute(batch, timeout)
        with self._lock:
            nxt = self._pending[0] if self._pending else None
            if nxt is None:
                self._leading = False
        for call in batch[1:]:
            call.wake.release()
        if nxt is not None:
            nxt.wake.release()  # not finished: it leads the next statement

    def _execute(self, batch: list[_Call], timeout: float | None) -> None:
        calls = [c.kwargs for c in batch]
        try:
            values = self._db._attempt(lambda conn: self._run(conn, calls), True, timeout)
        except Exception as exc:
            if len(batch) == 1 or isinstance(exc, (ServerUnavailable, CommitUnknown, Closed)):
                for call in batch:
                    call.error = exc
            else:
                # Some call's own error (a payload the server refuses): each
                # alone, so that only the culprit gets it.
                for call in batch:
                    self._execute([call], timeout)
                return
        except BaseException as exc:  # KeyboardInterrupt in the leader: nothing is known
            for call in batch:
                call.error = exc
        else:
            for call, value in zip(batch, values, strict=True):
                call.value = value
        for call in batch:
            call.finished = True


def _broken(exc: BaseException) -> bool:
    """Did ``exc`` come from a connection that broke (the server went away),
    rather than from a statement the server rejected?"""
    # A statement error carries a SQLSTATE from the server; a lost
    # connection has none, or class 08 (connection exception) / 57P
    # (operator intervention: admin shutdown, crash shutdown).
    state = getattr(exc, "sqlstate", None)
    return state is None or state.startswith(("08", "57P"))


def _aborted(exc: BaseException) -> bool:
    """Did the server say it ended the session (shutdown, restart, a
    terminated backend) instead of answering? Then the statement or
    transaction in flight was rolled back, not committed: safe to run again."""
    state = getattr(exc, "sqlstate", None)
    return state is not None and state.startswith("57P")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class PgWaker(Waiters):
    """Wakes claimers waiting for work, with the Waker's interface.

    One thread per queue object keeps a connection that ``LISTEN``s on the
    queue channel; the store's ``NOTIFY`` (sent by puts, releases, retries
    and sweeps, delivered at commit) wakes this queue's waiters at once.
    The thread starts with the first waiter and is listening before
    :meth:`add` returns, so no commit after it is missed. If the connection
    breaks, the thread reconnects and wakes every waiter (a notification may
    have been lost in between); they look for work themselves.
    """

    def __init__(self, db: PgDatabase, queue: str) -> None:
        self._db = db
        self._queue = queue
        super().__init__()
        self._thread: threading.Thread | None = None
        self._listening = threading.Event()
        self._conn: Any = None

    def add(self, wake: Callable[[], None]) -> None:
        with self._lock:
            if self._pid != os.getpid():  # forked: the thread stayed behind
                self._pid, self._thread, self._conn = os.getpid(), None, None
                self._listening = threading.Event()
            self._waiters.append(wake)
            start = self._thread is None and not self._closed
            if start:
                self._thread = threading.Thread(
                    target=self._listen, name="litegate-queue-listen", daemon=True
                )
                thread = self._thread
            listening = self._listening
        if start:
            thread.start()
        # Bounded: if the server is away, the waiter still wakes at its own
        # deadline; the listener wakes everyone once it is back.
        listening.wait(5.0)

    def _listen(self) -> None:
        psycopg = self._db._psycopg
        pause = 0.05
        while not self._closed:
            try:
                conn = psycopg.connect(self._db.url, autocommit=True, connect_timeout=5)
            except psycopg.Error:
                time.sleep(pause)
                pause = min(pause * 2, 1.0)
                continue
            pause = 0.05
            with self._lock:
                self._conn = conn
            try:
                conn.execute(f"LISTEN {CHANNEL}")
                self._listening.set()
                self.notify()  # anything missed while (re)connecting
                while not self._closed:
                    # notifies() returns after the timeout, so close() is seen.
                    for note in conn.notifies(timeout=0.5):
                        if note.payload == self._queue:
                            self.notify()
            except psycopg.Error:
                pass  # the server went away: reconnect
            finally:
                with self._lock:
                    self._conn = None
                with contextlib.suppress(psycopg.Error):
                    conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            thread = self._thread
        self.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)


class AsyncPgDatabase:
    """The asyncio face of :class:`PgDatabase`, for ``litegate.queue.aio``:
    each call runs the sync one on the loop's default executor, so the
    event loop never waits on the network (the same store and retries)."""

    def __init__(self, sync: PgDatabase) -> None:
        self.sync = sync

    async def transact(self, fn: Callable[[Any], T], *, timeout: float | None = None) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            None, functools.partial(self.sync.transact, fn, timeout=timeout)
        )

    async def query(self, sql: str, params: Any = ()) -> list[Any]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self.sync.query, sql, params)

    def stats(self) -> dict[str, Any]:
        return self.sync.stats()

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.sync.close)
