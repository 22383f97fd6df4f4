"""One fairness suite, run over every lock-like primitive in litegate.

Each primitive is wrapped in an adapter with ``acquire(timeout) -> bool``,
``release()`` and ``waiting``. The tests sequence real threads so that the
arrival order is known, then assert the grant order exactly.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

import pytest

import litegate
from litegate._fair import FairLock, HandoffQueue, QueueClosed, QueueTimeout
from tests.conftest import wait_until


class LockLike(Protocol):
    def acquire(self, timeout: float | None) -> bool: ...
    def release(self) -> None: ...
    @property
    def waiting(self) -> int: ...


class FairLockAdapter:
    def __init__(self) -> None:
        self.lock = FairLock()

    def acquire(self, timeout: float | None) -> bool:
        return self.lock.acquire(timeout)

    def release(self) -> None:
        self.lock.release()

    @property
    def waiting(self) -> int:
        return self.lock.waiting


class QueueAdapter:
    """A pool of one resource (a larger pool is tested separately)."""

    def __init__(self) -> None:
        self.q: HandoffQueue[object] = HandoffQueue(1, object)
        self.held: list[object] = []

    def acquire(self, timeout: float | None) -> bool:
        try:
            self.held.append(self.q.get(timeout))
        except QueueTimeout:
            return False
        return True

    def release(self) -> None:
        self.q.put(self.held.pop())

    @property
    def waiting(self) -> int:
        return self.q.waiting


class _DbAdapter:
    """Enter/exit a Database context manager on behalf of test threads."""

    def __init__(self, db: litegate.Database, kind: str) -> None:
        self.db = db
        self.kind = kind
        self.blocks: dict[int, object] = {}

    def acquire(self, timeout: float | None) -> bool:
        block = self.db.write(timeout) if self.kind == "gate" else self.db.read(timeout)
        try:
            block.__enter__()
        except (litegate.WriteTimeout, litegate.PoolTimeout):
            return False
        self.blocks[threading.get_ident()] = block
        return True

    def release(self) -> None:
        self.blocks.pop(threading.get_ident()).__exit__(None, None, None)  # type: ignore[attr-defined]

    @property
    def waiting(self) -> int:
        section = "gate" if self.kind == "gate" else "pool"
        return int(self.db.stats()[section]["waiting"])


PRIMITIVES = ["fairlock", "handoff-queue", "write-gate", "reader-pool"]


@pytest.fixture(params=PRIMITIVES)
def prim(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LockLike]:
    if request.param == "fairlock":
        yield FairLockAdapter()
    elif request.param == "handoff-queue":
        yield QueueAdapter()
    else:
        db = litegate.connect(str(tmp_path / "f.db"), readers=1, timeout=10)
        yield _DbAdapter(db, "gate" if request.param == "write-gate" else "pool")
        db.close()


def _queue_up(prim: LockLike, n: int, body: Callable[[int], None]) -> list[threading.Thread]:
    """Start n threads one at a time, each queued before the next starts."""
    threads = []
    for i in range(n):
        t = threading.Thread(target=body, args=(i,))
        t.start()
        threads.append(t)
        wait_until(lambda i=i: prim.waiting == i + 1, what=f"thread {i} to queue")  # type: ignore[misc]
    return threads


def test_grants_in_arrival_order(prim: LockLike) -> None:
    order: list[int] = []

    def body(i: int) -> None:
        assert prim.acquire(10)
        order.append(i)
        prim.release()

    assert prim.acquire(10)
    threads = _queue_up(prim, 8, body)
    prim.release()
    for t in threads:
        t.join()
    assert order == list(range(8))


def test_no_barging_newcomer_queues_behind_waiters(prim: LockLike) -> None:
    """On release the resource goes straight to the waiter: a newcomer that
    arrives before the waiter has even run must not get it."""
    got = threading.Event()
    leave = threading.Event()

    def body(i: int) -> None:
        assert prim.acquire(10)
        got.set()
        leave.wait(10)
        prim.release()

    assert prim.acquire(10)
    (t,) = _queue_up(prim, 1, body)
    prim.release()
    # The waiter may not have been scheduled yet; the resource is its anyway.
    assert prim.acquire(0.05) is False
    assert got.wait(10)
    leave.set()
    t.join()
    assert prim.acquire(10) is True  # free again once the waiter is done
    prim.release()


def test_timed_out_waiter_leaves_queue_and_order_holds(prim: LockLike) -> None:
    order: list[int] = []
    gave_up = threading.Event()

    def quitter() -> None:
        assert prim.acquire(0.2) is False
        gave_up.set()

    def body(i: int) -> None:
        assert prim.acquire(10)
        order.append(i)
        prim.release()

    assert prim.acquire(10)
    first = threading.Thread(target=body, args=(0,))
    first.start()
    wait_until(lambda: prim.waiting == 1)
    q = threading.Thread(target=quitter)
    q.start()
    wait_until(lambda: prim.waiting == 2)
    third = threading.Thread(target=body, args=(2,))
    third.start()
    wait_until(lambda: prim.waiting == 3)
    assert gave_up.wait(10)
    wait_until(lambda: prim.waiting == 2, what="the quitter to leave the queue")
    prim.release()
    for t in (first, q, third):
        t.join()
    assert order == [0, 2]


def test_pool_of_five_hands_back_in_order() -> None:
    q: HandoffQueue[int] = HandoffQueue(5, iter(range(100)).__next__)
    taken = [q.get(1) for _ in range(5)]
    assert sorted(taken) == [0, 1, 2, 3, 4]
    assert q.created == 5
    assert q.in_use == 5
    order: list[tuple[int, int]] = []

    def body(i: int) -> None:
        item = q.get(10)
        order.append((i, item))

    threads = []
    for i in range(5):
        t = threading.Thread(target=body, args=(i,))
        t.start()
        threads.append(t)
        wait_until(lambda i=i: q.waiting == i + 1)  # type: ignore[misc]
    for item in taken:  # give back 0..4: waiter i must get item i
        q.put(item)
    for t in threads:
        t.join()
    assert sorted(order) == [(i, i) for i in range(5)]
    assert q.created == 5  # never opened more than its capacity


def test_unfair_mode_lets_newcomer_barge() -> None:
    """The lab's "fairness off" mode really is unfair (seed 001)."""
    q: HandoffQueue[str] = HandoffQueue(1, lambda: "conn", fair=False)
    item = q.get(1)
    got: list[str] = []
    t = threading.Thread(target=lambda: got.append(q.get(10)))
    t.start()
    wait_until(lambda: q.waiting == 1)
    q.put(item)
    # The waiter was only notified; a newcomer can take the connection first.
    stolen = q.get(0)
    assert stolen == "conn"
    q.put(stolen)
    t.join()
    assert got == ["conn"]


