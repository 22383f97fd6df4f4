"""``litegate worker``: run a function over a queue, in threads and processes.

With ``--processes 1`` (the default) the command is one :class:`Worker` in
this process. With ``--processes M`` it is a supervisor: it starts M worker
processes (``--start-method spawn`` or ``fork``), forwards SIGTERM/SIGINT to
them, restarts one that dies (a SIGKILL, a crash: its jobs come back when
their leases expire) and sums their counters.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .._errors import Error, OpenError
from ._pgdb import is_url
from ._worker import HandlerError, Worker, load_handler

log = logging.getLogger("litegate.worker")

PROG = "litegate worker"
_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# Counters summed across processes.
_SUMMED = (
    "processed",
    "acked",
    "failed",
    "dead",
    "released",
    "lease_lost",
    "errors",
    "abandoned",
)
# How often a child process reports its counters to the supervisor.
_REPORT_EVERY = 0.5

DESCRIPTION = """\
Run a Python function for every job of a litegate queue.

The function gets the job's payload (with --pass-job, or decorated with
@litegate.queue.pass_job, the Job: id, payload, attempt, max_attempts, ...).
Returning acks the job; raising fails it: it is retried after a back-off
(--retry-base doubling per attempt, up to --retry-max) and goes to the dead
letters after its max_attempts, with the exception and traceback in
last_error. An `async def` function runs on an asyncio event loop.

Jobs are claimed in batches for the free threads, acked in batches, and their
leases extended by a heartbeat (every --lease / 3 s) while they run, so a job
that outlives its lease is not given to another worker.

SIGTERM or Ctrl-C: stop claiming, give back claimed jobs not yet started,
let running jobs finish (up to --grace s), ack them, exit 0. A second signal
stops at once (exit 1): running jobs come back when their leases expire.
"""

EPILOG = """\
exit status:
  0  stopped cleanly (a signal, or --burst found the queue empty)
  1  stopped with running jobs abandoned (--grace ran out, or a second signal)
  2  bad arguments: the handler does not import, the database cannot be opened or
     does not exist (--create makes a new one)

examples:
  litegate worker myapp.tasks:send_email --db app.db --queue emails --concurrency 8
  litegate worker myapp.tasks:resize --db app.db --processes 4 --lease 120 --json
  litegate worker myapp.tasks:nightly --db app.db --burst     # until the queue is empty
  litegate worker myapp.tasks:send_email --db postgresql://app@db.internal/app --queue emails
  litegate worker --django --settings mysite.settings --queue default --concurrency 4
