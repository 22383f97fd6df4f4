"""Fair hand-off between threads: the reader pool and the in-process gate.

:class:`HandoffQueue` hands a bounded set of resources (the reader pool's
connections) to waiters in strict arrival order. :class:`FairLock`, the
in-process half of the write gate, is a mutex with bounded fairness: its
sleepers are granted in arrival order, a running thread may take it while it
is free, and the waiter at the head of the line gets it handed over once it
has been overtaken ``Budget.overtakes`` times or has waited
``Budget.seconds`` (see FairLock).

The guarantee (``fair=True``): resources go to waiters in strict arrival
order. On release the resource is handed straight to the longest waiter (it
never passes through the free list, so nobody can snatch it), and a newcomer
that finds anyone waiting queues behind them even if a resource is free at
that instant. Each waiter sleeps on its own ``threading.Lock``, so waiting
releases the GIL and a release wakes exactly one thread.

``fair=False`` is the plain unfair queue, kept so the lab can measure the
tail it makes against the fair one: a released resource goes back to the
free list, the longest waiter is only notified, and whoever runs first
takes it.

State changes happen under one short mutex that never does I/O; opening a
resource (a connection) happens outside it.

Both lines also serve event-loop tasks without a thread (``enqueue``,
``claim``, ``cancel``); :func:`wait_turn` is the one loop that waits on asyncio
for a place in either, and :func:`set_done` / :func:`set_done_soon` the one way
litegate completes a future another party may have settled already.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

from ._stats import WaitHistogram
from ._time import FOREVER, acquire_until

if TYPE_CHECKING:  # importing asyncio at run time costs every user of the core
    import asyncio

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
        # Reentrant: a resource may come back from a garbage collector's
        # callback (SQLAlchemy returns an abandoned connection so) that runs
        # on a thread already inside this mutex; a plain lock would deadlock.
        self._mutex = threading.RLock()
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

    def take_idle(self) -> T | None:
        """A free resource at once, if there is one and nobody waits (no
        clock, no waiter object): the uncontended path. None: use get()."""
        with self._mutex:
            if self._idle and not self._waiters:  # (close() empties _idle)
                self.histogram.immediate += 1
                return self._idle.pop()
        return None

    def put(self, item: T) -> None:
        """Give a resource back: straight to the longest waiter if any."""
        with self._mutex:
            if not self._waiters and not self._closed:  # the common case
                self._idle.append(item)
                return
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


# FairLock's clock (a test replaces it with a fake one to check the budget
# bookkeeping deterministically).
_now = time.monotonic


class Budget(NamedTuple):
    """How far a head waiter may be overtaken before the lock is handed to it:
    after ``overtakes`` later arrivals took the lock past it, or once it has
    waited ``seconds`` at the head, whichever comes first. ``inf`` in both:
    no bound (``fair=False``); 0 in both: strict FIFO (``fair="strict"``)."""

    overtakes: float
    seconds: float

    def spent(self, overtaken: int, waited: float) -> bool:
        return overtaken >= self.overtakes or waited >= self.seconds

    @property
    def barges(self) -> bool:
        """A caller with this budget may take a free lock past waiters."""
        return self.overtakes > 0


STRICT = Budget(0, 0.0)
UNFAIR = Budget(math.inf, math.inf)
# The defaults of fair=True, chosen by measurement (docs/guarantees.md, "Fair order, with bounds").
BOUNDED = Budget(16, 0.002)


_W_WAITING, _W_WOKEN, _W_GRANTED, _W_CLOSED = range(4)


class _LockWaiter:
    """A caller queued on a FairLock: a thread sleeping on ``wake`` or, with
    ``notify``, an event-loop task that is told and then calls claim()."""

    __slots__ = ("budget", "head_since", "notify", "overtaken", "started", "state", "tag", "wake")

    def __init__(self, budget: Budget, tag: object, notify: Callable[[], None] | None) -> None:
        self.wake = threading.Lock()
        self.wake.acquire()  # released once per signal, by whoever signals
        self.state = _W_WAITING
        self.budget = budget
        self.tag = tag
        self.notify = notify
        self.started = _now()
        self.head_since = self.started
        self.overtaken = 0

    def signal(self) -> None:
        # After the lock's mutex is released: notify() may do I/O.
        if self.notify is None:
            self.wake.release()
        else:
            self.notify()


class FairLock:
    """A mutex with bounded fairness, for threads and event-loop tasks.

    - Sleeping waiters are granted in arrival order.
    - A release makes the lock free and wakes only the head waiter, with at
      most one woken-not-yet-running waiter at a time; a running thread (the
      releaser included) may take a free lock, and a woken head that finds it
      taken again keeps its place at the head.
    - Each head waiter has a :class:`Budget`: once it has been overtaken
      ``overtakes`` times or has waited ``seconds`` at the head, the next
      release hands the lock straight to it (it never becomes free), and
      newcomers queue behind it meanwhile. Barging resumes after that one
      grant: nothing is sticky.

    So a waiter with p waiters ahead of it is overtaken by at most
    ``overtakes * (p + 1)`` later arrivals, and once at the head waits at most
    one budget plus one holder's turn. ``Budget(0, 0)`` is strict FIFO with
    direct hand-off; ``Budget(inf, inf)`` never hands off.

    Each caller may bring its own budget (a waiter keeps the one it came
    with). State changes under one short mutex that never does I/O.
    ``on_vacant`` is called (outside the mutex) whenever the lock is left free
    with nobody queued, e.g. when the last waiter gave up.
    """

    def __init__(
        self,
        budget: Budget = BOUNDED,
        *,
        histogram: WaitHistogram | None = None,
        on_vacant: Callable[[], None] | None = None,
    ) -> None:
        self.budget = budget
        self.histogram = histogram if histogram is not None else WaitHistogram()
        self._on_vacant = on_vacant
        self._mutex = threading.Lock()
        self._held = False
        self._waiters: deque[_LockWaiter] = deque()
        self._woken: _LockWaiter | None = None  # told the lock is free, not yet run
        self._closed = False
        self._on_idle: Callable[[bool], None] | None = None
        self.handoffs = 0  # grants made by a direct hand-off to a head whose budget ran out
        self.barged = 0  # grants taken past at least one waiter
        # Whether the last grant slept in the line (read by its grantee only).
        self.last_queued = False

    # -- introspection -----------------------------------------------------
    @property
    def locked(self) -> bool:
        return self._held

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    @property
    def queue(self) -> FairLock:
        """The lock itself: it offers enqueue/claim/cancel for event loops."""
        return self

    def __repr__(self) -> str:
        return f"<FairLock {'held' if self._held else 'free'} waiting={self.waiting}>"

    # -- the policy, under the mutex ---------------------------------------
    def _may_take(self, budget: Budget, now: float) -> bool:
        """Free lock: may a caller with ``budget`` take it now?"""
        if not self._waiters:
            return True
        head = self._waiters[0]
        return budget.barges and not head.budget.spent(head.overtaken, now - head.head_since)

    def _take(self) -> None:
        self._held = True
        if self._waiters:  # taken past the head: count it against its budget
            self._waiters[0].overtaken += 1
            self.barged += 1

    def _pop_head(self, now: float) -> _LockWaiter:
        w = self._waiters.popleft()
        if self._waiters:
            self._waiters[0].head_since = now
        if self._woken is w:
            self._woken = None
        return w

    def _wake_head(self) -> _LockWaiter | None:
        """The lock is free: wake the head unless a woken waiter is on its way.
        Returns the waiter to signal (after the mutex is released)."""
        if self._held or self._woken is not None or not self._waiters:
            return None
        head = self._waiters[0]
        self._woken = head
        head.state = _W_WOKEN
        return head

    # -- threads -----------------------------------------------------------
    def acquire(
        self, timeout: float | None = None, budget: Budget | None = None, tag: object = None
    ) -> bool:
        """True when acquired; False on timeout. Raises QueueClosed if closed."""
        with self._mutex:
            if not self._held and not self._waiters and not self._closed:  # the common case
                self._held = True
                self.histogram.immediate += 1
                self.last_queued = False
                return True
            if self._closed:
                raise QueueClosed
            b = self.budget if budget is None else budget
            if not self._held and self._may_take(b, _now()):
                self._take()
                self.histogram.record_immediate()
                self.last_queued = False
                return True
            w = _LockWaiter(b, tag, None)
            self._waiters.append(w)
        deadline = math.inf if timeout is None or timeout >= FOREVER else w.started + timeout
        while True:
            try:
                acquire_until(w.wake, deadline)
            except BaseException:  # interrupted: leave cleanly, pass on what reached us
                self.cancel(w)
                raise
            outcome = self._settle(w, deadline)
            if outcome is not None:
                return outcome

    def try_acquire(self) -> bool:
        """Take the lock only if it is free and nobody waits."""
        with self._mutex:
            if self._held or self._waiters or self._closed:
                return False
            self._held = True
            return True

    def _settle(self, w: _LockWaiter, deadline: float) -> bool | None:
        """After a wake-up (or at the deadline): True (ours), False (timed
        out, left the queue), None (keep waiting). Raises QueueClosed."""
        signal = None
        vacant = False
        with self._mutex:
            now = _now()
            state = w.state
            if state == _W_GRANTED:
                self.histogram.record(now - w.started)
                self.last_queued = True
                return True
            if state == _W_CLOSED:
                raise QueueClosed
            if state == _W_WOKEN:
                self._woken = None
                if not self._held:
                    self._pop_head(now)
                    self._held = True
                    self.histogram.record(now - w.started)
                    self.last_queued = True
                    return True
                w.state = _W_WAITING  # lost the race: keep the head of the line
            if now < deadline:
                return None
            signal, vacant = self._leave(w, now)
            self.histogram.record_timeout()
        if signal is not None:
            signal.signal()
        if vacant and self._on_vacant is not None:
            self._on_vacant()
        return False

    def _leave(self, w: _LockWaiter, now: float) -> tuple[_LockWaiter | None, bool]:
        """Take a waiting ``w`` out of the line (under the mutex); returns who
        must be woken instead and whether the lock is left vacant."""
        was_head = self._waiters[0] is w
        self._waiters.remove(w)
        if self._woken is w:
            self._woken = None
        if was_head and self._waiters:
            self._waiters[0].head_since = now
        return self._wake_head(), not self._held and not self._waiters

    def release(self, tell_vacant: bool = True) -> None:
        """Give the lock back: straight to a head whose budget is spent, else
        free, waking the head unless a woken waiter is already on its way.
        ``tell_vacant=False``: the caller knows the lock is left free and
        needs no ``on_vacant`` call for it."""
        with self._mutex:
            if not self._waiters and not self._closed:  # the common case: nobody waits
                self._held = False
                if not tell_vacant:
                    return
                vacant = True
            else:
                vacant = False
        if vacant:
            if self._on_vacant is not None:
                self._on_vacant()
            return
        signal = None
        idle = None
        with self._mutex:
            now = _now()
            head = self._waiters[0] if self._waiters else None
            if head is not None and (
                self._closed is False and head.budget.spent(head.overtaken, now - head.head_since)
            ):
                was = head.state
                self._pop_head(now)
                head.state = _W_GRANTED
                self.handoffs += 1
                signal = head if was == _W_WAITING else None  # a woken one was signalled
            else:
                self._held = False
                signal = self._wake_head()
                vacant = not self._waiters
                if self._closed:
                    idle, self._on_idle = self._on_idle, None
        if signal is not None:
            signal.signal()
        if idle is not None:
            idle(True)
        elif vacant and self._on_vacant is not None:
            self._on_vacant()

    # -- event loops: wait without a thread -----------------------------------
    def enqueue(
        self, notify: Callable[[], None], budget: Budget | None = None, tag: object = None
    ) -> tuple[int, None, _LockWaiter | None]:
        """An acquire() that never blocks: ``(READY, None, None)`` (acquired)
        or ``(QUEUED, None, waiter)``: ``notify()`` will be called from some
        thread when there is news; then call :meth:`claim`."""
        b = self.budget if budget is None else budget
        with self._mutex:
            if self._closed:
                raise QueueClosed
            if not self._held and self._may_take(b, _now()):
                self._take()
                self.histogram.record_immediate()
                self.last_queued = False
                return READY, None, None
            w = _LockWaiter(b, tag, notify)
            self._waiters.append(w)
            return QUEUED, None, w

    def claim(self, waiter: _LockWaiter) -> tuple[int, None]:
        """After a notify(): ``(READY, None)`` if the lock is now the caller's,
        ``(QUEUED, None)`` to go on waiting. Raises QueueClosed."""
        done = self._settle(waiter, math.inf)
        return (READY, None) if done else (QUEUED, None)

    def cancel(self, waiter: _LockWaiter) -> None:
        """A waiter gives up: leave the line, or give back what reached it."""
        signal = None
        vacant = False
        with self._mutex:
            state = waiter.state
            if state in (_W_WAITING, _W_WOKEN) and waiter in self._waiters:
                signal, vacant = self._leave(waiter, _now())
        if state == _W_GRANTED:
            self.release()
            return
        if signal is not None:
            signal.signal()
        if vacant and self._on_vacant is not None:
            self._on_vacant()

    # -- closing -------------------------------------------------------------
    def close_waiters(self, tag: object) -> None:
        """Wake the waiters queued with ``tag`` with QueueClosed (a Database
        closing while its callers wait); the others keep their places."""
        signals = []
        vacant = False
        with self._mutex:
            now = _now()
            for w in [w for w in self._waiters if w.tag is tag]:
                signal, vacant = self._leave(w, now)
                w.state = _W_CLOSED
                signals.append(w)
                if signal is not None:
                    signals.append(signal)
        for w in signals:
            w.signal()
        if vacant and self._on_vacant is not None:
            self._on_vacant()

    def close(self, on_idle: Callable[[bool], None] | None = None) -> None:
        """Refuse new callers and wake every waiter with QueueClosed;
        ``on_idle`` runs once the lock is free (now, or at its release)."""
        with self._mutex:
            if self._closed:
                return
            self._closed = True
            self._on_idle = on_idle
            waiters = list(self._waiters)
            self._waiters.clear()
            self._woken = None
            for w in waiters:
                w.state = _W_CLOSED
            idle_now = not self._held
        for w in waiters:
            w.signal()
        if idle_now and on_idle is not None:
            on_idle(True)


# -- event loops -----------------------------------------------------------------


def set_done(fut: asyncio.Future[None]) -> None:
    """Complete ``fut`` unless it is done already: a waiter that timed out or
    was cancelled has settled its own future, and setting it again raises."""
    if not fut.done():
        fut.set_result(None)


def call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: Any) -> None:
    """``loop.call_soon_threadsafe(fn, *args)`` from any thread, tolerating a
    loop that has closed meanwhile (its waiters are gone with it)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(fn, *args)


