"""The gate's grant log: every grant of a file's write gate, for tests and
the lab to check the fairness bounds after a run.

Off unless switched on: ``LITEGATE_GRANT_LOG=<folder>`` in the environment
(inherited by child processes) or :func:`enable`. Each process appends to its
own file ``<folder>/grants-<pid>.log``, one line per grant, written when the
gate is released (a process killed while holding the gate leaves no line for
that grant): ::

    arrive_ns grant_ns release_ns pid tid queued_here ticket head_ns overtakes budget_us

- times on CLOCK_MONOTONIC (shared by every process of the machine);
- ``queued_here``: 1 if the thread slept in its process's line;
- ``ticket``: the cross-process ticket it slept on, -1 if it did not queue
  across processes (it took a free gate, or its process already held it);
- ``head_ns``: when that ticket became the head of the line (0 without one);
- ``overtakes``, ``budget_us``: its budget (-1: no bound).

:func:`read` loads every file of a folder.
"""

from __future__ import annotations

import glob
import math
import os
import threading
from typing import NamedTuple

_ENV = "LITEGATE_GRANT_LOG"


class Grant(NamedTuple):
    arrive_ns: int
    grant_ns: int
    release_ns: int
    pid: int
    tid: int
    queued_here: bool
    ticket: int
    head_ns: int
    overtakes: int
    budget_us: int


class _Log:
    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.pid = -1
        self.fd = -1
        self.lock = threading.Lock()

    def write(self, line: bytes) -> None:
        pid = os.getpid()
        with self.lock:
            if pid != self.pid:  # first line, or a forked child: a file of its own
                self.fd = os.open(
                    os.path.join(self.folder, f"grants-{pid}.log"),
                    os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC,
                    0o644,
                )
                self.pid = pid
            os.write(self.fd, line)


_LOG: _Log | None = _Log(os.environ[_ENV]) if os.environ.get(_ENV) else None


def enable(folder: str | None) -> None:
    """Log grants into ``folder`` from now on (None: stop). Child processes
    started afterwards inherit it through the environment."""
    global _LOG
    if folder is None:
        _LOG = None
        os.environ.pop(_ENV, None)
        return
    os.makedirs(folder, exist_ok=True)
    os.environ[_ENV] = folder
    _LOG = _Log(folder)


def active() -> _Log | None:
    return _LOG


def record(
    arrive_ns: int,
    grant_ns: int,
    release_ns: int,
    queued_here: bool,
    ticket: int,
    head_ns: int,
    overtakes: float,
    seconds: float,
) -> None:
    log = _LOG
    if log is None:
        return
    k = -1 if math.isinf(overtakes) else int(overtakes)
    t = -1 if math.isinf(seconds) else int(seconds * 1e6)
    log.write(
        f"{arrive_ns} {grant_ns} {release_ns} {os.getpid()} {threading.get_ident()} "
        f"{int(queued_here)} {ticket} {head_ns} {k} {t}\n".encode()
    )


def read(folder: str) -> list[Grant]:
    """Every grant logged in ``folder``, in grant order."""
    grants = []
    for path in glob.glob(os.path.join(folder, "grants-*.log")):
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) != 10:
                    continue  # a line cut short by a kill
                a, g, r, pid, tid, q, ticket, head, k, t = (int(x) for x in parts)
                grants.append(Grant(a, g, r, pid, tid, bool(q), ticket, head, k, t))
    grants.sort(key=lambda x: x.grant_ns)
    return grants
