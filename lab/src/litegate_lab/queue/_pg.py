"""The parent's PostgreSQL for ``bench queue --backend postgres``: the
server (a throwaway :class:`~litegate_lab._pgserver.PgServer`, or the one at
``--pg-url``), one fresh database per cell, what the server is, and the
database size sampled during a cell (the twin of the SQLite ``-wal`` size).

psycopg and the server module are imported when a server is opened, never
at import time: the SQLite backend does not need them.
"""

from __future__ import annotations

import itertools
import os
import threading
from types import TracebackType
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from ._sampler import Sampler

URL_SCHEMES = ("postgresql://", "postgres://")


def is_url(text: str) -> bool:
    return text.startswith(URL_SCHEMES)


def redact(url: str) -> str:
    """The URL without its password (for the JSON, the report and messages)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def with_dbname(url: str, name: str) -> str:
    """``url`` pointing at database ``name`` (user, host, socket and options kept)."""
    return urlunsplit(urlsplit(url)._replace(path="/" + quote(name, safe="")))


class PgCells:
    """Where the cells' databases live. ``url`` None: a throwaway PgServer
    for the run (``fsync`` as asked), closed at the end; else the server at
    ``url``, whose user must be allowed to CREATE DATABASE. Each cell gets a
    database of its own (:meth:`fresh`), dropped after it (:meth:`drop`), so
    no cell sees another's rows and the disk does not fill up over a run."""

    def __init__(self, url: str | None = None, *, fsync: bool = True) -> None:
        self.given_url = url
        self.fsync = fsync
        self.server: Any = None
        self.admin_url = ""
        self._admin: Any = None
        self._seq = itertools.count(1)

    def open(self) -> PgCells:
        import psycopg

        if self.given_url is None:
            from .._pgserver import PgServer

            # fsync on by default: a queue's figures are mostly commits, and a
            # server that does not flush them would flatter every side alike.
            self.server = PgServer(fsync=self.fsync).start()
            self.admin_url = self.server.url
        else:
            self.admin_url = self.given_url
        self._admin = psycopg.connect(self.admin_url, autocommit=True, connect_timeout=30)
        return self

    def __enter__(self) -> PgCells:
        try:
            return self.open()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None
        if self.server is not None:
            self.server.close()
            self.server = None

    def fresh(self) -> tuple[str, str]:
        """A new, empty database: its name and URL."""
        name = f"lgbench_{os.getpid()}_{next(self._seq)}"
        if self.server is not None:
            return name, str(self.server.create_database(name))
        from psycopg import sql

        self._admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return name, with_dbname(self.admin_url, name)

    def drop(self, name: str) -> None:
        from psycopg import sql

        # FORCE (PG 13+): a connection a side left behind must not keep it alive.
        statement = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
        self._admin.execute(statement.format(sql.Identifier(name)))

    def info(self) -> dict[str, Any]:
        """What the figures were measured against."""
        settings = ("fsync", "synchronous_commit", "shared_buffers", "max_connections")
        row = self._admin.execute(
            "SELECT version(), " + ", ".join(f"current_setting('{s}')" for s in settings)
        ).fetchone()
        out: dict[str, Any] = {
            "server": "throwaway PgServer on this machine (Unix socket)"
            if self.server is not None
            else redact(self.admin_url),
            "version": str(row[0]).split(" on ")[0],
        }
        out.update({s: str(v) for s, v in zip(settings, row[1:], strict=True)})
        return out


class DbSizeSampler(Sampler):
    """``pg_database_size`` of the cell's database, sampled on a thread of the
    parent: how the queue's storage grows with dead row versions and
    finished jobs."""

    NAME = "db-size-sampler"

    def __init__(self, url: str, interval: float) -> None:
        import psycopg

        super().__init__(interval)
        self._conn: Any = psycopg.connect(url, autocommit=True, connect_timeout=30)
        self._lock = threading.Lock()  # the sampler thread and the caller share _conn

    def size(self) -> int:
        with self._lock:
            if self._conn is None:
                return self.samples[-1][1] if self.samples else 0
            row = self._conn.execute("SELECT pg_database_size(current_database())").fetchone()
            return int(row[0])

    def stop(self) -> None:
        super().stop()
        self.close()

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
