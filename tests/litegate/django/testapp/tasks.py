"""Tasks for the tasks backend's tests (module level, as Django requires)."""

from __future__ import annotations

from typing import Any

from litegate.django.tasks._api import TaskContext

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task

from tests.litegate.django.testapp.models import Entry


@task()
def add(a: int, b: int) -> int:
    return a + b


@task()
def boom() -> None:
    raise ValueError("boom")


@task()
def record(who: str) -> str:
    Entry.objects.create(who=who)
    return who


@task(takes_context=True)
def attempt(context: TaskContext) -> int:
    return int(context.attempt)


def not_a_task(*_: Any) -> None:  # pragma: no cover - for the error path
    pass


@task()
def wait_for(path: str) -> str:
    """Runs until the file ``path`` exists (at most 60 s): a task the test
    holds running while it stops the worker."""
    import os
    import time

    deadline = time.monotonic() + 60
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)
    return path


@task()
def exits(code: int) -> None:
    """Raises SystemExit in the worker's thread (sys.exit in a task)."""
    import sys

    sys.exit(code)


@task()
def interrupts() -> None:
    """Raises KeyboardInterrupt in the worker's thread."""
    raise KeyboardInterrupt("from the task")


@task()
async def aexits() -> None:
    """An async task's sys.exit()."""
    import sys

    sys.exit("async exit")


@task()
def echo(*args: Any, **kwargs: Any) -> list[Any]:
    """Takes anything: the misuse suite's enqueue() arguments."""
    return [list(args), kwargs]
