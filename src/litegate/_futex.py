"""Linux futexes on a word of a shared file mapping, through ctypes.

The cross-process gate uses one to let its head waiter sleep with a timeout
and be woken by exactly the release that hands the gate to it. A futex
needs no helper thread (the caller's own thread sleeps in the kernel, with
the GIL released by ctypes) and can time out, which an ``F_OFD_SETLKW`` lock
wait cannot. It is not told about deaths; the gate does not need it to be:
mutual exclusion and crash safety stay with the kernel's OFD locks, and a
sleeping head wakes at least every few hundred microseconds to look.

Where futexes are not available (not Linux, an unknown architecture, a
sandbox that refuses the call) :data:`AVAILABLE` is False and the gate
waits in the kernel on its lock through a helper thread instead.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import platform
import sys

_SYS_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98, "i686": 240, "i386": 240}
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _load() -> tuple[object, int] | None:
    if not sys.platform.startswith("linux") or os.environ.get("LITEGATE_NO_FUTEX"):
        return None
    nr = _SYS_FUTEX.get(platform.machine().lower())
    if nr is None:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.syscall
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_long
    return fn, nr


_LOADED = _load()


class Word:
    """One 32-bit word at ``offset`` of a shared mmap, to wait and wake on."""

    __slots__ = ("_addr", "_cell", "_fn", "_nr")

    def __init__(self, table: mmap.mmap, offset: int) -> None:
        assert _LOADED is not None
        self._fn, self._nr = _LOADED
        self._cell = ctypes.c_uint32.from_buffer(table, offset)
        self._addr = ctypes.addressof(self._cell)

    @property
    def value(self) -> int:
        return int(self._cell.value)

    def bump(self) -> None:
        """Change the word (so a waiter that read the old value does not sleep)."""
        self._cell.value = (self._cell.value + 1) & 0xFFFFFFFF

    def wait(self, seen: int, seconds: float) -> None:
        """Sleep while the word still reads ``seen``, at most ``seconds``;
        returns early when woken, when it changed, or on a signal."""
        ts = _Timespec(int(seconds), int((seconds % 1.0) * 1e9))
        self._fn(  # type: ignore[operator]
            self._nr,
            ctypes.c_void_p(self._addr),
            _FUTEX_WAIT,
            ctypes.c_uint32(seen),
            ctypes.byref(ts),
            None,
            0,
        )

    def wake(self, n: int = 1) -> None:
        self._fn(  # type: ignore[operator]
            self._nr, ctypes.c_void_p(self._addr), _FUTEX_WAKE, n, None, None, 0
        )

    def release(self) -> None:
        """Drop the view of the mapping (the mapping cannot close while a
        view exists)."""
        del self._cell


def _probe() -> bool:
    """A futex call that must return at once: EAGAIN (the word is not the
    value we say) proves the call works here."""
    if _LOADED is None:
        return False
    table = mmap.mmap(-1, 4096)
    word = Word(table, 0)
    try:
        fn, nr = _LOADED
        ts = _Timespec(0, 1000)
        ctypes.set_errno(0)
        rc = fn(  # type: ignore[operator]
            nr, ctypes.c_void_p(word._addr), _FUTEX_WAIT, ctypes.c_uint32(1), ctypes.byref(ts),
            None, 0,
        )  # fmt: skip
        return rc == -1 and ctypes.get_errno() == errno.EAGAIN
    finally:
        word.release()
        table.close()


AVAILABLE = _probe()