"""


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "handler",
        nargs="?",
        metavar="MODULE:FUNCTION",
        help="the function to run, e.g. myapp.tasks:send_email (imported from the current "
        "directory or PYTHONPATH); not with --django",
    )
    p.add_argument(
        "--db",
        metavar="PATH|URL",
        help="the SQLite database file, or a postgresql:// URL; not with --django",
    )
    p.add_argument(
        "--create",
        action="store_true",
        help="make the SQLite file if it does not exist (without it, a missing file is an "
        "error: a mistyped path would make a new, empty database no job ever reaches)",
    )
    p.add_argument("--queue", default="default", metavar="NAME", help='queue name ("default")')
    p.add_argument(
        "--django",
        action="store_true",
        help="run the tasks of Django's tasks API (TASKS backend "
        "litegate.django.tasks.TaskBackend) instead of a function; Django's settings come from "
        "--settings or DJANGO_SETTINGS_MODULE",
    )
    p.add_argument(
        "--settings",
        metavar="MODULE",
        help="with --django: the settings module (else DJANGO_SETTINGS_MODULE)",
    )
    p.add_argument(
        "--backend",
        default="default",
        metavar="ALIAS",
        help='with --django: the TASKS alias ("default")',
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=1,
        metavar="N",
        help="jobs run at once per process, each on a thread (1)",
    )
    p.add_argument(
        "--processes",
        type=int,
        default=1,
        metavar="M",
        help="worker processes; with M > 1 this process supervises them and restarts one "
        "that dies (1)",
    )
    p.add_argument(
        "--lease",
        type=float,
        default=30.0,
        metavar="S",
        help="seconds a claim holds a job before another worker may take it; renewed by the "
        "heartbeat while the job runs (30)",
    )
    p.add_argument(
        "--heartbeat",
        type=float,
        default=None,
        metavar="S",
        help="seconds between lease renewals (lease / 3)",
    )
    p.add_argument(
        "--grace",
        type=float,
        default=30.0,
        metavar="S",
        help="on SIGTERM/SIGINT, seconds running jobs get to finish (30)",
    )
    p.add_argument(
        "--prefetch",
        type=int,
        default=0,
        metavar="K",
        help="jobs claimed ahead of free threads; released unstarted on stop (0)",
    )
    p.add_argument(
        "--ack-delay",
        type=float,
        default=0.010,
        metavar="S",
        help="finished jobs are settled (acked or failed) with the next claim, or after this "
        "long at most (0.01); a SIGKILL loses these: those jobs run again after their lease",
    )
    p.add_argument(
        "--ack-batch",
        type=int,
        default=100,
        metavar="N",
        help="settle at once when this many finished jobs wait (100)",
    )
    p.add_argument(
        "--retry-base",
        type=float,
        default=1.0,
        metavar="S",
        help="back-off before the first retry of a failed job, doubling per attempt (1)",
    )
    p.add_argument(
        "--retry-max",
        type=float,
        default=600.0,
        metavar="S",
        help="longest back-off (600)",
    )
    p.add_argument(
        "--pass-job",
        action="store_true",
        help="call the function with the Job instead of its payload",
    )
    p.add_argument(
        "--burst",
        action="store_true",
        help="exit once the queue has nothing left to run (no job ready, scheduled or leased)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="on exit, print the counters as one JSON object on stdout",
    )
    p.add_argument(
        "--start-method",
        choices=("spawn", "fork"),
        default="spawn",
        help="how worker processes are started with --processes > 1 (spawn)",
    )
    p.add_argument(
        "--log-level",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        default="INFO",
        help="logging level on stderr; failures are WARNING (INFO)",
    )
    return p


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """Run ``litegate worker``; return the exit status."""
    args = build_parser(prog).parse_args(argv)
    _ensure_import_path()
    if args.processes < 1:
        return _usage_error(f"--processes must be at least 1, got {args.processes}")
    if args.django:
        if args.handler or args.db:
            return _usage_error(
                "--django runs the tasks of Django's TASKS setting: drop MODULE:FUNCTION and "
                "--db (the database is the tasks backend's)"
            )
    elif not args.handler or not args.db:
        return _usage_error("give MODULE:FUNCTION and --db PATH|URL (or --django for Django tasks)")
    try:
        # Everything is checked here, once, also for --processes > 1: the
        # handler imports, the options are valid, the database opens.
        worker = make_worker(_config(args))
    except Error as exc:
        return _usage_error(str(exc))
    console = _Console(sys.stderr)
    restore = _setup_logging(args.log_level, console)
    try:
        if args.processes > 1:
            worker.queue.close()
            stats, code = _Supervisor(args, console).run()
        else:
            stats, code = _run_here(worker, console)
    finally:
        restore()  # (main() called in a process that goes on: its logging as it was)
    if args.json:
        print(json.dumps(stats), flush=True)
    return code


def _usage_error(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def _worker_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "name": args.queue,
        "concurrency": args.concurrency,
        "prefetch": args.prefetch,
        "lease": args.lease,
        "heartbeat": args.heartbeat,
        "ack_delay": args.ack_delay,
        "ack_batch": args.ack_batch,
        "grace": args.grace,
        "pass_job": True if args.pass_job else None,
        "burst": args.burst,
        "retry_base": args.retry_base,
        "retry_max": args.retry_max,
    }


def _config(args: argparse.Namespace) -> dict[str, Any]:
    """What a worker process needs to build its Worker (picklable)."""
    return {
        "handler": args.handler,
        "db": args.db,
        "create": args.create,
        "django": args.django,
        "settings": args.settings,
        "backend": args.backend,
        "log_level": args.log_level,
        "options": _worker_options(args),
    }


def make_worker(config: dict[str, Any]) -> Worker:
    """The Worker of ``config`` (from :func:`_config`), in this process."""
    if not config.get("django"):
        handler = load_handler(config["handler"])
        if not config.get("create"):
            _must_exist(config["db"])
        return Worker(config["db"], handler, **config["options"])
    if config.get("settings"):
        os.environ["DJANGO_SETTINGS_MODULE"] = config["settings"]
    if not os.environ.get("DJANGO_SETTINGS_MODULE"):
        raise HandlerError(
            "--django needs Django's settings: --settings MODULE or DJANGO_SETTINGS_MODULE"
        )
    try:
        import django

        django.setup()
        from ..django.tasks._worker import make_worker as django_worker
    except Error:
        raise
    except Exception as exc:
        raise HandlerError(f"Django did not start ({type(exc).__name__}: {exc})") from exc
    return django_worker(config["backend"], **config["options"])


def _must_exist(db: str) -> None:
    """A worker serves a database its producers write to: one that is not
    there is a mistyped path (or the wrong directory), not a new queue.
    Opening it would make an empty file, and the worker would idle on it."""
    if is_url(db) or os.path.exists(db):
        return
    raise OpenError(
        f"--db {db}: no such file (relative to {os.getcwd()}); the worker would make a new, "
        "empty database that no producer writes to. Check the path, or pass --create to "
        "make a new database"
    )


def _ensure_import_path() -> None:
    """Handlers are imported from the current directory, as with
    ``python -m``, also when run as the ``litegate`` script."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


