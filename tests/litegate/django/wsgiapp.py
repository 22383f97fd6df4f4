"""A WSGI app for the gunicorn --preload test: it queries the database at
import, so gunicorn's master holds an open connection when it forks its
workers, as many real apps do (settings checks, caches warmed at start)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

from tests.litegate.django import procs

procs.setup(os.environ["LITEGATE_DJANGO_DB"], "litegate.django")

from django.db import connection, transaction  # noqa: E402

from tests.litegate.django.testapp.models import Counter  # noqa: E402

Counter.objects.get(name="c")  # the master's connection, open across the fork
assert connection.connection is not None


def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """Each request: atomic() read-then-write of the counter."""
    with transaction.atomic():
        c = Counter.objects.get(name="c")
        c.n += 1
        c.save(update_fields=["n"])
    body = f"{os.getpid()} {c.n}".encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
