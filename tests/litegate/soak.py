"""A chaos soak of the write gate across processes (``make soak``; a short run
is part of ``make test``, in ``test_soak.py``).

Worker processes, started with fork and with spawn, write to one file with a
mix of every policy at once (``fair="strict"``, ``True``, a small
``litegate.Bounded`` and, for one worker in eight, ``False``), from one to
three threads each, through every write path (``db.write()`` blocks, some
holding the gate a moment, some with timeouts short enough to give up in the
line; ``db.execute``'s group commit; ``db.transact``; now and then
``db.checkpoint`` with the whole gate), plus reads; every other worker also
writes from 16 asyncio tasks on a second Database of the same file
(``litegate.aio``, cancelling some writes while they wait); one worker in
three combines its writes with the others' (``connect(combine=True)``),
so the combiner dies too. Each worker
appends the id of every write that returned to a file of its own: those are
acknowledged. Meanwhile the parent SIGKILLs a worker every 50-300 ms
(holding the gate, queued, woken, in the middle of a batch: wherever it is)
and starts a new one in its place, and now and then stops one with SIGSTOP
for up to 50 ms (a process preempted at any step). The grant log is on
throughout.

What it asserts, at the end or as soon as it sees it:

- no stall: the gate's grant counter or the WAL moves at least every
  ``stall_s`` seconds (else the queue table, the kernel's locks on the lock
  file and every worker's threads are dumped);
- every worker stops within a minute once told to (no hang);
- no acknowledged write is missing from the database, and no write is in
  it twice (a combined batch settled by a client whose combiner died);
- the grant log's bounds (``_grantlog.check``): never two holders at once,
  sleepers granted in ticket order, no head overtaken past its count budget,
  and, with slack for the stops, no head waiting past its time budget and no
  gate left free while a head waited.

It found one bug so far: a sleeper preempted between marking itself the
head and publishing the head hint was overtaken past its budget
(``test_bounded.py::test_a_head_is_seen_by_bargers_from_the_moment_its_clock_starts``).
And one false alarm, twice in ~45 runs: "two holders at once", both times a
holder that never queued and was never killed. It was the soak's own
process (the pytest process, which logs too) writing to other files: Django
cache sweepers left running by earlier tests. The log now names each grant's
file, and the soak checks its own file's grants only (it says what else it
saw).

Run it longer by hand: ``python -m tests.litegate.soak --seconds 600``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import glob
import itertools
import multiprocessing as mp
import os
import random
import signal
import sqlite3
import sys
import tempfile
import time
import traceback
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

import litegate
import litegate.aio
from litegate import _combine, _grantlog, _lockformat
from tests.litegate import ckptlog
from tests.litegate.workers import on_threads

# Every policy on one file at once; worker w gets POLICIES[w % 8]. One in
# eight is unfair (``fair=False``, the lab's): a head of that policy is never
# handed the gate, so while it waits the holder's process keeps the gate for
# as long as its own threads want it, and everyone behind waits too (seconds,
# measured here). So that the soak still tests hand-offs, the unfair worker
# gives up every wait after UNFAIR_TIMEOUT.
POLICIES: tuple[Any, ...] = (
    "strict", True, litegate.Bounded(4, 0.001), True, "strict", litegate.Bounded(4, 0.001),
    True, False,
)  # fmt: skip
# The grant log's time bounds get this much slack: a worker stopped for up to
# 50 ms holds the gate (or is handed it) that long, and 2 busy cores add more.
SLACK_NS = 250_000_000
# Commits between checkpoint rounds (the profile's wal_autocheckpoint), per
# worker: small, so that checkpoints, RESTART turns and the restarts of the
# log they lead to come many times a second.
CHECKPOINT_EVERY = (20, 50, 200)
UNFAIR_TIMEOUT = 0.05
_INSERT = "INSERT INTO acks(w, inc, seq) VALUES (?, ?, ?)"


def _insert(row: tuple[int, int, int], conn: sqlite3.Connection) -> None:
    conn.execute(_INSERT, row)


def _worker(w: int, inc: int, path: str, threads: int, seed: int, folder: str, parent: int) -> None:
    """Worker ``w``'s incarnation ``inc``: write until the stop file exists
    (or the soak that started it is gone)."""
    ckptlog.install_from_env(path)  # (when the soak checks checkpoints against commits)
    fair = POLICIES[w % len(POLICIES)]
    limit = UNFAIR_TIMEOUT if fair is False else 60.0
    # One worker in three combines its writes with the others' (one of them
    # the combiner, SIGKILLed like any worker, wherever it is); half of those
    # ship every write (as clients), the rest only when the combiner is busy,
    # writing at home through the gate when it is quiet (the default), and
    # they commit with synchronous=FULL: a one-row write ships by default only
    # from a process whose commits sync (so the other half's turns also
    # raise the combiner's sync level for their batches).
    every: dict[str, str | int] = {
        "wal_autocheckpoint": CHECKPOINT_EVERY[w % len(CHECKPOINT_EVERY)]
    }
    if w % 6 == 0:
        _combine.ALWAYS_SHIP = True
    elif w % 6 == 3:
        every["synchronous"] = "FULL"
    db = litegate.connect(path, timeout=limit, fair=fair, combine=w % 3 == 0, pragmas=every)
    fd = os.open(
        os.path.join(folder, f"acks-{w}-{inc}.txt"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644
    )
    stop = os.path.join(folder, "stop")

    def running() -> bool:
        return not os.path.exists(stop) and os.getppid() == parent

    def body(k: int) -> None:
        """Thread k: writes, or for the last thread of an odd worker, the
        asyncio tasks. Anything but a timeout is a finding: the parent
        reports it."""
        try:
            if k < threads:
                write(k)
            else:
                asyncio.run(tasks(k))
        except BaseException:
            with open(os.path.join(folder, f"errors-{w}-{inc}.txt"), "a") as f:
                f.write(traceback.format_exc())

    def write(k: int) -> None:
        rnd = random.Random(seed * 100 + k)
        n = 0
        while running():
            n += 1
            seq = k * 1_000_000_000 + n
            x = rnd.random()
            try:
                if x < 0.35:
                    with db.write(timeout=rnd.choice([None, 0.005, 0.05])) as conn:
                        conn.execute(_INSERT, (w, inc, seq))
                        if rnd.random() < 0.2:
                            time.sleep(rnd.random() * 0.001)  # a longer transaction
                elif x < 0.65:
                    db.execute(_INSERT, (w, inc, seq))
                elif x < 0.75:
                    db.transact(functools.partial(_insert, (w, inc, seq)))
                elif x < 0.85:  # gives up in the line, most of the time
                    with db.write(timeout=0.0005) as conn:
                        conn.execute(_INSERT, (w, inc, seq))
                elif x < 0.995:
                    db.query("SELECT count(*) FROM acks WHERE w = ?", (w,))
                    continue
                else:  # maintenance takes the whole gate, the checkpointer's turn too
                    db.checkpoint(rnd.choice(["PASSIVE", "RESTART", "TRUNCATE"]), timeout=0.05)
                    continue
            except litegate.WriteTimeout:
                continue
            os.write(fd, b"%d\n" % seq)  # acknowledged: the write returned

    async def tasks(k: int) -> None:
        """Odd workers also write from asyncio tasks (a second Database on
        the file in the same process, so one gate for both), cancelling some
        writes while they wait."""
        adb = await litegate.aio.connect(path, timeout=limit, fair=fair, pragmas=every)

        async def task(j: int) -> None:
            rnd = random.Random(seed * 100 + k * 1000 + j)
            n = 0
            while running():
                n += 1
                seq = k * 1_000_000_000 + j * 10_000_000 + n
                x = rnd.random()
                try:
                    if x < 0.4:
                        await adb.execute(_INSERT, (w, inc, seq), timeout=rnd.choice([None, 0.005]))
                    elif x < 0.7:
                        async with adb.write(timeout=rnd.choice([None, 0.01])) as tx:
                            await tx.execute(_INSERT, (w, inc, seq))
                    elif x < 0.9:  # cancelled wherever it is: then it counts as not written
                        await asyncio.wait_for(adb.execute(_INSERT, (w, inc, seq)), 0.001)
                    else:
                        await adb.query("SELECT count(*) FROM acks WHERE w = ?", (w,))
                        continue
                except (litegate.WriteTimeout, asyncio.TimeoutError):
                    continue
                os.write(fd, b"%d\n" % seq)

        try:
            await asyncio.gather(*(task(j) for j in range(16)))
        finally:
            await adb.close()

    on_threads(threads + w % 2, body)
    db.close()
    os.close(fd)


@dataclass
class SoakResult:
    seconds: float
    kills: int = 0
    stops: int = 0
    grants: int = 0
    committed: int = 0
    acknowledged: int = 0
    lost: int = 0
    twice: int = 0  # writes applied more than once (combined writes must never be)
    # grants of other databases' gates logged meanwhile (by whom, which file):
    # the soak's process logs every gate it takes, and a test run before it
    # may have left a thread writing to a file of its own
    elsewhere: list[str] = field(default_factory=list)
    check: dict[str, int] = field(default_factory=dict)
    checkpoints: ckptlog.CheckResult | None = None
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        c = self.check
        return (
            f"{self.seconds:.0f} s: {self.kills} SIGKILLs, {self.stops} SIGSTOPs, "
            f"{self.grants:,} grants logged, {self.committed:,} rows committed, "
            f"{self.acknowledged:,} acknowledged, {self.lost} lost, {self.twice} twice; "
            "grant log: "
            f"{c.get('overlaps', '-')} overlaps, {c.get('out_of_order', '-')} out of ticket "
            f"order, {c.get('over_overtakes', '-')} heads overtaken past their count, "
            f"{c.get('over_budget', '-')} past their time (+{SLACK_NS // 1_000_000} ms), "
            f"{c.get('free_gaps', '-')} free gaps (worst wait past a time budget "
            f"{c.get('worst_over_budget_ns', 0) / 1e6:.1f} ms, worst free gap "
            f"{c.get('worst_free_gap_ns', 0) / 1e6:.1f} ms); "
            + (f"not checked: {'; '.join(self.elsewhere)}; " if self.elsewhere else "")
            + (f"checkpoints: {self.checkpoints.summary()}; " if self.checkpoints else "")
            + ("OK" if not self.problems else "PROBLEMS: " + "; ".join(self.problems))
        )


def _state_of(pid: int) -> str:
    """A process's threads as the kernel sees them: state and where they sleep."""
    try:
        out = []
        for tid in sorted(os.listdir(f"/proc/{pid}/task")):
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            with open(f"/proc/{pid}/task/{tid}/wchan") as f:
                out.append(f"{tid}:{state}:{f.read() or '-'}")
        return " ".join(out)
    except OSError:
        return "gone"


