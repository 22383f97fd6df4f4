"""The three engine configurations of the FastAPI app. The app's code is the
same for all three: it reads through ``Engines.reader`` and runs each
write transaction through ``Engines.writer``; what differs is only what
those two are.

- ``naive``: ``create_async_engine("sqlite+aiosqlite:///…")`` and nothing
  else, SQLAlchemy's defaults: the driver's legacy transaction control
  (no BEGIN before a SELECT, a deferred BEGIN before the first write), its
  5 s busy timeout, foreign keys not enforced, a rollback journal; one
  engine for reads and writes.
- ``tuned``: SQLAlchemy's documented recipe for SQLite transactions
  (``isolation_level = None`` on connect, BEGIN emitted from the ``begin``
  event; the SQLite dialect's "Transactions with SQLite and the sqlite3
  driver" section), with ``BEGIN IMMEDIATE`` for the writer, a 5 s busy
  timeout, and on connect the PRAGMAs of the Django app's ``tuned`` (WAL,
  ``synchronous=NORMAL``, ``mmap_size``, ``journal_size_limit``,
  ``cache_size``) plus ``foreign_keys=ON`` (the dialect's "Foreign Key
  Support" recipe). Reads go through a second engine whose BEGIN is the
  recipe's plain (deferred) one, so that they do not queue behind writers:
  seed 003's step 3, separate reader and writer pools.
- ``litegate``: ``create_async_engine("sqlite+litegate:///…")`` (litegate's
  SQLAlchemy dialect: the file's write gate, ``BEGIN IMMEDIATE``, its
  PRAGMA profile, a fair pool); reads through its read-only scope.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from .._variant import settings
from . import ENGINES

TIMEOUT = 5.0  # seconds; the busy timeout (naive: the driver's default) or gate timeout

TUNED_PRAGMAS = (
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = NORMAL",
    "PRAGMA mmap_size = 134217728",
    "PRAGMA journal_size_limit = 67108864",
    "PRAGMA cache_size = 2000",
    "PRAGMA foreign_keys = ON",
)


@dataclass(frozen=True)
class Engines:
    """Where the app's reads and its write transactions go."""

    writer: AsyncEngine
    reader: AsyncEngine

    async def dispose(self) -> None:
        await self.writer.dispose()
        if self.reader.sync_engine.pool is not self.writer.sync_engine.pool:
            await self.reader.dispose()


def _recipe(engine: AsyncEngine, begin: str) -> AsyncEngine:
    """SQLAlchemy's recipe: the driver emits no BEGIN, the ``begin`` event
    emits ``begin``; the PRAGMAs on every new connection."""

    @event.listens_for(engine.sync_engine, "connect")
    def connect(dbapi_connection: Any, record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        for pragma in TUNED_PRAGMAS:
            cursor.execute(pragma)
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def do_begin(conn: Any) -> None:
        conn.exec_driver_sql(begin)

    return engine


def make(engine: str, path: str) -> Engines:
    """The engines of one configuration for the database file ``path`` (or
    a variant: ``litegate+NAME=VALUE``, see ``_variant``)."""
    engine, pragmas, fair = settings(engine)
    if engine == "naive":
        naive = create_async_engine(f"sqlite+aiosqlite:///{path}")
        return Engines(writer=naive, reader=naive)
    if engine == "tuned":
        url = f"sqlite+aiosqlite:///{path}"
        args = {"timeout": TIMEOUT}
        return Engines(
            writer=_recipe(create_async_engine(url, connect_args=args), "BEGIN IMMEDIATE"),
            reader=_recipe(create_async_engine(url, connect_args=args), "BEGIN"),
        )
    if engine == "litegate":
        writer = create_async_engine(
            f"sqlite+litegate:///{path}",
            connect_args={
                "timeout": TIMEOUT,
                **({"pragmas": pragmas} if pragmas else {}),
                **({"fair": fair} if fair is not None else {}),
            },
        )
        return Engines(writer=writer, reader=writer.execution_options(litegate_read_only=True))
    raise ValueError(f"unknown engine {engine!r}; pick one of {', '.join(ENGINES)}")
