"""The processes of a power-cut run: writers that record every
acknowledgement before they count it as given, and the checker that opens
the database after the cut.

Imported by the forkserver's children: no rich, no matplotlib. Django is
imported only by the Django writer.

**The ledger.** Each writer process appends one line per event to its own
file *outside* the mount, with one ``write(2)`` (``O_APPEND``) per line:

- ``A unit n t``: call ``n`` of ``unit`` returned (acknowledged) at
  CLOCK_MONOTONIC ``t`` ns (core and Django units);
- ``P unit n jid t``: ``put`` of job (unit, n) returned its id ``jid``;
- ``K jid t``: ``ack`` of job ``jid`` returned;
- ``F unit n t error``: the call raised (it may or may not have committed).

A line is written after the call returns and before the next one starts, so
"acknowledged" means "the caller was told it is committed". The cut stops
processes, not the machine: a line whose ``write`` returned is in the
kernel's page cache of the real disk and survives, so no fsync is needed.

**The phase table** (a small shared file, also outside the mount): one byte
per process, set once it is connected and writing, and one word per thread
saying which call it is inside (0 = none), read by the controller just
before the cut to say what the cut interrupted.
"""

from __future__ import annotations

import mmap
import os
import random
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import litegate
from litegate.queue import LeaseLost, Queue

QUEUE = "powercut"
LEASE = 2.0  # seconds: short, so jobs claimed before a cut come back in later rounds

# What a thread may be inside (the phase table's words).
OPS = {
    "execute": 1,
    "executemany": 2,
    "write": 3,
    "transact": 4,
    "checkpoint": 5,
    "put": 6,
    "put_many": 7,
    "claim": 8,
    "ack": 9,
    "ack_many": 10,
    "atomic": 11,
    "autocommit": 12,
    "cache_set": 13,
    "cache_set_many": 14,
}
OP_NAMES = {v: k for k, v in OPS.items()}

# How many rows one unit of each API writes (all in one transaction): the
# check finds a unit torn when only some are there.
PARTS = {"execute": 1, "executemany": 3, "write": 2, "transact": 1, "atomic": 2, "autocommit": 1,
         "cache_set": 1, "cache_set_many": 3}  # fmt: skip

# The cache writer's file, beside the database, and its table.
CACHE_DB = "cache.sqlite3"
CACHE_TABLE = "litegate_cache"

SCHEMA = """
CREATE TABLE IF NOT EXISTS lg_rows (
    r INTEGER NOT NULL, w TEXT NOT NULL, n INTEGER NOT NULL, part INTEGER NOT NULL,
    PRIMARY KEY (r, w, n, part)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS lg_counters (w TEXT PRIMARY KEY, n INTEGER NOT NULL);
"""
INSERT = "INSERT INTO lg_rows (r, w, n, part) VALUES (?, ?, ?, ?)"
COUNTER = (
    "INSERT INTO lg_counters (w, n) VALUES (?, ?) ON CONFLICT (w) DO UPDATE SET n = excluded.n"
)

_READY = 64  # bytes of ready flags, one per process
_SLOTS = 256  # thread words after them
PHASE_SIZE = _READY + 4 * _SLOTS


@dataclass(frozen=True)
class Actor:
    """One writer process: its name, kind and the API each thread drives."""

    name: str
    kind: str  # core | producer | worker | django
    apis: tuple[str, ...]


# Five processes: two on the core API (one also checkpoints by hand in the
# cuts that ask for it), a queue producer, a queue worker and a Django process. Several threads per
# process share group commits (mid-batch); the processes share the gate.
ACTORS: tuple[Actor, ...] = (
    Actor(
        "core1",
        "core",
        ("execute", "execute", "execute", "executemany", "write", "transact", "checkpoint"),
    ),
    Actor("core2", "core", ("execute", "execute", "write", "transact")),
    Actor("producer", "producer", ("put", "put", "put_many")),
    Actor("worker", "worker", ("claim", "claim")),
    Actor("django", "django", ("atomic", "atomic", "autocommit")),
)
# On request (--writers ...,cache): LitegateCache on its own file beside the
# database (set from two threads, set_many of three keys from a third), with
# the cache's PRAGMAs (--cache-pragmas over them).
CACHE_ACTOR = Actor("cache", "cache", ("cache_set", "cache_set", "cache_set_many"))
ALL_ACTORS = (*ACTORS, CACHE_ACTOR)


