"""A process of the cache bench: Django set up with one backend, then cells
on command (over a pipe) until told to quit.

Imported by spawned children: Django and the backend only, no matplotlib.
"""

from __future__ import annotations

import base64
import bisect
import math
import os
import pickle
import random
import threading
import time
from array import array
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

BACKENDS = ("litegate", "database", "filebased", "redis")
WORKLOADS = ("get", "set", "mix90", "mix50", "incr")
GET_SHARE = {"get": 1.0, "set": 0.0, "mix90": 0.9, "mix50": 0.5}
COUNTERS = 100  # incr: keys c0..c99, Zipf-drawn as the others
_SUB = 16  # latency histogram: 16 buckets per power of two (within ~2.2 %)


def settings_for(backend: str, tmp: str, redis_url: str) -> dict[str, Any]:
    """Django settings of one backend, as its documentation sets it up;
    entries never expire (TIMEOUT None) and the incumbents never cull (their
    MAX_ENTRIES above the key space), so every get of the key space hits."""
    caches: dict[str, Any]
    databases: dict[str, Any] = {}
    if backend == "litegate":
        caches = {"BACKEND": "litegate.django.cache.LitegateCache",
                  "LOCATION": os.path.join(tmp, "litegate-cache.sqlite3")}  # fmt: skip
    elif backend == "database":
        # DatabaseCache on SQLite with Django's tuned settings (as bench web's "tuned")
        databases = {
            "default": {
                "ENGINE": "django.db.backends.sqlite3",
                "NAME": os.path.join(tmp, "database-cache.sqlite3"),
                "OPTIONS": {
                    "transaction_mode": "IMMEDIATE",
                    "timeout": 5,
                    "init_command": "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; "
                    "PRAGMA mmap_size = 134217728; PRAGMA cache_size = 2000",
                },
                "CONN_MAX_AGE": 600,
            }
        }
        caches = {"BACKEND": "django.core.cache.backends.db.DatabaseCache",
                  "LOCATION": "bench_cache", "OPTIONS": {"MAX_ENTRIES": 10**8}}  # fmt: skip
    elif backend == "filebased":
        caches = {"BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
                  "LOCATION": os.path.join(tmp, "filebased"),
                  "OPTIONS": {"MAX_ENTRIES": 10**8}}  # fmt: skip
    elif backend == "redis":
        caches = {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                  "LOCATION": redis_url}  # fmt: skip
    else:
        raise ValueError(f"unknown backend {backend!r}")
    caches["TIMEOUT"] = None
    return {"CACHES": {"default": caches}, "DATABASES": databases, "USE_TZ": True,
            "SECRET_KEY": "litegate-bench-cache"}  # fmt: skip


def zipf(n: int, s: float) -> list[float]:
    """Cumulative weights of ranks 1..n (weight 1/rank^s)."""
    total, out = 0.0, []
    for r in range(1, n + 1):
        total += 1.0 / r**s
        out.append(total)
    return out


def key(size: int, i: int) -> str:
    return f"s{size}:k{i}"


def value(size: int) -> bytes:
    """Incompressible bytes (FileBasedCache compresses what it stores)."""
    return random.Random(size).randbytes(size)


def histogram(latencies: array[int]) -> dict[int, int]:
    out: dict[int, int] = {}
    log2 = math.log2
    for ns in latencies:
        idx = int(log2(ns) * _SUB) if ns > 0 else 0
        out[idx] = out.get(idx, 0) + 1
    return out


def percentile_us(hist: dict[int, int], q: float) -> float:
    """The ``q``-th percentile of merged histograms, in microseconds (the
    middle of its bucket)."""
    n = sum(hist.values())
    if not n:
        return 0.0
    rank = max(1, math.ceil(q / 100.0 * n))
    seen = 0
    for idx in sorted(hist):
        seen += hist[idx]
        if seen >= rank:
            return float(2 ** ((idx + 0.5) / _SUB) / 1000.0)
    return 0.0


