"""Process entry points (spawn): each sets up Django from the environment."""

from __future__ import annotations

import os
import threading
import time


def setup(db: str, engine: str) -> None:
    os.environ["LITEGATE_DJANGO_DB"] = db
    os.environ["LITEGATE_DJANGO_ENGINE"] = engine
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.litegate.django.settings"
    import django

    django.setup()


def read_then_write(db: str, engine: str, threads: int, seconds: float) -> tuple[int, int]:
    """atomic(): read the counter, then write it, as Django code does.
    Returns (transactions committed, errors)."""
    setup(db, engine)
    return _read_then_write(threads, seconds)


def forked_read_then_write(threads: int, seconds: float) -> tuple[bool, int, int]:
    """In a forked child of a process whose Django connection was open:
    (was the parent's connection dropped at the fork, committed, errors)."""
    from django.db import connection

    dropped = connection.connection is None and connection.litegate_gate is None
    return (dropped, *_read_then_write(threads, seconds))


def _read_then_write(threads: int, seconds: float) -> tuple[int, int]:
    from django.db import connection, transaction

    from tests.litegate.django.testapp.models import Counter

    done = [0] * threads
    errors = [0] * threads

    def run(k: int) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                with transaction.atomic():
                    c = Counter.objects.get(name="c")
                    c.n += 1
                    c.save(update_fields=["n"])
                done[k] += 1
            except Exception:
                errors[k] += 1
        connection.close()

    ts = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(done), sum(errors)


def hold_in_atomic(db: str, engine: str, holding: object) -> None:
    """Write inside atomic(), say so, and hang there until SIGKILLed."""
    setup(db, engine)
    from django.db import transaction

    from tests.litegate.django.testapp.models import Entry

    with transaction.atomic():
        Entry.objects.create(who="killed")
        holding.set()  # type: ignore[attr-defined]
        time.sleep(600)
