"""A cache file in this process: its :class:`litegate.Database` (shared by every
cache instance on the file: Django makes one per thread), its tables, and
the sweeper thread that expires and evicts in batches off the request path.

A table's rows are kept in first-in-first-out order by their ``id`` (a set
of an existing key keeps its place, as in Rails' solid_cache); small columns
come first so that reading ``expires`` or ``size`` never touches a large
value's overflow pages. Entry and byte counts are kept exact by triggers in
a one-row ``<table>_stats``, so checking the bounds costs one row read.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import litegate
from litegate.aio import AsyncDatabase

log = logging.getLogger("litegate.django.cache")

# What a row costs beyond its key and value, roughly: the row's header and
# rowid, and the key index's copy of the key with its rowid. ``size`` (what
# max_bytes bounds) is key + value + this; the file is bigger by the pages'
# free space (see docs/guides/django-cache.md).
ROW_OVERHEAD = 32

# The cache file's PRAGMAs over litegate's default profile. synchronous=NORMAL
# in WAL mode: a commit does not fsync (a power cut may lose the last sets),
# a checkpoint does, on litegate's background thread, so the file is never
# corrupted (measured with `litegate bench durability --writers cache`, as
# synchronous=OFF, see docs/guides/django-cache.md). Many read connections (READERS) with a
# small page cache each, and reads through mmap (10 KB values: ~7 % more gets
# per second, measured).
PRAGMAS: dict[str, Any] = {
    "synchronous": "NORMAL",
    "foreign_keys": "OFF",
    "cache_size": -2000,
    "mmap_size": 268435456,
}
# Read connections per process, opened as needed: at least as many as the
# threads that read at once. Fewer, and readers queue for them: each hand-over
# wakes a sleeping thread (measured, 32 threads of gets in one process: 20,335
# gets/s with 8 connections, 39,134 with 32).
READERS = 32

# The sweeper: how often it looks without being woken, how many rows one
# eviction or expiry transaction deletes at most, and how long one sweep of
# the expired rows may read for.
SWEEP_SECONDS = 1.0
BACKGROUND = True  # False: no sweeper thread (tests that sweep by hand)
BATCH = 500
SCAN_IDS = 5000
SCAN_SECONDS = 0.02


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class Table:
    """One cache table's statements, bounds and pending work."""

    def __init__(self, store: Store, name: str) -> None:
        self.store = store
        self.name = name
        t, s = quote(name), quote(name + "_stats")
        self.schema = [
            f"CREATE TABLE IF NOT EXISTS {t} (id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, "
            "expires REAL, size INTEGER NOT NULL, value NOT NULL)",
            f"CREATE TABLE IF NOT EXISTS {s} (id INTEGER PRIMARY KEY CHECK (id = 0), "
            "entries INTEGER NOT NULL, bytes INTEGER NOT NULL)",
            f"INSERT OR IGNORE INTO {s} (id, entries, bytes) VALUES (0, 0, 0)",
            f"CREATE TRIGGER IF NOT EXISTS {quote(name + '_ins')} AFTER INSERT ON {t} BEGIN "
            f"UPDATE {s} SET entries = entries + 1, bytes = bytes + NEW.size WHERE id = 0; END",
            self._delete_trigger(),
            f"CREATE TRIGGER IF NOT EXISTS {quote(name + '_upd')} AFTER UPDATE OF size ON {t} "
            f"WHEN NEW.size != OLD.size BEGIN UPDATE {s} SET bytes = bytes + NEW.size - OLD.size "
            "WHERE id = 0; END",
        ]
        self.get = f"SELECT value, expires FROM {t} WHERE key = ?"
        self.get_many = f"SELECT key, value, expires FROM {t} WHERE key IN ({{}})"
        self.has = f"SELECT 1 FROM {t} WHERE key = ? AND (expires IS NULL OR expires > ?)"
        self.set = (
            f"INSERT INTO {t} (key, expires, size, value) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (key) DO UPDATE SET expires = excluded.expires, "
            "size = excluded.size, value = excluded.value"
        )
        # Inserted, or over an expired row: one statement, atomic across processes.
        self.add = self.set + f" WHERE {t}.expires <= ? RETURNING id"
        # A 64-bit integer plus a 64-bit integer, unless the sum would leave
        # that range (SQLite would make it a float): one statement.
        self.incr = (
            f"UPDATE {t} SET value = value + ?2 WHERE key = ?1 AND typeof(value) = 'integer' "
            "AND (expires IS NULL OR expires > ?3) AND typeof(value + ?2) = 'integer' "
            "RETURNING value"
        )
        self.read_for_update = f"SELECT value, expires FROM {t} WHERE key = ?"
        self.replace_value = f"UPDATE {t} SET value = ?, size = ? WHERE key = ?"
        self.touch = (
            f"UPDATE {t} SET expires = ? WHERE key = ? AND (expires IS NULL OR expires > ?)"
        )
        self.delete = f"DELETE FROM {t} WHERE key = ? RETURNING expires"
        self.delete_key = f"DELETE FROM {t} WHERE key = ?"
        self.delete_expired_key = f"DELETE FROM {t} WHERE key = ? AND expires <= ?"
        self.stats = f"SELECT entries, bytes FROM {s} WHERE id = 0"
        self.oldest = f"SELECT id, size FROM {t} ORDER BY id LIMIT ?"
        self.evict = f"DELETE FROM {t} WHERE id <= ?"
        self.nth_oldest = f"SELECT id FROM {t} ORDER BY id LIMIT 1 OFFSET ?"
        self.bounds_ids = f"SELECT min(id), max(id) FROM {t}"
        self.expired_ids = (
            f"SELECT id FROM {t} WHERE id > ? AND id <= ? AND expires <= ? ORDER BY id"
        )
        self.delete_expired_ids = f"DELETE FROM {t} WHERE id IN ({{}}) AND expires <= ?"
        self.delete_expired = f"DELETE FROM {t} WHERE expires <= ?"
        self.columns = f"SELECT name FROM pragma_table_info({_sql_text(name)}) ORDER BY cid"
        # clear(): without the delete trigger SQLite empties the table in one
        # step (its truncate optimisation) instead of row by row.
        self.clear = [
            f"DROP TRIGGER IF EXISTS {quote(name + '_del')}",
            f"DELETE FROM {t}",
            f"UPDATE {s} SET entries = 0, bytes = 0 WHERE id = 0",
            self._delete_trigger(),
        ]
        # Bounds, the smallest any cache on this table asked for (None: none).
        self.max_entries: int | None = None
        self.max_bytes: int | None = None
        self._bounded: set[tuple[int | None, int | None]] = set()
        self.expired: set[str] = set()  # keys read after they expired: deleted by the sweeper
        self.written = 0  # bytes written by this process since the last sweep
        self.rows_written = 0  # and rows
        self.scan_at = 0  # the expiry scan's position (an id)
        self.lock = threading.Lock()

    def _delete_trigger(self) -> str:
        t, s = quote(self.name), quote(self.name + "_stats")
        return (
            f"CREATE TRIGGER IF NOT EXISTS {quote(self.name + '_del')} AFTER DELETE ON {t} BEGIN "
            f"UPDATE {s} SET entries = entries - 1, bytes = bytes - OLD.size WHERE id = 0; END"
        )

    def bound(self, max_entries: int | None, max_bytes: int | None) -> None:
        with self.lock:
            self._bounded.add((max_entries, max_bytes))
            entries = [e for e, _ in self._bounded if e is not None]
            sizes = [b for _, b in self._bounded if b is not None]
            self.max_entries = min(entries) if entries else None
            self.max_bytes = min(sizes) if sizes else None

    def wrote(self, size: int, rows: int = 1) -> None:
        """``rows`` sets of ``size`` bytes in all: wake the sweeper once this
        process has written 1 % of a bound since the last sweep."""
        if self.store._sweeper is None:  # (a forked child starts its own)
            self.store.start_sweeper()
        self.written += size
        self.rows_written += rows
        by_bytes = self.max_bytes is not None and self.written * 100 >= self.max_bytes
        by_rows = self.max_entries is not None and self.rows_written * 100 >= self.max_entries
        if by_bytes or by_rows:
            self.store.wake()

    def saw_expired(self, keys: Iterable[str]) -> None:
        self.expired.update(keys)
        if len(self.expired) >= BATCH:
            self.store.wake()