COMBINING = ("core2", "producer")  # connect(combine=True)


def slots_of(actors: tuple[Actor, ...]) -> list[int]:
    """The first phase-table slot of each actor."""
    out, n = [], 0
    for a in actors:
        out.append(n)
        n += len(a.apis)
    if n > _SLOTS or len(actors) > _READY:
        raise ValueError("too many writer threads for the phase table")
    return out


def new_phase_table(path: str) -> None:
    with open(path, "wb") as f:
        f.write(bytes(PHASE_SIZE))


def read_phase_table(path: str, actors: tuple[Actor, ...]) -> dict[str, Any]:
    """Which processes are ready, and which call each thread is inside."""
    with open(path, "rb") as f:
        raw = f.read(PHASE_SIZE)
    ready = [bool(raw[i]) for i in range(len(actors))]
    inside: list[tuple[str, str]] = []  # (actor, api of the call in progress)
    for actor, first in zip(actors, slots_of(actors), strict=True):
        for i in range(len(actor.apis)):
            (op,) = struct.unpack_from("<I", raw, _READY + 4 * (first + i))
            if op:
                inside.append((actor.name, OP_NAMES.get(op, str(op))))
    return {"ready": ready, "inside": inside}


class Ledger:
    """One process's ack log and its part of the phase table."""

    def __init__(self, log_path: str, phase_path: str, index: int, first_slot: int) -> None:
        self._fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        pfd = os.open(phase_path, os.O_RDWR | os.O_CLOEXEC)
        try:
            self._phase = mmap.mmap(pfd, PHASE_SIZE)
        finally:
            os.close(pfd)
        self._index = index
        self._first = first_slot

    def record(self, text: str) -> None:
        """Append whole lines with one write(2): a line is there or not."""
        os.write(self._fd, text.encode("ascii"))

    def ready(self) -> None:
        self._phase[self._index] = 1

    @contextmanager
    def inside(self, thread: int, api: str) -> Iterator[None]:
        off = _READY + 4 * (self._first + thread)
        struct.pack_into("<I", self._phase, off, OPS[api])
        try:
            yield
        finally:
            struct.pack_into("<I", self._phase, off, 0)


def now() -> int:
    return time.monotonic_ns()


def _err(exc: BaseException) -> str:
    return type(exc).__name__


