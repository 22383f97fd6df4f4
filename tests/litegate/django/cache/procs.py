"""Process entry points of the cache's cross-process tests (spawn and fork)."""

from __future__ import annotations

import os
import threading
from typing import Any


def configure(kind: str, location: str) -> None:
    """Django in a spawned process: ``kind`` "litegate" (LitegateCache on
    ``location``) or "database" (Django's DatabaseCache in the SQLite file
    ``location``, Django's tuned settings: WAL, IMMEDIATE, 5 s timeout)."""
    import django
    from django.conf import settings

    if kind == "litegate":
        caches = {"default": {"BACKEND": "litegate.django.cache.LitegateCache",
                              "LOCATION": location}}  # fmt: skip
        databases: dict[str, Any] = {}
    else:
        caches = {"default": {"BACKEND": "django.core.cache.backends.db.DatabaseCache",
                              "LOCATION": "cache_table"}}  # fmt: skip
        options: dict[str, Any] = {"timeout": 5}
        if django.VERSION >= (5, 1):  # (its tuned settings: these two came in Django 5.1)
            options["transaction_mode"] = "IMMEDIATE"
            options["init_command"] = "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL"
        engine = "django.db.backends.sqlite3"
        databases = {"default": {"ENGINE": engine, "NAME": location, "OPTIONS": options}}
    settings.configure(CACHES=caches, DATABASES=databases, USE_TZ=True)
    django.setup()
    if kind == "database":
        from django.core.management import call_command

        call_command("createcachetable", verbosity=0)


def incr_spawned(kind: str, location: str, threads: int, n: int, barrier: Any) -> tuple[int, int]:
    configure(kind, location)
    return incr_threads(threads, n, barrier)


def incr_threads(threads: int, n: int, barrier: Any) -> tuple[int, int]:
    """``threads`` threads each call ``cache.incr("hits")`` ``n`` times
    (after every process is ready): (incr calls that returned, errors)."""
    from django.core.cache import cache
    from django.db import connections

    done = [0] * threads
    errors = [0] * threads

    def run(k: int) -> None:
        for _ in range(n):
            try:
                cache.incr("hits")
                done[k] += 1
            except Exception:
                errors[k] += 1
        connections.close_all()

    cache.get("warm-up")  # open the cache before the start
    barrier.wait()
    ts = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(done), sum(errors)


def add_spawned(location: str, threads: int, barrier: Any) -> list[bool]:
    """Every thread adds the same key once, at the same moment."""
    configure("litegate", location)
    from django.core.cache import cache

    cache.get("warm-up")
    got: list[bool] = []
    lock = threading.Lock()
    start = threading.Barrier(threads)

    def run(k: int) -> None:
        start.wait()
        added = cache.add("once", f"{os.getpid()}-{k}")
        with lock:
            got.append(added)

    barrier.wait()
    ts = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return got


def value_of(kind: str, location: str, key: str) -> Any:
    configure(kind, location)
    from django.core.cache import cache

    return cache.get(key)


def set_up(kind: str, location: str, key: str, value: Any) -> None:
    configure(kind, location)
    from django.core.cache import cache

    cache.set(key, value, None)
