"""One fairness suite, run over every lock-like primitive in litegate.

Each primitive is wrapped in an adapter with ``acquire(timeout) -> bool``,
``release()`` and ``waiting``. The tests sequence real threads so that the
arrival order is known, then assert the grant order exactly.
"""

from __future__ import annotations

import asyncio
import math
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

import pytest

import litegate
from litegate import _fair
from litegate._fair import (
    BOUNDED,
    QUEUED,
    READY,
    STRICT,
    UNFAIR,
    Budget,
    FairLock,
    HandoffQueue,
    QueueClosed,
    QueueTimeout,
    set_done,
    set_done_soon,
    wait_turn,
)
from tests.conftest import wait_until


class LockLike(Protocol):
    def acquire(self, timeout: float | None) -> bool: ...
    def release(self) -> None: ...
    @property
    def waiting(self) -> int: ...


class FairLockAdapter:
    def __init__(self, budget: Budget) -> None:
        self.lock = FairLock(budget)

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


# (primitive, policy): every lock-like thing, under each policy it has.
PRIMITIVES = [
    ("fairlock", "strict"),
    ("fairlock", "bounded"),
    ("write-gate", "strict"),
    ("write-gate", "bounded"),
    ("handoff-queue", "strict"),
    ("reader-pool", "strict"),
]
POLICY = {"strict": STRICT, "bounded": BOUNDED}


@pytest.fixture(params=PRIMITIVES, ids=lambda p: "-".join(p))
def prim(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LockLike]:
    kind, policy = request.param
    if kind == "fairlock":
        yield FairLockAdapter(POLICY[policy])
    elif kind == "handoff-queue":
        yield QueueAdapter()
    else:
        fair: bool | str = True if policy == "bounded" else "strict"
        db = litegate.connect(str(tmp_path / "f.db"), readers=1, timeout=10, fair=fair)
        yield _DbAdapter(db, "gate" if kind == "write-gate" else "pool")
        db.close()


def _strict(request: pytest.FixtureRequest) -> bool:
    return bool(request.node.callspec.params["prim"][1] == "strict")


def _queue_up(prim: LockLike, n: int, body: Callable[[int], None]) -> list[threading.Thread]:
    """Start n threads one at a time, each queued before the next starts."""
    threads = []
    for i in range(n):
        t = threading.Thread(target=body, args=(i,))
        t.start()
        threads.append(t)
        wait_until(lambda i=i: prim.waiting == i + 1, what=f"thread {i} to queue")  # type: ignore[misc]
    return threads


def test_sleepers_are_granted_in_arrival_order(prim: LockLike) -> None:
    """Every policy: waiters that sleep get the lock in the order they came."""
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


def test_strict_newcomer_queues_behind_waiters(
    prim: LockLike, request: pytest.FixtureRequest
) -> None:
    """Strict FIFO: on release the lock goes straight to the waiter; a
    newcomer that arrives before the waiter has even run must not get it.
    Bounded: a newcomer may take it (the waiter keeps the head of the line)."""
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
    if _strict(request):
        assert prim.acquire(0.05) is False  # the waiter's, though it may not have run yet
    elif prim.acquire(0.05):  # the releaser may take it back, or the woken head got it first
        assert not got.is_set()
        assert prim.waiting == 1  # the waiter kept its place
        prim.release()
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


# -- bounded fairness: the budget, exactly -----------------------------------------


def _queued_waiter(lock: FairLock, got: list[str], name: str) -> threading.Thread:
    def body() -> None:
        assert lock.acquire(10)
        got.append(name)
        lock.release()

    t = threading.Thread(target=body)
    t.start()
    wait_until(lambda: lock.waiting >= 1, what=f"{name} to queue")
    return t


@pytest.mark.parametrize("k", [1, 2, 5])
def test_a_head_is_overtaken_at_most_k_times(k: int) -> None:
    lock = FairLock(Budget(k, math.inf))
    got: list[str] = []
    assert lock.acquire(1)
    t = _queued_waiter(lock, got, "waiter")
    overtakes = 0
    for _ in range(k + 3):
        lock.release()  # the waiter may run now, or we take the lock back first
        if not lock.acquire(0):  # strictly a barge: no waiting
            break
        if got:
            lock.release()  # the woken waiter had it and gave it back: nothing to measure
            break
        overtakes += 1
    else:
        lock.release()
    t.join(10)
    assert got == ["waiter"]
    assert overtakes <= k  # never more than its budget ...
    if overtakes == k:  # ... and once spent, the lock was handed over
        assert lock.handoffs == 1


