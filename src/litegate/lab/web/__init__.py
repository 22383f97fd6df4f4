"""``litegate bench web``: seed 003, the "Hacker News" load test, in Django.

The app (``litegate.lab.web.app``) runs under a real gunicorn (gthread; 2
workers x 3 threads by default) on 127.0.0.1, and a real ``hey`` loads it
with the seed's command, ``hey -c N -z Ss -m POST …/benchmarking/MIX``, for
four configurations of the same code, in the same run:

- ``naive``: Django's defaults (ENGINE and NAME only; rollback journal);
- ``wal``: naive on a file in WAL mode;
- ``tuned``: Django's best today: ``transaction_mode: IMMEDIATE``,
  ``timeout`` 5 s, WAL and the usual PRAGMAs through ``init_command``,
  persistent connections;
- ``litegate``: ``ENGINE: "litegate.django"``, persistent connections.

Cells: the seed's headline (``balanced`` at c = 20, ``--headline`` times), a
sweep of ``balanced`` over ``--sweep`` concurrencies, and ``--mixes`` at
c = 20. Cells run cell-major (every engine, then the next cell), each on a
fresh copy of one seeded database (``--no-reset``: one copy per engine,
kept across its cells, as the seed's "three runs on one seed") and a
fresh server. Per cell: requests/s, p50/p90/p99, slowest, status codes,
"database is locked" errors in the server's log, server CPU seconds per
request.

gunicorn runs with ``--keep-alive 0``: a gthread worker that keeps a
client's idle connection parks it, and with more clients than threads the
others wait for it behind keep-alive timers (multi-second outliers that
are the server's, not the database's). Closing each connection after its
response makes every request queue at the listening socket instead.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .._args import positive_float, positive_int
from .._progress import Progress
from .._stats import median
from . import _hey
from ._server import Server

NAME = "web"
HELP = "seed 003: the Hacker News Django app under gunicorn, loaded with hey"
ENGINES = ("naive", "wal", "tuned", "litegate")
MIXES = ("read_heavy", "balanced", "write_heavy")
SWEEP = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class Config:
    engines: tuple[str, ...] = ENGINES
    seconds: float = 10.0
    headline: int = 3
    sweep: tuple[int, ...] = SWEEP
    mixes: tuple[str, ...] = ("read_heavy", "write_heavy")
    workers: int = 2
    threads: int = 3
    reset: bool = True
    hey: str = ""
    runs: int = 1


def _ints(text: str) -> tuple[int, ...]:
    out = tuple(int(v) for v in text.split(",") if v.strip())
    if any(v < 1 for v in out):
        raise ValueError(f"concurrencies must be whole numbers >= 1, got {text!r}")
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engines", default=",".join(ENGINES), help="comma-separated (all four)")
    p.add_argument(
        "--seconds", type=positive_float, default=10.0, help="hey -z per cell (10, the seed's)"
    )
    p.add_argument("--headline", type=positive_int, default=3, help="runs of balanced at c=20 (3)")
    p.add_argument(
        "--sweep",
        default=",".join(map(str, SWEEP)),
        help="concurrencies of the balanced sweep ('' for none)",
    )
    p.add_argument(
        "--mixes",
        default="read_heavy,write_heavy",
        help="other mixes run at c=20 ('' for none)",
    )
    p.add_argument("--workers", type=positive_int, default=2, help="gunicorn workers (2)")
    p.add_argument("--threads", type=positive_int, default=3, help="threads per worker (3)")
    p.add_argument(
        "--no-reset",
        action="store_true",
        help="one database per engine for all its cells (the seed's 'three runs on one "
        "seed'); default: a fresh copy of the seeded database per cell",
    )
    p.add_argument("--hey", default=None, help="the hey binary (default: .tools/bin/hey)")


def config_from_args(args: argparse.Namespace) -> Config:
    engines = tuple(e.strip() for e in args.engines.split(",") if e.strip())
    bad = [e for e in engines if e not in ENGINES]
    if bad or not engines:
        raise ValueError(f"unknown engine(s) {bad}; pick from {', '.join(ENGINES)}")
    mixes = tuple(m.strip() for m in args.mixes.split(",") if m.strip())
    bad = [m for m in mixes if m not in MIXES]
    if bad:
        raise ValueError(f"unknown mix(es) {bad}; pick from {', '.join(MIXES)}")
    try:
        hey = _hey.find(args.hey)
    except _hey.HeyMissing as exc:
        raise ValueError(str(exc)) from None
    if args.quick:
        return Config(engines=engines, seconds=3.0, headline=1, sweep=(), mixes=(),
                      workers=args.workers, threads=args.threads, reset=True, hey=hey,
                      runs=args.runs)  # fmt: skip
    return Config(
        engines=engines,
        seconds=args.seconds,
        headline=args.headline,
        sweep=_ints(args.sweep),
        mixes=mixes,
        workers=args.workers,
        threads=args.threads,
        reset=not args.no_reset,
        hey=hey,
        runs=args.runs,
    )


def _cells(cfg: Config) -> list[tuple[str, str, int, int]]:
    """(kind, mix, concurrency, repeat) in the order they run."""
    cells = [("headline", "balanced", 20, k) for k in range(cfg.headline)]
    cells += [("sweep", "balanced", n, 0) for n in cfg.sweep]
    cells += [("mix", m, 20, 0) for m in cfg.mixes]
    return cells


def _seed(path: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "litegate", "web", "seed", path],
        check=True, stdout=subprocess.DEVNULL, timeout=300,
    )  # fmt: skip


_LOCKED = b"django.db.utils.OperationalError: database is locked"
_SERVER_ERROR = b"Internal Server Error:"


def _count(log: Path, start: int) -> tuple[int, int]:
    """Lines of the server's log from ``start`` on: ("database is locked"
    errors, 500 tracebacks), in one pass."""
    locked = errors = 0
    with open(log, "rb") as f:
        f.seek(start)
        for line in f:
            locked += line.startswith(_LOCKED)
            errors += line.startswith(_SERVER_ERROR)
    return locked, errors


def _cell(cfg: Config, engine: str, db: str, log: Path, mix: str, n: int) -> dict[str, Any]:
    start = log.stat().st_size if log.exists() else 0
    with Server(db, engine, log, workers=cfg.workers, threads=cfg.threads) as srv:
        cpu0 = srv.cpu_seconds()
        summary, _ = _hey.run(cfg.hey, f"{srv.url}/benchmarking/{mix}", n, cfg.seconds)
        cpu = srv.cpu_seconds() - cpu0
        code = srv.stop()
    responses = max(1, summary.responses)
    locked, server_errors = _count(log, start)
    return {
        "engine": engine,
        "mix": mix,
        "c": n,
        "hey": summary.as_dict(),
        "locked": locked,
        "server_errors": server_errors,
        "cpu_s": cpu,
        "cpu_ms_per_request": 1000.0 * cpu / responses,
        "server_exit": code,
    }


def run(cfg: Config, progress: Progress | None = None) -> dict[str, Any]:
    progress = progress or Progress(0)
    cells = _cells(cfg)
    progress.total = float(cfg.runs * len(cells) * len(cfg.engines))
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="litegate-bench-web-") as tmp:
        template = os.path.join(tmp, "seeded.db")
        _seed(template)
        for r in range(cfg.runs):
            kept: dict[str, str] = {}
            for kind, mix, n, k in cells:
                for engine in cfg.engines:
                    progress.describe(f"run {r + 1}: {engine} {mix} c={n}")
                    db = kept.get(engine) or os.path.join(tmp, f"{engine}.db")
                    if cfg.reset or engine not in kept:
                        for suffix in ("", "-wal", "-shm", "-litegate"):
                            if os.path.exists(db + suffix):
                                os.remove(db + suffix)
                        shutil.copyfile(template, db)
                        kept[engine] = db
                    log = Path(tmp) / f"{engine}.log"
                    row = _cell(cfg, engine, db, log, mix, n)
                    row.update(run=r, kind=kind, repeat=k)
                    results.append(row)
                    progress.advance()
    return {"experiment": NAME, "config": asdict(cfg), "cells": results,
            "summary": summarize(results, cfg.engines)}  # fmt: skip


def _rate(row: dict[str, Any], code: int) -> float:
    h = row["hey"]
    hits: int = h["statuses"].get(str(code), 0)
    answered: int = h["responses"]
    return hits / max(1, answered)


def summarize(cells: list[dict[str, Any]], engines: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for e in engines:
        mine = [c for c in cells if c["engine"] == e]
        head = [c for c in mine if c["kind"] == "headline"]
        sweep: dict[int, list[dict[str, Any]]] = {}
        for c in mine:
            if c["mix"] == "balanced":
                sweep.setdefault(c["c"], []).append(c)
        out[e] = {
            "headline": {
                "rps": [c["hey"]["rps"] for c in head],
                "average_s": [c["hey"]["average_s"] for c in head],
                "p90_s": [c["hey"]["percentiles"].get("90", 0.0) for c in head],
                "p99_s": [c["hey"]["percentiles"].get("99", 0.0) for c in head],
                "slowest_s": [c["hey"]["slowest_s"] for c in head],
                "http_500": [c["hey"]["statuses"].get("500", 0) for c in head],
                "responses": [c["hey"]["responses"] for c in head],
                "locked": [c["locked"] for c in head],
                "cpu_ms_per_request": [c["cpu_ms_per_request"] for c in head],
            },
            "sweep": {
                str(n): {
                    "rps": median([c["hey"]["rps"] for c in rows]),
                    "p99_s": median([c["hey"]["percentiles"].get("99", 0.0) for c in rows]),
                    "slowest_s": max(c["hey"]["slowest_s"] for c in rows),
                    "http_500_rate": median([_rate(c, 500) for c in rows]),
                }
                for n, rows in sorted(sweep.items())
            },
            "mixes": {
                c["mix"]: {
                    "rps": c["hey"]["rps"],
                    "p99_s": c["hey"]["percentiles"].get("99", 0.0),
                    "slowest_s": c["hey"]["slowest_s"],
                    "http_500_rate": _rate(c, 500),
                    "locked": c["locked"],
                }
                for c in mine
                if c["kind"] == "mix"
            },
        }
    return out


def render(result: dict[str, Any]) -> str:
    from ._render import render as draw

    return draw(result)


def charts(result: dict[str, Any], out: Path) -> list[Path]:
    from ._render import charts as draw

    return draw(result, out)
