"""The worker runner: :class:`Worker` calls a function for every job of a queue.

One process, several threads:

- the **claimer** claims as many jobs as there are free slots (``concurrency``
  running plus ``prefetch`` waiting) in one ``q.claim(n=...)``; with nothing
  to do it blocks in ``claim(wait=idle_wait)``, so an idle worker does not spin;
- ``concurrency`` **executor** threads call the handler, one job each. A job
  whose handler returns is to be acked; one whose handler raises is to be
  failed (retry with back-off, dead after ``max_attempts``);
- finished jobs are settled in batches, River's batch completer: the next
  claim carries them (``q.finish_and_claim``: the acks, the failures and the
  claim in one transaction, one turn of the write gate), and the **acker**
  settles what no claim took within ``ack_delay`` seconds, or as soon as
  ``ack_batch`` jobs wait;
- the **heartbeat** extends the lease of every job the worker holds (waiting,
  running or finished but not yet acked) every ``heartbeat`` seconds
  (``lease / 3`` by default), so a long job is never handed to another worker;
- the thread that called :meth:`Worker.run` watches for :meth:`Worker.stop`
  and runs the shutdown.

``async def`` handlers run on one asyncio event loop in a thread of its own;
the executors wait for their coroutines, so ``concurrency`` still bounds how
many run at once.

Shutdown (:meth:`Worker.stop`): stop claiming, give back the jobs that were
claimed but not started (``q.release``: their attempt is not counted), let
running jobs finish for up to ``grace`` seconds, ack what finished. Jobs still
running after the grace period are abandoned: their leases expire and another
worker runs them again.
"""

from __future__ import annotations

import concurrent.futures
import functools
import importlib
import inspect
import logging
import os
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from .._database import Database
from .._errors import ConfigError
from ._core import Also, Finished, Job, _lease, _seconds, _whole
from ._errors import LeaseLost, QueueError
from ._queue import Queue

log = logging.getLogger("litegate.worker")

F = TypeVar("F", bound=Callable[..., Any])

# How often the thread in run() looks for a stop request. stop() must be safe
# to call from a signal handler, so it only stores a deadline (no lock, no
# Event.set(), which takes a lock the interrupted thread may hold) and the
# controller polls for it.
_TICK = 0.05
# The most jobs acked in one transaction.
# last_error keeps at most this many characters of the traceback.
_MAX_ERROR = 8000
# A worker's threads and the jobs it claims ahead are bounded: the executor
# threads are made up front, so a mistyped 99999999 would allocate gigabytes
# before the first job (more work wants more processes, not more threads).
MAX_CONCURRENCY = 4096
MAX_PREFETCH = 100_000

# What the worker is doing with a job it holds.
_PENDING = "pending"  # claimed, waiting for an executor
_RUNNING = "running"  # the handler is running
_DONE = "done"  # the handler returned; waiting for the acker
_FINISHING = "finishing"  # being acked, failed or released: no longer extended
_LOST = "lost"  # the lease was lost; the result will not be acked


class HandlerError(QueueError):
    """The worker's handler cannot be used: ``module:function`` does not
    import, names nothing, or names something that is not callable. The
    message says which, and what to do."""


def pass_job(fn: F) -> F:
    """Decorator: the worker calls ``fn(job)`` with the :class:`Job` (id,
    payload, attempt, max_attempts, ...) instead of ``fn(payload)``.

    ```python
    @litegate.queue.pass_job
    def send(job):
        if job.last_attempt: ...
    ```

    Same as ``Worker(..., pass_job=True)`` or ``litegate worker --pass-job``.
    """
    fn.pass_job = True  # type: ignore[attr-defined]
    return fn


