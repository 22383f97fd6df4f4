"""``LitegateCache``: Django's cache API on a SQLite file through litegate."""

from __future__ import annotations

import asyncio
import difflib
import math
import os
import pickle
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from django.core.cache.backends.base import DEFAULT_TIMEOUT, BaseCache
from django.core.exceptions import ImproperlyConfigured

import litegate
from litegate.aio import AsyncDatabase

from ._store import READERS, ROW_OVERHEAD, Store, Table, forget_store, open_store

T = TypeVar("T")

DEFAULT_TABLE = "litegate_cache"
DEFAULT_MAX_BYTES = 256 * 2**20
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
_CHUNK = 500  # keys per statement in get_many (SQLite's variable limit is higher)


class CacheSettingsError(ImproperlyConfigured, litegate.ConfigError):
    """A ``settings.CACHES`` entry ``LitegateCache`` cannot use: Django's
    ``ImproperlyConfigured`` and :class:`litegate.ConfigError`."""


_OPTIONS = {
    "max_entries": "at most this many entries (None: no bound); the oldest go first",
    "max_bytes": "at most this many bytes of keys and values (default 256 MiB; None: no bound)",
    "database": "an alias of settings.DATABASES: the cache's table goes in that SQLite file",
    "table": f"the table's name (default {DEFAULT_TABLE!r})",
    "profile": "litegate's profile for the cache file",
    "pragmas": "PRAGMAs over the cache profile",
    "readers": f"read connections per process, opened as needed (default {READERS})",
    "timeout": "seconds a call may wait for the write gate or a read connection",
    # Django's own culling options, honoured as Django's backends do
    "MAX_ENTRIES": "Django's: cull when this many entries are there (docs/guides/django-cache.md)",
    "CULL_FREQUENCY": "Django's: cull 1/CULL_FREQUENCY of the entries (0: all)",
}


def _bound(where: str, name: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CacheSettingsError(
            f"{where}[{name!r}] must be a whole number of at least 1, or None for no bound; "
            f"got {value!r}"
        )
    return value


def encode(value: Any) -> int | bytes:
    """A value as stored: a 64-bit ``int`` as SQLite's integer (so that
    ``incr`` is one statement), anything else pickled."""
    if type(value) is int and _INT_MIN <= value <= _INT_MAX:
        return value
    return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)


def decode(stored: int | bytes) -> Any:
    return stored if isinstance(stored, int) else pickle.loads(stored)


def _size(key: str, stored: int | bytes) -> int:
    return len(key.encode()) + (8 if isinstance(stored, int) else len(stored)) + ROW_OVERHEAD