def _sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


EXPECTED_COLUMNS = ["id", "key", "expires", "size", "value"]


class Store:
    """A cache file's Database in this process, its tables, and its sweeper."""

    def __init__(self, path: str, settings: tuple[Any, ...], db: litegate.Database) -> None:
        self.path = path
        self.settings = settings
        self.db = db
        self.tables: dict[str, Table] = {}
        self._adb: AsyncDatabase | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None
        self._pid = os.getpid()

    # -- tables -------------------------------------------------------------
    def table(self, name: str) -> Table:
        table = self.tables.get(name)
        if table is not None:
            return table
        with self._lock:
            table = self.tables.get(name)
            if table is None:
                table = Table(self, name)
                self._create(table)
                self.tables[name] = table
            return table

    def _create(self, table: Table) -> None:
        def create(conn: sqlite3.Connection) -> None:
            for stmt in table.schema:
                conn.execute(stmt)
            got = [r[0] for r in conn.execute(table.columns)]
            if got != EXPECTED_COLUMNS:
                raise litegate.OpenError(
                    f"{self.path!r} has a table {table.name!r} that is not a litegate cache "
                    f"table (its columns: {', '.join(got)}); name another table with "
                    "OPTIONS['table'] or point LOCATION at another file"
                )

        try:
            self.db.transact(create)
        except sqlite3.DatabaseError as exc:
            raise litegate.OpenError(
                f"cannot create the cache table {table.name!r} in {self.path!r}: {exc}"
            ) from exc

    # -- asyncio ------------------------------------------------------------
    def aio(self) -> AsyncDatabase:
        adb = self._adb
        if adb is None:
            with self._lock:
                if self._adb is None:
                    self._adb = AsyncDatabase(self.db)
                adb = self._adb
        return adb

    # -- the sweeper ----------------------------------------------------------
    def wake(self) -> None:
        self.start_sweeper()
        self._wake.set()

    def start_sweeper(self) -> None:
        """The sweeper thread of this process (started again in a forked child)."""
        if not BACKGROUND:
            return
        if self._sweeper is not None:
            return
        with self._lock:
            if self._sweeper is None:
                ref = weakref.ref(self)
                thread = threading.Thread(
                    target=_sweep_forever,
                    args=(ref, self._wake, self._stop),
                    name=f"litegate-cache-sweeper {os.path.basename(self.path)}",
                    daemon=True,
                )
                self._sweeper = thread
                thread.start()

    def sweep(self, table: Table) -> dict[str, int]:
        """One pass over ``table``: the expired keys reads saw, the rows over
        the bounds (oldest first), and the expiry scan's next window.
        Returns what was deleted."""
        table.written = table.rows_written = 0
        expired = self._drop_seen_expired(table)
        evicted = self._evict(table)
        scanned = self._scan_expired(table)
        return {"expired": expired + scanned, "evicted": evicted}

    def _drop_seen_expired(self, table: Table) -> int:
        keys, table.expired = table.expired, set()
        if not keys:
            return 0
        now = time.time()
        return self.db.executemany(table.delete_expired_key, [(k, now) for k in keys]).rowcount

    def _evict(self, table: Table) -> int:
        """Delete the oldest rows until the table is within its bounds, less
        1 % (so that the next sweep is not due at once), a batch per
        transaction (writers take turns with it at the gate; readers are
        never blocked)."""
        max_n, max_b = table.max_entries, table.max_bytes
        if max_n is None and max_b is None:
            return 0
        entries, size = self.db.query(table.stats)[0]
        over_n = 0 if max_n is None else entries - max_n
        over_b = 0 if max_b is None else size - max_b
        if over_n <= 0 and over_b <= 0:
            return 0
        if over_n > 0 and max_n is not None:
            over_n += max_n // 100
        if over_b > 0 and max_b is not None:
            over_b += max_b // 100
        deleted = 0
        while over_n > 0 or over_b > 0:
            rows = self.db.query(table.oldest, (BATCH,))
            n = b = 0
            cut = None
            for rid, rsize in rows:
                if n >= over_n and b >= over_b:
                    break
                n += 1
                b += rsize
                cut = rid
            if cut is None:
                break
            gone = self.db.execute(table.evict, (cut,)).rowcount
            deleted += gone
            over_n -= n
            over_b -= b
        return deleted

    def _scan_expired(self, table: Table) -> int:
        """Read the next windows of ids (on a read connection) for expired
        rows and delete those, for at most SCAN_SECONDS."""
        lo, hi = self.db.query(table.bounds_ids)[0]
        if lo is None:
            return 0
        deleted = 0
        start = time.monotonic()
        pos = max(table.scan_at, lo - 1)
        while time.monotonic() - start < SCAN_SECONDS:
            if pos >= hi:
                pos = lo - 1  # wrapped: start over at the oldest row
                table.scan_at = pos
                break
            now = time.time()
            ids = [r[0] for r in self.db.query(table.expired_ids, (pos, pos + SCAN_IDS, now))]
            pos += SCAN_IDS
            for i in range(0, len(ids), BATCH):
                chunk = ids[i : i + BATCH]
                sql = table.delete_expired_ids.format(",".join("?" * len(chunk)))
                deleted += self.db.execute(sql, (*chunk, now)).rowcount
        table.scan_at = pos
        return deleted

    def forget_parent(self) -> None:
        """In a forked child: the parent's sweeper, asyncio threads and locks
        are not here; start afresh (litegate's Database reopens its own
        connections)."""
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._sweeper = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._adb = None
        for t in self.tables.values():
            t.lock = threading.Lock()
            t.expired = set()
            t.written = t.rows_written = 0

    @property
    def closed(self) -> bool:
        return self._stop.is_set()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self.db.close()