class Worker:
    def __init__(self, backend: str, settings: dict[str, Any]) -> None:
        import django
        from django.conf import settings as dj

        dj.configure(**settings)
        django.setup()
        self.backend = backend
        self.cum: list[float] = []
        self.keys_n = 0

    # -- setup ----------------------------------------------------------------
    def setup(self) -> None:
        """The backend's store, empty (once per run, in one process)."""
        from django.core.cache import cache

        if self.backend == "database":
            from django.core.management import call_command

            call_command("createcachetable", verbosity=0)
        cache.clear()

    def fill(self, size: int, keys: int) -> float:
        """Every key of the size's key space, once; seconds it took."""
        from django.core.cache import cache

        t0 = time.perf_counter()
        v = value(size)
        if self.backend == "database":
            self._fill_database(size, keys, v)
        elif self.backend == "filebased":
            for i in range(keys):
                cache.set(key(size, i), v)
        else:
            for i in range(0, keys, 500):
                cache.set_many({key(size, j): v for j in range(i, min(keys, i + 500))})
        return time.perf_counter() - t0

    @staticmethod
    def _fill_database(size: int, keys: int, v: bytes) -> None:
        """Straight into DatabaseCache's table, as its set() writes a row:
        its set() counts the whole table first, which makes a fill quadratic."""
        from datetime import datetime

        from django.core.cache import cache
        from django.db import connection, transaction

        encoded = base64.b64encode(pickle.dumps(v, pickle.HIGHEST_PROTOCOL)).decode("latin1")
        forever = connection.ops.adapt_datetimefield_value(datetime.max.replace(microsecond=0))
        rows = [(cache.make_key(key(size, i)), encoded, forever) for i in range(keys)]
        with transaction.atomic(), connection.cursor() as cur:
            cur.executemany(
                "INSERT INTO bench_cache (cache_key, value, expires) VALUES (%s, %s, %s)", rows
            )

    def reset_counters(self) -> None:
        from django.core.cache import cache

        cache.set_many({f"c{i}": 0 for i in range(COUNTERS)})

    def sum_counters(self) -> int:
        from django.core.cache import cache

        got = cache.get_many([f"c{i}" for i in range(COUNTERS)])
        return sum(int(v) for v in got.values())

    # -- a cell -----------------------------------------------------------------
    def cell(self, conn: Connection, spec: dict[str, Any]) -> dict[str, Any]:
        """Start the threads, say ready, wait for go, run, report."""
        threads, seconds = int(spec["threads"]), float(spec["seconds"])
        if self.keys_n != spec["keys"]:
            self.keys_n = spec["keys"]
            self.cum = zipf(spec["keys"], spec["zipf"])
        workload, size = spec["workload"], int(spec["size"])
        start = threading.Barrier(threads + 1)
        results: list[dict[str, Any]] = [{} for _ in range(threads)]
        ts = [
            threading.Thread(
                target=self._run,
                args=(workload, size, start, seconds, spec["seed"] * 1000 + k, results[k]),
            )
            for k in range(threads)
        ]
        for t in ts:
            t.start()
        conn.send("ready")
        conn.recv()  # go
        start.wait()
        for t in ts:
            t.join()
        hist: dict[int, int] = {}
        for r in results:
            for idx, c in r["hist"].items():
                hist[idx] = hist.get(idx, 0) + c
        return {
            "ops": sum(r["ops"] for r in results),
            "errors": sum(r["errors"] for r in results),
            "error": next((r["error"] for r in results if r["error"]), ""),
            "misses": sum(r["misses"] for r in results),
            "incrs": sum(r["incrs"] for r in results),
            "seconds": max(r["seconds"] for r in results),
            "hist": hist,
        }

    def _run(self, workload: str, size: int, start: threading.Barrier, seconds: float,
             seed: int, out: dict[str, Any]) -> None:  # fmt: skip
        from django.core.cache import cache
        from django.db import connections

        rnd = random.Random(seed)
        cum, total = self.cum, self.cum[-1]
        names = [key(size, i) for i in range(len(cum))]
        counters = [f"c{i}" for i in range(COUNTERS)]
        ccum = zipf(COUNTERS, 0.99)
        v = value(size)
        share = GET_SHARE.get(workload, 0.0)
        lat: array[int] = array("q")
        ops = errors = misses = incrs = 0
        error = ""
        now = time.perf_counter_ns
        pick = bisect.bisect_left
        draw = rnd.random
        get: Callable[[str], Any] = cache.get
        cache.get("warm-up")  # this thread's connection (or client) opened before the start
        start.wait()
        t_start = now()
        deadline = t_start + int(seconds * 1e9)
        while True:
            t0 = now()
            if t0 >= deadline:
                break
            try:
                if workload == "incr":
                    cache.incr(counters[pick(ccum, draw() * ccum[-1])])
                    incrs += 1
                elif draw() < share:
                    if get(names[pick(cum, draw() * total)]) is None:
                        misses += 1
                else:
                    cache.set(names[pick(cum, draw() * total)], v)
            except Exception as exc:
                errors += 1
                error = error or f"{type(exc).__name__}: {exc}"[:300]
            lat.append(now() - t0)
            ops += 1
        out.update(ops=ops, errors=errors, error=error, misses=misses, incrs=incrs,
                   seconds=(now() - t_start) / 1e9, hist=histogram(lat))  # fmt: skip
        connections.close_all()


def main(conn: Connection, backend: str, settings: dict[str, Any]) -> None:
    """The process's loop: a command per message, an answer per command."""
    worker = Worker(backend, settings)
    conn.send("up")
    while True:
        cmd, arg = conn.recv()
        try:
            if cmd == "quit":
                conn.send("bye")
                return
            if cmd == "setup":
                worker.setup()
                conn.send(("ok", None))
            elif cmd == "fill":
                conn.send(("ok", worker.fill(*arg)))
            elif cmd == "reset":
                worker.reset_counters()
                conn.send(("ok", None))
            elif cmd == "sum":
                conn.send(("ok", worker.sum_counters()))
            elif cmd == "cell":
                conn.send(("ok", worker.cell(conn, arg)))
            else:
                conn.send(("error", f"unknown command {cmd!r}"))
        except Exception as exc:
            import traceback

            conn.send(("error", f"{exc!r}\n{traceback.format_exc()}"))