# -- the writers ------------------------------------------------------------
def run_actor(spec: dict[str, Any]) -> None:
    """A writer process's body: connect, say ready, then write until killed
    (or until ``spec["seconds"]`` pass, so that nothing runs for ever)."""
    actor = Actor(spec["name"], spec["kind"], tuple(spec["apis"]))
    # What a writer prints (tracebacks of threads the cut interrupts) goes
    # to a file beside its ledger, read only if it ended before the cut.
    err = os.open(spec["log"][:-4] + ".err", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(err, 2)
    os.close(err)
    ledger = Ledger(spec["log"], spec["phase"], spec["index"], spec["slot"])
    rng = random.Random(spec["seed"])
    stop_at = time.monotonic() + spec["seconds"]
    path, profile, r = spec["db"], spec["profile"], spec["round"]
    prefix = f"r{r}.{actor.name}"
    bodies: list[Callable[[], None]] = []
    if actor.kind == "django":
        bodies = _django_threads(spec, actor, ledger, prefix, stop_at)
    elif actor.kind == "cache":
        bodies = _cache_threads(spec, actor, ledger, prefix, stop_at)
    else:
        # core2 and the producer combine their writes across processes (one
        # of them commits both's): what survives a power cut must not change.
        combine = actor.name in COMBINING
        db = litegate.connect(path, profile=profile, timeout=60, readers=2, combine=combine)
        q = Queue(db, QUEUE) if actor.kind in ("producer", "worker") else None
        for i, api in enumerate(actor.apis):
            unit = f"{prefix}.{api}{i}"
            seed = rng.randrange(1 << 30)
            if q is not None and actor.kind == "producer":
                bodies.append(_bind(_producer, q, api, unit, r, ledger, i, stop_at))
            elif q is not None:
                bodies.append(_bind(_worker, q, ledger, i, stop_at, seed))
            elif api == "checkpoint":
                if spec["by_hand"]:
                    bodies.append(_bind(_checkpointer, db, ledger, i, stop_at, seed))
            else:
                bodies.append(_bind(_core, db, api, unit, r, ledger, i, stop_at))
    threads = [threading.Thread(target=b, daemon=True) for b in bodies]
    ledger.ready()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    os._exit(0)  # ran out of time without a cut: leave without closing anything


def _bind(fn: Callable[..., None], *args: Any) -> Callable[[], None]:
    return lambda: fn(*args)


def _core(
    db: litegate.Database, api: str, unit: str, r: int, ledger: Ledger, slot: int, stop_at: float
) -> None:
    n = 0
    while time.monotonic() < stop_at:
        n += 1
        try:
            with ledger.inside(slot, api):
                if api == "execute":
                    db.execute(INSERT, (r, unit, n, 0))
                elif api == "executemany":
                    db.executemany(INSERT, [(r, unit, n, p) for p in range(PARTS[api])])
                elif api == "write":
                    with db.write() as conn:
                        for p in range(PARTS[api]):
                            conn.execute(INSERT, (r, unit, n, p))
                elif api == "transact":

                    def fn(conn: Any, n: int = n) -> None:
                        conn.execute(INSERT, (r, unit, n, 0))
                        conn.execute(COUNTER, (unit, n))

                    db.transact(fn)
                else:
                    raise ValueError(f"unknown core API {api!r}")
        except Exception as exc:
            ledger.record(f"F {unit} {n} {now()} {_err(exc)}\n")
            time.sleep(0.01)
            continue
        ledger.record(f"A {unit} {n} {now()}\n")


def _checkpointer(
    db: litegate.Database, ledger: Ledger, slot: int, stop_at: float, seed: int
) -> None:
    """Checkpoints by hand, at random, on top of litegate's own (in the cuts
    that have them): more cuts land while the database file is written. They
    also sync the WAL more often, so losses under synchronous=NORMAL are
    reported for the cuts without them too."""
    rng = random.Random(seed)
    while time.monotonic() < stop_at:
        time.sleep(rng.uniform(0.01, 0.08))
        mode = rng.choice(("PASSIVE", "FULL", "RESTART", "TRUNCATE"))
        try:
            with ledger.inside(slot, "checkpoint"):
                db.checkpoint(mode, timeout=60)
        except Exception:
            time.sleep(0.01)


def _producer(
    q: Queue, api: str, unit: str, r: int, ledger: Ledger, slot: int, stop_at: float
) -> None:
    n = 0
    while time.monotonic() < stop_at:
        ns = [n + 1] if api == "put" else list(range(n + 1, n + 6))
        n = ns[-1]
        payloads = [{"r": r, "w": unit, "n": k} for k in ns]
        try:
            with ledger.inside(slot, api):
                ids = [q.put(payloads[0])] if api == "put" else q.put_many(payloads)
        except Exception as exc:
            ledger.record("".join(f"F {unit} {k} {now()} {_err(exc)}\n" for k in ns))
            time.sleep(0.01)
            continue
        t = now()
        ledger.record("".join(f"P {unit} {k} {jid} {t}\n" for k, jid in zip(ns, ids, strict=True)))


def _worker(q: Queue, ledger: Ledger, slot: int, stop_at: float, seed: int) -> None:
    rng = random.Random(seed)
    while time.monotonic() < stop_at:
        try:
            with ledger.inside(slot, "claim"):
                jobs = q.claim(n=rng.randint(1, 6), lease=LEASE, wait=0.05)
        except Exception:
            time.sleep(0.01)
            continue
        if not jobs:
            continue
        together = rng.random() < 0.5
        batches = [jobs] if together else [[j] for j in jobs]
        for batch in batches:
            lost: set[int] = set()
            try:
                with ledger.inside(slot, "ack_many" if together else "ack"):
                    q.ack_many(batch)
            except LeaseLost as exc:  # the others of the batch are committed
                lost = set(exc.job_ids)
            except Exception as exc:
                ledger.record("".join(f"X {j.id} {now()} {_err(exc)}\n" for j in batch))
                time.sleep(0.01)
                continue
            t = now()
            ledger.record("".join(f"K {j.id} {t}\n" for j in batch if j.id not in lost))


def _django_threads(
    spec: dict[str, Any], actor: Actor, ledger: Ledger, prefix: str, stop_at: float
) -> list[Callable[[], None]]:
    import django
    from django.conf import settings

    settings.configure(
        DATABASES={"default": {"ENGINE": "litegate.django", "NAME": spec["db"],
                               "OPTIONS": {"profile": spec["profile"], "timeout": 60}}},
        INSTALLED_APPS=[], USE_TZ=True,
    )  # fmt: skip
    django.setup()
    from django.db import connection

    with connection.cursor() as cur:  # connect now: "ready" means able to write
        cur.execute("SELECT count(*) FROM lg_rows WHERE r = %s", [spec["round"]])
    r = spec["round"]
    return [
        _bind(_django, api, f"{prefix}.{api}{i}", r, ledger, i, stop_at)
        for i, api in enumerate(actor.apis)
    ]


def _django(api: str, unit: str, r: int, ledger: Ledger, slot: int, stop_at: float) -> None:
    from django.db import connection, transaction

    sql = INSERT.replace("?", "%s")
    n = 0
    while time.monotonic() < stop_at:
        n += 1
        try:
            with ledger.inside(slot, api):
                if api == "atomic":
                    with transaction.atomic(), connection.cursor() as cur:
                        for p in range(PARTS[api]):
                            cur.execute(sql, [r, unit, n, p])
                else:
                    with connection.cursor() as cur:
                        cur.execute(sql, [r, unit, n, 0])
        except Exception as exc:
            ledger.record(f"F {unit} {n} {now()} {_err(exc)}\n")
            time.sleep(0.01)
            continue
        ledger.record(f"A {unit} {n} {now()}\n")


def cache_path(db: str) -> str:
    return os.path.join(os.path.dirname(db), CACHE_DB)


def cache_value(key: str) -> str:
    """What the cache writer stores under ``key``: the key, then padding
    (so that a value spans part of a page and a torn one shows)."""
    return f"{key}|" + "v" * 300


def _configure_cache(db: str, pragmas: dict[str, Any]) -> Any:
    import django
    from django.conf import settings

    options: dict[str, Any] = {"timeout": 60}
    if pragmas:
        options["pragmas"] = pragmas
    settings.configure(
        CACHES={"default": {"BACKEND": "litegate.django.cache.LitegateCache",
                            "LOCATION": cache_path(db), "OPTIONS": options}},
        INSTALLED_APPS=[], USE_TZ=True,
    )  # fmt: skip
    django.setup()
    from django.core.cache import cache

    return cache


def _cache_threads(
    spec: dict[str, Any], actor: Actor, ledger: Ledger, prefix: str, stop_at: float
) -> list[Callable[[], None]]:
    cache = _configure_cache(spec["db"], spec.get("cache_pragmas") or {})
    cache.get("ready")  # open it now: "ready" means able to write
    r = spec["round"]
    return [
        _bind(_cache, cache, api, f"{prefix}.{api}{i}", r, ledger, i, stop_at)
        for i, api in enumerate(actor.apis)
    ]


def _cache(
    cache: Any, api: str, unit: str, r: int, ledger: Ledger, slot: int, stop_at: float
) -> None:
    n = 0
    while time.monotonic() < stop_at:
        n += 1
        keys = [f"{unit}:{n}:{p}" for p in range(PARTS[api])]
        try:
            with ledger.inside(slot, api):
                if api == "cache_set":
                    cache.set(keys[0], cache_value(keys[0]), None)
                else:
                    cache.set_many({k: cache_value(k) for k in keys}, None)
        except Exception as exc:
            ledger.record(f"F {unit} {n} {now()} {_err(exc)}\n")
            time.sleep(0.01)
            continue
        ledger.record(f"A {unit} {n} {now()}\n")


def setup_cache(db: str, pragmas: dict[str, Any]) -> None:
    """The cache file and its table, in a fresh file (a process of its own:
    Django's settings are set once per process)."""
    cache = _configure_cache(db, pragmas)
    cache.set("setup", 1)
    cache.delete("setup")
    cache.shutdown()  # closed, so the table is on disk before the first cut


def look_cache(path: str, r: int) -> dict[str, Any]:
    """The cache file after a cut: ``integrity_check`` and round ``r``'s
    entries (made key -> value), or why it cannot be read."""
    import pickle

    out: dict[str, Any] = {"cache_error": None}
    if not os.path.exists(path):
        out.update(cache_integrity=["ok"], cache_rows={})
        return out
    try:
        db = litegate.connect(path, readers=1, timeout=60)
    except Exception as exc:
        out["cache_error"] = f"open: {type(exc).__name__}: {exc}"
        return out
    try:
        out["cache_integrity"] = [row[0] for row in db.query("PRAGMA integrity_check")]
        there = db.query("SELECT count(*) FROM sqlite_master WHERE name = ?", (CACHE_TABLE,))
        rows = (
            db.query(
                f"SELECT key, value FROM {CACHE_TABLE} WHERE key >= ? AND key < ?",
                (f":1:r{r}.", f":1:r{r}/"),
            )
            if there[0][0]
            else []
        )
        values: dict[str, Any] = {}
        for key, blob in rows:
            try:
                values[key[3:]] = pickle.loads(blob)
            except Exception as exc:
                values[key[3:]] = f"unreadable: {type(exc).__name__}"
        out["cache_rows"] = values
    except Exception as exc:
        out["cache_error"] = f"read: {type(exc).__name__}: {exc}"
    finally:
        db.close()
    return out


# -- before and after -------------------------------------------------------
def setup(path: str, profile: str) -> None:
    """The tables (the harness's and the queue's), in a fresh file."""
    with litegate.connect(path, profile=profile) as db:
        with db.write() as conn:
            for stmt in SCHEMA.split(";"):
                if stmt.strip():
                    conn.execute(stmt)
        Queue(db, QUEUE).close()


def look(path: str, profile: str, r: int, after_job: int, ack_ids: list[int]) -> dict[str, Any]:
    """Open the database after a cut (through the remounted filesystem) and
    read what the check needs: the time the open took (WAL recovery runs
    then), ``integrity_check``, round ``r``'s rows and counters, row counts
    of earlier rounds, the jobs with an id above ``after_job``, and the
    states of the jobs in ``ack_ids``."""
    out: dict[str, Any] = {"error": None}
    t0 = time.perf_counter()
    try:
        db = litegate.connect(path, profile=profile, timeout=60, readers=1)
    except Exception as exc:
        out["error"] = f"open: {type(exc).__name__}: {exc}"
        return out
    try:
        db.query("SELECT count(*) FROM sqlite_master")
        out["open_seconds"] = time.perf_counter() - t0
        out["integrity"] = [row[0] for row in db.query("PRAGMA integrity_check")]
        out["rows"] = db.query("SELECT w, n, part FROM lg_rows WHERE r = ?", (r,))
        out["counters"] = db.query(
            "SELECT w, n FROM lg_counters WHERE w >= ? AND w < ?", (f"r{r}.", f"r{r}/")
        )
        out["earlier_rows"] = db.query(
            "SELECT r, count(*) FROM lg_rows WHERE r < ? GROUP BY r", (r,)
        )
        out["jobs"] = db.query(
            "SELECT id, state, payload FROM litegate_queue_jobs WHERE queue = ? AND id > ?",
            (QUEUE, after_job),
        )
        out["earlier_jobs"] = db.query(
            "SELECT count(*), coalesce(sum(state = 2), 0) FROM litegate_queue_jobs "
            "WHERE queue = ? AND id <= ?",
            (QUEUE, after_job),
        )[0]
        states: list[Any] = []
        for i in range(0, len(ack_ids), 500):
            chunk = ack_ids[i : i + 500]
            marks = ",".join("?" * len(chunk))
            states += db.query(
                f"SELECT id, state FROM litegate_queue_jobs WHERE id IN ({marks})", chunk
            )
        out["acked_states"] = states
    except Exception as exc:
        out["error"] = f"read: {type(exc).__name__}: {exc}"
    finally:
        try:
            db.close()
        except Exception as exc:
            out["error"] = out["error"] or f"close: {type(exc).__name__}: {exc}"
    return out