class LitegateCache(BaseCache):
    """Django's cache on a SQLite file, through litegate's write gate, group
    commit and read pool::

        CACHES = {"default": {"BACKEND": "litegate.django.cache.LitegateCache",
                              "LOCATION": BASE_DIR / "cache.sqlite3",
                              "OPTIONS": {"max_entries": 1_000_000, "max_bytes": 256 * 2**20}}}

    ``add``, ``incr`` and ``decr`` are one statement each (atomic across
    processes); the oldest entries are evicted first once a bound is passed,
    and expired ones are deleted in batches by a background thread. Guide:
    ``docs/guides/django-cache.md``.
    """

    def __init__(self, location: object, params: dict[str, Any]) -> None:
        super().__init__(params)
        where = "settings.CACHES[...]['OPTIONS']"
        options = params.get("OPTIONS", {})
        if not isinstance(options, Mapping):
            raise CacheSettingsError(f"{where} must be a dict, got {options!r}")
        unknown = [k for k in options if k not in _OPTIONS]
        if unknown:
            hints = [
                f"{k!r} (did you mean {close[0]!r}?)" if close else repr(k)
                for k in unknown
                for close in [difflib.get_close_matches(str(k), _OPTIONS, n=1)]
            ]
            raise CacheSettingsError(
                f"{where} has unknown key(s) {', '.join(hints)}; LitegateCache takes "
                + "; ".join(f"{k}: {v}" for k, v in _OPTIONS.items())
            )
        self._max_entries_opt = _bound(where, "max_entries", options.get("max_entries"))
        self._max_bytes_opt = _bound(
            where, "max_bytes", options.get("max_bytes", DEFAULT_MAX_BYTES)
        )
        self._django_cull = "MAX_ENTRIES" in options or "CULL_FREQUENCY" in options
        table = options.get("table", DEFAULT_TABLE)
        if not isinstance(table, str) or not table or table.lower().startswith("sqlite_"):
            raise CacheSettingsError(
                f"{where}['table'] must be a table name (not empty, not starting with sqlite_), "
                f"got {table!r}"
            )
        self._table_name = table
        alias = options.get("database")
        path = os.fspath(location) if location else ""  # type: ignore[call-overload]
        if alias is not None and (not isinstance(alias, str) or path):
            raise CacheSettingsError(
                f"{where}['database'] must be an alias of settings.DATABASES (a str), with no "
                f"LOCATION (the table goes in that database's file); got {alias!r} and "
                f"LOCATION {path!r}"
            )
        if alias is None and not path:
            raise CacheSettingsError(
                "LitegateCache needs LOCATION, the path of its SQLite file (e.g. "
                "BASE_DIR / 'cache.sqlite3'), or OPTIONS['database'] to use an app database"
            )
        self._alias: str | None = alias
        self._path = path
        self._profile = options.get("profile", "default")
        pragmas = options.get("pragmas")
        if pragmas is not None and not isinstance(pragmas, Mapping):
            raise CacheSettingsError(f"{where}['pragmas'] must be a dict, got {pragmas!r}")
        self._pragmas = dict(pragmas) if pragmas else None
        readers = options.get("readers", READERS)
        if isinstance(readers, bool) or not isinstance(readers, int) or readers < 1:
            raise CacheSettingsError(f"{where}['readers'] must be a whole number >= 1")
        self._readers = readers
        timeout = options.get("timeout")
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not timeout > 0
            or math.isnan(timeout)
        ):
            raise CacheSettingsError(
                f"{where}['timeout'] must be a number of seconds greater than zero, got {timeout!r}"
            )
        self._gate_timeout = None if timeout is None else float(timeout)
        self._tbl: Table | None = None

    # -- opening ----------------------------------------------------------------
    def shutdown(self) -> None:
        """Close the cache's file in this process now: its connections and
        its sweeper, as the process's exit would, so that the file is whole
        on disk (its WAL checkpointed) before it is copied, cut or removed.
        Any cache of this process on that file opens it again on its next
        use. (Django calls :meth:`close` after every request, which keeps
        the file open; this is for tests, tools and shutdown hooks.)"""
        self._tbl = None
        forget_store(self._file())

    def _table(self) -> Table:
        t = self._tbl
        if t is None or t.store.closed:  # (closed: shutdown() on this file, here or by another)
            t = self._open()
        return t

    def _file(self) -> str:
        """The cache's file: LOCATION, or the app database's (OPTIONS["database"])."""
        return self._path if self._alias is None else self._database_file(self._alias)

    def _open(self) -> Table:
        try:
            store = open_store(
                self._file(),
                profile=self._profile,
                pragmas=self._pragmas,
                readers=self._readers,
                timeout=self._gate_timeout,
            )
        except litegate.ConfigError as exc:
            raise CacheSettingsError(f"settings.CACHES[...]['OPTIONS']: {exc}") from None
        table = store.table(self._table_name)
        table.bound(self._max_entries_opt, self._max_bytes_opt)
        store.start_sweeper()
        self._tbl = table
        return table

    @staticmethod
    def _database_file(alias: str) -> str:
        from django.db import connections

        try:
            conn = connections[alias]
        except Exception as exc:
            raise CacheSettingsError(
                f"OPTIONS['database'] = {alias!r} is not an alias of settings.DATABASES"
            ) from exc
        name = str(conn.settings_dict.get("NAME") or "")
        if conn.vendor != "sqlite" or not name or conn.is_in_memory_db():
            raise CacheSettingsError(
                f"OPTIONS['database'] = {alias!r} must be a SQLite database in a file "
                f"(ENGINE 'litegate.django' or Django's sqlite3), got "
                f"{conn.settings_dict.get('ENGINE')!r} with NAME {name!r}"
            )
        return name

    def _joined(self) -> sqlite3.Connection | None:
        """In an app database, inside an ``atomic()`` block of this thread on
        it: that transaction's connection (the cache's statements then commit
        or roll back with it, and this thread's write gate is not asked for
        twice). Otherwise None: litegate's own connections."""
        if self._alias is None:
            return None
        from django.db import connections

        conn = connections[self._alias]
        if not conn.in_atomic_block or getattr(conn, "litegate_read_only", False):
            return None
        conn.ensure_connection()
        raw: sqlite3.Connection = conn.connection
        return raw

    # -- the statements, on litegate or on the joined transaction -------------
    def _rows(self, t: Table, sql: str, params: Any) -> list[Any]:
        conn = self._joined()
        if conn is not None:
            return conn.execute(sql, params).fetchall()
        return t.store.db.query(sql, params)

    def _write(self, t: Table, sql: str, params: Any) -> tuple[int, list[Any]]:
        conn = self._joined()
        if conn is not None:
            cur = conn.execute(sql, params)
            rows = cur.fetchall()
            return cur.rowcount, rows
        result = t.store.db.execute(sql, params)
        return result.rowcount, result.rows

    def _write_many(self, t: Table, sql: str, seq: list[Any]) -> int:
        conn = self._joined()
        if conn is not None:
            return conn.executemany(sql, seq).rowcount
        return t.store.db.executemany(sql, seq).rowcount

    def _transact(self, t: Table, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn = self._joined()
        if conn is not None:
            return fn(conn)
        return t.store.db.transact(fn)

    # -- Django's culling (MAX_ENTRIES / CULL_FREQUENCY) ------------------------
    def _cull(self, t: Table, conn: sqlite3.Connection) -> None:
        """As Django's own backends do when ``MAX_ENTRIES`` is given: before
        a set finds the cache full, the expired entries go, then
        1/``CULL_FREQUENCY`` of the rest (the oldest), or all with 0. In the
        set's transaction."""
        entries = conn.execute(t.stats).fetchone()[0]
        if entries < self._max_entries:
            return
        if self._cull_frequency == 0:
            for stmt in t.clear:
                conn.execute(stmt)
            return
        entries -= conn.execute(t.delete_expired, (time.time(),)).rowcount
        if entries >= self._max_entries:
            n = entries // self._cull_frequency
            row = conn.execute(t.nth_oldest, (n - 1,)).fetchone() if n > 0 else None
            if row is not None:
                conn.execute(t.evict, (row[0],))

    def _set_rows(self, t: Table, rows: list[tuple[Any, ...]], sql: str) -> Callable[..., Any]:
        def run(conn: sqlite3.Connection) -> list[Any]:
            out = []
            for params in rows:
                self._cull(t, conn)
                out.append(conn.execute(sql, params).fetchall())
            return out

        return run

    # -- the API ------------------------------------------------------------------
    def get(self, key: Any, default: Any = None, version: int | None = None) -> Any:
        key = self.make_and_validate_key(key, version=version)
        t = self._table()
        rows = self._rows(t, t.get, (key,))
        if not rows:
            return default
        stored, expires = rows[0]
        if expires is not None and expires <= time.time():
            t.saw_expired((key,))
            return default
        return decode(stored)

    def set(
        self, key: Any, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None
    ) -> None:
        key = self.make_and_validate_key(key, version=version)
        stored = encode(value)  # (an unpicklable value fails here, before any write)
        size = _size(key, stored)
        t = self._table()
        params = (key, self.get_backend_timeout(timeout), size, stored)
        if self._django_cull:
            self._transact(t, self._set_rows(t, [params], t.set))
        else:
            self._write(t, t.set, params)
        t.wrote(size)

    def add(
        self, key: Any, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None
    ) -> bool:
        key = self.make_and_validate_key(key, version=version)
        stored = encode(value)
        size = _size(key, stored)
        t = self._table()
        params = (key, self.get_backend_timeout(timeout), size, stored, time.time())
        if self._django_cull:
            added = bool(self._transact(t, self._set_rows(t, [params], t.add))[0])
        else:
            added = bool(self._write(t, t.add, params)[1])
        if added:
            t.wrote(size)
        return added

    def touch(self, key: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None) -> bool:
        key = self.make_and_validate_key(key, version=version)
        t = self._table()
        params = (self.get_backend_timeout(timeout), key, time.time())
        return self._write(t, t.touch, params)[0] > 0

    def delete(self, key: Any, version: int | None = None) -> bool:
        key = self.make_and_validate_key(key, version=version)
        t = self._table()
        rows = self._write(t, t.delete, (key,))[1]
        return bool(rows) and (rows[0][0] is None or rows[0][0] > time.time())

    def get_many(self, keys: Iterable[Any], version: int | None = None) -> dict[Any, Any]:
        key_map = {self.make_and_validate_key(k, version=version): k for k in keys}
        if not key_map:
            return {}
        t = self._table()
        made = list(key_map)
        found: dict[Any, Any] = {}
        expired = []
        now = time.time()
        for i in range(0, len(made), _CHUNK):
            chunk = made[i : i + _CHUNK]
            sql = t.get_many.format(",".join("?" * len(chunk)))
            for k, stored, expires in self._rows(t, sql, chunk):
                if expires is not None and expires <= now:
                    expired.append(k)
                else:
                    found[key_map[k]] = decode(stored)
        if expired:
            t.saw_expired(expired)
        return found

    def has_key(self, key: Any, version: int | None = None) -> bool:
        key = self.make_and_validate_key(key, version=version)
        t = self._table()
        return bool(self._rows(t, t.has, (key, time.time())))

    def incr(self, key: Any, delta: int = 1, version: int | None = None) -> Any:
        made = self.make_and_validate_key(key, version=version)
        t = self._table()
        if type(delta) is int and _INT_MIN <= delta <= _INT_MAX:
            rows = self._write(t, t.incr, (made, delta, time.time()))[1]
            if rows:
                return rows[0][0]
        # Not a 64-bit integer on both sides (or the sum leaves that range):
        # read, add in Python, write back, in one transaction.
        return self._transact(t, lambda conn: _incr_in(t, conn, key, made, delta))

    def set_many(
        self, data: Mapping[Any, Any], timeout: Any = DEFAULT_TIMEOUT, version: int | None = None
    ) -> list[Any]:
        if not data:
            return []
        rows = self._set_many_rows(data, timeout, version)
        t = self._table()
        if self._django_cull:
            self._transact(t, self._set_rows(t, rows, t.set))
        else:
            self._write_many(t, t.set, rows)
        t.wrote(sum(r[2] for r in rows), len(rows))
        return []

    def _set_many_rows(
        self, data: Mapping[Any, Any], timeout: Any, version: int | None
    ) -> list[tuple[str, float | None, int, int | bytes]]:
        """set_many's rows (key, expiry, size, stored value), both faces'."""
        expires = self.get_backend_timeout(timeout)
        rows = []
        for k, v in data.items():
            made = self.make_and_validate_key(k, version=version)
            stored = encode(v)
            rows.append((made, expires, _size(made, stored), stored))
        return rows

    def delete_many(self, keys: Iterable[Any], version: int | None = None) -> None:
        made = [(self.make_and_validate_key(k, version=version),) for k in keys]
        if not made:
            return
        t = self._table()
        self._write_many(t, t.delete_key, made)

    def clear(self) -> None:
        t = self._table()
        self._transact(t, lambda conn: _clear_in(t, conn))

    def close(self, **kwargs: Any) -> None:
        """Nothing to close per request: the file's connections serve every
        request of this process (they close with the process)."""

    # -- beyond Django's API ------------------------------------------------------
    def sweep(self) -> dict[str, int]:
        """Expire and evict now, as the background sweeper does about once a
        second: ``{"expired": n, "evicted": n}``, rows deleted."""
        t = self._table()
        return t.store.sweep(t)

    def stats(self) -> dict[str, Any]:
        """Entries and bytes (keys, values and ROW_OVERHEAD each) now, the
        bounds, and the file's size on disk (with its WAL)."""
        t = self._table()
        entries, size = t.store.db.query(t.stats)[0]
        path = t.store.path
        on_disk = sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))
        return {
            "entries": entries,
            "bytes": size,
            "max_entries": t.max_entries,
            "max_bytes": t.max_bytes,
            "file_bytes": on_disk,
            "path": path,
            "table": t.name,
        }

    # -- asyncio: on litegate.aio (no thread per call) ---------------------------
    async def _atable(self) -> Table:
        t = self._tbl
        if t is None or t.store.closed:  # (opening may wait for a file lock: off the loop)
            t = await asyncio.to_thread(self._open)
        return t

    @staticmethod
    def _adb(t: Table) -> AsyncDatabase:
        return t.store.aio()

    async def aget(self, key: Any, default: Any = None, version: int | None = None) -> Any:
        key = self.make_and_validate_key(key, version=version)
        t = await self._atable()
        rows = await self._adb(t).query(t.get, (key,))
        if not rows:
            return default
        stored, expires = rows[0]
        if expires is not None and expires <= time.time():
            t.saw_expired((key,))
            return default
        return decode(stored)

    async def aset(
        self, key: Any, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None
    ) -> None:
        key = self.make_and_validate_key(key, version=version)
        stored = encode(value)
        size = _size(key, stored)
        t = await self._atable()
        params = (key, self.get_backend_timeout(timeout), size, stored)
        if self._django_cull:
            await self._adb(t).transact(self._set_rows(t, [params], t.set))
        else:
            await self._adb(t).execute(t.set, params)
        t.wrote(size)

    async def aadd(
        self, key: Any, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None
    ) -> bool:
        key = self.make_and_validate_key(key, version=version)
        stored = encode(value)
        size = _size(key, stored)
        t = await self._atable()
        params = (key, self.get_backend_timeout(timeout), size, stored, time.time())
        if self._django_cull:
            added = bool((await self._adb(t).transact(self._set_rows(t, [params], t.add)))[0])
        else:
            added = bool((await self._adb(t).execute(t.add, params)).rows)
        if added:
            t.wrote(size)
        return added

    async def atouch(
        self, key: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None
    ) -> bool:
        key = self.make_and_validate_key(key, version=version)
        t = await self._atable()
        params = (self.get_backend_timeout(timeout), key, time.time())
        return (await self._adb(t).execute(t.touch, params)).rowcount > 0

    async def adelete(self, key: Any, version: int | None = None) -> bool:
        key = self.make_and_validate_key(key, version=version)
        t = await self._atable()
        rows = (await self._adb(t).execute(t.delete, (key,))).rows
        return bool(rows) and (rows[0][0] is None or rows[0][0] > time.time())

    async def aget_many(self, keys: Iterable[Any], version: int | None = None) -> dict[Any, Any]:
        key_map = {self.make_and_validate_key(k, version=version): k for k in keys}
        if not key_map:
            return {}
        t = await self._atable()
        made = list(key_map)
        found: dict[Any, Any] = {}
        expired = []
        now = time.time()
        for i in range(0, len(made), _CHUNK):
            chunk = made[i : i + _CHUNK]
            sql = t.get_many.format(",".join("?" * len(chunk)))
            for k, stored, expires in await self._adb(t).query(sql, chunk):
                if expires is not None and expires <= now:
                    expired.append(k)
                else:
                    found[key_map[k]] = decode(stored)
        if expired:
            t.saw_expired(expired)
        return found

    async def ahas_key(self, key: Any, version: int | None = None) -> bool:
        key = self.make_and_validate_key(key, version=version)
        t = await self._atable()
        return bool(await self._adb(t).query(t.has, (key, time.time())))

    async def aincr(self, key: Any, delta: int = 1, version: int | None = None) -> Any:
        made = self.make_and_validate_key(key, version=version)
        t = await self._atable()
        adb = self._adb(t)
        if type(delta) is int and _INT_MIN <= delta <= _INT_MAX:
            rows = (await adb.execute(t.incr, (made, delta, time.time()))).rows
            if rows:
                return rows[0][0]
        return await adb.transact(lambda conn: _incr_in(t, conn, key, made, delta))

    async def aset_many(
        self, data: Mapping[Any, Any], timeout: Any = DEFAULT_TIMEOUT, version: int | None = None
    ) -> list[Any]:
        if not data:
            return []
        rows = self._set_many_rows(data, timeout, version)
        t = await self._atable()
        if self._django_cull:
            await self._adb(t).transact(self._set_rows(t, rows, t.set))
        else:
            await self._adb(t).executemany(t.set, rows)
        t.wrote(sum(r[2] for r in rows), len(rows))
        return []

    async def adelete_many(self, keys: Iterable[Any], version: int | None = None) -> None:
        made = [(self.make_and_validate_key(k, version=version),) for k in keys]
        if not made:
            return
        t = await self._atable()
        await self._adb(t).executemany(t.delete_key, made)

    async def aclear(self) -> None:
        t = await self._atable()
        await self._adb(t).transact(lambda conn: _clear_in(t, conn))

    async def aclose(self, **kwargs: Any) -> None:
        """Nothing to close per request (see :meth:`close`)."""


def _incr_in(t: Table, conn: sqlite3.Connection, key: Any, made: str, delta: Any) -> Any:
    row = conn.execute(t.read_for_update, (made,)).fetchone()
    if row is None or (row[1] is not None and row[1] <= time.time()):
        raise ValueError(f"Key '{key}' not found")
    new = decode(row[0]) + delta  # (TypeError for a value that cannot be added to)
    stored = encode(new)
    conn.execute(t.replace_value, (stored, _size(made, stored), made))
    return new


def _clear_in(t: Table, conn: sqlite3.Connection) -> None:
    for stmt in t.clear:
        conn.execute(stmt)


def _store_of(cache: LitegateCache) -> Store:
    """The Store behind a cache (tests)."""
    t = cache._tbl or cache._open()
    return t.store