def test_the_budget_is_handed_over_deterministically() -> None:
    """With the waiter asleep (it cannot run while we hold the only path to
    it), the count is exact: k overtakes, then a direct hand-off that no
    newcomer can take."""
    k = 3
    lock = FairLock(Budget(k, math.inf))
    assert lock.acquire(1)
    w = lock.enqueue(lambda: None)[2]  # a queued waiter that is told, and never runs
    assert w is not None
    for i in range(k):
        lock.release()
        assert lock.acquire(0), f"overtake {i + 1} of {k}"
        assert w.overtaken == i + 1
    lock.release()  # the budget is spent: handed straight to the waiter
    assert lock.locked
    assert lock.acquire(0) is False  # nobody barges past a granted head
    assert lock.claim(w) == (READY, None)
    assert lock.handoffs == 1
    lock.release()
    assert not lock.locked


def test_the_time_budget_uses_the_heads_waiting_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake clock: the head is overtaken freely until it has waited T,
    then the next release hands over; the bookkeeping restarts for the
    next head."""
    now = [1000.0]
    monkeypatch.setattr(_fair, "_now", lambda: now[0])
    lock = FairLock(Budget(math.inf, 0.005))
    assert lock.acquire(1)
    a = lock.enqueue(lambda: None)[2]
    b = lock.enqueue(lambda: None)[2]
    assert a is not None
    assert b is not None
    for step in range(4):  # 0, 1, 2, 3 ms: within T
        now[0] = 1000.0 + step * 0.001
        lock.release()
        assert lock.acquire(0)
    assert a.overtaken == 4
    now[0] = 1000.005  # a has waited T at the head
    lock.release()
    assert lock.claim(a) == (READY, None)  # handed over
    assert b.head_since == 1000.005  # b became the head now: its clock starts here
    assert b.overtaken == 0
    now[0] = 1000.008
    lock.release()  # b has waited 3 ms: within T, so the lock is free again
    assert not lock.locked
    assert lock.acquire(0)  # barging resumed: nothing sticky
    assert b.overtaken == 1
    lock.release()
    assert lock.claim(b) == (READY, None)  # the woken b takes the free lock
    lock.release()


def test_at_most_one_woken_waiter() -> None:
    lock = FairLock(Budget(math.inf, math.inf))
    assert lock.acquire(1)
    told: list[str] = []
    waiters = [lock.enqueue(lambda n=n: told.append(n))[2] for n in "abc"]  # type: ignore[misc]
    for _ in range(5):  # release and take back, again and again
        lock.release()
        assert lock.acquire(0)
    assert told == ["a"]  # the head was told once; nobody else, however often released
    head = waiters[0]
    assert head is not None
    assert lock.claim(head) == (QUEUED, None)  # it lost: still the head
    lock.release()
    assert told == ["a", "a"]  # told again, still only the head
    for w in waiters:
        assert w is not None
        lock.cancel(w)
    assert lock.waiting == 0
    assert not lock.locked


def test_unfair_never_hands_over() -> None:
    lock = FairLock(UNFAIR)
    assert lock.acquire(1)
    w = lock.enqueue(lambda: None)[2]
    assert w is not None
    for _ in range(1000):
        lock.release()
        assert lock.acquire(0)
    assert lock.handoffs == 0
    assert w.overtaken == 1000
    lock.release()
    assert lock.claim(w) == (READY, None)
    lock.release()


def test_strict_budget_is_fifo_with_direct_handoff() -> None:
    lock = FairLock(STRICT)
    assert lock.acquire(1)
    w = lock.enqueue(lambda: None)[2]
    assert w is not None
    lock.release()
    assert lock.locked  # handed over, not freed
    assert lock.acquire(0) is False
    assert lock.claim(w) == (READY, None)
    lock.release()


def test_vacant_hook_runs_when_the_last_waiter_gives_up() -> None:
    calls: list[str] = []
    lock = FairLock(BOUNDED, on_vacant=lambda: calls.append("vacant"))
    assert lock.acquire(1)
    w = lock.enqueue(lambda: None)[2]
    assert w is not None
    lock.release()  # wakes w; the lock is free but w is on its way
    assert calls == []
    lock.cancel(w)  # w gives up before it ran: nobody left
    assert calls == ["vacant"]


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
    """The lab's "fairness off" mode really is unfair (what it is kept to measure)."""
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
    lock = FairLock(STRICT)
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


