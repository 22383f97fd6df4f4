"""Callbacks run once when their owner closes: how ``close()`` wakes what
waits outside the owner's own queues (``litegate.queue``'s waiting claims,
which sleep on the queue's waker, not on a litegate line)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable


class CloseHooks:
    """Run each added function once, when :meth:`fire` is called (at once if
    it already was). Thread-safe; no call runs under the lock."""

    __slots__ = ("_fired", "_fns", "_keys", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fns: dict[int, Callable[[], None]] = {}
        self._keys = itertools.count()
        self._fired = False

    def add(self, fn: Callable[[], None]) -> Callable[[], None]:
        """Call ``fn()`` on close; returns a function that takes it back."""
        with self._lock:
            if not self._fired:
                key = next(self._keys)
                self._fns[key] = fn
                return lambda: self._discard(key)
        fn()
        return _nothing

    def _discard(self, key: int) -> None:
        with self._lock:
            self._fns.pop(key, None)

    def fire(self) -> None:
        with self._lock:
            self._fired = True
            fns, self._fns = list(self._fns.values()), {}
        for fn in fns:
            fn()


def _nothing() -> None:
    pass
