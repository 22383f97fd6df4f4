"""A cross-process exclusive lock the kernel releases when its holder dies.

An open-file-description (OFD) ``fcntl`` lock on one byte of a sidecar file
(``<db>-litegate``). OFD locks belong to the open file, not the process, so
two :class:`ProcessLock` objects in one process exclude each other just like
two processes do, and closing an unrelated descriptor never drops them (the
trap of classic POSIX locks). When the holder exits or is SIGKILLed, the
kernel drops the lock and wakes a blocked waiter: nobody sleeps and polls.

``F_OFD_SETLKW`` blocks without a timeout, so the blocking wait runs in a
helper thread (one per lock, started on first contention); the caller waits
for the helper's hand-off on a ``threading.Lock`` with its own deadline. If
the caller gives up, the helper still completes its acquisition and, finding
nobody wanting it, releases at once (or hands it to the next caller of this
process, who joins the pending wait instead of starting another).

Only one thread per :class:`ProcessLock` calls :meth:`acquire` at a time: the
in-process :class:`~litegate._fair.FairLock` in front of it guarantees that.
"""

from __future__ import annotations

import fcntl
import os
import struct
import threading

_LOCK = struct.pack("hhqqixxxx", fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0)
_UNLOCK = struct.pack("hhqqixxxx", fcntl.F_UNLCK, os.SEEK_SET, 0, 1, 0)
_SETLK: int = fcntl.F_OFD_SETLK  # type: ignore[attr-defined,unused-ignore]
_SETLKW: int = fcntl.F_OFD_SETLKW  # type: ignore[attr-defined,unused-ignore]


class ProcessLock:
    def __init__(self, path: str, mode: int = 0o644) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, mode)
        self._mutex = threading.Lock()  # guards the fields below; no I/O under it
        self._held = False
        self._helper: threading.Thread | None = None
        self._helper_busy = False  # helper is (about to be) blocked in F_OFD_SETLKW
        self._granted = False  # helper holds the lock for a caller, not yet taken
        self._wanted = False  # a caller is waiting for the helper's result
        self._work = threading.Lock()
        self._work.acquire()  # released to start one helper acquisition
        self._handoff = threading.Lock()
        self._handoff.acquire()  # released by the helper when it got the lock for a caller
        self._closed = False
        self.contended = 0  # acquisitions that had to block

    def __repr__(self) -> str:
        return f"<ProcessLock {self.path!r} held={self._held} closed={self._closed}>"

    @property
    def held(self) -> bool:
        return self._held

    def _try(self) -> bool:
        try:
            fcntl.fcntl(self._fd, _SETLK, _LOCK)
        except OSError:
            return False
        return True

    def acquire(self, timeout: float | None) -> bool:
        """True once held; False if ``timeout`` seconds passed first."""
        with self._mutex:
            if self._closed:
                raise ValueError("ProcessLock is closed")
            if self._granted:  # an earlier, abandoned wait completed meanwhile
                self._granted = False
                self._held = True
                self._handoff.acquire(blocking=False)
                return True
            if not self._helper_busy:
                if self._try():
                    self._held = True
                    return True
                self._helper_busy = True
                self._start_helper()
                self._work.release()
            self._wanted = True
            self.contended += 1
        if timeout is None:
            got = self._handoff.acquire()
        else:
            got = self._handoff.acquire(timeout=max(0.0, timeout))
        with self._mutex:
            self._wanted = False
            if self._granted:
                self._granted = False
                self._held = True
                if not got:  # the hand-off raced our timeout: consume it
                    self._handoff.acquire(blocking=False)
                return True
            return False

    def _start_helper(self) -> None:
        if self._helper is None:
            self._helper = threading.Thread(
                target=self._helper_loop, name=f"litegate-lock:{self.path}", daemon=True
            )
            self._helper.start()

    def _helper_loop(self) -> None:
        while True:
            self._work.acquire()
            if self._closed:
                return  # close() closed the descriptor itself
            fcntl.fcntl(self._fd, _SETLKW, _LOCK)  # blocks in the kernel, GIL released
            with self._mutex:
                self._helper_busy = False
                if self._closed:
                    unlock = False
                    close = True
                elif self._wanted:
                    self._granted = True
                    self._handoff.release()
                    unlock = close = False
                else:
                    unlock, close = True, False
            if close:
                self._close_fd()  # closing the last descriptor drops the lock
                return
            if unlock:
                fcntl.fcntl(self._fd, _SETLK, _UNLOCK)

    def release(self) -> None:
        with self._mutex:
            if not self._held:
                raise RuntimeError("ProcessLock.release() without acquire()")
            self._held = False
        fcntl.fcntl(self._fd, _SETLK, _UNLOCK)

    def close(self) -> None:
        """Drop the lock if held and close the file. Safe to call twice."""
        with self._mutex:
            if self._closed:
                return
            self._closed = True
            self._held = False
            helper_owns_fd = self._helper_busy
            helper = self._helper
        if helper_owns_fd:
            return  # the blocked helper closes the descriptor when it returns
        self._close_fd()
        if helper is not None:
            self._work.release()  # let the idle helper thread exit

    def _close_fd(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def forget_after_fork(self) -> None:
        """In a forked child: drop our copy of the descriptor without touching
        the lock, which (being an OFD lock) may be the parent's."""
        self._closed = True
        self._held = False
        self._close_fd()
