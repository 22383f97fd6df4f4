"""Job handlers that ``litegate worker`` imports in the worker tests.

Each records what happened as one JSON line appended to the file named by the
payload's ``out`` (one ``write`` on an ``O_APPEND`` file, so lines from many
threads and processes never interleave).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from typing import Any

from litegate.queue import Job, pass_job

NOT_CALLABLE = 42


def _record(out: str, **event: Any) -> None:
    line = (json.dumps(event, sort_keys=True) + "\n").encode()
    fd = os.open(out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def record(payload: dict[str, Any]) -> None:
    _record(payload["out"], n=payload["n"], pid=os.getpid())


def always_fails(payload: dict[str, Any]) -> None:
    _record(payload["out"], n=payload["n"])
    raise ValueError(f"boom {payload['n']}")


@pass_job
def flaky(job: Job) -> None:
    """Fails its first attempt, succeeds on the second."""
    _record(job.payload["out"], id=job.id, attempt=job.attempt)
    if job.attempt == 1:
        raise RuntimeError("first attempts fail")


def slow(payload: dict[str, Any]) -> None:
    _record(payload["out"], event="start", n=payload["n"], pid=os.getpid())
    time.sleep(payload["sleep"])
    _record(payload["out"], event="end", n=payload["n"])


@pass_job
def slow_first_attempt(job: Job) -> None:
    """The first attempt sleeps ``payload["sleep"]`` s (long enough to be
    signalled or killed); later attempts return at once."""
    out = job.payload["out"]
    _record(out, event="start", id=job.id, attempt=job.attempt, pid=os.getpid())
    if job.attempt == 1:
        time.sleep(job.payload["sleep"])
    _record(out, event="end", id=job.id, attempt=job.attempt)


def takes_job(job: Job) -> None:
    """Undecorated: gets the Job only with --pass-job / pass_job=True."""
    _record(job.payload["out"], id=job.id, attempt=job.attempt)


async def async_record(payload: dict[str, Any]) -> None:
    await asyncio.sleep(0.01)
    loop = asyncio.get_running_loop()
    _record(payload["out"], n=payload["n"], loop=id(loop), thread=threading.get_ident())


async def async_fails(payload: dict[str, Any]) -> None:
    await asyncio.sleep(0)
    raise KeyError(payload["n"])
