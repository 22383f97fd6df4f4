"""The dialects: SQLAlchemy's own pysqlite dialect (its SQLite compiler,
types, reflection and provisioning, ``name == "sqlite"``) with litegate's
connections, pool and read-only option."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import pool
from sqlalchemy.dialects.sqlite.base import SQLiteExecutionContext
from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite
from sqlalchemy.engine import URL
from sqlalchemy.engine.characteristics import ConnectionCharacteristic
from sqlalchemy.engine.interfaces import ConnectArgsType, DBAPIConnection

from . import _dbapi
from ._config import DEFAULT_PROFILE, check_pragma_names, check_url, parse_pragmas, resolve
from ._errors import ConfigError
from ._pool import AsyncFairQueuePool, FairQueuePool


class _ReadOnly(ConnectionCharacteristic):
    """The ``litegate_read_only`` execution option (engine, connection or
    session): transactions begin without the gate and SQLite refuses
    writes. Set before a transaction begins; reset when the connection goes
    back to the pool."""

    transactional = True

    def reset_characteristic(self, dialect: Any, dbapi_conn: DBAPIConnection) -> None:
        dbapi_conn.litegate_set_read_only(False)

    def set_characteristic(self, dialect: Any, dbapi_conn: DBAPIConnection, value: Any) -> None:
        dbapi_conn.litegate_set_read_only(bool(value))

    def get_characteristic(self, dialect: Any, dbapi_conn: DBAPIConnection) -> Any:
        return dbapi_conn.litegate_read_only


class LitegateDialect(SQLiteDialect_pysqlite):
    """``sqlite+litegate://``: the stock pysqlite dialect whose connections
    take the file's write gate (see :mod:`litegate.sqlalchemy`)."""

    driver = "litegate"
    supports_statement_cache = True
    connection_characteristics = SQLiteDialect_pysqlite.connection_characteristics.union(
        {"litegate_read_only": _ReadOnly()}
    )

    @classmethod
    def get_pool_class(cls, url: URL) -> type[pool.Pool]:
        if cls._is_url_file_db(url):
            return FairQueuePool
        return super().get_pool_class(url)

    @classmethod
    def get_async_dialect_cls(cls, url: URL) -> type[AsyncLitegateDialect]:
        return AsyncLitegateDialect

    @classmethod
    def load_provisioning(cls) -> None:
        # SQLAlchemy looks for a "provision" module next to the dialect's; the
        # SQLite one applies (test databases, attached schemas).
        import sqlalchemy.dialects.sqlite.provision  # noqa: F401

    @classmethod
    def import_dbapi(cls) -> Any:
        return _dbapi.DBAPI()

    def create_connect_args(self, url: URL) -> ConnectArgsType:
        query = dict(url.query)
        check_url(query)  # every value typed-checked here, at create_engine
        profile = query.pop("profile", None)
        pragmas = query.pop("pragmas", None)
        fair = query.pop("fair", None)
        args, opts = super().create_connect_args(url.set(query=query))
        if fair is not None:
            opts["fair"] = fair
        if profile is not None:
            opts["profile"] = profile
        if pragmas is not None:
            assert isinstance(pragmas, str)  # (check_url refused a repeated one)
            opts["pragmas"] = parse_pragmas(pragmas)
        # connect_args may still override these; checked again on connect
        resolve(
            opts.get("profile", DEFAULT_PROFILE),
            opts.get("pragmas"),
            opts.get("timeout"),
            opts.get("fair", True),
        )
        check_pragma_names(opts.get("pragmas") or {})  # (names checked by resolve first)
        return args, opts

    def on_connect(self) -> Callable[[DBAPIConnection], None]:
        stock = super().on_connect()

        def setup(conn: DBAPIConnection) -> None:
            if not hasattr(conn, "litegate_begin"):
                raise ConfigError(
                    "sqlite+litegate needs its own connections, and a creator= (or a pool made "
                    "outside the engine) gave it a plain one: make them with "
                    "litegate.sqlalchemy.connect(path, ...), or drop creator= and put the "
                    "sqlite3 arguments in the URL or connect_args"
                )
            stock(conn)

        return setup

    def do_begin(self, dbapi_connection: Any) -> None:
        dbapi_connection.litegate_begin()


class _AsyncExecutionContext(SQLiteExecutionContext):
    def create_server_side_cursor(self) -> Any:
        return self._dbapi_connection.cursor(server_side=True)


class AsyncLitegateDialect(LitegateDialect):
    """``create_async_engine("sqlite+litegate://…")`` or
    ``sqlite+litegate_async://``: the same, for asyncio (see
    :mod:`litegate.sqlalchemy._async`)."""

    driver = "litegate_async"
    is_async = True
    has_terminate = True
    supports_statement_cache = True
    supports_server_side_cursors = True  # AsyncConnection.stream(), as with aiosqlite
    execution_ctx_cls = _AsyncExecutionContext

    @classmethod
    def import_dbapi(cls) -> Any:
        from ._async import AsyncDBAPI

        return AsyncDBAPI()

    @classmethod
    def get_pool_class(cls, url: URL) -> type[pool.Pool]:
        if cls._is_url_file_db(url):
            return AsyncFairQueuePool
        return pool.StaticPool  # in memory: one connection, as with aiosqlite

    def get_driver_connection(self, connection: DBAPIConnection) -> Any:
        return connection._connection

    def do_terminate(self, dbapi_connection: DBAPIConnection) -> None:
        dbapi_connection.terminate()
