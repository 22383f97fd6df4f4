"""Bounded fairness across processes, proven from the grant log.

Real processes (fork and spawn) write through the gate with the grant log on;
afterwards the log is checked for what the README states:

- never two holders at once, across processes (intervals never overlap);
- sleepers across processes are granted in ticket order;
- a head waiter is overtaken at most ``overtakes`` times (plus the one race
  a barger that looked just before the budget ran out may win), and waits at
  most its budget plus the transactions that were already running;
- no waiter sleeps while the gate is free for longer than the head's check
  interval (no lost wake-up).

Plus Go's ``TestMutexFairness`` (a hog that re-takes the gate back to back
cannot starve a light writer) for threads and processes, and SIGKILL of a
head waiter, including one woken by a hand-off that never got to run.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

import litegate
from litegate import _futex, _grantlog
from litegate._fair import STRICT
from litegate._filelock import DUE, NOBODY, PASSED, ProcessLock, read_counters
from litegate._grantlog import Grant
from tests.conftest import wait_until
from tests.litegate import workers

# Slack for a machine shared with other work (CI on 2 cores): a bound that
# holds on an idle machine is checked with this much extra time.
SLACK_NS = 250_000_000


@pytest.fixture
def grant_log(tmp_path: Path) -> Iterator[str]:
    folder = str(tmp_path / "grants")
    with _grantlog.logging_to(folder):
        yield folder


def check_log(grants: list[Grant]) -> dict[str, int]:
    """Assert the bounds on a grant log (``_grantlog.check``, which the lab's
    ``--grant-log`` reports too); returns what it saw."""
    assert grants, "no grants logged"
    seen = _grantlog.check(grants, SLACK_NS)
    assert seen["overlaps"] == 0, f"two holders at once: {seen}"
    assert seen["out_of_order"] == 0, f"sleepers were not granted in ticket order: {seen}"
    assert seen["over_overtakes"] == 0, f"a head was overtaken past its budget: {seen}"
    assert seen["over_budget"] == 0, f"a head waited past its budget: {seen}"
    assert seen["free_gaps"] == 0, (
        f"the gate was free for {seen['worst_free_gap_ns'] / 1e6:.1f} ms while a head waited"
    )
    return seen


def _writer(path: str, fair: Any, threads: int, n: int, start: Any) -> None:
    db = litegate.connect(path, timeout=120, fair=fair)
    start.wait(60)

    def body(_k: int) -> None:
        for _ in range(n):
            with db.write() as conn:
                conn.execute("INSERT INTO w(pid) VALUES (?)", (os.getpid(),))

    workers.on_threads(threads, body)
    db.close()


def _stress(db_path: str, method: str, fair: Any, procs: int, threads: int, n: int) -> None:
    with litegate.connect(db_path) as db:
        db.execute("CREATE TABLE w(id INTEGER PRIMARY KEY, pid INTEGER)")
    ctx: Any = mp.get_context(method)
    start = ctx.Event()
    ps = [
        ctx.Process(target=_writer, args=(db_path, fair, threads, n, start)) for _ in range(procs)
    ]
    for p in ps:
        p.start()
    start.set()
    for p in ps:
        p.join(300)
    assert [p.exitcode for p in ps] == [0] * procs
    with closing(sqlite3.connect(db_path)) as conn:
        assert conn.execute("SELECT count(*) FROM w").fetchone()[0] == procs * threads * n


@pytest.mark.slow
@pytest.mark.parametrize("method", ["fork", "spawn"])
@pytest.mark.parametrize("fair", [True, "strict", litegate.Bounded(4, 0.001)], ids=repr)
def test_the_grant_log_holds_the_bounds_after_a_stress_run(
    db_path: str, grant_log: str, method: str, fair: Any
) -> None:
    procs, threads, n = 4, 2, 150
    _stress(db_path, method, fair, procs, threads, n)
    grants = [g for g in _grantlog.read(grant_log) if g.pid != os.getpid()]
    seen = check_log(grants)
    assert seen["grants"] >= procs * threads * n  # (+ any checkpointer turn)
    assert len({g.pid for g in grants}) == procs
    if fair == "strict":
        assert seen["worst_overtakes"] <= 1  # strict: a head is never passed (but the race)


def test_logging_to_goes_back_to_the_callers_log(tmp_path: Path) -> None:
    outer, inner = str(tmp_path / "outer"), str(tmp_path / "inner")

    def folder() -> str | None:
        log = _grantlog.active()
        assert os.environ.get("LITEGATE_GRANT_LOG") == (None if log is None else log.folder)
        return None if log is None else log.folder

    before = folder()
    with _grantlog.logging_to(outer):
        assert folder() == outer  # (children started here inherit it)
        with _grantlog.logging_to(inner):
            assert folder() == inner
        assert folder() == outer  # the caller's log, switched back on
    assert folder() == before


def test_the_checks_measure_a_clean_log() -> None:
    """Three bargers take the gate while a sleeper is at the head, within its
    budget: counted, and nothing reported as a violation."""
    head = Grant(0, 1000, 1100, 1, 1, True, 7, 10, 16, 2000)
    bargers = [Grant(0, 20 + 10 * i, 25 + 10 * i, 2, 1, False, -1, 0, 16, 2000) for i in range(3)]
    seen = _grantlog.check([*bargers, head])
    assert seen["grants"] == 4
    assert seen["queued"] == seen["timed"] == 1
    assert (seen["worst_overtakes"], seen["overtakes_bound"]) == (3, 16)
    assert seen["worst_free_gap_ns"] == 1000 - 45  # free from the last barger's release on
    assert seen["worst_over_budget_ns"] == 0  # 990 ns at the head against a 2 ms budget
    assert seen["worst_overlap_ns"] == -5  # none: 5 ns between a release and the next grant
    for count in ("overlaps", "out_of_order", "over_overtakes", "over_budget"):
        assert seen[count] == 0
    assert seen["free_gaps"] == 4  # (every gap counts past a slack of 0)


def test_the_checks_catch_overlapping_holders() -> None:
    """The log check itself: two holders at once are reported."""
    a = Grant(0, 10, 30, 1, 1, False, -1, 0, 16, 2000)
    b = Grant(0, 20, 40, 2, 1, False, -1, 0, 16, 2000)
    with pytest.raises(AssertionError, match="two holders at once"):
        check_log([a, b])
    assert _grantlog.check([a, b])["worst_overlap_ns"] == 10  # by how much


def test_the_checks_measure_each_files_gate_apart() -> None:
    """Two databases' gates are two gates: a process holding one while another
    holds the other is no overlap (a foreign file's grants in the soak's log
    showed as "two holders at once"). Within one file it still is, and the
    counts add up over the files."""
    a = Grant(0, 10, 30, 1, 1, False, -1, 0, 16, 2000, "/x/a.db")
    b = Grant(0, 20, 40, 2, 1, False, -1, 0, 16, 2000, "/x/b.db")
    assert _grantlog.check([a, b])["overlaps"] == 0
    assert _grantlog.check([a, b])["worst_overlap_ns"] == 0  # (one grant a file: no pair)
    c = Grant(0, 25, 50, 3, 1, False, -1, 0, 16, 2000, "/x/a.db")
    d = Grant(0, 60, 70, 3, 1, False, -1, 0, 16, 2000, "/x/b.db")
    seen = _grantlog.check([a, b, c, d])
    assert (seen["grants"], seen["overlaps"], seen["worst_overlap_ns"]) == (4, 1, 5)


def test_each_grant_is_logged_with_its_file(tmp_path: Path) -> None:
    """A write to a second database inside a write to the first logs two
    grants held at once, on two files: read() tells them apart (and keeps one
    file's when asked), check() finds no overlap."""
    folder = str(tmp_path / "grants")
    first, second = tmp_path / "first.db", tmp_path / "second.db"
    link = tmp_path / "link.db"
    link.symlink_to(first)
    with (
        _grantlog.logging_to(folder),
        litegate.connect(str(link)) as one,
        litegate.connect(str(second)) as two,
        one.write() as c1,
    ):
        c1.execute("CREATE TABLE t(x)")
        with two.write() as c2:
            c2.execute("CREATE TABLE t(x)")
    grants = _grantlog.read(folder)
    assert [(g.file, g.pid) for g in grants] == [
        (os.path.realpath(first), os.getpid()),
        (os.path.realpath(second), os.getpid()),
    ]
    assert grants[0].grant_ns < grants[1].grant_ns < grants[1].release_ns < grants[0].release_ns
    assert _grantlog.check(grants)["overlaps"] == 0
    assert _grantlog.read(folder, file=str(link)) == grants[:1]  # (resolved as the gate does)
    assert _grantlog.read(folder, file=str(second)) == grants[1:]


def test_a_child_forked_while_the_log_was_being_written_can_log(tmp_path: Path) -> None:
    """A thread of the parent writing a line at the fork left the log's lock
    taken in the child: its first grant waited for it forever."""
    folder = str(tmp_path / "grants")
    with _grantlog.logging_to(folder):
        log = _grantlog.active()
        assert log is not None
        with log.lock:  # as a thread writing its line at that moment holds it
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    _grantlog.record(0, 1, 2, False, -1, 0, 16, 0.002, "/x/a.db")
                    code = 0
                finally:
                    os._exit(code)
        deadline = time.monotonic() + 10
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        if done[0] == 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the child waited for the parent's lock of the grant log")
        assert os.waitstatus_to_exitcode(done[1]) == 0
    assert [(g.pid, g.file) for g in _grantlog.read(folder)] == [(pid, "/x/a.db")]


def test_the_checks_catch_an_overrun_budget() -> None:
    head = Grant(0, 1000, 1100, 1, 1, True, 7, 10, 2, 2000)
    bargers = [Grant(0, 20 + 10 * i, 25 + 10 * i, 2, 1, False, -1, 0, 2, 2000) for i in range(5)]
    with pytest.raises(AssertionError):
        check_log(sorted([head, *bargers], key=lambda g: g.grant_ns))


def test_the_checks_catch_a_lost_wakeup() -> None:
    holder = Grant(0, 0, 100, 1, 1, False, -1, 0, 16, 2000)
    head = Grant(0, SLACK_NS + 10_000, SLACK_NS + 10_100, 2, 1, True, 3, 50, 16, 2000)
    with pytest.raises(AssertionError, match="was free for"):
        check_log([holder, head])


# -- Go's TestMutexFairness --------------------------------------------------------------


def test_a_hog_thread_cannot_starve_a_light_one(db_path: str) -> None:
    """One thread takes the gate back to back, holding it 100 us each time;
    another wants it 10 times with 100 us in between. With bounded fairness
    the light thread gets all 10 while the hog is still going."""
    db = litegate.connect(db_path, timeout=30)
    db.execute("CREATE TABLE t(v)")
    stop = threading.Event()
    hog_turns = [0]

    def hog() -> None:
        while not stop.is_set():
            with db.write():
                time.sleep(0.0001)
            hog_turns[0] += 1

    t = threading.Thread(target=hog)
    t.start()
    try:
        wait_until(lambda: hog_turns[0] > 10, what="the hog to get going")
        for _ in range(10):
            with db.write() as conn:
                conn.execute("INSERT INTO t VALUES (1)")
            time.sleep(0.0001)
        assert not stop.is_set()
    finally:
        stop.set()
        t.join(30)
    assert db.query("SELECT count(*) FROM t") == [(10,)]
    db.close()


def _hog(path: str, seconds: float, started: Any) -> None:
    db = litegate.connect(path, timeout=60)
    started.set()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with db.write() as conn:
            conn.execute("UPDATE hog SET n = n + 1")
    db.close()


@pytest.mark.slow
def test_a_hog_process_cannot_starve_a_light_one(db_path: str, grant_log: str) -> None:
    db = litegate.connect(db_path, timeout=30)
    db.execute("CREATE TABLE hog(n INTEGER)")
    db.execute("INSERT INTO hog VALUES (0)")
    db.execute("CREATE TABLE t(v)")
    ctx: Any = mp.get_context("spawn")
    started = ctx.Event()
    p = ctx.Process(target=_hog, args=(db_path, 8.0, started))
    p.start()
    try:
        assert started.wait(60)
        wait_until(lambda: db.query("SELECT n FROM hog")[0][0] > 100, 60, "the hog to get going")
        for _ in range(10):
            with db.write() as conn:
                conn.execute("INSERT INTO t VALUES (1)")
            time.sleep(0.0001)
        assert p.is_alive()  # the light side was done while the hog still ran
    finally:
        p.join(60)
    assert p.exitcode == 0
    assert db.query("SELECT count(*) FROM t") == [(10,)]
    db.close()
    check_log(_grantlog.read(grant_log))


# -- SIGKILL of a head waiter --------------------------------------------------------------


def _queue_and_write(path: str, label: str, ready: Any) -> None:
    db = litegate.connect(path, timeout=60, fair="strict")
    ready.set()
    db.execute("INSERT INTO t(v) VALUES (?)", (label,))
    db.close()


@pytest.mark.parametrize("when", ["asleep", "woken"])
def test_sigkill_of_the_head_waiter(db_path: str, when: str) -> None:
    """The head waiter dies asleep, or just after a release handed it the
    gate (woken, not yet running): the waiter behind it gets the gate."""
    db = litegate.connect(db_path, timeout=30, fair="strict")
    db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
    ctx: Any = mp.get_context("spawn")
    r1, r2 = ctx.Event(), ctx.Event()
    sidecar = db_path + "-litegate"
    with db.write() as conn:
        conn.execute("INSERT INTO t(v) VALUES ('holder')")
        head = ctx.Process(target=_queue_and_write, args=(db_path, "head", r1))
        head.start()
        assert r1.wait(60)
        wait_until(lambda: workers.queued_writers(sidecar) == 1, what="the head to queue")
        behind = ctx.Process(target=_queue_and_write, args=(db_path, "behind", r2))
        behind.start()
        assert r2.wait(60)
        wait_until(lambda: workers.queued_writers(sidecar) == 2, what="the second to queue")
        assert head.pid is not None
        if when == "asleep":
            os.kill(head.pid, signal.SIGSTOP)  # it cannot take the gate any more ...
            os.kill(head.pid, signal.SIGKILL)  # ... and dies as the head
    if when == "woken":  # the release (strict: a hand-off) woke it; it dies now
        os.kill(head.pid, signal.SIGKILL)
    head.join(30)
    behind.join(60)
    assert behind.exitcode == 0
    rows = sorted(v for (v,) in db.query("SELECT v FROM t"))
    assert rows in (["behind", "holder"], ["behind", "head", "holder"])  # head may have won
    db.execute("INSERT INTO t(v) VALUES ('after')", timeout=10)  # nothing is wedged
    db.close()


def _head_behind(
    path: str, budget: litegate.Bounded
) -> tuple[ProcessLock, threading.Event, threading.Thread]:
    """Another ProcessLock on ``path`` (another process, as far as OFD locks
    go) asks for the gate on a thread of its own and becomes the head waiter;
    it wakes only when handed the gate, so counts against its budget are
    exact. Returns it, an Event set once it has the gate, and its thread."""
    b = ProcessLock(path)
    b.HEAD_CHECK_SECONDS = 60.0
    got = threading.Event()

    def head() -> None:
        if b.acquire(30, budget):
            got.set()

    t = threading.Thread(target=head)
    t.start()
    return b, got, t


@pytest.mark.skipif(not _futex.AVAILABLE, reason="needs futexes (the head sleeps on one)")
def test_a_head_due_gets_the_gate_handed_over(tmp_path: Path) -> None:
    """Two ProcessLocks (two processes, as far as OFD locks go): the holder
    may take the gate back while the head is within its budget; once the
    head has been overtaken k times, release hands it over."""
    path = str(tmp_path / "x-litegate")
    a = ProcessLock(path)
    budget = litegate.Bounded(3, 60.0)
    assert a.acquire(1, budget)
    b, got, t = _head_behind(path, budget)
    wait_until(lambda: a.head_due() is False and a._head() is not None, what="b at the head")
    for _ in range(3):  # within the budget: the holder takes it back, b stays asleep
        a.release()
        assert a.acquire(0, budget)
    assert not got.is_set()
    assert a.head_due()
    a.release()  # budget spent: handed over
    assert got.wait(10)
    assert a.acquire(0.05, budget) is False  # b has it
    t.join()
    b.release()
    assert a.handoffs == 1
    assert a.barged == 3
    a.close()
    b.close()


@pytest.mark.skipif(not _futex.AVAILABLE, reason="needs futexes (the head sleeps on one)")
def test_a_cold_process_wakes_the_head_when_it_lets_go_and_a_warm_one_does_not(
    db_path: str,
) -> None:
    """A head within its budget is woken by the release of a process that
    had not let the gate go for WARM_NS (a burst's one write: it will not
    take the gate back, so the head takes it at once instead of at its next
    look); a warm process's release wakes nobody (it is likely to ask again
    at once, and take the gate back past the head). The head here looks
    only once a minute, so being woken is the only way it gets the gate."""
    db = litegate.connect(db_path, timeout=10, checkpoints=False)
    db.execute("CREATE TABLE t(v)")
    gate = db._process_state().filegate
    gate.HOT_GAP_NS = 0  # never hot: every release lets the gate go
    budget = litegate.Bounded(1000, 3600.0)  # never due: a release need not hand over
    for warm in (True, False):
        gate.WARM_NS = 3600 * 10**9 if warm else 0
        with db.write() as conn:
            conn.execute("INSERT INTO t VALUES (1)")
            b, got, t = _head_behind(db_path + "-litegate", budget)
            wait_until(lambda: gate.plock._head() is not None, what="a head waiter")
        assert got.wait(0.5) is not warm  # woken (and granted) only by the cold release
        if warm:
            gate.WARM_NS = 0
            db.execute("INSERT INTO t VALUES (2)")  # now cold: its release wakes b
            assert got.wait(10)
        t.join()
        b.release()
        b.close()
    db.close()


def _barges(path: str) -> int:
    counters = read_counters(path)
    assert counters is not None
    return counters["barges"]


def _overtaken(lock: ProcessLock) -> int:
    """How many times the head waiter has been overtaken, from its record."""
    head = lock._head()
    assert head is not None
    return head[1][4]


@pytest.mark.skipif(not _futex.AVAILABLE, reason="needs futexes (the head sleeps on one)")
def test_pass_on_counts_each_pass_against_the_head_until_it_is_due(tmp_path: Path) -> None:
    """The holder's hot path (ProcessLock.pass_on): with nobody waiting the
    gate is simply ours and nothing is written to the shared table; with a
    head waiting, each pass counts one overtake against its budget (and
    clears the idle mark), until the budget is spent; then DUE, and the
    release hands the gate to the head."""
    path = str(tmp_path / "x-litegate")
    a = ProcessLock(path)
    budget = litegate.Bounded(3, 60.0)
    assert a.acquire(1, budget)
    assert a.keep_idle_unless_due()  # kept idle: the mark other processes see
    assert a.pass_on() == NOBODY
    assert a.idle  # nobody waits: the mark stays while our transactions run
    assert _barges(path) == 0
    b, got, t = _head_behind(path, budget)
    wait_until(lambda: a._head() is not None, what="b at the head")
    for n in (1, 2, 3):
        assert a.pass_on() == PASSED
        assert not a.idle  # a head waits: the mark is gone while we use the gate
        assert _overtaken(a) == n
        assert _barges(path) == n
    assert a.pass_on() == DUE  # overtaken 3 times: the budget is spent
    assert _overtaken(a) == 3  # (DUE counts nothing)
    assert not got.is_set()
    a.release()  # hands over
    assert got.wait(10)
    t.join()
    assert a.handoffs == 1
    b.release()
    a.close()
    b.close()


def test_a_head_is_seen_by_bargers_from_the_moment_its_clock_starts(tmp_path: Path) -> None:
    """A sleeper that becomes the head by itself (the ticket before it gave
    up) and is then preempted before it looks at the gate: bargers must see
    it at the head already, or they overtake it past its budget while its
    clock runs. The chaos soak (soak.py) found this: a bounded process
    took a free gate 9 times past a strict head preempted for 1.1 ms, whose
    grant log said it had been the head all along."""
    path = str(tmp_path / "x-litegate")
    holder, head, barger = ProcessLock(path), ProcessLock(path), ProcessLock(path)
    head.HEAD_CHECK_SECONDS = 60.0
    assert holder.acquire(1, litegate.Bounded(16, 60.0))
    assert head.acquire(0.01, STRICT) is False  # ticket 0 was the head, and gave up
    stalled, go_on = threading.Event(), threading.Event()
    make_head = head._make_head

    def preempted_after(t: int, head_ns: int) -> None:
        make_head(t, head_ns)  # its record says HEAD from here on ...
        stalled.set()
        go_on.wait(30)  # ... and the process gets no CPU for a while

    head._make_head = preempted_after  # type: ignore[method-assign]
    got: list[bool] = []
    waiter = threading.Thread(target=lambda: got.append(head.acquire(30, STRICT)))
    waiter.start()
    try:
        assert stalled.wait(10)
        seen = barger._head()
        assert seen is not None, "the head is not visible to other processes"
        assert seen[0] == 1
        holder.release()  # a strict head is due at once: nobody may take the free gate
        assert barger.try_now(litegate.Bounded(16, 60.0)) is False
    finally:
        go_on.set()
        waiter.join(30)
    assert got == [True]
    assert head.last_head_ns >= seen[1][3]  # the grant log's clock starts once it is seen
    head.release()
    for lock in (holder, head, barger):
        lock.close()


# -- keeping the gate while idle ------------------------------------------------------------


# A budget no waiter spends in a test: only the holder going cold lets go.
_LONG = litegate.Bounded(10**6, 3600.0)


def _write_then_idle(path: str, ready: Any, fair: Any = True) -> None:
    db = litegate.connect(path, timeout=60, fair=fair)
    for i in range(200):  # back to back: the process is "hot" and keeps the gate idle
        db.execute("INSERT INTO t(v) VALUES (?)", (f"a{i}",))
    ready.set()
    time.sleep(60)  # idle, the gate kept, until the test kills it
    db.close()


@pytest.mark.skipif(not _futex.AVAILABLE, reason="idle keeping needs the futex doorbell")
@pytest.mark.parametrize("end", ["asks", "asks-long-budget", "sigkill"])
def test_an_idle_holder_lets_the_gate_go(db_path: str, end: str) -> None:
    """A process that wrote back to back keeps the gate while idle (its next
    write needs no system call); another process that asks gets it (the idle
    holder's keeper lets go), and so does one after the holder is killed.
    With a budget that never runs out (an hour), the holder lets go because
    it stopped writing (HOT_GAP_NS), not because the waiter's budget is spent."""
    fair = _LONG if end == "asks-long-budget" else True
    from litegate._filelock import read_counters

    with litegate.connect(db_path) as db:
        db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
    ctx: Any = mp.get_context("spawn")
    ready = ctx.Event()
    p = ctx.Process(target=_write_then_idle, args=(db_path, ready, fair))
    p.start()
    try:
        assert ready.wait(60)
        wait_until(
            lambda: (read_counters(db_path + "-litegate") or {}).get("idle_holder_pid") == p.pid,
            what="the writer to keep the gate idle",
        )
        if end == "sigkill":
            assert p.pid is not None
            os.kill(p.pid, signal.SIGKILL)
            p.join(30)
        db = litegate.connect(db_path, timeout=30, fair=fair)
        db.execute("INSERT INTO t(v) VALUES ('b')")  # would time out if nobody let go
        assert db.query("SELECT count(*) FROM t") == [(201,)]
        db.close()
        # (this file's keeper: another test's unclosed connection may keep its own)
        keeper = f"litegate-keeper:{os.path.realpath(db_path)}"
        assert keeper not in {t.name for t in threading.enumerate()}
    finally:
        p.kill()  # (a multiprocessing Event set after its waiter was killed would hang)
        p.join(30)
