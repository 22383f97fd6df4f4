"""The gate's grant log: every grant of a file's write gate, for tests and
the lab to check the fairness bounds after a run.

Off unless switched on: ``LITEGATE_GRANT_LOG=<folder>`` in the environment
(inherited by child processes) or :func:`enable`. Each process appends to its
own file ``<folder>/grants-<pid>.log``, one line per grant, written when the
gate is released (a process killed while holding the gate leaves no line for
that grant): ::

    arrive_ns grant_ns release_ns pid tid queued_here ticket head_ns overtakes budget_us file

- times on CLOCK_MONOTONIC (shared by every process of the machine);
- ``queued_here``: 1 if the thread slept in its process's line;
- ``ticket``: the cross-process ticket it slept on, -1 if it did not queue
  across processes (it took a free gate, or its process already held it);
- ``head_ns``: when that ticket became the head of the line (0 without one);
- ``overtakes``, ``budget_us``: its budget (-1: no bound);
- ``file``: the database whose gate it was (its resolved path, %-quoted).

A process logs every gate it takes while the log is on, whatever the file:
a test that writes to a second database (or a thread an earlier test left
running) logs those grants too. The bounds hold per file: :func:`check`
measures each file's grants apart, and :func:`read` can keep one file's.

:func:`read` loads every file of a folder.
"""

from __future__ import annotations

import contextlib
import glob
import math
import os
import threading
from collections.abc import Iterator
from typing import NamedTuple
from urllib.parse import quote, unquote

ENV = "LITEGATE_GRANT_LOG"
"""The switch: a folder to log into, in a process's environment (child
processes inherit it)."""


class Grant(NamedTuple):
    """One grant of the write gate, as logged: when its thread asked, got and
    let go of the gate (CLOCK_MONOTONIC ns), who it was, whether it queued in
    its process's line, its cross-process ticket (-1: none), when that
    ticket became the head (0: never), its budget (-1: no bound) and the
    database whose gate it was (its resolved path; "" if not logged)."""

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
    file: str = ""


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


_LOG: _Log | None = _Log(os.environ[ENV]) if os.environ.get(ENV) else None


def _after_fork_in_child() -> None:
    """A thread of the parent may have held the log's lock at the fork: the
    child's copy would stay taken, and its first grant wait for it forever."""
    if _LOG is not None:
        _LOG.lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def enable(folder: str | None) -> None:
    """Log grants into ``folder`` from now on (None: stop). Child processes
    started afterwards inherit it through the environment."""
    global _LOG
    if folder is None:
        _LOG = None
        os.environ.pop(ENV, None)
        return
    os.makedirs(folder, exist_ok=True)
    os.environ[ENV] = folder
    _LOG = _Log(folder)


def active() -> _Log | None:
    return _LOG


@contextlib.contextmanager
def logging_to(folder: str) -> Iterator[None]:
    """Log grants into ``folder`` within the block (child processes started
    in it inherit it), then go back to the log the caller had, if any."""
    before = _LOG
    enable(folder)
    try:
        yield
    finally:
        enable(before.folder if before is not None else None)


def record(
    arrive_ns: int,
    grant_ns: int,
    release_ns: int,
    queued_here: bool,
    ticket: int,
    head_ns: int,
    overtakes: float,
    seconds: float,
    file: str,
) -> None:
    log = _LOG
    if log is None:
        return
    k = -1 if math.isinf(overtakes) else int(overtakes)
    t = -1 if math.isinf(seconds) else int(seconds * 1e6)
    log.write(
        f"{arrive_ns} {grant_ns} {release_ns} {os.getpid()} {threading.get_ident()} "
        f"{int(queued_here)} {ticket} {head_ns} {k} {t} {quote(file)}\n".encode()
    )


def read(folder: str, file: str | None = None) -> list[Grant]:
    """Every grant logged in ``folder``, in grant order; with ``file``, only
    the grants of that database's gate (symlinks resolved, as the gate
    resolves them)."""
    want = None if file is None else os.path.realpath(file)
    grants = []
    for path in glob.glob(os.path.join(folder, "grants-*.log")):
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) != 11 or not line.endswith("\n"):
                    continue  # a line cut short by a kill
                a, g, r, pid, tid, q, ticket, head, k, t = (int(x) for x in parts[:10])
                name = unquote(parts[10])
                if want is None or name == want:
                    grants.append(Grant(a, g, r, pid, tid, bool(q), ticket, head, k, t, name))
    grants.sort(key=lambda x: x.grant_ns)
    return grants


# the worst figures of check(): the largest over the files
_WORSTS = ("worst_overlap_ns", "worst_over_budget_ns", "worst_free_gap_ns")