# -- the one wait on an event loop, over both lines -------------------------------


def test_wait_turn_on_a_loop_keeps_arrival_order_with_threads() -> None:
    """Tasks and threads share one line: a task queued before a thread is
    served before it, and a task's CREATE reservation is its own."""
    lock = FairLock(STRICT)
    assert lock.acquire(1)
    order: list[str] = []

    async def task() -> None:
        status, item = await wait_turn(lock, 10)
        assert (status, item) == (READY, None)
        order.append("task")
        lock.release()

    def thread() -> None:
        assert lock.acquire(10)
        order.append("thread")
        lock.release()

    async def main() -> None:
        t = asyncio.ensure_future(task())
        await asyncio.sleep(0)
        assert lock.waiting == 1
        th = threading.Thread(target=thread)
        th.start()
        await asyncio.to_thread(wait_until, lambda: lock.waiting == 2)
        lock.release()
        await t
        await asyncio.to_thread(th.join)

    asyncio.run(main())
    assert order == ["task", "thread"]

    q: HandoffQueue[str] = HandoffQueue(1, lambda: "conn")
    assert asyncio.run(wait_turn(q, None)) == (_fair.CREATE, None)
    assert q.created == 1


def test_wait_turn_times_out_with_queue_timeout_and_leaves_the_line() -> None:
    q: HandoffQueue[str] = HandoffQueue(1, lambda: "conn")
    held = q.get(1)

    async def main() -> None:
        with pytest.raises(QueueTimeout):
            await wait_turn(q, 0.05)
        assert q.waiting == 0

    asyncio.run(main())
    q.put(held)
    assert q.get(0.01) == "conn"  # nobody left behind to hand it to


def test_wait_turn_cancelled_after_its_grant_passes_it_on() -> None:
    """A task cancelled once the lock was handed to it gives it back: the
    next waiter gets it, the lock is never lost."""
    lock = FairLock(STRICT)
    assert lock.acquire(1)

    async def main() -> None:
        first = asyncio.ensure_future(wait_turn(lock, 10))
        await asyncio.sleep(0)
        second = asyncio.ensure_future(wait_turn(lock, 10))
        await asyncio.sleep(0)
        assert lock.waiting == 2
        first.cancel()  # (runs at the task's next step, after this grant)
        lock.release()  # handed straight to the first (strict)
        with pytest.raises(asyncio.CancelledError):
            await first
        assert await second == (READY, None)
        assert lock.locked
        lock.release()

    asyncio.run(main())
    assert not lock.locked
    assert lock.waiting == 0


def test_wait_turn_raises_queue_closed() -> None:
    lock = FairLock(STRICT)
    assert lock.acquire(1)

    async def main() -> None:
        waiting = asyncio.ensure_future(wait_turn(lock, 10))
        await asyncio.sleep(0)
        lock.close()
        with pytest.raises(QueueClosed):
            await waiting

    asyncio.run(main())


def test_set_done_completes_a_future_once_and_leaves_a_settled_one_alone() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        set_done(fut)
        set_done(fut)  # done already: no InvalidStateError
        assert fut.result() is None
        cancelled: asyncio.Future[None] = loop.create_future()
        cancelled.cancel()
        set_done(cancelled)
        assert cancelled.cancelled()
        later: asyncio.Future[None] = loop.create_future()
        await asyncio.to_thread(set_done_soon, loop, later)  # from another thread
        await later

    asyncio.run(main())
    closed = asyncio.new_event_loop()
    orphan = closed.create_future()
    closed.close()
    set_done_soon(closed, orphan)  # a closed loop took its waiters with it: no error
    assert not orphan.done()