def test_failed_open_passes_capacity_to_a_waiter() -> None:
    calls = {"n": 0}
    gate = threading.Event()

    def factory() -> str:
        calls["n"] += 1
        if calls["n"] == 1:
            gate.wait(10)
            raise sqlite3.OperationalError("cannot open")
        return "conn"

    q: HandoffQueue[str] = HandoffQueue(1, factory)
    errors: list[BaseException] = []

    def first() -> None:
        try:
            q.get(10)
        except sqlite3.OperationalError as exc:
            errors.append(exc)

    t1 = threading.Thread(target=first)
    t1.start()
    wait_until(lambda: q.created == 1)
    got: list[str] = []
    t2 = threading.Thread(target=lambda: got.append(q.get(10)))
    t2.start()
    wait_until(lambda: q.waiting == 1)
    gate.set()
    t1.join()
    t2.join()
    assert len(errors) == 1
    assert got == ["conn"]  # the waiter opened its own instead of waiting forever


def test_close_wakes_every_waiter() -> None:
    lock = FairLock()
    assert lock.acquire(1)
    results: list[str] = []

    def body() -> None:
        try:
            lock.acquire(10)
            results.append("acquired")
        except QueueClosed:
            results.append("closed")

    threads = [threading.Thread(target=body) for _ in range(3)]
    for i, t in enumerate(threads):
        t.start()
        wait_until(lambda i=i: lock.waiting == i + 1)  # type: ignore[misc]
    released: list[bool] = []
    lock.close(released.append)
    for t in threads:
        t.join()
    assert results == ["closed"] * 3
    assert released == []  # still held by us
    lock.release()
    assert released == [True]  # on_idle ran once the holder let go
    with pytest.raises(QueueClosed):
        lock.acquire(1)


def test_repr_and_counts() -> None:
    lock = FairLock()
    assert repr(lock) == "<FairLock free waiting=0>"
    lock.acquire()
    assert lock.locked

    def take_and_give_back() -> None:
        assert lock.acquire(10)
        lock.release()

    t = threading.Thread(target=take_and_give_back)
    t.start()
    wait_until(lambda: lock.waiting == 1)
    assert repr(lock) == "<FairLock held waiting=1>"
    lock.release()
    t.join()
    assert not lock.locked