def _dump(path: str, procs: dict[int, tuple[Any, int]]) -> str:
    """What the gate looks like now: for a stall or a hang."""
    sidecar = path + "-litegate"
    lines = [
        f"queue: {_lockformat.read_queue(sidecar)}",
        f"counters: {_lockformat.read_counters(sidecar)}",
    ]
    ino = os.stat(sidecar).st_ino
    with open("/proc/locks") as f:
        lines += [f"lock: {line.strip()}" for line in f if f":{ino} " in line]
    for w, (p, inc) in sorted(procs.items()):
        lines.append(f"worker {w}.{inc} pid {p.pid} exit {p.exitcode}: {_state_of(p.pid)}")
    return "\n".join(lines)


def run(
    seconds: float,
    workers: int = 8,
    seed: int = 1,
    stall_s: float = 10.0,
    progress: bool = False,
    checkpoints: bool = True,
) -> SoakResult:
    """One soak on a fresh database; the result lists what went wrong.
    ``checkpoints``: every worker also logs its checkpoints and commits
    (``ckptlog``), checked at the end: no checkpoint while a commit
    restarted the log, no two at once, one checkpointer at a time."""
    rnd = random.Random(seed)
    result = SoakResult(seconds)
    with tempfile.TemporaryDirectory(prefix="litegate-soak-") as folder:
        path = os.path.join(folder, "soak.db")
        with litegate.connect(path) as db:
            db.execute(
                "CREATE TABLE acks(w INTEGER, inc INTEGER, seq INTEGER, PRIMARY KEY (w, inc, seq))"
            )
        ctxs: list[Any] = [mp.get_context("spawn"), mp.get_context("fork")]
        procs: dict[int, tuple[Any, int]] = {}

        def start(w: int) -> None:
            inc = procs[w][1] + 1 if w in procs else 1
            args = (w, inc, path, 1 + w % 3, rnd.randrange(1 << 30), folder, os.getpid())
            p = ctxs[rnd.randrange(2)].Process(target=_worker, args=args)
            p.start()
            procs[w] = (p, inc)

        grants_folder = os.path.join(folder, "grants")
        ckpt_folder = os.path.join(folder, "checkpoints")
        kills: dict[int, tuple[int, int]] = {}  # pid -> ns just before and after its SIGKILL
        end_ns = 0
        if checkpoints:
            os.mkdir(ckpt_folder)
            os.environ[ckptlog._ENV] = ckpt_folder  # (inherited by every worker)
        with _grantlog.logging_to(grants_folder):  # (inherited by every worker)
            try:
                for w in range(workers):
                    start(w)
                sidecar = path + "-litegate"
                began = time.monotonic()
                end = began + seconds
                last, moved = (-1, -1), began
                chaos = began + rnd.uniform(0.05, 0.3)
                shown = began
                while (now := time.monotonic()) < end:
                    time.sleep(0.02)
                    counters = _lockformat.read_counters(sidecar)
                    grants = counters["grants"] if counters else 0
                    # progress: a grant across processes, or a commit (a
                    # process passing the gate among its own threads takes
                    # no grant across processes, but its commits touch the WAL)
                    try:
                        wal = os.stat(path + "-wal").st_mtime_ns
                    except FileNotFoundError:
                        wal = 0
                    if (grants, wal) != last:
                        last, moved = (grants, wal), now
                    elif now - moved > stall_s:
                        result.problems.append(
                            f"stall: no grant for {now - moved:.1f} s\n{_dump(path, procs)}"
                        )
                        break
                    if progress and now - shown >= 10:
                        shown = now
                        print(
                            f"  {now - began:5.0f} s: {grants:,} grants, {result.kills} SIGKILLs, "
                            f"{result.stops} SIGSTOPs",
                            flush=True,
                        )
                    if now < chaos:
                        continue
                    chaos = now + rnd.uniform(0.05, 0.3)
                    w = rnd.randrange(workers)
                    p = procs[w][0]
                    if p.exitcode is not None:  # it ended by itself: a finding
                        result.problems.append(f"worker {w} exited on its own ({p.exitcode})")
                        start(w)
                    elif rnd.random() < 0.2:  # preempted at whatever step it is in
                        os.kill(p.pid, signal.SIGSTOP)
                        time.sleep(rnd.uniform(0.001, 0.05))
                        os.kill(p.pid, signal.SIGCONT)
                        result.stops += 1
                    else:
                        before = time.monotonic_ns()
                        os.kill(p.pid, signal.SIGKILL)
                        kills[p.pid] = (before, time.monotonic_ns())
                        p.join(10)
                        result.kills += 1
                        start(w)
                end_ns = time.monotonic_ns()
                open(os.path.join(folder, "stop"), "w").close()
                for p, _inc in procs.values():
                    p.join(60)
                hung = [w for w, (p, _inc) in procs.items() if p.exitcode is None]
                if hung:
                    result.problems.append(f"workers {hung} did not stop\n{_dump(path, procs)}")
            finally:  # stopped or not, none outlives the soak (a stopped one dies too)
                os.environ.pop(ckptlog._ENV, None)
                for p, _inc in procs.values():
                    if p.exitcode is None:
                        p.kill()
                        p.join(10)
        with closing(sqlite3.connect(path)) as conn:
            committed = set(conn.execute("SELECT w, inc, seq FROM acks"))
            (twice,) = conn.execute(
                "SELECT count(*) FROM (SELECT 1 FROM acks GROUP BY w, inc, seq HAVING count(*) > 1)"
            ).fetchone()
        result.twice = int(twice)
        if twice:
            result.problems.append(f"{twice} writes are in the database more than once")
        acknowledged: set[tuple[int, int, int]] = set()
        for name in glob.glob(os.path.join(folder, "acks-*.txt")):
            _, w_s, inc_s = os.path.basename(name)[: -len(".txt")].split("-")
            with open(name) as f:
                acknowledged.update((int(w_s), int(inc_s), int(line)) for line in f if line.strip())
        for name in sorted(glob.glob(os.path.join(folder, "errors-*.txt"))):
            with open(name) as f:
                result.problems.append(f"{os.path.basename(name)}:\n{f.read()}")
        result.committed, result.acknowledged = len(committed), len(acknowledged)
        result.lost = len(acknowledged - committed)
        if result.lost:
            result.problems.append(f"{result.lost} acknowledged writes are not in the database")
        every = _grantlog.read(grants_folder)
        own = os.path.realpath(path)
        log = [g for g in every if g.file == own]
        result.elsewhere = _elsewhere(every, own)
        result.grants = len(log)
        result.check = _grantlog.check(log, SLACK_NS)
        for what in ("overlaps", "out_of_order", "over_overtakes", "over_budget", "free_gaps"):
            if result.check[what]:
                result.problems.append(f"grant log: {what} = {result.check[what]}")
        result.problems += _overlapping(log, kills)
        if checkpoints:
            result.checkpoints = ckptlog.check(ckpt_folder, kills, end_ns)
            result.problems += result.checkpoints.problems()
    return result