def check(grants: list[Grant], slack_ns: int = 0) -> dict[str, int]:
    """The bounds, measured on a log (grant order, as :func:`read` gives it),
    for each database's gate apart (one gate's grants say nothing about
    another's); the counts are summed over the files, the worst figures are
    the largest. Counts of violations (each must be 0) and the worst figures seen:

    - ``overlaps``: two holders at once, across every process and thread
      (``worst_overlap_ns``: the largest, negative when there is none: then
      the shortest gap between one release and the next grant);
    - ``out_of_order``: sleepers across processes not granted in ticket order;
    - ``worst_overtakes`` (and that grant's ``overtakes_bound``): grants taken
      while a sleeper was at the head; ``over_overtakes``: sleepers overtaken
      more than their budget's count allows (+1: the grant of the holder it
      queued behind may be logged as taken after it became the head);
    - ``timed``: sleepers with a time budget; ``over_budget``: those that
      waited at the head longer than their
      time budget plus the turns of the holders meanwhile plus ``slack_ns``;
      ``worst_over_budget_ns``: the most any waited past that (no slack);
    - ``worst_free_gap_ns``: the longest the gate was free while a sleeper
      was at the head (a head looks every 0.5 ms; a lost wake-up shows as a
      gap as long as a whole wait); ``free_gaps``: gaps longer than
      ``slack_ns``.

    Sorting once and bisecting keeps it fast for a whole benchmark's log."""
    by_file: dict[str, list[Grant]] = {}
    for g in grants:
        by_file.setdefault(g.file, []).append(g)
    if len(by_file) <= 1:
        return _check_one(grants, slack_ns)
    out: dict[str, int] = {}
    for one in sorted(by_file.values(), key=len, reverse=True):
        seen = _check_one(one, slack_ns)
        if not out:
            out = seen
            continue
        if len(one) < 2:  # (no pair: its "worst overlap" of 0 says nothing)
            seen["worst_overlap_ns"] = out["worst_overlap_ns"]
        if seen["worst_overtakes"] > out["worst_overtakes"]:
            out["worst_overtakes"] = seen["worst_overtakes"]
            out["overtakes_bound"] = seen["overtakes_bound"]
        for key, value in seen.items():
            if key in _WORSTS:
                out[key] = max(out[key], value)
            elif key not in ("worst_overtakes", "overtakes_bound"):
                out[key] += value
    return out


def _check_one(grants: list[Grant], slack_ns: int) -> dict[str, int]:
    """:func:`check` on the grants of one gate."""
    import bisect
    import itertools

    starts = [g.grant_ns for g in grants]
    ends = [g.release_ns for g in grants]
    held = list(itertools.accumulate((e - s for s, e in zip(starts, ends, strict=True)), initial=0))
    out = dict.fromkeys(
        ("grants", "queued", "overlaps", "worst_overlap_ns", "out_of_order", "worst_overtakes",
         "overtakes_bound", "over_overtakes", "timed", "over_budget", "worst_over_budget_ns",
         "worst_free_gap_ns", "free_gaps"),
        0,
    )  # fmt: skip
    out["grants"] = len(grants)
    out["overtakes_bound"] = -1
    out["overlaps"] = sum(1 for a, b in itertools.pairwise(grants) if a.release_ns > b.grant_ns)
    # by how much (a real second holder overlaps by its whole wait for the
    # unlock; a few microseconds would be the clocks of two CPUs disagreeing)
    out["worst_overlap_ns"] = max(
        (a.release_ns - b.grant_ns for a, b in itertools.pairwise(grants)), default=0
    )
    last_ticket = -1
    for i, g in enumerate(grants):
        if g.ticket < 0:
            continue
        out["queued"] += 1
        if g.ticket < last_ticket:
            out["out_of_order"] += 1
        last_ticket = max(last_ticket, g.ticket)
        lo = bisect.bisect_right(starts, g.head_ns, 0, i)  # the first taken after it was head
        between = i - lo
        if between > out["worst_overtakes"]:
            out["worst_overtakes"], out["overtakes_bound"] = between, g.overtakes
        if g.overtakes >= 0 and between > g.overtakes + 1:
            out["over_overtakes"] += 1
        # the holders' turns while it was the head: those taken since, and
        # the ones already holding when it became the head
        busy = held[i] - held[lo]
        first = lo
        while first > 0 and ends[first - 1] > g.head_ns:
            first -= 1
            busy += ends[first] - g.head_ns
        if g.budget_us >= 0:
            out["timed"] += 1
            past = g.grant_ns - g.head_ns - g.budget_us * 1000 - busy
            out["worst_over_budget_ns"] = max(out["worst_over_budget_ns"], past)
            if past > slack_ns:
                out["over_budget"] += 1
        free_from = g.head_ns
        for j in range(first, i + 1):
            if starts[j] > free_from:
                gap = starts[j] - free_from
                out["worst_free_gap_ns"] = max(out["worst_free_gap_ns"], gap)
                if gap > slack_ns:
                    out["free_gaps"] += 1
            free_from = max(free_from, ends[j])
    return out