# -- one process ---------------------------------------------------------------


def _run_here(worker: Worker, console: _Console) -> tuple[dict[str, Any], int]:
    signals = _Signals(lambda n: worker.stop() if n == 1 else worker.stop(grace=0))
    progress = _Progress(console, worker.stats) if console.tty else None
    try:
        stats = worker.run()
    finally:
        if progress is not None:
            progress.close()
        signals.restore()
    stats["processes"] = 1
    stats["restarts"] = 0
    forced = signals.count >= 2
    return stats, 1 if forced or stats["abandoned"] else 0


class _Signals:
    """SIGTERM/SIGINT counted; ``react(count)`` runs in the signal handler, so
    it must not take locks (Worker.stop does not)."""

    def __init__(self, react: Callable[[int], None]) -> None:
        self.count = 0
        self._react = react
        self._old: dict[int, Any] = {}
        for sig in _SIGNALS:
            self._old[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: object) -> None:
        self.count += 1
        self._react(self.count)

    def restore(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


# -- the terminal -----------------------------------------------------------------


class _Console:
    """stderr, shared by log lines and (on a terminal) one refreshing
    progress line that log lines are written above."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        try:
            self.tty = bool(stream.isatty())
        except (AttributeError, ValueError):
            self.tty = False
        self.lock = threading.Lock()
        self.status = ""

    def write_record(self, text: str) -> None:
        with self.lock:
            if self.status:
                self.stream.write("\r\x1b[K")
            self.stream.write(text + "\n")
            if self.status:
                self.stream.write(self.status)
            self.stream.flush()

    def set_status(self, text: str) -> None:
        with self.lock:
            self.status = text
            self.stream.write("\r\x1b[K" + text)
            self.stream.flush()


class _LogHandler(logging.Handler):
    def __init__(self, console: _Console) -> None:
        super().__init__()
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.console.write_record(self.format(record))
        except Exception:
            self.handleError(record)


_LOG_FORMAT = "%(asctime)s [%(process)d] %(levelname)s %(name)s: %(message)s"


def _setup_logging(level: str, console: _Console) -> Callable[[], None]:
    """Log lines (the worker's and the handler's own) to stderr; returns
    what puts the root logger back as it was."""
    root = logging.getLogger()
    for h in list(root.handlers):
        if isinstance(h, _LogHandler):  # a forked child inherits the parent's
            root.removeHandler(h)
    handler = _LogHandler(console)
    handler.setFormatter(logging.Formatter(_LOG_FORMAT))
    before = root.level
    root.addHandler(handler)
    root.setLevel(level)

    def restore() -> None:
        root.removeHandler(handler)
        root.setLevel(before)

    return restore


class _Progress:
    """On a terminal: ``done / failed / running / jobs/s``, refreshed twice a
    second on one line."""

    def __init__(self, console: _Console, stats: Callable[[], dict[str, Any]]) -> None:
        self._console = console
        self._stats = stats
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="litegate-progress", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        last_n, last_t = 0, time.monotonic()
        while not self._stop.wait(0.5):
            s = self._stats()
            now = time.monotonic()
            rate = (s["processed"] - last_n) / max(now - last_t, 1e-9)
            last_n, last_t = s["processed"], now
            self._console.set_status(progress_line(s, rate))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)
        with self._console.lock:
            if self._console.status:
                self._console.stream.write("\r\x1b[K")
                self._console.stream.flush()
            self._console.status = ""


def progress_line(s: dict[str, Any], rate: float) -> str:
    return (
        f"{PROG}: {s['acked']} done, {s['failed']} failed ({s['dead']} dead), "
        f"{s.get('running', 0)} running, {rate:.0f} jobs/s"
    )


# -- many processes -------------------------------------------------------------


@dataclass
class _Child:
    slot: int
    process: Any  # multiprocessing.Process
    conn: Any  # the supervisor's end of the pipe (None once closed)
    started: float
    stats: dict[str, Any] = field(default_factory=dict)


class _Supervisor:
    def __init__(self, args: argparse.Namespace, console: _Console) -> None:
        import multiprocessing

        self.args = args
        self.console = console
        self.ctx = multiprocessing.get_context(args.start_method)
        self.children: dict[int, _Child] = {}
        self.finished: list[dict[str, Any]] = []  # counters of children that exited
        self.restart_at: dict[int, float] = {}
        self.quick_deaths: dict[int, int] = {}
        self.restarts = 0
        self.clean = True
        self.started = time.monotonic()
        self.config = _config(args)

    def stats(self) -> dict[str, Any]:
        parts = self.finished + [c.stats for c in self.children.values()]
        out: dict[str, Any] = {"queue": self.args.queue}
        for key in _SUMMED:
            out[key] = sum(int(p.get(key, 0)) for p in parts)
        for key in ("running", "pending"):  # now: the live processes only
            out[key] = sum(int(c.stats.get(key, 0)) for c in self.children.values())
        runtime = time.monotonic() - self.started
        out["runtime"] = round(runtime, 3)
        out["jobs_per_s"] = round(out["processed"] / runtime, 1) if runtime > 0 else 0.0
        out["processes"] = self.args.processes
        out["restarts"] = self.restarts
        return out

    def run(self) -> tuple[dict[str, Any], int]:
        signals = _Signals(lambda n: None)  # counted here, acted on in the loop
        progress = _Progress(self.console, self.stats) if self.console.tty else None
        log.info(
            "supervisor started: %d worker processes (%s)",
            self.args.processes,
            self.args.start_method,
        )
        try:
            self._loop(signals)
        finally:
            for child in list(self.children.values()):  # only after an error here
                if child.process.is_alive():
                    child.process.kill()
            if progress is not None:
                progress.close()
            signals.restore()
        forced = signals.count >= 2
        stats = self.stats()
        log.info(
            "supervisor stopped: %d processed, %d acked, %d failed (%d dead), %d restarts",
            stats["processed"],
            stats["acked"],
            stats["failed"],
            stats["dead"],
            stats["restarts"],
        )
        return stats, 0 if self.clean and not forced and not stats["abandoned"] else 1

    def _loop(self, signals: _Signals) -> None:
        from multiprocessing.connection import wait

        for slot in range(self.args.processes):
            self._start(slot)
        seen = 0  # signals acted on
        kill_at: float | None = None
        while self.children or (self.restart_at and seen == 0):
            waitables = [c.process.sentinel for c in self.children.values()]
            waitables += [c.conn for c in self.children.values() if c.conn is not None]
            timeout = 0.2
            if self.restart_at:
                timeout = max(0.0, min(timeout, min(self.restart_at.values()) - time.monotonic()))
            for ready in wait(waitables, timeout=timeout):
                for child in self.children.values():
                    if ready is child.conn:
                        self._read(child)
            if signals.count > seen:
                seen = signals.count
                kill_at = self._forward(seen, kill_at)
            for slot, child in list(self.children.items()):
                if child.process.exitcode is not None:
                    self._reap(slot, child, stopping=seen > 0)
            now = time.monotonic()
            if seen == 0:
                for slot, when in list(self.restart_at.items()):
                    if now >= when:
                        del self.restart_at[slot]
                        self._start(slot)
            if kill_at is not None and now >= kill_at:
                for child in self.children.values():
                    if child.process.is_alive():
                        log.error("worker process %d did not stop; killing it", child.process.pid)
                        child.process.kill()
                        self.clean = False
                kill_at = None

    def _forward(self, count: int, kill_at: float | None) -> float:
        self.restart_at.clear()
        live = [c for c in self.children.values() if c.process.is_alive()]
        if count == 1:
            log.info("stopping: asking %d worker processes to finish their running jobs", len(live))
            deadline: float = time.monotonic() + self.args.grace + 10.0
        else:
            log.warning("stopping at once: running jobs come back when their leases expire")
            deadline = time.monotonic() + 5.0
        for child in live:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.process.pid, signal.SIGTERM)
        return deadline if kill_at is None else min(kill_at, deadline)

    def _start(self, slot: int) -> None:
        here, there = self.ctx.Pipe(duplex=False)
        process = self.ctx.Process(
            target=child_main,
            args=(self.config, there, os.getpid()),
            name=f"litegate-worker-{slot}",
        )
        # Signals stay blocked until the child has installed its own handlers
        # (it inherits the mask across fork and exec); the supervisor's
        # arrive once start() is done. multiprocessing's resource tracker
        # unblocks SIGINT/SIGTERM after it starts itself: start it first.
        if self.args.start_method == "spawn":
            from multiprocessing import resource_tracker

            resource_tracker.ensure_running()
        old = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
        try:
            process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        there.close()
        self.children[slot] = _Child(slot, process, here, time.monotonic())

    def _read(self, child: _Child) -> None:
        try:
            while child.conn is not None and child.conn.poll():
                child.stats = child.conn.recv()
        except Exception:  # EOF: the child exited; or a message cut short by a kill
            child.conn.close()
            child.conn = None

    def _reap(self, slot: int, child: _Child, stopping: bool) -> None:
        if child.conn is not None:
            self._read(child)
            if child.conn is not None:
                child.conn.close()
        child.process.join()
        del self.children[slot]
        self.finished.append(child.stats)
        code = child.process.exitcode
        pid = child.process.pid
        if stopping:
            # -SIGTERM: stopped before it could install its handler, holding nothing.
            if code not in (0, -signal.SIGTERM):
                self.clean = False
                log.warning("worker process %d %s", pid, _describe(code))
            return
        if code == 0 and self.args.burst:
            return  # the queue is empty for it: done
        lived = time.monotonic() - child.started
        quick = self.quick_deaths.get(slot, 0) + 1 if lived < 10.0 else 0
        self.quick_deaths[slot] = quick
        delay = 0.0 if quick == 0 else min(30.0, 0.25 * 2 ** (quick - 1))
        log.error(
            "worker process %d %s; starting a new one%s (its jobs come back when their "
            "leases expire)",
            pid,
            _describe(code),
            f" in {delay:g} s" if delay else "",
        )
        self.restarts += 1
        self.restart_at[slot] = time.monotonic() + delay


def _describe(code: int | None) -> str:
    if code is None:
        return "is still running"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def child_main(config: dict[str, Any], conn: Any, supervisor: int) -> None:
    """A worker process of ``litegate worker --processes M``."""
    console = _Console(sys.stderr)
    _setup_logging(config["log_level"], console)
    # Ctrl-C reaches the whole process group: the supervisor forwards it as
    # SIGTERM, so the child listens to SIGTERM only.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        worker = make_worker(config)
    except Error as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)
        sys.exit(2)
    signals: list[int] = []

    def on_term(signum: int, frame: object) -> None:
        signals.append(signum)
        if len(signals) == 1:
            worker.stop()
        else:
            worker.stop(grace=0)

    signal.signal(signal.SIGTERM, on_term)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)
    last = 0.0
    orphaned = False

    def tick(w: Worker) -> None:
        nonlocal last, orphaned
        if not orphaned and os.getppid() != supervisor:
            orphaned = True
            log.warning("the supervisor is gone; stopping")
            w.stop()
        now = time.monotonic()
        if now - last >= _REPORT_EVERY:
            last = now
            _send(conn, w.stats())

    worker._on_tick = tick
    stats = worker.run()
    _send(conn, stats)
    conn.close()
    sys.exit(1 if len(signals) >= 2 or stats["abandoned"] else 0)


def _send(conn: Any, stats: dict[str, Any]) -> None:
    with contextlib.suppress(OSError, ValueError):  # the supervisor is gone
        conn.send(stats)