def load_handler(spec: str) -> Callable[..., Any]:
    """Import ``"package.module:function"`` (the part after the colon may be
    dotted: ``module:Class.method``) and return the callable.

    :class:`HandlerError` says what is wrong and what to do.
    """
    if not isinstance(spec, str):
        raise HandlerError(
            f"the handler must be a callable or a 'module:function' string, got {spec!r}"
        )
    module_name, sep, attr = spec.partition(":")
    module_name, attr = module_name.strip(), attr.strip()
    if not sep or not module_name or not attr:
        raise HandlerError(
            f"handler {spec!r} is not of the form module:function; write the module's import "
            "path, a colon and the function's name, e.g. myapp.tasks:send_email"
        )
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            raise HandlerError(
                f"cannot import module {module_name!r} of handler {spec!r}: no module named "
                f"{missing!r}. Check the spelling, and run the worker from the directory that "
                "holds the package (or add it to PYTHONPATH); the current directory is "
                f"{os.getcwd()}"
            ) from exc
        raise HandlerError(
            f"importing module {module_name!r} of handler {spec!r} failed: it imports "
            f"{missing!r}, which is not installed. Install it (in this environment: "
            f"{sys.executable}) or fix the import"
        ) from exc
    except Exception as exc:
        raise HandlerError(
            f"importing module {module_name!r} of handler {spec!r} raised "
            f"{type(exc).__name__}: {exc}. Fix the module; `python -c 'import {module_name}'` "
            "shows the traceback"
        ) from exc
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            functions = sorted(
                name
                for name, value in vars(module).items()
                if not name.startswith("_")
                and inspect.isfunction(value)
                and value.__module__ == module.__name__
            )
            hint = f" Its functions: {', '.join(functions[:20])}." if functions else ""
            raise HandlerError(
                f"module {module_name!r} has no attribute {attr!r} (handler {spec!r}).{hint} "
                "Name a function defined in that module: module:function"
            ) from None
    if not callable(obj):
        raise HandlerError(
            f"handler {spec!r} is a {type(obj).__name__}, not a function: name a function "
            "(def or async def) that takes the job's payload"
        )
    handler: Callable[..., Any] = obj
    return handler


def format_error(exc: BaseException) -> str:
    """What a failed job stores as ``last_error``: ``"Type: message"`` on the
    first line, then the traceback from the handler's frame on (the worker's
    own frames left out; at most the last ``_MAX_ERROR`` characters)."""
    name = type(exc).__qualname__
    module = type(exc).__module__
    if module not in ("builtins", "__main__"):
        name = f"{module}.{name}"
    head = f"{name}: {exc}" if str(exc) else name
    frames = exc.__traceback__
    while (
        frames is not None
        and frames.tb_next is not None
        and frames.tb_frame.f_code.co_filename in _PLUMBING
    ):
        frames = frames.tb_next
    tb = "".join(traceback.format_exception(type(exc), exc, frames))
    if len(tb) > _MAX_ERROR:
        tb = "...\n" + tb[-_MAX_ERROR:]
    return f"{head}\n\n{tb.rstrip()}"


# Files whose frames lead into the handler: this one, and concurrent.futures
# (an async handler's exception comes back through Future.result()).
_PLUMBING = frozenset({__file__, concurrent.futures._base.__file__})


def _summary(exc: BaseException) -> str:
    return format_error(exc).split("\n", 1)[0]


def _pass_values(
    on_ack: Callable[[Any, list[tuple[Job, Any]]], None],
    batch: list[_Held],
    conn: Any,
    acked: list[int],
) -> None:
    ids = set(acked)
    on_ack(conn, [(h.job, h.value) for h in batch if h.job.id in ids])


class _Held:
    """A job this worker holds, and what it is doing with it."""

    __slots__ = ("error", "job", "state", "value")

    def __init__(self, job: Job) -> None:
        self.job = job
        self.state = _PENDING
        self.value: Any = None  # what the handler returned
        # Why the handler failed (then the job is failed, not acked), with the
        # exception's summary for the log.
        self.error: tuple[str, str] | None = None


_COUNTERS = (
    "processed",  # handler calls that returned or raised
    "acked",  # acks committed
    "failed",  # failures committed (retried later, or dead)
    "dead",  # ... of which went to the dead letters
    "released",  # claimed but not started, given back
    "lease_lost",  # jobs found no longer ours (by extend, ack, fail or release)
    "errors",  # database errors while claiming, acking, extending (logged)
)


