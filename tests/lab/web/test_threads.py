"""The web bench's CPU by thread: threads named to the kernel, sampled from
/proc, and turned into figures per request."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from litegate_lab.web import _threads
from litegate_lab.web._threads import EXITED, MAIN, MASTER, Sample, Task

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="/proc and prctl(PR_SET_NAME) are Linux's"
)


def test_os_name_keeps_the_leading_words_within_the_kernels_fifteen_bytes() -> None:
    assert _threads.os_name("litegate-keeper:/tmp/x.db") == "litegate-keeper"
    assert _threads.os_name("ThreadPoolExecutor-0_2") == "ThreadPoolExecu"
    assert _threads.os_name("litegate-checkpointer") == "litegate-checkp"
    assert _threads.os_name("Thread-3 (run)") == "Thread"
    assert _threads.os_name("0_odd") == "thread"  # no leading word at all


# A child that names its threads and runs a thread that exits at once; then
# one that spins on the CPU for 300 ms and one that sleeps on an event 50
# times (voluntary switches). With "exit" they end before the child says
# "done"; else they stay alive (idle) until the child's stdin closes.
_CHILD = """
import sys, threading, time
from litegate_lab.web._threads import name_os_threads
assert name_os_threads()
leave = threading.Event()
def spin(worked):
    end = time.thread_time() + 0.3
    while time.thread_time() < end:
        pass
    worked.set()
    leave.wait()
def naps(worked):
    e = threading.Event()
    for _ in range(50):
        e.wait(0.001)
    worked.set()
    leave.wait()
gone = threading.Thread(target=spin, args=(threading.Event(),), name="gone-soon")
leave.set(); gone.start(); gone.join(); leave.clear()
print("ready", flush=True)
sys.stdin.readline()
events = [threading.Event(), threading.Event()]
ts = [threading.Thread(target=spin, args=(events[0],), name="bench-spin:1"),
      threading.Thread(target=naps, args=(events[1],), name="bench-naps")]
for t in ts: t.start()
for e in events: e.wait()
if sys.argv[1] == "exit":
    leave.set()
    for t in ts: t.join()
print("done", flush=True)
sys.stdin.readline()
"""


def _run_child(mode: str) -> tuple[Sample, Sample]:
    """Samples of the child before its two threads start and after they
    did their work."""
    with subprocess.Popen(
        [sys.executable, "-c", _CHILD, mode],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    ) as child:  # fmt: skip
        try:
            assert child.stdout is not None
            assert child.stdin is not None
            assert child.stdout.readline() == "ready\n"
            before = _threads.sample(child.pid, [])
            child.stdin.write("\n")
            child.stdin.flush()
            assert child.stdout.readline() == "done\n"
            after = _threads.sample(child.pid, [])
        finally:
            child.kill()
    return before, after


def test_threads_are_sampled_by_the_names_they_gave_the_kernel() -> None:
    before, after = _run_child("stay")
    # the thread that exited before the first sample is in neither
    assert {t.role for t in before.tasks.values()} == {MASTER}
    assert {t.role for t in after.tasks.values()} == {MASTER, "bench-spin", "bench-naps"}
    by = _threads.per_request(before, after, requests=1)
    assert by["bench-spin"]["cpu_ms"] >= 250  # it spun 300 ms of its own CPU
    assert by["bench-naps"]["voluntary"] >= 50  # it slept 50 times
    assert by["bench-naps"]["cpu_ms"] < by["bench-spin"]["cpu_ms"]
    assert EXITED not in by


def test_the_cpu_of_threads_that_exited_is_kept_as_exited() -> None:
    before, after = _run_child("exit")
    assert {t.role for t in after.tasks.values()} == {MASTER}
    by = _threads.per_request(before, after, requests=10)
    # the process's total still has their CPU: nothing of it is lost
    assert by[EXITED]["cpu_ms"] >= 250 / 10
    assert "bench-spin" not in by


def test_per_request_adds_roles_up_and_shows_what_exited() -> None:
    tick = 1.0 / os.sysconf("SC_CLK_TCK")
    before = Sample(
        tasks={
            (10, 10): Task(MASTER, 1.0, 5, 0),
            (20, 20): Task(MAIN, 2.0, 100, 1),
            (20, 21): Task("pool", 3.0, 10, 2),
            (20, 22): Task("pool", 4.0, 10, 2),
            (20, 23): Task("old", 1.0, 0, 0),  # exits between the samples
        },
        totals={10: 1.0, 20: 10.0},
    )
    after = Sample(
        tasks={
            (10, 10): Task(MASTER, 1.0, 5, 0),
            (20, 20): Task(MAIN, 2.5, 120, 1),
            (20, 21): Task("pool", 4.0, 30, 4),
            (20, 22): Task("pool", 5.0, 30, 6),
            (20, 24): Task("pool", 0.5, 8, 0),  # started between the samples
        },
        # main 0.5 + pool 2.5 live, and 1.5 s by threads no longer there
        totals={10: 1.0, 20: 14.5},
    )
    by = _threads.per_request(before, after, requests=100)
    assert by[MAIN] == pytest.approx({"cpu_ms": 5.0, "voluntary": 0.2, "involuntary": 0.0})
    assert by["pool"] == pytest.approx({"cpu_ms": 25.0, "voluntary": 0.48, "involuntary": 0.06})
    assert by[MASTER]["cpu_ms"] == 0
    assert by[EXITED]["cpu_ms"] == pytest.approx(15.0)
    # up to two ticks unexplained is rounding, not an exited thread
    after2 = Sample(after.tasks, {10: 1.0, 20: 13.0 + 1.5 * tick})
    assert EXITED not in _threads.per_request(before, after2, requests=100)
