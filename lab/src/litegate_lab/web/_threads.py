"""Server CPU by thread: which of a server's threads spend the CPU that a
request costs, and how often they sleep.

The apps call :func:`name_os_threads` when a worker loads them. Every thread
the worker starts from then on gives the kernel its Python name, so
``/proc/<pid>/task/<tid>/comm`` tells the threads apart: gunicorn's request
threads, uvicorn's event loop and litegate's own threads (the keeper, the
lock helpers, the checkpointer). Linux keeps 15 bytes of a name, so the name
given is the Python name's leading words ("litegate-keeper" of
"litegate-keeper:/path/db", "ThreadPoolExecu" of "ThreadPoolExecutor-0_2").

:func:`sample` reads every thread of the server's processes; :func:`per_request`
turns two samples into CPU milliseconds and context switches per request for
each role. A thread that exits between the samples still counts: its process's
total keeps its CPU, and what the live threads do not explain is shown as
``(exited)``.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

_PR_SET_NAME = 15  # linux/prctl.h
_NAME_MAX = 15  # bytes the kernel keeps of a thread's name (TASK_COMM_LEN - 1)
_WORDS = re.compile(r"[A-Za-z]+(?:-[A-Za-z]+)*")
_TICK = os.sysconf("SC_CLK_TCK")
MAIN = "main"  # a worker's first thread (gunicorn's accept loop, uvicorn's event loop)
MASTER = "master"  # the first thread of the process the bench started (gunicorn's arbiter)
EXITED = "(exited)"


def os_name(python_name: str) -> str:
    """The kernel's name for a thread called ``python_name``: its leading
    words, cut to what the kernel keeps."""
    m = _WORDS.match(python_name)
    words = m.group(0) if m else "thread"
    return words.encode()[:_NAME_MAX].decode("ascii", "ignore")


def name_os_threads() -> bool:
    """From now on, each new thread of this process names itself to the
    kernel after its Python name, once, when it starts. False where the
    kernel call is not available (only Linux has ``prctl(PR_SET_NAME)``)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return False

    def first_call(frame: FrameType, event: str, arg: Any) -> None:
        # threading.setprofile's hook runs in the new thread: name it, then
        # take the hook off again so that the thread runs unprofiled.
        sys.setprofile(None)
        prctl(_PR_SET_NAME, os_name(threading.current_thread().name).encode(), 0, 0, 0)

    threading.setprofile(first_call)
    return True


@dataclass(frozen=True)
class Task:
    """One thread at one moment: its role, CPU seconds, context switches."""

    role: str
    cpu_s: float
    voluntary: int
    involuntary: int


@dataclass(frozen=True)
class Sample:
    tasks: dict[tuple[int, int], Task]  # (pid, tid) -> the thread
    totals: dict[int, float]  # pid -> CPU seconds of the whole process, dead threads included

    @property
    def cpu_s(self) -> float:
        """CPU seconds of all the processes so far."""
        return sum(self.totals.values())


def _stat_cpu(text: str) -> float:
    fields = text.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _thread_cpu(where: Path) -> float:
    """A thread's CPU seconds: its run time in nanoseconds (schedstat's
    first field) where the kernel keeps it, else its clock ticks. Ticks are
    too coarse for threads that run a little each: the kernel rounds every
    thread's down to a tick."""
    try:
        return int((where / "schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return _stat_cpu((where / "stat").read_text())


def _switches(status: str) -> tuple[int, int]:
    vol = invol = 0
    for line in status.splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            vol = int(line.split()[1])
        elif line.startswith("nonvoluntary_ctxt_switches:"):
            invol = int(line.split()[1])
    return vol, invol


def sample(master: int, workers: list[int]) -> Sample:
    """Every thread of ``master`` and its ``workers`` now (a process or a
    thread gone meanwhile is left out)."""
    tasks: dict[tuple[int, int], Task] = {}
    totals: dict[int, float] = {}
    for pid in (master, *workers):
        base = Path(f"/proc/{pid}")
        try:
            totals[pid] = _stat_cpu((base / "stat").read_text())
            tids = [int(t) for t in os.listdir(base / "task")]
        except OSError:
            continue
        for tid in tids:
            where = base / "task" / str(tid)
            try:
                cpu = _thread_cpu(where)
                vol, invol = _switches((where / "status").read_text())
                comm = (where / "comm").read_text().strip()
            except OSError:
                continue
            role = comm if tid != pid else MASTER if pid == master else MAIN
            tasks[(pid, tid)] = Task(role, cpu, vol, invol)
    return Sample(tasks, totals)


def per_request(before: Sample, after: Sample, requests: int) -> dict[str, dict[str, float]]:
    """{role: {"cpu_ms", "voluntary", "involuntary"}} per request between
    the samples; the threads of each role added up."""
    n = max(1, requests)
    out: dict[str, dict[str, float]] = {}

    def add(role: str, cpu_s: float, vol: int, invol: int) -> None:
        r = out.setdefault(role, {"cpu_ms": 0.0, "voluntary": 0.0, "involuntary": 0.0})
        r["cpu_ms"] += 1000.0 * cpu_s / n
        r["voluntary"] += vol / n
        r["involuntary"] += invol / n

    live: dict[int, float] = {}  # pid -> CPU of its live threads
    for key, t in after.tasks.items():
        was = before.tasks.get(key)
        cpu = t.cpu_s - (was.cpu_s if was else 0.0)
        add(t.role, cpu, t.voluntary - (was.voluntary if was else 0),
            t.involuntary - (was.involuntary if was else 0))  # fmt: skip
        live[key[0]] = live.get(key[0], 0.0) + cpu
    gone = 0.0
    for pid, total in after.totals.items():
        unexplained = (total - before.totals.get(pid, 0.0)) - live.get(pid, 0.0)
        # A process's total is in clock ticks, each reading rounded down:
        # up to two ticks between two readings is rounding.
        if unexplained > 2 / _TICK:
            gone += unexplained
    if gone:
        add(EXITED, gone, 0, 0)
    return out
