"""Ctrl-C never lands inside litegate's bookkeeping.

Python raises ``KeyboardInterrupt`` from its SIGINT handler at whatever
instruction the main thread runs next. Inside litegate that may be between
taking a lock and noting that it is held, or between ``BEGIN`` and the note
that a transaction is open: with Python's own handler called at every step
of one ``db.write()`` (tests/litegate/interrupts.py), 133 of 164 steps left
the Database unable to write again, its gate taken and never given back;
under a storm of real SIGINTs another process's write then timed out too.

The cure is trio's (``trio.lowlevel.enable_ki_protection``): litegate's own
handler looks at the frame the signal interrupted. In litegate's core modules
(``litegate/_*.py``) the interrupt is deferred: the signal is sent to the main
thread again a moment later, until it finds the thread outside them (back in
the caller's code, or in the with-block of a ``db.write()``), where it raises
as Python's own handler would. Waits stay interruptible where the waiting
code was written to leave cleanly (the gate's queues: their waiter leaves its
place and passes on whatever reached it meanwhile); a write that waits for
its group commit's leader finishes (or times out) first.

The handler is installed by :func:`install` (``litegate.connect`` calls it)
only in the main thread and only while SIGINT has Python's default handler:
a program or framework that set its own keeps it (gunicorn's workers,
uvicorn while it serves, ``asyncio.run()`` entered before the connect,
Jupyter's kernel for each cell). ``LITEGATE_DEFER_CTRL_C=0`` leaves
Python's. docs/guarantees.md, "Ctrl-C", says what users see.
"""

from __future__ import annotations

import os
import signal
import sysconfig
import threading
import time
from types import CodeType, FrameType
from typing import Any

# How soon a deferred interrupt is tried again (seconds).
RETRY_S = 0.002

_CORE = os.path.dirname(os.path.realpath(__file__))
_STDLIB = tuple(
    os.path.realpath(p) + os.sep
    for p in {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]}
)

deferred = 0  # interrupts deferred so far (tests read it)

# The retry: a thread of its own sends the signal again. The handler only
# releases ``_kick`` (one C call, no Python lock): starting a thread there
# could wait forever for a lock of ``threading`` that the interrupted
# thread itself holds (a join's bookkeeping, say).
_kick = threading.Lock()
_kick.acquire()
_retrying = False  # (written by the handler, in the main thread, and the retry thread)
_retrier: threading.Thread | None = None


# Leaf waits (their frame is where the signal's handler runs while they
# block) and the callers whose waits may be interrupted: each leaves its
# queue cleanly on any exception (see their ``except BaseException``).
_WAITS: frozenset[CodeType] = frozenset()
_WAITERS: frozenset[CodeType] = frozenset()
# What each code file is: litegate's core, the standard library, or other
# (cached: the handler walks frames and should not ask the filesystem twice).
_CORE_FILE, _STDLIB_FILE, _OTHER_FILE = 0, 1, 2
_kinds: dict[str, int] = {}


def _codes() -> None:
    global _WAITS, _WAITERS
    from . import _fair, _filelock, _futex, _time

    _WAITS = frozenset({_time.acquire_until.__code__, _futex.Word.wait.__code__})
    _WAITERS = frozenset(
        {
            _fair.FairLock.acquire.__code__,
            _fair.HandoffQueue._wait.__code__,
            _filelock.ProcessLock._wait_gate.__code__,
            _filelock.ProcessLock._wait_free.__code__,
        }
    )


def _kind(code: CodeType) -> int:
    """Is this code litegate's core (``litegate/_*.py``), the standard
    library's, or other code?"""
    name = code.co_filename
    kind = _kinds.get(name)
    if kind is None:
        if name.startswith("<"):
            kind = _STDLIB_FILE  # (frozen modules)
        else:
            path = os.path.realpath(name)
            if os.path.dirname(path) == _CORE and os.path.basename(path).startswith("_"):
                kind = _CORE_FILE
            elif path.startswith(_STDLIB) and "site-packages" not in path:
                kind = _STDLIB_FILE
            else:
                kind = _OTHER_FILE
        _kinds[name] = kind
    return kind


def in_core(code: CodeType) -> bool:
    """Is this code litegate's core (``litegate/_*.py``)?"""
    return _kind(code) == _CORE_FILE


def deferring(frame: FrameType | None) -> bool:
    """Would an interrupt of ``frame`` be deferred? The first frame that is
    not the standard library's decides: litegate's core defers, unless it
    waits where waiting may be interrupted; anything else raises."""
    f = frame
    while f is not None:
        code = f.f_code
        kind = _kind(code)
        if kind == _CORE_FILE:
            if code in _WAITS:
                caller = f.f_back
                return caller is None or caller.f_code not in _WAITERS
            return True
        if kind == _OTHER_FILE:
            return False
        f = f.f_back
    return False


def _handler(signum: int, frame: FrameType | None) -> Any:
    global deferred, _retrying
    # (no retry thread: a forked child before its next connect(); then as Python)
    if _retrier is not None and deferring(frame):
        deferred += 1
        if not _retrying:
            _retrying = True
            _kick.release()
        return None
    return signal.default_int_handler(signum, frame)


def _retry_loop(main: int) -> None:
    """Send SIGINT to the main thread RETRY_S after each deferral (a real
    signal, so that a wait in a system call returns to look at it)."""
    global _retrying
    while True:
        _kick.acquire()
        time.sleep(RETRY_S)
        _retrying = False
        signal.pthread_kill(main, signal.SIGINT)


def _start_retrier() -> None:
    global _retrier
    if _retrier is None or not _retrier.is_alive():
        main = threading.main_thread().ident
        assert main is not None
        _retrier = threading.Thread(
            target=_retry_loop, args=(main,), name="litegate-ctrl-c", daemon=True
        )
        _retrier.start()


def _after_fork_in_child() -> None:
    """A forked child has no retry thread (the next ``install`` starts one;
    until then its interrupts land as Python's would)."""
    global _kick, _retrying, _retrier
    _kick = threading.Lock()
    _kick.acquire()
    _retrying = False
    _retrier = None


os.register_at_fork(after_in_child=_after_fork_in_child)


def install() -> bool:
    """Take over SIGINT from Python's default handler (see the module's
    docstring); True if litegate's handler is in place. (Only the main
    thread changes it, so the look and the change need no lock.)"""
    if os.environ.get("LITEGATE_DEFER_CTRL_C", "1") == "0":
        return False
    current = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread():
        return current is _handler
    if current is not _handler and current is not signal.default_int_handler:
        return False
    if not _WAITS:
        _codes()
    _start_retrier()
    if current is not _handler:
        signal.signal(signal.SIGINT, _handler)
    return True
