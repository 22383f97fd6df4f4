"""The code of the bench's spawned processes (the tasks are in ``work``).

Each function here runs in a spawned process that sets the side up first
(:func:`setup`): Django's settings are per process."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from contextlib import closing
from typing import Any

SETTINGS = "litegate_lab.tasks.settings"


def setup(side: str, db: str) -> None:
    os.environ["LITEGATE_LAB_TASKS_SIDE"] = side
    os.environ["LITEGATE_LAB_TASKS_DB"] = db
    os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS
    import django

    django.setup()


def tasks() -> tuple[Any, Any]:
    from . import work

    return work.noop, work.slow


def enqueue_views(
    side: str, db: str, threads: int, per_thread: int, barrier: Any
) -> tuple[int, int, float]:
    """A web process: ``threads`` threads each run ``per_thread`` views that
    read, write an order and enqueue its task in one ``atomic()`` block.
    Returns (tasks enqueued, views that raised, seconds)."""
    setup(side, db)
    from django.db import connection, transaction

    noop_t, _ = tasks()
    ok = [0] * threads
    errors = [0] * threads

    def view(k: int) -> None:
        for i in range(per_thread):
            try:
                with transaction.atomic(), connection.cursor() as cur:
                    cur.execute("SELECT count(*) FROM orders")
                    cur.fetchone()
                    cur.execute("INSERT INTO orders (n) VALUES (%s)", [i])
                    noop_t.enqueue(i)
                ok[k] += 1
            except Exception:
                errors[k] += 1
        connection.close()

    ts = [threading.Thread(target=view, args=(k,)) for k in range(threads)]
    barrier.wait(60)
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(ok), sum(errors), time.perf_counter() - t0


def fill(side: str, db: str, n: int) -> float:
    """Enqueue ``n`` tasks from one thread, each in its own transaction;
    returns the seconds it took."""
    setup(side, db)
    noop_t, _ = tasks()
    t0 = time.perf_counter()
    for i in range(n):
        noop_t.enqueue(i)
    return time.perf_counter() - t0


def window(side: str, db: str) -> float:
    """Seconds from the first task's start to the last one's end, as the
    backend recorded them (worker start-up left out)."""
    with closing(sqlite3.connect(db)) as conn:
        if side.startswith("django-tasks-db"):
            sql = (
                "SELECT (julianday(max(finished_at)) - julianday(min(started_at))) * 86400 "
                "FROM django_tasks_database_dbtaskresult"
            )
        else:
            sql = "SELECT max(finished_at) - min(started_at) FROM litegate_task_results"
        value = conn.execute(sql).fetchone()[0]
    return float(value or 0.0)


def enqueue_slow(side: str, db: str, flag: str, seconds: float) -> str:
    setup(side, db)
    _, slow_t = tasks()
    return str(slow_t.enqueue(flag, seconds).id)


def statuses(side: str, db: str, ids: list[str] | None) -> dict[str, int] | list[str]:
    """Counts of results by status (``ids`` None), or the status of each id."""
    setup(side, db)
    tasks()
    from django.db import connection

    if ids is not None:
        backend = tasks()[0].get_backend()
        return [str(backend.get_result(i).status) for i in ids]
    if not side.startswith("django-tasks-db"):
        counts: dict[str, int] = tasks()[0].get_backend().counts()
        return counts
    with connection.cursor() as cur:
        cur.execute(
            "SELECT status, count(*) FROM django_tasks_database_dbtaskresult GROUP BY status"
        )
        return {str(s): int(n) for s, n in cur.fetchall()}
