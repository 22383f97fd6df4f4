"""``litegate bench tasks``: Django's tasks API on SQLite, litegate's
backend against the incumbent ``django-tasks-db``, on the same machine in
the same run (issue 8).

Sides (each on a fresh database file):

- ``django-tasks-db``: ``django_tasks_db.DatabaseBackend`` on the stock
  ``django.db.backends.sqlite3`` engine with Django's defaults, workers
  ``manage.py db_worker --batch`` (one task at a time per process);
- ``django-tasks-db+gate``: the same backend and workers on the
  ``litegate.django`` engine (what the engine alone changes);
- ``litegate``: ``litegate.django.tasks.TaskBackend`` on ``litegate.django``,
  workers ``litegate worker --django --burst --concurrency 1``.

Phases, per side and run:

1. ``enqueue``: P web processes x T threads, each view an ``atomic()``
   block that reads, writes an order row and enqueues a task (the pattern
   of "save, then send the email"): tasks enqueued per second, and views
   that raised (Django's "database is locked");
2. ``drain``: a fresh file gets N tasks enqueued from one thread (tasks
   enqueued per second, uncontended), then W worker processes run them all
   (a no-op each): tasks per second between the first task's start and the
   last one's end as the backend recorded them (worker start-up left out),
   and how many tasks ended SUCCESSFUL;
3. ``kill``: one task that sleeps; its worker is SIGKILLed mid-task, a
   fresh worker is started; the task's status once that worker is done (or
   after a time limit): litegate's lease runs out and the task runs again;
   django-tasks-db has no lease and the task stays RUNNING.

Every process is bounded in time and stopped by its PID.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .._args import positive_int
from .._procs import pythonpath
from .._progress import Progress
from .._stats import cv, median
from . import jobs

NAME = "tasks"
HELP = "Django tasks: litegate.django.tasks against django-tasks-db (issue 8)"
SIDES = ("django-tasks-db", "django-tasks-db+gate", "litegate")
_LIMIT = 300.0  # seconds any one process of a phase may take


@dataclass(frozen=True)
class Config:
    sides: tuple[str, ...] = SIDES
    processes: int = 4
    threads: int = 4
    tasks: int = 2000
    workers: int = 2
    kill: bool = True
    runs: int = 1


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sides", default=",".join(SIDES), help="comma-separated (default: both)")
    p.add_argument("--processes", type=positive_int, default=4, help="web processes (4)")
    p.add_argument("--threads", type=positive_int, default=4, help="threads per process (4)")
    p.add_argument("--tasks", type=positive_int, default=2000, help="tasks enqueued per run (2000)")
    p.add_argument("--workers", type=positive_int, default=2, help="worker processes (2)")
    p.add_argument("--no-kill", action="store_true", help="skip the SIGKILL phase")


def config_from_args(args: argparse.Namespace) -> Config:
    sides = tuple(s.strip() for s in args.sides.split(",") if s.strip())
    unknown = [s for s in sides if s not in SIDES]
    if unknown or not sides:
        raise ValueError(f"unknown side(s) {unknown}; pick from {', '.join(SIDES)}")
    tasks = 400 if args.quick else args.tasks
    return Config(
        sides=sides,
        processes=2 if args.quick else args.processes,
        threads=args.threads,
        tasks=tasks,
        workers=args.workers,
        kill=not args.no_kill,
        runs=args.runs,
    )


def _env(side: str, db: str) -> dict[str, str]:
    return {
        **os.environ,
        "LITEGATE_LAB_TASKS_SIDE": side,
        "LITEGATE_LAB_TASKS_DB": db,
        "DJANGO_SETTINGS_MODULE": jobs.SETTINGS,
        "PYTHONPATH": pythonpath(),
    }


def _worker_cmd(side: str, lease: float) -> list[str]:
    if side.startswith("django-tasks-db"):
        return [sys.executable, "-m", "django", "db_worker", "--batch", "--no-startup-delay",
                "--interval", "0.05"]  # fmt: skip
    return [sys.executable, "-m", "litegate", "worker", "--django", "--burst",
            "--concurrency", "1", "--lease", str(lease), "--log-level", "WARNING"]  # fmt: skip


def _stop(proc: subprocess.Popen[bytes], timeout: float) -> int:
    """Wait up to ``timeout`` s, then SIGKILL; the exit status."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(30)


