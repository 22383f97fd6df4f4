"""The queue's guarantees are one suite run on every face and backend.

``make_queue`` opens a queue. Its parameters run the suite over both faces,
the sync :class:`litegate.queue.Queue` and :class:`litegate.queue.aio.Queue`
(driven from a private event loop, so the tests read the same), and over
both backends: SQLite (the file at ``db_path``) and PostgreSQL (a throwaway
server, see ``pg_url`` in tests/conftest.py; each test starts on an empty
table).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest

from litegate.queue import Queue, aio
from litegate.queue._pgdb import PgDatabase


class SyncOverAsync:
    """The aio queue with a sync face: each call runs on a private loop."""

    def __init__(self, path: str, name: str, **kwargs: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.q: aio.Queue = self._call(aio.Queue.open(path, name, **kwargs))
        self.name = name
        self.db = self.q.db.sync

    def _call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(60)

    def __getattr__(self, attr: str) -> Callable[..., Any]:
        method = getattr(self.q, attr)

        def call(*args: Any, **kwargs: Any) -> Any:
            result = method(*args, **kwargs)
            return self._call(result) if asyncio.iscoroutine(result) else result

        return call

    def close(self) -> None:
        self._call(self.q.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


MakeQueue = Callable[..., Any]


def job_recorder(q: Any, table: str) -> Callable[[Any, list[int]], None]:
    """Create ``table (job)`` and return an ``also=`` that records there the
    job ids it is given, on either backend (``also`` runs on the store's own
    connection, with its parameter style)."""
    mark = "%s" if isinstance(q.db, PgDatabase) else "?"
    q.db.transact(lambda c: c.execute(f"CREATE TABLE {table} (job BIGINT)"))

    def record(conn: Any, job_ids: list[int]) -> None:
        conn.cursor().executemany(
            f"INSERT INTO {table} (job) VALUES ({mark})", [(i,) for i in job_ids]
        )

    return record


@pytest.fixture(params=["sqlite", "postgres"])
def queue_db(request: pytest.FixtureRequest, db_path: str) -> str:
    """Where a queue lives: a SQLite path, or the URL of an empty PostgreSQL
    database."""
    if request.param == "sqlite":
        return db_path
    url: str = request.getfixturevalue("pg_empty")
    return url


@pytest.fixture(params=["sync", "aio"])
def make_queue(request: pytest.FixtureRequest, queue_db: str) -> Iterator[MakeQueue]:
    opened: list[Any] = []

    def make(name: str = "default", **kwargs: Any) -> Any:
        q: Any
        if request.param == "sync":
            q = Queue(queue_db, name, **kwargs)
        else:
            q = SyncOverAsync(queue_db, name, **kwargs)
        opened.append(q)
        return q

    yield make
    for q in opened:
        q.close()
