"""Every process logs each checkpoint's and each commit's interval, so a test
can check that no checkpoint of litegate's ran while a commit restarted the
WAL (SQLite's "WAL-reset bug" needs exactly that), and that litegate's
checkpoints and its checkpointer's tenures never overlapped across
processes.

:func:`install` patches litegate in the calling process (a soak worker) at
the few places every version of it has (the gate's grant and release with
the grant log on, the checkpointer's connection, the maintenance
connection, the checkpointer's seat where there is one), so the same test
runs against code from before the checkpointer was elected. Times are
CLOCK_MONOTONIC nanoseconds, which every process shares.

Lines, one per event, appended to ``<folder>/ckpt-<pid>.log``:

- ``C pid thread t0 t1 salt0 salt1``: a commit (or any grant of the gate
  that ended in a restart of the log): the gate granted at ``t0``, the
  COMMIT done (or the gate released) at ``t1``; the WAL index's salts at
  both ends. A write transaction restarted the log (wal.c,
  ``walRestartLog``) when they differ, somewhere in between; only grants
  whose salts differ are logged (the grant log has the others).
- ``B pid thread t0 salt0 kind`` then ``K pid thread t0 t1 salt0 salt1
  kind sql``: a checkpoint call began (logged first, so a process killed
  in the middle still left a trace) and ended.
- ``S pid t``: this process's checkpointer took the file's seat.

:func:`check` reads every process's lines (and the parent's kill times)
and returns what went wrong.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

_ENV = "LITEGATE_TEST_CHECKPOINT_LOG"


class _Log:
    def __init__(self, folder: str, db_path: str) -> None:
        self.fd = os.open(
            os.path.join(folder, f"ckpt-{os.getpid()}.log"),
            os.O_WRONLY | os.O_CREAT | os.O_APPEND,
            0o644,
        )
        self.shm_path = db_path + "-shm"
        self.shm_fd = -1  # kept open for good: closing it would drop SQLite's locks here

    def write(self, *fields: object) -> None:
        os.write(self.fd, (" ".join(map(str, fields)) + "\n").encode())

    def salt(self) -> str:
        """The WAL index header's two salts (they change when the log restarts)."""
        if self.shm_fd < 0:
            try:
                self.shm_fd = os.open(self.shm_path, os.O_RDONLY)
            except OSError:
                return "-"
        data = os.pread(self.shm_fd, 8, 32)
        return data.hex() if len(data) == 8 else "-"


_LOG: _Log | None = None