def _sweep_forever(ref: Callable[[], Store | None], wake: threading.Event,
                   stop: threading.Event) -> None:  # fmt: skip
    """The sweeper's loop: every SWEEP_SECONDS, or sooner when a writer or
    reader wakes it. Holds the Store only while sweeping, so a Store nobody
    uses can go."""
    while not stop.is_set():
        wake.wait(SWEEP_SECONDS)
        wake.clear()
        if stop.is_set():
            return
        store = ref()
        if store is None:
            return
        try:
            for table in list(store.tables.values()):
                store.sweep(table)
        except litegate.Closed:
            return
        except Exception:  # a busy moment (WriteTimeout) or a disk error: try again later
            log.warning("the cache sweeper of %s failed; trying again", store.path, exc_info=True)
        del store


# -- the stores of this process ---------------------------------------------
_STORES: dict[str, Store] = {}
_STORES_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    global _STORES_LOCK
    _STORES_LOCK = threading.Lock()  # the parent's may be held for ever
    for store in list(_STORES.values()):
        store.forget_parent()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def open_store(
    path: str, *, profile: str, pragmas: dict[str, Any] | None, readers: int, timeout: float | None
) -> Store:
    """The Store of the file at ``path`` (opened on first use). Every cache
    on one file must open it with the same settings."""
    full = os.path.realpath(os.path.abspath(path))
    settings = (profile, tuple(sorted((pragmas or {}).items())), readers, timeout)
    store = _STORES.get(full)
    if store is None:
        with _STORES_LOCK:
            store = _STORES.get(full)
            if store is None:
                merged = {**PRAGMAS, **(pragmas or {})}
                db = litegate.connect(
                    full, readers=readers, profile=profile, pragmas=merged, timeout=timeout
                )
                store = _STORES[full] = Store(full, settings, db)
    if store.settings != settings:
        raise litegate.ConfigError(
            f"two caches open {full!r} with different OPTIONS (profile, pragmas, readers, "
            f"timeout: {store.settings} and {settings}); caches on one file share its "
            "connections, so give them the same OPTIONS or separate files"
        )
    return store


def forget_store(path: str) -> None:
    """Close and forget the Store of ``path`` (tests, and a file removed)."""
    full = os.path.realpath(os.path.abspath(path))
    with _STORES_LOCK:
        store = _STORES.pop(full, None)
    if store is not None:
        store.close()
