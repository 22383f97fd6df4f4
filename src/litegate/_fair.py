"""Fair hand-off of a bounded set of resources between threads.

One primitive serves every lock-like thing in litegate: the in-process write
gate is a :class:`HandoffQueue` of capacity one, the reader pool one of
capacity ``readers``.

The guarantee (``fair=True``): resources go to waiters in strict arrival
order. On release the resource is handed straight to the longest waiter (it
never passes through the free list, so nobody can snatch it), and a newcomer
that finds anyone waiting queues behind them even if a resource is free at
that instant. Each waiter sleeps on its own ``threading.Lock``, so waiting
releases the GIL and a release wakes exactly one thread.

``fair=False`` reproduces the "unfair" queue of seed 001 for the lab: a
released resource goes back to the free list, the longest waiter is only
notified, and whoever runs first takes it.

State changes happen under one short mutex that never does I/O; opening a
resource (a connection) happens outside it.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from ._stats import WaitHistogram
from ._time import FOREVER, acquire_until

T = TypeVar("T")

_WAITING, _GRANTED, _CREATE, _NOTIFIED, _CLOSED = range(5)


class _Waiter:
    """A queued caller: a thread sleeping on ``wake``, or (``notify`` given) an
    event-loop task that is told through ``notify`` and then calls claim()."""

    __slots__ = ("item", "notify", "started", "state", "wake")

    def __init__(self, notify: Callable[[], None] | None = None) -> None:
        self.wake = threading.Lock()
        self.wake.acquire()  # released exactly once, by whoever wakes us
        self.state = _WAITING
        self.item: object = None
        self.notify = notify
        self.started = time.monotonic()

    def signal(self) -> None:
        # Called after the queue's mutex is released: notify() may do I/O
        # (asyncio's call_soon_threadsafe writes to the loop's self-pipe).
        if self.notify is None:
            self.wake.release()
        else:
            self.notify()


READY, CREATE, QUEUED = range(3)


class QueueTimeout(Exception):
    """Internal: the wait passed its deadline (callers raise their own type)."""


class QueueClosed(Exception):
    """Internal: the queue was closed (callers raise litegate.Closed)."""


class HandoffQueue(Generic[T]):
    """At most ``capacity`` resources, created lazily by ``factory``, handed
    out in arrival order."""

    def __init__(
        self,
        capacity: int,
        factory: Callable[[], T],
        *,
        fair: bool = True,
        histogram: WaitHistogram | None = None,
    ) -> None:
        self._capacity = capacity
        self._factory = factory
        self._fair = fair
        self._mutex = threading.Lock()
        self._idle: list[T] = []  # LIFO: the warmest connection is reused first
        self._waiters: deque[_Waiter] = deque()
        self._created = 0
        self._closed = False
        self._on_discard: Callable[[T], None] | None = None
        self.histogram = histogram if histogram is not None else WaitHistogram()

    # -- introspection -------------------------------------------------
    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def created(self) -> int:
        return self._created

    @property
    def in_use(self) -> int:
        return self._created - len(self._idle)

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    @property
    def fair(self) -> bool:
        return self._fair

    def idle_snapshot(self) -> list[T]:
        """The free resources, read without the mutex: only for a forked child,
        where the thread that may have held the mutex no longer exists."""
        return list(self._idle)

    def __repr__(self) -> str:
        return (
            f"<HandoffQueue in_use={self.in_use}/{self._capacity} "
            f"waiting={self.waiting} fair={self._fair}>"
        )

    # -- acquire / release ---------------------------------------------
    def get(self, timeout: float | None) -> T:
        """Take a resource, waiting at most ``timeout`` seconds (None: forever).

        Raises :class:`QueueTimeout` or :class:`QueueClosed`.
        """
        with self._mutex:
            if self._closed:
                raise QueueClosed
            if self._idle and (not self._fair or not self._waiters):
                self.histogram.record_immediate()
                return self._idle.pop()
            if self._created < self._capacity and (not self._fair or not self._waiters):
                self._created += 1
                create_now = True
            else:
                create_now = False
                waiter = _Waiter()
                self._waiters.append(waiter)
        if create_now:
            self.histogram.record_immediate()
            return self._create()
        return self._wait(waiter, timeout)

    def _create(self) -> T:
        try:
            return self._factory()
        except BaseException:
            self._pass_capacity()
            raise

    def _pass_capacity(self) -> None:
        """Capacity we reserved is free again: let the longest waiter try to
        open a resource itself rather than wait for a release that may never
        come."""
        woken = None
        with self._mutex:
            self._created -= 1
            if self._waiters and not self._closed:
                self._created += 1
                woken = self._waiters.popleft()
                woken.state = _CREATE
        if woken is not None:
            woken.signal()

    def _wait(self, waiter: _Waiter, timeout: float | None) -> T:
        start = time.monotonic()
        deadline = math.inf if timeout is None or timeout >= FOREVER else start + timeout
        while True:
            try:
                acquire_until(waiter.wake, deadline)
            except BaseException:
                # Interrupted (KeyboardInterrupt): leave the queue cleanly; if
                # a resource reached us meanwhile, pass it on.
                self._abandon(waiter)
                raise
            with self._mutex:
                state = waiter.state
                if state == _GRANTED:
                    self.histogram.record(time.monotonic() - start)
                    return waiter.item  # type: ignore[return-value]
                if state == _CLOSED:
                    raise QueueClosed
                if state == _NOTIFIED:  # unfair mode: race for the free list
                    if self._idle:
                        self.histogram.record(time.monotonic() - start)
                        return self._idle.pop()
                    waiter.wake.acquire(blocking=False)
                    waiter.state = _WAITING
                    self._waiters.append(waiter)  # lost the race: back of the line
                    continue
                if state == _WAITING:
                    if time.monotonic() >= deadline:
                        self._waiters.remove(waiter)
                        self.histogram.record_timeout()
                        raise QueueTimeout
                    continue
                # _CREATE: capacity was handed to us to open a resource.
            self.histogram.record(time.monotonic() - start)
            return self._create()

    def _abandon(self, waiter: _Waiter) -> None:
        with self._mutex:
            if waiter.state == _WAITING:
                self._waiters.remove(waiter)
                return
            state, item = waiter.state, waiter.item
        if state == _GRANTED:
            self.put(item)  # type: ignore[arg-type]
        elif state == _CREATE:
            self._pass_capacity()
        elif state == _NOTIFIED:
            # unfair mode: we were told a resource is free; tell the next one
            woken = None
            with self._mutex:
                if self._idle and self._waiters:
                    woken = self._waiters.popleft()
                    woken.state = _NOTIFIED
            if woken is not None:
                woken.signal()

    # -- for event loops: wait without a thread ------------------------------
    def enqueue(self, notify: Callable[[], None]) -> tuple[int, T | None, _Waiter | None]:
        """A get() that never blocks. Returns ``(READY, item, None)``,
        ``(CREATE, None, None)`` (capacity reserved: call :meth:`create`), or
        ``(QUEUED, None, waiter)``: ``notify()`` will be called from some
        thread once the waiter has an outcome; then call :meth:`claim`."""
        with self._mutex:
            if self._closed:
                raise QueueClosed
            if self._idle and (not self._fair or not self._waiters):
                self.histogram.record_immediate()
                return READY, self._idle.pop(), None
            if self._created < self._capacity and (not self._fair or not self._waiters):
                self._created += 1
                self.histogram.record_immediate()
                return CREATE, None, None
            waiter = _Waiter(notify)
            self._waiters.append(waiter)
            return QUEUED, None, waiter

    def claim(self, waiter: _Waiter) -> tuple[int, T | None]:
        """The outcome of an enqueued wait, after its notify(): ``(READY,
        item)``, ``(CREATE, None)``, or ``(QUEUED, None)`` if it must go on
        waiting (unfair mode lost a race). Raises QueueClosed."""
        with self._mutex:
            state = waiter.state
            if state == _CLOSED:
                raise QueueClosed
            if state == _NOTIFIED:
                if not self._idle:
                    waiter.state = _WAITING
                    self._waiters.append(waiter)
                    return QUEUED, None
                item = self._idle.pop()
            elif state == _GRANTED:
                item = waiter.item  # type: ignore[assignment]
            elif state == _CREATE:
                item = None
            else:
                return QUEUED, None
            self.histogram.record(time.monotonic() - waiter.started)
        return (CREATE, None) if state == _CREATE else (READY, item)

    def create(self) -> T:
        """Open a resource for capacity reserved by enqueue()/claim()."""
        return self._create()

    def put(self, item: T) -> None:
        """Give a resource back: straight to the longest waiter if any."""
        with self._mutex:
            if self._closed:
                self._created -= 1
                woken = None
            elif self._waiters:
                woken = self._waiters.popleft()
                if self._fair:
                    woken.item = item
                    woken.state = _GRANTED
                else:
                    self._idle.append(item)
                    woken.state = _NOTIFIED
            else:
                self._idle.append(item)
                return
        if woken is None:
            self._discard(item)  # closed meanwhile
        else:
            woken.signal()

    def cancel(self, waiter: _Waiter) -> None:
        """An enqueued waiter gives up: leave the queue, or pass on whatever
        reached it meanwhile."""
        self._abandon(waiter)

    def discard(self, item: T) -> None:
        """Drop a broken resource; its capacity goes to the longest waiter."""
        self._pass_capacity()
        self._discard(item)

    def _discard(self, item: T) -> None:
        if self._on_discard is not None:
            self._on_discard(item)

    def close(self, on_idle: Callable[[T], None] | None = None) -> None:
        """Refuse new callers, wake every waiter with :class:`QueueClosed`, and
        hand each idle resource to ``on_idle``. Resources out on loan are passed
        to ``on_idle`` when they come back. Safe to call twice."""
        with self._mutex:
            if self._closed:
                return
            self._closed = True
            if on_idle is not None:
                self._on_discard = on_idle
            waiters = list(self._waiters)
            self._waiters.clear()
            idle, self._idle = self._idle, []
            self._created -= len(idle)
            for w in waiters:
                w.state = _CLOSED
        for w in waiters:
            w.signal()
        for item in idle:
            self._discard(item)


class FairLock:
    """A mutex with the :class:`HandoffQueue` guarantee: strict FIFO,
    direct hand-off, no barging."""

    def __init__(self, *, fair: bool = True, histogram: WaitHistogram | None = None) -> None:
        self._q: HandoffQueue[bool] = HandoffQueue(1, lambda: True, fair=fair, histogram=histogram)
        # Create the single token now so close() always finds it (idle or on loan).
        self._q.put(self._q.get(0))
        self._q.histogram.immediate = 0

    def acquire(self, timeout: float | None = None) -> bool:
        """True when acquired; False on timeout. Raises QueueClosed if closed."""
        try:
            self._q.get(timeout)
        except QueueTimeout:
            return False
        return True

    def release(self) -> None:
        self._q.put(True)

    def close(self, on_idle: Callable[[bool], None] | None = None) -> None:
        """Wake every waiter with QueueClosed; ``on_idle`` runs once the lock
        is free (now, or when its holder releases it)."""
        self._q.close(on_idle)

    @property
    def locked(self) -> bool:
        return self._q.in_use > 0

    @property
    def waiting(self) -> int:
        return self._q.waiting

    @property
    def histogram(self) -> WaitHistogram:
        return self._q.histogram

    @property
    def queue(self) -> HandoffQueue[bool]:
        """The underlying queue (the asyncio front waits on it without a thread)."""
        return self._q

    def __repr__(self) -> str:
        return f"<FairLock {'held' if self.locked else 'free'} waiting={self.waiting}>"