class _Logged:
    """A connection whose ``PRAGMA wal_checkpoint`` calls are logged."""

    def __init__(self, conn: Any, kind: str) -> None:
        self._conn = conn
        self._kind = kind

    def execute(self, sql: str, *args: Any) -> Any:
        log = _LOG
        if log is None or "wal_checkpoint" not in sql:
            return self._conn.execute(sql, *args)
        me = threading.get_ident()
        s0 = log.salt()
        t0 = time.monotonic_ns()
        log.write("B", os.getpid(), me, t0, s0, self._kind)
        try:
            return self._conn.execute(sql, *args)
        finally:
            t1 = time.monotonic_ns()
            mode = sql.split("(")[-1].rstrip(")").strip() if "(" in sql else "PASSIVE"
            log.write("K", os.getpid(), me, t0, t1, s0, log.salt(), self._kind, mode)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def install(folder: str, db_path: str) -> None:
    """Patch litegate in this process to log into ``folder`` (the grant log
    must be on: its hooks give each grant's times)."""
    global _LOG
    from litegate import _database, _gate

    _LOG = _Log(folder, db_path)
    gate_cls: Any = _gate.FileGate
    note_grant = gate_cls._note_grant
    release = gate_cls.release
    open_conn = gate_cls._open_checkpoint_conn

    def _note_grant(self: Any, *args: Any) -> None:
        note_grant(self, *args)
        log = _LOG
        if log is not None and self._grant is not None:
            self._ckptlog = (self._grant[1], log.salt(), threading.get_ident())

    def committed_here(self: Any) -> None:
        """Right after a COMMIT, the gate held: end the commit's interval."""
        mark = getattr(self, "_ckptlog", None)
        log = _LOG
        if log is None or mark is None:
            return
        t0, s0, thread = mark
        s1 = log.salt()
        self._ckptlog = None
        if s1 != s0:
            log.write("C", os.getpid(), thread, t0, time.monotonic_ns(), s0, s1)

    def _release(self: Any) -> None:
        committed_here(self)  # a grant with no commit that restarted the log (a TRUNCATE)
        release(self)

    committed = gate_cls.committed

    def _committed(self: Any) -> None:
        committed_here(self)
        committed(self)

    def _open(self: Any) -> Any:
        return _Logged(open_conn(self), "background")

    gate_cls._note_grant = _note_grant
    gate_cls.release = _release
    gate_cls.committed = _committed
    gate_cls._open_checkpoint_conn = _open
    # the lone writer's path tells the checkpointer of a commit directly
    from litegate import _checkpoint

    ckpt_cls: Any = _checkpoint.Checkpointer
    ckpt_committed = ckpt_cls.committed
    owner_gate: dict[int, Any] = {}

    def _ckpt_committed(self: Any) -> None:
        gate = owner_gate.get(id(self))
        if gate is not None:
            committed_here(gate)
        ckpt_committed(self)

    checkpointer = gate_cls.checkpointer

    def _checkpointer(self: Any, **kwargs: Any) -> Any:
        ckpt = checkpointer(self, **kwargs)
        owner_gate[id(ckpt)] = self
        return ckpt

    ckpt_cls.committed = _ckpt_committed
    gate_cls.checkpointer = _checkpointer

    exclusive = _database.Database._exclusive

    @contextlib.contextmanager
    def _exclusive(self: Any, timeout: float | None) -> Iterator[Any]:
        with exclusive(self, timeout) as conn:
            yield _Logged(conn, "maintenance")

    db_cls: Any = _database.Database
    db_cls._exclusive = _exclusive
    from litegate import _filelock

    seat_cls: Any = getattr(_filelock, "CheckpointSeat", None)  # (none before the election)
    if seat_cls is not None:
        take = seat_cls.take

        def _take(self: Any) -> bool:
            was = self.seated
            got = bool(take(self))
            log = _LOG
            if got and not was and log is not None:
                log.write("S", os.getpid(), time.monotonic_ns())
            return got

        seat_cls.take = _take


def install_from_env(db_path: str) -> None:
    folder = os.environ.get(_ENV)
    if folder:
        install(folder, db_path)


@dataclass
class Interval:
    pid: int
    thread: int
    t0: int
    t1: int
    salt0: str
    salt1: str
    kind: str = ""
    mode: str = ""


@dataclass
class CheckResult:
    commits_restarting: int = 0  # commits (grants) that restarted the log
    checkpoints: int = 0
    killed_in_checkpoint: int = 0
    overlaps: list[str] = field(default_factory=list)  # a checkpoint while the log restarted
    concurrent: list[str] = field(default_factory=list)  # two checkpoints at once
    tenures: int = 0
    seat_overlaps: list[str] = field(default_factory=list)
    takeovers_ns: list[int] = field(default_factory=list)  # kill of the holder -> next seat
    slow_takeovers: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        out = [f"checkpoint during a restart of the log: {x}" for x in self.overlaps[:5]]
        out += [f"two checkpoints at once: {x}" for x in self.concurrent[:5]]
        out += [f"two checkpointers at once: {x}" for x in self.seat_overlaps[:5]]
        out += [f"takeover slower than 1 s: {x}" for x in self.slow_takeovers[:5]]
        return out

    def summary(self) -> str:
        worst = max(self.takeovers_ns, default=0) / 1e6
        return (
            f"{self.checkpoints:,} checkpoint calls ({self.killed_in_checkpoint} killed in one), "
            f"{self.commits_restarting:,} commits that restarted the log: "
            f"{len(self.overlaps)} checkpoint(s) during a restart, {len(self.concurrent)} pairs "
            f"of checkpoints at once; {self.tenures} checkpointer tenures, "
            f"{len(self.seat_overlaps)} overlapping, {len(self.takeovers_ns)} takeovers after a "
            f"SIGKILL of the holder (slowest {worst:.0f} ms)"
        )


