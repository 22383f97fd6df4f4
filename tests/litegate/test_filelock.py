"""The cross-process lock on its own: exclusion, hand-off after a timeout,
release by the kernel when the holder dies."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from litegate._filelock import ProcessLock
from litegate._lockformat import H_HEAD, HEAD, HOLDING, U64, WAITING
from tests.conftest import wait_until


def test_two_locks_in_one_process_exclude_each_other(tmp_path: Path) -> None:
    a = ProcessLock(str(tmp_path / "x-litegate"))
    b = ProcessLock(str(tmp_path / "x-litegate"))
    assert a.acquire(1)
    assert b.acquire(0.05) is False
    a.release()
    assert b.acquire(1)
    b.release()
    a.close()
    b.close()
    a.close()  # twice is fine


def test_blocked_waiter_wakes_on_release(tmp_path: Path) -> None:
    a = ProcessLock(str(tmp_path / "x-litegate"))
    b = ProcessLock(str(tmp_path / "x-litegate"))
    assert a.acquire(1)
    got = threading.Event()

    def wait_for_it() -> None:
        if b.acquire(10):
            got.set()

    t = threading.Thread(target=wait_for_it)
    t.start()
    wait_until(lambda: b.contended == 1)
    assert not got.is_set()
    a.release()
    assert got.wait(10)
    t.join()
    assert b.held
    b.release()
    a.close()
    b.close()


def test_abandoned_wait_is_picked_up_by_next_caller(tmp_path: Path) -> None:
    a = ProcessLock(str(tmp_path / "x-litegate"))
    b = ProcessLock(str(tmp_path / "x-litegate"))
    assert a.acquire(1)
    assert b.acquire(0.05) is False  # leaves the helper thread blocked in the kernel
    a.release()
    assert b.acquire(5) is True  # joins the pending wait instead of a second one
    assert a.acquire(0.05) is False
    b.release()
    assert a.acquire(1)
    a.release()
    a.close()
    b.close()


def test_abandoned_wait_releases_when_nobody_wants_it(tmp_path: Path) -> None:
    a = ProcessLock(str(tmp_path / "x-litegate"))
    b = ProcessLock(str(tmp_path / "x-litegate"))
    assert a.acquire(1)
    assert b.acquire(0.05) is False
    a.release()
    # b's helper gets the lock, finds no caller and lets go again
    wait_until(lambda: a.acquire(0.01), what="the abandoned acquisition to let go")
    a.release()
    a.close()
    b.close()


def test_kernel_releases_lock_of_killed_holder(tmp_path: Path) -> None:
    path = str(tmp_path / "x-litegate")
    code = (
        "import sys, time\n"
        "from litegate._filelock import ProcessLock\n"
        "lock = ProcessLock(sys.argv[1]); assert lock.acquire(1)\n"
        "print('held', flush=True); time.sleep(600)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen(
        [sys.executable, "-c", code, path], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "held"
        mine = ProcessLock(path)
        assert mine.acquire(0.05) is False
        got = threading.Event()

        def wait_for_it() -> None:
            if mine.acquire(30):
                got.set()

        t = threading.Thread(target=wait_for_it)
        t.start()
        time.sleep(0.05)  # let it block; correctness does not depend on this
        child.send_signal(signal.SIGKILL)
        assert got.wait(30)
        t.join()
        mine.release()
        mine.close()
    finally:
        child.kill()
        child.wait()
        assert child.stdout is not None
        child.stdout.close()


def _flip_records(path: str, n: int, start: Any) -> None:
    """Rewrite one ticket's record back and forth (HEAD, then HOLDING), and
    the head hint between two values, as holders and heads do."""
    lock = ProcessLock(path)
    start.wait(30)
    for i in range(n):
        lock._make_head(7, 1000 + i)
        lock._words[H_HEAD >> 3] = 8 + (i & 1)
        lock._set_state(7, HOLDING)
    lock.close()


def test_another_process_never_sees_a_record_half_written(tmp_path: Path) -> None:
    """The table is shared memory that other processes read while it is
    written: each field is one aligned store, so a reader sees the old
    value or the new one, never the zeros that struct's pack_into writes
    first (a reader that saw a head hint of 0, or a record in no state,
    let a strict writer pass a sleeping head)."""
    path = str(tmp_path / "lock")
    lock = ProcessLock(path)
    lock._put_record(7, WAITING, 1, 1, 0, 0)
    lock._words[H_HEAD >> 3] = 8
    ctx: Any = mp.get_context("spawn")
    start = ctx.Event()
    p = ctx.Process(target=_flip_records, args=(path, 300_000, start))
    p.start()
    start.set()
    torn = reads = 0
    while p.is_alive() or reads == 0:
        for _ in range(2_000):
            state = lock._record(7)[1]
            hint = U64.unpack_from(lock._map, H_HEAD)[0]
            torn += state not in (WAITING, HEAD, HOLDING) or hint not in (8, 9)
            reads += 1
    p.join(60)
    assert p.exitcode == 0
    lock.close()
    assert reads > 10_000
    assert torn == 0, f"{torn} of {reads} reads saw a half-written record"


def _sidecar_fds(path: str) -> list[int]:
    """This process's descriptors open on ``path``."""
    out = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") == path:
                out.append(int(name))
        except OSError:
            pass  # (the listing's own descriptor, gone)
    return out


def test_a_forked_child_keeps_no_copy_of_a_waiting_helpers_descriptor(tmp_path: Path) -> None:
    """A thread queued behind another process's sleeper waits in the kernel
    through a helper thread, on a dup of the lock's descriptor. A child
    forked meanwhile got a copy of that dup: unless it closes it, the
    parent's open file, and every lock the parent holds on it, lives on
    after the parent dies, for as long as the child lives (a gate held by
    a SIGKILLed parent, never given back)."""
    path = os.path.realpath(str(tmp_path / "x-litegate"))
    holder, head, mine = (ProcessLock(path) for _ in range(3))
    assert holder.acquire(1)
    waiters = [threading.Thread(target=lock.acquire, args=(30,)) for lock in (head, mine)]
    waiters[0].start()
    wait_until(lambda: head.contended == 1)
    before = len(_sidecar_fds(path))  # (each lock's, and its mmap's own dup)
    waiters[1].start()  # behind head: waits for head's slot through a helper
    wait_until(lambda: len(_sidecar_fds(path)) == before + 1)  # the helper's dup
    pid = os.fork()
    if pid == 0:  # child: the copies go, as the fork hooks make them go
        code = 99
        try:
            for lock in (holder, head, mine):
                lock.forget_after_fork()
            code = len(_sidecar_fds(path))
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0  # no descriptor on the lock file left
    holder.release()
    waiters[0].join(10)
    head.release()
    waiters[1].join(10)
    assert mine.held
    mine.release()
    for lock in (holder, head, mine):
        lock.close()