def set_done_soon(loop: asyncio.AbstractEventLoop, fut: asyncio.Future[None]) -> None:
    """:func:`set_done` from any thread, on ``fut``'s loop."""
    call_soon(loop, set_done, fut)


async def wait_turn(
    line: HandoffQueue[Any] | FairLock, timeout: float | None, *how: Any
) -> tuple[int, Any]:
    """Wait for a place in ``line`` on the running event loop, without a
    thread: ``(READY, item)`` (a FairLock's item is None), or ``(CREATE,
    None)``: capacity is reserved, call ``line.create()`` (on a thread: it
    opens a connection). ``how``: what a FairLock waiter brings (budget, tag).
    ``timeout`` None or from :data:`FOREVER` up: no limit.

    A task cancelled or timed out leaves the line, passing on whatever
    reached it meanwhile, so whoever is behind it moves up. Raises
    :class:`QueueTimeout` or :class:`QueueClosed`."""
    import asyncio

    loop = asyncio.get_running_loop()
    woken: list[asyncio.Future[None]] = [loop.create_future()]

    def notify() -> None:  # any thread; a FairLock waiter may be told more than once
        set_done_soon(loop, woken[0])

    q: Any = line  # each line takes back its own kind of waiter
    status, item, waiter = q.enqueue(notify, *how)
    if status != QUEUED:
        return status, item
    deadline = None if timeout is None or timeout >= FOREVER else loop.time() + timeout
    while True:
        left = None if deadline is None else max(0.0, deadline - loop.time())
        try:
            await asyncio.wait_for(woken[0], left)
        except asyncio.TimeoutError:
            q.cancel(waiter)
            raise QueueTimeout from None
        except BaseException:  # cancelled: leave the line
            q.cancel(waiter)
            raise
        woken[0] = loop.create_future()
        status, item = q.claim(waiter)
        if status != QUEUED:
            return status, item