def check(folder: str, kills: dict[int, tuple[int, int]], end_ns: int) -> CheckResult:
    """``kills``: pid -> (ns just before its SIGKILL, ns just after)."""
    resets: list[Interval] = []
    began: dict[tuple[int, int, int], Interval] = {}
    calls: list[Interval] = []
    seats: list[tuple[int, int]] = []  # (t, pid)
    for name in glob.glob(os.path.join(folder, "ckpt-*.log")):
        with open(name) as f:
            for line in f:
                p = line.split()
                if not p:
                    continue
                if p[0] == "C":
                    resets.append(Interval(int(p[1]), int(p[2]), int(p[3]), int(p[4]), p[5], p[6]))
                elif p[0] == "B":
                    key = (int(p[1]), int(p[2]), int(p[3]))
                    began[key] = Interval(key[0], key[1], key[2], -1, p[4], "?", p[5])
                elif p[0] == "K":
                    key = (int(p[1]), int(p[2]), int(p[3]))
                    began.pop(key, None)
                    calls.append(
                        Interval(key[0], key[1], key[2], int(p[4]), p[5], p[6], p[7], p[8])
                    )
                elif p[0] == "S":
                    seats.append((int(p[2]), int(p[1])))
    res = CheckResult(commits_restarting=len(resets))
    # A call that never ended was cut short by its process's SIGKILL.
    cut: list[Interval] = []
    for iv in began.values():
        if iv.pid in kills:
            before, after = kills[iv.pid]
            res.killed_in_checkpoint += 1
            cut.append(Interval(iv.pid, iv.thread, iv.t0, after, iv.salt0, "?", iv.kind, "?"))
            # (for two-at-once: it held litegate's lock until it died, after `before`)
            calls.append(Interval(iv.pid, iv.thread, iv.t0, before, iv.salt0, "?", iv.kind, "?"))
    res.checkpoints = len(calls)
    # 1. No checkpoint call ran while a commit restarted the log: the restart
    # from salt a to salt b of a commit whose interval overlaps the call's,
    # the call having begun on salt a and ended on another (so the restart
    # came between its two looks; a call cut short by a SIGKILL counts as
    # ending on another). A commit's interval runs from its grant of the
    # gate, so it may begin long before its restart: the salts say whether
    # the restart fell inside the call. (A checkpoint made inside the same
    # grant, on the same thread, is that grant's own: a TRUNCATE restarts
    # the log itself.)
    for k in calls + cut:
        if k.salt1 == k.salt0:
            continue  # no restart between its start and its end
        for c in resets:
            if k.pid == c.pid and k.thread == c.thread and c.t0 <= k.t0 and k.t1 <= c.t1:
                continue
            if k.t0 < c.t1 and c.t0 < k.t1 and k.salt0 == c.salt0:
                res.overlaps.append(
                    f"{k.kind} {k.mode} by pid {k.pid} [{k.t0}, {k.t1}] and a commit by pid "
                    f"{c.pid} [{c.t0}, {c.t1}] that restarted the log ({c.salt0} -> {c.salt1})"
                )
    # 2. litegate's checkpoint calls never overlap one another.
    ordered = sorted(calls, key=lambda iv: iv.t0)
    reach: Interval | None = None  # the call reaching furthest so far
    for b in ordered:
        a = reach
        if a is not None and b.t0 < a.t1 and (a.pid, a.thread) != (b.pid, b.thread):
            res.concurrent.append(
                f"{a.kind} {a.mode} pid {a.pid} [{a.t0}, {a.t1}] and {b.kind} {b.mode} pid "
                f"{b.pid} [{b.t0}, {b.t1}]"
            )
        if a is None or b.t1 > a.t1:
            reach = b
    # 3. One checkpointer at a time; a tenure ends when its process is killed
    # (or the soak ends; a process that closed the file also stops logging
    # rounds, and the next holder's start is after its release).
    seats.sort()
    res.tenures = len(seats)
    for (t_a, pid_a), (t_b, pid_b) in itertools.pairwise(seats):
        end_a = kills.get(pid_a, (end_ns, end_ns))[1]
        if pid_a in kills and kills[pid_a][0] < t_b:
            res.takeovers_ns.append(t_b - kills[pid_a][0])
            if t_b - kills[pid_a][0] > 1_000_000_000:
                res.slow_takeovers.append(
                    f"pid {pid_a} killed at {kills[pid_a][0]}, pid {pid_b} seated at {t_b}"
                )
        elif t_b < end_a and pid_a not in kills:
            # a holder that was not killed: it must have closed the file first
            # (workers only do that at the very end)
            res.seat_overlaps.append(f"pid {pid_a} seated at {t_a}, pid {pid_b} at {t_b}")
        if pid_a in kills and t_b < kills[pid_a][0]:
            res.seat_overlaps.append(
                f"pid {pid_a} seated at {t_a} and alive until {kills[pid_a][0]}, pid {pid_b} "
                f"seated at {t_b}"
            )
    return res