def _prepare(side: str, db: str) -> None:
    """Django's tables for the side (django-tasks-db's migrations), and the
    orders table the views write."""
    subprocess.run(
        [sys.executable, "-m", "django", "migrate", "--verbosity", "0"],
        env=_env(side, db), check=True, timeout=_LIMIT,
    )  # fmt: skip
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, n INTEGER)")
        conn.commit()


def _in_child(fn: Any, *args: Any) -> Any:
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:
        return pool.apply_async(fn, args).get(_LIMIT)


def _enqueue(cfg: Config, side: str, db: str) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    per_thread = max(1, cfg.tasks // (cfg.processes * cfg.threads))
    barrier = ctx.Manager().Barrier(cfg.processes)
    with ctx.Pool(cfg.processes) as pool:
        parts = [
            pool.apply_async(jobs.enqueue_views, (side, db, cfg.threads, per_thread, barrier))
            for _ in range(cfg.processes)
        ]
        got = [p.get(_LIMIT) for p in parts]
    ok = sum(g[0] for g in got)
    errors = sum(g[1] for g in got)
    seconds = max(g[2] for g in got)
    return {"enqueued": ok, "errors": errors, "seconds": seconds, "per_s": ok / seconds}


def _drain(cfg: Config, side: str, db: str) -> dict[str, Any]:
    fill_s = _in_child(jobs.fill, side, db, cfg.tasks)
    env = _env(side, db)
    t0 = time.perf_counter()
    procs = [_spawn_worker(side, 30.0, env) for _ in range(cfg.workers)]
    codes = [_stop(p, _LIMIT) for p in procs]
    wall = time.perf_counter() - t0
    counts = _in_child(jobs.statuses, side, db, None)
    done = int(counts.get("SUCCESSFUL", 0))
    window = jobs.window(side, db)
    return {
        "fill_seconds": fill_s,
        "fill_per_s": cfg.tasks / fill_s,
        "wall_seconds": wall,
        "window_seconds": window,
        "per_s": done / window if window > 0 else 0.0,
        "successful": done,
        "statuses": counts,
        "enqueued": cfg.tasks,
        "exit_codes": codes,
    }


def _spawn_worker(side: str, lease: float, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        _worker_cmd(side, lease), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def _started(flag: str) -> bool:
    """The task wrote its line (the file appears at open(), the line a moment
    later: killed in between, the run would not be counted)."""
    try:
        return Path(flag).read_text().endswith("\n")
    except OSError:
        return False


def _kill(side: str, db: str, tmp: str) -> dict[str, Any]:
    flag = os.path.join(tmp, f"{side}.flag")
    tid = _in_child(jobs.enqueue_slow, side, db, flag, 30.0)
    env = _env(side, db)
    first = _spawn_worker(side, 2.0, env)
    deadline = time.monotonic() + 60
    while not _started(flag) and time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.01)
    started = _started(flag)
    os.kill(first.pid, signal.SIGKILL)
    _stop(first, 10)
    t0 = time.monotonic()
    second = _spawn_worker(side, 2.0, env)
    _stop(second, 20.0)  # bounded: a task that never comes back does not hang the bench
    status = _in_child(jobs.statuses, side, db, [tid])[0]
    runs = len(Path(flag).read_text().split()) if os.path.exists(flag) else 0
    return {
        "started": started,
        "status_after": status,
        "runs": runs,
        "seconds": round(time.monotonic() - t0, 2),
    }


def run(cfg: Config, progress: Progress | None = None) -> dict[str, Any]:
    progress = progress or Progress(0)
    progress.total = float(len(cfg.sides) * cfg.runs)
    runs: list[dict[str, Any]] = []
    for r in range(cfg.runs):
        one: dict[str, Any] = {}
        for side in cfg.sides:
            progress.describe(f"run {r + 1}/{cfg.runs}: {side}")
            with tempfile.TemporaryDirectory(prefix="litegate-bench-tasks-") as tmp:
                db = os.path.join(tmp, "app.db")
                _prepare(side, db)
                enq = _enqueue(cfg, side, db)
                ddb = os.path.join(tmp, "drain.db")
                _prepare(side, ddb)
                drain = _drain(cfg, side, ddb)
                row: dict[str, Any] = {"enqueue": enq, "drain": drain}
                if cfg.kill:
                    kdb = os.path.join(tmp, "kill.db")
                    _prepare(side, kdb)
                    row["kill"] = _kill(side, kdb, tmp)
                one[side] = row
            progress.advance()
        runs.append(one)
    return {"experiment": NAME, "config": asdict(cfg), "runs": runs, "summary": _summary(runs)}


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for side in runs[0]:
        rows = [r[side] for r in runs]
        enq = [x["enqueue"]["per_s"] for x in rows]
        drain = [x["drain"]["per_s"] for x in rows]
        fill = [x["drain"]["fill_per_s"] for x in rows]
        out[side] = {
            "enqueue_per_s": median(enq),
            "enqueue_cv": cv(enq),
            "view_errors": sum(x["enqueue"]["errors"] for x in rows),
            "views": sum(x["enqueue"]["enqueued"] + x["enqueue"]["errors"] for x in rows),
            "fill_per_s": median(fill),
            "fill_cv": cv(fill),
            "drain_per_s": median(drain),
            "drain_cv": cv(drain),
            "successful": sum(x["drain"]["successful"] for x in rows),
            "enqueued": sum(x["drain"]["enqueued"] for x in rows),
            "kill": [x["kill"]["status_after"] for x in rows if "kill" in x],
        }
    return out


def render(result: dict[str, Any]) -> str:
    cfg = result["config"]
    lines = [
        f"litegate bench tasks, {cfg['runs']} run(s), medians (CV). views/s: views that "
        f"committed per second, {cfg['processes']} web processes x {cfg['threads']} threads, "
        "each view atomic(): read, write an order, enqueue its task. enqueue/s: "
        f"{cfg['tasks']} tasks enqueued from one thread. run tasks/s: those tasks run by "
        f"{cfg['workers']} worker processes (first start to last end).",
        "",
        f"{'side':<22}{'views/s':>14}{'view errors':>16}{'enqueue/s':>14}"
        f"{'run tasks/s':>16}{'successful':>16}  after SIGKILL mid-task",
    ]

    def fmt(v: float, c: float | None) -> str:
        return f"{v:,.0f}" + (f" ({c:.0%})" if c is not None else "")

    for side, s in result["summary"].items():
        lines.append(
            f"{side:<22}{fmt(s['enqueue_per_s'], s['enqueue_cv']):>14}"
            f"{s['view_errors']:>9} / {s['views']:<5}"
            f"{fmt(s['fill_per_s'], s['fill_cv']):>14}"
            f"{fmt(s['drain_per_s'], s['drain_cv']):>16}"
            f"{s['successful']:>9} / {s['enqueued']:<5}  " + (", ".join(s["kill"]) or "-")
        )
    summ = result["summary"]
    if "litegate" in summ and "django-tasks-db" in summ:
        a, b = summ["litegate"], summ["django-tasks-db"]
        ratios = []
        for key, label in (
            ("enqueue_per_s", "views"),
            ("fill_per_s", "enqueue"),
            ("drain_per_s", "run"),
        ):
            if b[key]:
                ratios.append(f"{label} {a[key] / b[key]:.2f}x")
        lines += ["", "litegate / django-tasks-db (same run): " + ", ".join(ratios)]
    return "\n".join(lines)


def charts(result: dict[str, Any], out: Path) -> list[Path]:
    return []  # the table says it all: two sides, three figures