def _elsewhere(log: list[_grantlog.Grant], path: str) -> list[str]:
    """The grants of other files' gates in the log, counted by process and file."""
    counts: dict[tuple[int, str], int] = {}
    for g in log:
        if g.file != path:
            counts[g.pid, g.file] = counts.get((g.pid, g.file), 0) + 1
    return [f"{n} grants by pid {pid} on {file!r}" for (pid, file), n in sorted(counts.items())]


def _overlapping(log: list[_grantlog.Grant], kills: dict[int, tuple[int, int]]) -> list[str]:
    """Each pair of grants the log shows held at once, said in full (times
    from the first grant, in us; their tickets; SIGKILLs of either), so a
    failure that happens once can be read from its report: two holders at
    once is the gate's worst possible bug."""
    out = []
    began_ns = log[0].grant_ns if log else 0
    for a, b in itertools.pairwise(log):
        if a.release_ns <= b.grant_ns:
            continue

        def said(g: _grantlog.Grant) -> str:
            killed = kills.get(g.pid)
            return (
                f"pid {g.pid} tid {g.tid} held {(g.grant_ns - began_ns) / 1e3:.0f}.."
                f"{(g.release_ns - began_ns) / 1e3:.0f} us (asked at "
                f"{(g.arrive_ns - began_ns) / 1e3:.0f}, ticket {g.ticket}, queued here "
                f"{g.queued_here}, budget {g.overtakes}/{g.budget_us} us"
                + (f", SIGKILLed at {(killed[0] - began_ns) / 1e3:.0f} us" if killed else "")
                + ")"
            )

        out.append(
            f"held at once for {(a.release_ns - b.grant_ns) / 1e3:.1f} us: {said(a)}; {said(b)}"
        )
    return out[:5]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.litegate.soak", description=__doc__)
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--seed", type=int, default=None, help="default: random, printed")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print(f"soak: {args.workers} workers for {args.seconds:.0f} s, seed {seed}", flush=True)
    result = run(args.seconds, args.workers, seed, progress=True)
    print(result.summary())
    return 1 if result.problems else 0


if __name__ == "__main__":
    sys.exit(main())