class Worker:
    """Run ``handler`` for every job of a queue, on ``concurrency`` threads.

    ```python
    from litegate.queue import Worker

    def send(payload): ...          # return: ack; raise: fail and retry

    Worker("app.db", send, name="emails", concurrency=8).run()   # until stop()
    ```

    - ``queue``: a :class:`Queue`, or a :class:`litegate.Database` or path
      (then the worker opens ``Queue(queue, name, retry_base=..., retry_max=...)``
      and closes it when it stops).
    - ``handler``: called with the job's payload, or with the :class:`Job`
      if ``pass_job=True`` or the function is decorated with :func:`pass_job`.
      Returning acks the job; raising fails it (retried after a back-off,
      dead after ``max_attempts``, the exception kept in ``last_error``). An
      ``async def`` handler runs on an asyncio loop in a thread of its own. A
      ``"module:function"`` string is imported (:func:`load_handler`).
    - ``concurrency``: jobs run at once (threads). ``prefetch``: jobs claimed
      ahead of free threads (they are released, uncounted, on stop).
    - ``lease``: seconds each claim leases a job for; the heartbeat extends
      it every ``heartbeat`` seconds (default ``lease / 3``) while the worker
      holds the job.
    - ``grace``: default seconds :meth:`stop` lets running jobs finish.
    - ``burst``: stop by itself once the queue has nothing left to run (no job
      ready, scheduled or leased).
    - ``idle_wait``: an idle claimer blocks this long per ``claim(wait=...)``;
      it is also how long a stop may wait for a claim in flight.
    - ``ack_delay``, ``ack_batch``: finished jobs (acks and failures) are
      settled in one transaction with the next claim, or by the acker after
      ``ack_delay`` seconds (10 ms) or once ``ack_batch`` (100) wait. A
      SIGKILL loses at most these unsettled results: those jobs run again
      once their leases expire, as any job a dead worker held.
    - ``on_claim(conn, job_ids)`` and ``on_ack(conn, [(job, value), ...])``:
      SQL of yours run inside the claim's and the ack's transactions (what
      the handler returned is ``value``): records that must change exactly
      when the job does, such as a result table. The gate is held while
      they run; if one raises, that claim or ack is rolled back and retried.
      ``on_release(conn, job_ids)`` runs inside the release of jobs claimed
      but never started (at stop): undo there what ``on_claim`` recorded.
    - ``failed(value)``: for a handler that reports a failure by what it
      returns rather than by raising (its ``on_ack`` records the outcome):
      True counts that acked job as "failed" in :meth:`stats`, not "acked".

    Thread-safe: :meth:`stop` and :meth:`stats` may be called from any thread,
    and :meth:`stop` from a signal handler.
    """

    def __init__(
        self,
        queue: Queue | Database | str | os.PathLike[str],
        handler: Callable[..., Any] | str,
        *,
        name: str = "default",
        concurrency: int = 1,
        prefetch: int = 0,
        lease: float = 30.0,
        heartbeat: float | None = None,
        grace: float = 30.0,
        pass_job: bool | None = None,
        burst: bool = False,
        idle_wait: float = 0.5,
        ack_delay: float = 0.010,
        ack_batch: int = 100,
        retry_base: float | None = None,
        retry_max: float | None = None,
        on_claim: Also | None = None,
        on_ack: Callable[[Any, list[tuple[Job, Any]]], None] | None = None,
        on_release: Also | None = None,
        failed: Callable[[Any], bool] | None = None,
    ) -> None:
        if isinstance(handler, str):
            handler = load_handler(handler)
        if not callable(handler):
            raise HandlerError(
                f"the handler must be callable (a function taking the payload), got {handler!r}"
            )
        self._handler = handler
        self._pass_job = (
            getattr(handler, "pass_job", False) is True if pass_job is None else bool(pass_job)
        )
        self._concurrency = _whole("concurrency", concurrency, minimum=1)
        if self._concurrency > MAX_CONCURRENCY:
            raise ConfigError(
                f"concurrency must be at most {MAX_CONCURRENCY} threads, got {concurrency!r}; "
                "for more jobs at once, run more worker processes (--processes)"
            )
        self._prefetch = _whole("prefetch", prefetch, minimum=0)
        if self._prefetch > MAX_PREFETCH:
            raise ConfigError(
                f"prefetch must be at most {MAX_PREFETCH} jobs, got {prefetch!r}; a worker "
                "claims that many ahead of its threads, which only takes them from other workers"
            )
        self._lease = _lease(lease)
        self._heartbeat = (
            self._lease / 3
            if heartbeat is None
            else _seconds("heartbeat", heartbeat, zero_ok=False)
        )
        if self._heartbeat >= self._lease:
            raise ConfigError(
                f"heartbeat ({heartbeat!r} s) must be shorter than lease ({lease!r} s), or the "
                "lease runs out between beats; leave it unset for lease / 3"
            )
        self._grace = _seconds("grace", grace, zero_ok=True)
        self._burst = bool(burst)
        self._idle_wait = _seconds("idle_wait", idle_wait, zero_ok=False)
        self._ack_delay = _seconds("ack_delay", ack_delay, zero_ok=True)
        self._ack_batch = _whole("ack_batch", ack_batch, minimum=1)
        self._on_claim = on_claim
        self._on_ack = on_ack
        self._on_release = on_release
        # None: every acked value is a success
        self._failure: Callable[[Any], bool] | None = failed

        if isinstance(queue, Queue):
            if retry_base is not None or retry_max is not None:
                raise ConfigError(
                    "retry_base / retry_max configure a queue the worker opens; with a Queue "
                    "object, pass them to Queue(...) instead"
                )
            self._queue, self._owns_queue = queue, False
        else:
            kwargs: dict[str, float] = {}
            if retry_base is not None:
                kwargs["retry_base"] = retry_base
            if retry_max is not None:
                kwargs["retry_max"] = retry_max
            self._queue, self._owns_queue = Queue(queue, name, **kwargs), True

        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # slots and pending jobs changed
        self._ack_cond = threading.Condition(self._lock)  # finished jobs to ack
        self._held: set[_Held] = set()
        self._pending: deque[_Held] = deque()
        self._done: deque[_Held] = deque()
        self._running = 0
        self._stopping = False  # no more claims, no new jobs started
        self._exiting = False  # run() is returning: threads finish up
        self._counters = dict.fromkeys(_COUNTERS, 0)
        self._abandoned = 0
        self._started: float | None = None
        self._ended: float | None = None
        self._ran = False
        # stop(): a monotonic deadline for running jobs (None: not asked to).
        self._stop_deadline: float | None = None
        self._wake = threading.Event()
        self._hb_stop = threading.Event()
        self._stop_event = threading.Event()  # set when stopping begins
        self._claimer: threading.Thread | None = None
        self._loop_lock = threading.Lock()
        self._loop: Any = None  # asyncio loop for async handlers, started on first need
        self._loop_thread: threading.Thread | None = None
        # Called by run()'s thread every tick (the CLI's child processes use it).
        self._on_tick: Callable[[Worker], None] | None = None

    @property
    def queue(self) -> Queue:
        return self._queue

    def __repr__(self) -> str:
        s = self.stats()
        return (
            f"<litegate.queue.Worker queue={self._queue.name!r} concurrency={self._concurrency} "
            f"running={s['running']} processed={s['processed']} acked={s['acked']} "
            f"failed={s['failed']}>"
        )

    # -- the public face --------------------------------------------------------
    def run(self) -> dict[str, Any]:
        """Work until :meth:`stop` is called (or, with ``burst=True``, until the
        queue is empty); return :meth:`stats`. A Worker runs once."""
        with self._lock:
            if self._ran:
                raise QueueError("this Worker has already run; create a new one")
            self._ran = True
        self._started = time.monotonic()
        threads = [
            threading.Thread(target=self._execute, name=f"litegate-worker-{k}", daemon=True)
            for k in range(self._concurrency)
        ]
        acker = threading.Thread(target=self._ack_loop, name="litegate-worker-ack", daemon=True)
        heart = threading.Thread(
            target=self._heartbeat_loop, name="litegate-worker-heartbeat", daemon=True
        )
        self._claimer = threading.Thread(
            target=self._claim_loop, name="litegate-worker-claim", daemon=True
        )
        log.info(
            "worker started: queue %r in %s, concurrency %d, lease %g s, heartbeat %.3g s",
            self._queue.name,
            self._queue.db.path,
            self._concurrency,
            self._lease,
            self._heartbeat,
        )
        for t in (*threads, acker, heart, self._claimer):
            t.start()
        forced = False
        try:
            forced = self._control()
        finally:
            self._shutdown(acker, heart, forced)
        return self.stats()

    def stop(self, grace: float | None = None) -> None:
        """Stop claiming; release the jobs claimed but not started; let running
        jobs finish for up to ``grace`` seconds (default: the worker's); ack
        what finished. :meth:`run` then returns. ``grace=0`` stops at once:
        running jobs are abandoned and come back when their leases expire.

        Safe to call from any thread and from a signal handler, before or
        during :meth:`run`, and more than once (the earliest deadline wins).
        """
        g = self._grace if grace is None else _seconds("grace", grace, zero_ok=True)
        deadline = time.monotonic() + g
        current = self._stop_deadline
        if current is None or deadline < current:
            self._stop_deadline = deadline
        if threading.current_thread() is not threading.main_thread():
            self._wake.set()  # not in a signal handler: wake run() now

    def stats(self) -> dict[str, Any]:
        """Counters of this worker: ``processed`` (handler calls that returned
        or raised), ``acked``, ``failed`` (of which ``dead``), ``released``,
        ``lease_lost``, ``errors`` (database errors, logged and retried),
        ``abandoned`` (still running when the grace period ended), ``running``
        and ``pending`` now, ``runtime`` (s) and ``jobs_per_s`` (processed per
        second of runtime)."""
        with self._lock:
            out: dict[str, Any] = {"queue": self._queue.name, **self._counters}
            out["abandoned"] = self._abandoned
            out["running"] = self._running
            out["pending"] = len(self._pending)
        end = self._ended if self._ended is not None else time.monotonic()
        runtime = 0.0 if self._started is None else max(0.0, end - self._started)
        out["runtime"] = round(runtime, 3)
        out["jobs_per_s"] = round(out["processed"] / runtime, 1) if runtime > 0 else 0.0
        return out

    # -- control and shutdown ---------------------------------------------------
    def _control(self) -> bool:
        """Wait for a stop request, then for the running jobs; return True if
        jobs were abandoned. Ctrl-C (KeyboardInterrupt) in this thread asks
        for a stop; a second one for a stop at once."""
        stopping = False
        interrupts = 0
        while True:
            try:
                # Sleep, not Event.wait(): a Ctrl-C (KeyboardInterrupt) can land
                # anywhere in this thread, and threading's Condition is not
                # safe against that; time.sleep keeps no state. stop() from
                # another thread sets _wake, seen within one tick.
                if self._wake.is_set():
                    self._wake.clear()
                else:
                    time.sleep(_TICK)
                if self._on_tick is not None:
                    self._on_tick(self)
                deadline = self._stop_deadline
                if deadline is None:
                    continue
                if not stopping:
                    stopping = True
                    grace = max(0.0, deadline - time.monotonic())
                    log.info("stopping: no more claims; running jobs get %.1f s to finish", grace)
                    self._begin_stop()
                with self._lock:
                    running = self._running
                claimer = self._claimer
                if running == 0 and not (claimer is not None and claimer.is_alive()):
                    return False
                if time.monotonic() < deadline:
                    continue
            except KeyboardInterrupt:
                interrupts += 1
                self.stop(grace=None if interrupts == 1 else 0)
                continue
            if running:
                with self._lock:
                    self._abandoned = running
                log.warning(
                    "stopped with %d job(s) still running: they are abandoned and run "
                    "again once their lease expires",
                    running,
                )
            return bool(running)

    def _begin_stop(self) -> None:
        self._stop_event.set()
        with self._lock:
            self._stopping = True
            unstarted = []
            for h in self._pending:
                if h.state == _PENDING:
                    h.state = _FINISHING
                    unstarted.append(h)
                else:
                    self._held.discard(h)
            self._pending.clear()
            self._cond.notify_all()
        # After _stopping: a claim in flight returns now, and whatever it got
        # goes straight back (the claimer checks _stopping).
        self._queue.wake()
        if unstarted:
            self._release(unstarted)

    def _shutdown(self, acker: threading.Thread, heart: threading.Thread, forced: bool) -> None:
        self._stop_event.set()
        with self._lock:
            self._stopping = True
            self._exiting = True
            self._cond.notify_all()
            self._ack_cond.notify_all()
        self._wake.set()
        acker.join(timeout=2.0 if forced else 30.0)  # the last acks
        self._hb_stop.set()
        heart.join(timeout=2.0)
        if not forced and self._claimer is not None:
            self._claimer.join(timeout=self._idle_wait + 5.0)
        self._ended = time.monotonic()
        self._stop_loop(forced)
        if self._owns_queue:
            self._queue.close()  # threads still working get litegate.Closed, ignored
        s = self.stats()
        log.info(
            "worker stopped: %d processed, %d acked, %d failed (%d dead), %d released, "
            "%d lease lost, %d abandoned in %.1f s",
            s["processed"],
            s["acked"],
            s["failed"],
            s["dead"],
            s["released"],
            s["lease_lost"],
            s["abandoned"],
            s["runtime"],
        )

    def _count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._counters[key] += n

    # -- claiming ---------------------------------------------------------------
    def _free(self) -> int:  # under the lock
        return self._concurrency + self._prefetch - self._running - len(self._pending)

    def _claim_loop(self) -> None:
        failures = 0
        # burst: look without waiting first, so that an empty queue ends the
        # run without an idle wait; claim(wait=...) only when other workers'
        # or scheduled jobs may still come.
        quick = self._burst
        # A step claims for at least half of the slots when it can: one that
        # refilled each slot as it freed would take the write gate once per
        # job. It waits for them at most ack_delay (which also bounds how
        # long a finished job waits to be settled), unless it has nothing
        # running at all.
        low = max(1, (self._concurrency + self._prefetch) // 2)
        while True:
            with self._lock:
                while not self._stopping and self._free() <= 0:
                    self._cond.wait()
                if not self._stopping and self._free() < low and self._running:
                    self._cond.wait_for(
                        lambda: self._stopping or self._free() >= low or not self._running,
                        timeout=self._ack_delay,
                    )
                if self._stopping:
                    return
                n = self._free()
            batch = self._take_finished()
            try:
                wait = 0.0 if quick else self._idle_wait
                done = self._queue.finish_and_claim(
                    **self._settling(batch),
                    n=n,
                    lease=self._lease,
                    wait=wait,
                    also=self._on_claim,
                )
            except Exception as exc:
                self._unsettled(batch)
                if self._exiting:
                    return
                failures += 1
                pause = min(5.0, 0.1 * 2 ** min(failures, 6))
                self._count("errors")
                log.error("claiming failed (%s); trying again in %.1f s", _summary(exc), pause)
                self._stop_event.wait(pause)
                continue
            failures = 0
            self._settled(batch, done)
            jobs = done.jobs
            if jobs:
                quick = self._burst
                held = [_Held(j) for j in jobs]
                with self._lock:
                    late = self._stopping
                    if not late:
                        self._held.update(held)
                        self._pending.extend(held)
                        self._cond.notify_all()
                if late:  # stop came while claiming: give them straight back
                    for h in held:
                        h.state = _FINISHING
                    self._release(held)
                    return
            elif self._burst:
                with self._lock:
                    mine = len(self._held)
                left = self._counts()
                if left is not None and sum(left.values()) == 0:
                    log.info("burst: queue %r has nothing left to run; stopping", self._queue.name)
                    self.stop()
                    return
                quick = left is not None and self._wait_for_own_jobs(mine, left)

    def _wait_for_own_jobs(self, mine: int, left: dict[str, int]) -> bool:
        """burst: if every job left is one of the ``mine`` this worker holds,
        wait for them here rather than in claim(wait=...) (their acks are not
        new work, and would not end that wait); return True if it waited."""
        if mine == 0 or left["ready"] + left["scheduled"] > 0 or left["leased"] > mine:
            return False  # work may come: scheduled jobs, or other workers' failures
        with self._lock:
            self._cond.wait_for(
                lambda: len(self._held) < mine or self._stopping, timeout=self._idle_wait
            )
        return True

    def _counts(self) -> dict[str, int] | None:
        """The queue's ready, scheduled and leased counts (None on an error)."""
        try:
            counts = self._queue.counts()
        except Exception as exc:
            self._count("errors")
            log.error("counting jobs failed (%s)", _summary(exc))
            return None
        return {k: counts[k] for k in ("ready", "scheduled", "leased")}

    def _release(self, held: list[_Held]) -> None:
        jobs = [h.job for h in held]
        released, lost = len(jobs), 0
        try:
            self._queue.release(jobs, also=self._on_release)
        except LeaseLost as exc:
            lost = len(exc.job_ids)
            released -= lost
            log.warning(
                "job(s) %s were no longer held when released (their lease had expired)",
                ", ".join(map(str, exc.job_ids)),
            )
        except Exception as exc:
            released = 0
            self._count("errors")
            log.error(
                "releasing %d job(s) failed (%s); they come back when their lease expires",
                len(jobs),
                _summary(exc),
            )
        with self._lock:
            self._counters["released"] += released
            self._counters["lease_lost"] += lost
            self._held.difference_update(held)
            self._cond.notify_all()

    # -- running ----------------------------------------------------------------
    def _execute(self) -> None:
        while True:
            with self._lock:
                while not self._pending and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return  # jobs still pending are released by _begin_stop
                h = self._pending.popleft()
                if h.state != _PENDING:  # lease lost while waiting
                    self._held.discard(h)
                    self._cond.notify_all()
                    continue
                h.state = _RUNNING
                self._running += 1
            error: BaseException | None = None
            try:
                result = self._handler(h.job if self._pass_job else h.job.payload)
                if inspect.isawaitable(result):
                    result = self._await(result)
                h.value = result
            except BaseException as exc:  # the job's failure, whatever it is
                error = exc
            self._finish(h, error)

    def _finish(self, h: _Held, error: BaseException | None) -> None:
        with self._lock:
            self._counters["processed"] += 1
            self._running -= 1
            self._cond.notify_all()
            if self._exiting or h.state == _LOST:
                # Abandoned (its lease expires) or no longer ours: leave it.
                self._held.discard(h)
                if h.state == _LOST:
                    log.warning(
                        "job %d finished but its lease was lost; not acked (it may run again)",
                        h.job.id,
                    )
                return
            if error is not None:
                h.error = (format_error(error), _summary(error))
            h.state = _DONE
            self._done.append(h)
            if len(self._done) >= self._ack_batch:
                self._ack_cond.notify()
            elif len(self._done) == 1:
                self._ack_cond.notify()  # the acker's clock starts

    def _await(self, awaitable: Awaitable[Any]) -> Any:
        import asyncio

        async def wrap() -> Any:
            return await awaitable

        with self._loop_lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="litegate-worker-asyncio", daemon=True
                )
                thread.start()
                self._loop, self._loop_thread = loop, thread
            loop = self._loop
        return asyncio.run_coroutine_threadsafe(wrap(), loop).result()

    def _stop_loop(self, forced: bool) -> None:
        with self._loop_lock:
            loop, thread = self._loop, self._loop_thread
        if loop is None or thread is None or forced:
            return  # forced: coroutines may still run; the daemon thread dies with us
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5.0)
        if not thread.is_alive():
            loop.close()

    # -- settling finished jobs ---------------------------------------------------
    def _take_finished(self) -> list[_Held]:
        """Up to ``ack_batch`` finished jobs, marked as being settled."""
        with self._lock:
            batch: list[_Held] = []
            while self._done and len(batch) < self._ack_batch:
                h = self._done.popleft()
                if h.state == _DONE:
                    h.state = _FINISHING
                    batch.append(h)
                else:  # lease lost while it waited: nothing to settle
                    self._held.discard(h)
                    self._cond.notify_all()
            return batch

    def _settling(self, batch: list[_Held]) -> dict[str, Any]:
        """finish_and_claim's arguments for ``batch``: the acks (with
        on_ack's SQL) and the failures."""
        acks = [h for h in batch if h.error is None]
        also = None
        if acks and self._on_ack is not None:
            also = functools.partial(_pass_values, self._on_ack, acks)
        return {
            "ack": [h.job for h in acks],
            "fail": [(h.job, h.error[0]) for h in batch if h.error is not None],
            "ack_also": also,
        }

    def _settled(self, batch: list[_Held], done: Finished) -> None:
        """Count and log what a step did with ``batch``; the jobs are no
        longer this worker's."""
        lost = set(done.lost)
        if lost:
            log.warning(
                "job(s) %s finished but their lease was lost before they were settled; they "
                "may run again",
                ", ".join(map(str, sorted(lost))),
            )
        acked = [h for h in batch if h.error is None and h.job.id not in lost]
        failures = 0
        if self._failure is not None:
            failures = sum(1 for h in acked if self._failure(h.value))
        for h in batch:
            if h.error is None or h.job.id in lost:
                continue
            job, state = h.job, done.failed[h.job.id]
            outcome = "dead (no attempts left)" if state == "dead" else "will retry"
            log.warning(
                "job %d failed on attempt %d of %d, %s: %s",
                job.id,
                job.attempt,
                job.max_attempts,
                outcome,
                h.error[1] if h.error else "",
            )
        with self._lock:
            self._counters["acked"] += len(acked) - failures
            self._counters["failed"] += failures + len(done.failed)
            self._counters["dead"] += sum(1 for st in done.failed.values() if st == "dead")
            self._counters["lease_lost"] += len(lost)
            self._held.difference_update(batch)
            self._cond.notify_all()

    def _unsettled(self, batch: list[_Held]) -> None:
        """A step that raised: its finished jobs wait for the next one (a try
        whose answer was lost but that committed is found by the jobs'
        tokens, so nothing is settled twice)."""
        with self._lock:
            for h in reversed(batch):
                h.state = _DONE
                self._done.appendleft(h)

    def _ack_loop(self) -> None:
        """Settle the finished jobs that no claim carried within ack_delay
        (the claimer takes them whenever it claims), or once ack_batch wait."""
        while True:
            with self._lock:
                while not self._done and not self._exiting:
                    self._ack_cond.wait()
                if not self._done:
                    return  # exiting, nothing left
                end = time.monotonic() + self._ack_delay
                while len(self._done) < self._ack_batch and not self._exiting:
                    left = end - time.monotonic()
                    if left <= 0 or not self._done:
                        break
                    self._ack_cond.wait(left)
                exiting = self._exiting
            batch = self._take_finished()
            if batch and not self._flush(batch) and exiting:
                return  # cannot settle now: the leases expire and the jobs run again

    def _flush(self, batch: list[_Held]) -> bool:
        try:
            done = self._queue.finish_and_claim(**self._settling(batch), n=0)
        except Exception as exc:
            self._unsettled(batch)
            self._count("errors")
            log.error(
                "settling %d finished job(s) failed (%s); trying again", len(batch), _summary(exc)
            )
            self._hb_stop.wait(0.2)
            return False
        self._settled(batch, done)
        return True

    # -- heartbeat --------------------------------------------------------------
    def _heartbeat_loop(self) -> None:
        beat, lease = self._heartbeat, self._lease
        while not self._hb_stop.wait(beat):
            now = time.time()
            with self._lock:
                due = [
                    h
                    for h in self._held
                    if h.state in (_PENDING, _RUNNING, _DONE)
                    and h.job.lease_until - now < lease - beat / 2
                ]
            if due and not self._hb_stop.is_set():
                self._extend(due)

    def _extend(self, held: list[_Held]) -> None:
        """One transaction for every lease due for a beat."""
        try:
            self._queue.extend_many([h.job for h in held], self._lease)
        except LeaseLost as exc:
            gone = set(exc.job_ids)
            with self._lock:
                # Acked, failed or released meanwhile (FINISHING): not a loss.
                lost = [
                    h for h in held if h.job.id in gone and h.state in (_PENDING, _RUNNING, _DONE)
                ]
                for h in lost:
                    h.state = _LOST
                self._counters["lease_lost"] += len(lost)
            for h in lost:
                log.warning(
                    "job %d: lease lost (it expired and another worker claimed the job); "
                    "its result will not be acked",
                    h.job.id,
                )
        except Exception as exc:
            if not self._exiting:
                self._count("errors")
                log.warning(
                    "extending the leases of %d job(s) failed (%s)", len(held), _summary(exc)
                )
