"""The core's two faces behind one interface, so one behaviour suite runs on
both (as the queue's does, tests/litegate/queue/conftest.py).

:class:`AsyncFace` is :class:`litegate.aio.AsyncDatabase` with the sync
face's methods: each call runs as a task on a private event loop (its own
thread), so a test reads the same on both faces. A write or read block's
statements run as tasks too, and give back what a sqlite3 cursor would."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from types import TracebackType
from typing import Any

import litegate
import litegate.aio


class _Cursor:
    """A block statement's WriteResult, read as a sqlite3 cursor is."""

    def __init__(self, result: litegate.WriteResult) -> None:
        self.rowcount = result.rowcount
        self.lastrowid = result.lastrowid
        self._rows = list(result.rows)

    def fetchall(self) -> list[Any]:
        rows, self._rows = self._rows, []
        return rows

    def fetchone(self) -> Any:
        return self._rows.pop(0) if self._rows else None


class _TxFace:
    def __init__(self, face: AsyncFace, tx: Any) -> None:
        self._face = face
        self._tx = tx

    def execute(self, sql: str, params: Any = ()) -> _Cursor:
        return _Cursor(self._face.call(self._tx.execute(sql, params)))

    def executemany(self, sql: str, seq: Any) -> _Cursor:
        return _Cursor(self._face.call(self._tx.executemany(sql, seq)))

    @property
    def in_transaction(self) -> bool:
        return bool(self._tx._conn.in_transaction)


class _BlockFace:
    def __init__(self, face: AsyncFace, block: Any) -> None:
        self._face = face
        self._block = block

    def __enter__(self) -> _TxFace:
        return _TxFace(self._face, self._face.call(self._block.__aenter__()))

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._face.call(self._block.__aexit__(et, ev, tb))


class AsyncFace:
    def __init__(self, db: litegate.Database) -> None:
        self.sync = db
        self.path = db.path
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.adb = litegate.aio.AsyncDatabase(db)

    def call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(60)

    def execute(self, sql: str, params: Any = (), *, timeout: float | None = None) -> Any:
        return self.call(self.adb.execute(sql, params, timeout=timeout))

    def executemany(self, sql: str, seq: Any, *, timeout: float | None = None) -> Any:
        return self.call(self.adb.executemany(sql, seq, timeout=timeout))

    def transact(self, fn: Any, *, timeout: float | None = None) -> Any:
        return self.call(self.adb.transact(fn, timeout=timeout))

    def query(self, sql: str, params: Any = (), *, timeout: float | None = None) -> Any:
        return self.call(self.adb.query(sql, params, timeout=timeout))

    def write(self, timeout: float | None = None) -> _BlockFace:
        return _BlockFace(self, self.adb.write(timeout))

    def read(self, timeout: float | None = None) -> _BlockFace:
        return _BlockFace(self, self.adb.read(timeout))

    def stats(self) -> dict[str, Any]:
        return self.adb.stats()

    @property
    def closed(self) -> bool:
        return self.sync.closed

    def __repr__(self) -> str:
        return repr(self.sync)

    def close(self) -> None:
        """``await adb.close()`` (safe twice); the loop stays for more calls."""
        self.call(self.adb.close())

    def shutdown(self) -> None:
        """Stop the private loop (after the test)."""
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


def sync_of(db: Any) -> litegate.Database:
    """The sync Database under either face."""
    return db.sync if isinstance(db, AsyncFace) else db
