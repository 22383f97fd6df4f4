"""The tasks the bench runs, on whichever backend the process's settings
name (import this module only once Django is set up)."""

from __future__ import annotations

import os
import time

try:
    from django.tasks import task
except ImportError:  # Django < 6: the backport
    from django_tasks import task


@task()
def noop(n: int) -> int:
    return n


@task()
def slow(flag: str, seconds: float) -> str:
    """Writes a line to ``flag``; the first run then takes ``seconds``, a
    run after it returns at once."""
    rerun = os.path.exists(flag)
    with open(flag, "a") as f:
        f.write(f"{os.getpid()}\n")
    if not rerun:
        time.sleep(seconds)
    return "done"
