"""``litegate bench web``: seed 003, the "Hacker News" load test, in Django
and in FastAPI.

The same app twice, on the same seeded file: in Django
(``litegate_lab.web.app``) under a real gunicorn (gthread; 2 workers x 3
threads by default), and in FastAPI + SQLAlchemy 2.0 asyncio
(``litegate_lab.web.fastapi_app``) under a real uvicorn (2 workers, one
event loop each), both on 127.0.0.1; a real ``hey`` loads each with the
seed's command, ``hey -c N -z Ss -m POST …/benchmarking/MIX``, for each
engine configuration of the same code, in the same run:

- Django: ``naive`` (Django's defaults: ENGINE and NAME only; rollback
  journal), ``wal`` (naive on a file in WAL mode), ``tuned`` (Django's best
  today: ``transaction_mode: IMMEDIATE``, ``timeout`` 5 s, WAL and the usual
  PRAGMAs through ``init_command``, persistent connections), ``litegate``
  (``ENGINE: "litegate.django"``, persistent connections);
- FastAPI: ``naive`` (SQLAlchemy's defaults with aiosqlite), ``tuned``
  (SQLAlchemy's documented recipe: BEGIN IMMEDIATE through event
  listeners, busy timeout, WAL and the same PRAGMAs, a reader engine with
  a deferred BEGIN), ``litegate`` (``sqlite+litegate``; reads in its
  read-only scope).

Cells: the seed's headline (``balanced`` at c = 20, ``--headline`` times), a
sweep of ``balanced`` over ``--sweep`` concurrencies, and ``--mixes`` at
each of ``--mix-c``. Cells run cell-major (every framework and engine,
then the next cell), each on a fresh copy of one seeded database
(``--no-reset``: one copy per engine, kept across its cells, as the seed's
"three runs on one seed") and a fresh server. Per cell: requests/s,
p50/p90/p99, slowest, status codes, "database is locked" errors in the
server's log, server CPU seconds per request, the same CPU by thread and
the threads' context switches (``._threads``), the machine's idle share;
with ``--grant-log``, litegate's servers log every grant of the write gate
and the cell gets the bounds checked on it and where the gate's time went
(held, free while a writer waited). Then, with the server
stopped, the database is checked: ``PRAGMA integrity_check``, ``PRAGMA
foreign_key_check``, and every write the app acknowledged during the load
is there (``._acks``: each worker appends each write whose commit returned
to a ledger file before it answers).

Both servers close each connection after its response (``--keep-alive
0``): a gthread worker that keeps a client's idle connection parks it, and
with more clients than threads the others wait for it behind keep-alive
timers (multi-second outliers that are the server's, not the database's);
a uvicorn worker keeps every client whose first connection it accepted.
Closing each connection makes every request queue at the listening socket
instead, where any free worker takes it.
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

from litegate import diagnostics

from .._args import positive_float, positive_int
from .._progress import Progress
from .._report import combine_grant_logs, cpu_times, gate_timing, idle_share
from .._stats import median
from . import _acks, _cache, _hey, _profile, _threads, _variant
from ._actions import MIXES as _WEIGHTS
from ._cli import ALL_ENGINES, FRAMEWORKS
from ._cli import ENGINES as ENGINES_OF
from ._server import Server

NAME = "web"
ENGINES = ALL_ENGINES  # the union of both frameworks' engines
HELP = "seed 003: the Hacker News app in Django (gunicorn) and FastAPI (uvicorn), loaded with hey"
MIXES = tuple(_WEIGHTS)
SWEEP = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class Config:
    frameworks: tuple[str, ...] = FRAMEWORKS
    engines: tuple[str, ...] = ENGINES  # each framework runs those of them it has
    seconds: float = 10.0
    headline: int = 3
    sweep: tuple[int, ...] = SWEEP
    mixes: tuple[str, ...] = ("read_heavy", "write_heavy")
    mix_c: tuple[int, ...] = (20, 64)
    workers: int = 2
    threads: int = 3
    reset: bool = True
    hey: str = ""
    runs: int = 1
    profile: int = 0  # > 0: only profile Django's request path, this many requests a round
    grant_log: bool = False  # litegate's servers log every grant of the gate (slower)
    caches: tuple[str, ...] = ()  # --cache: the front page cached by each (_cache)
    cache_c: tuple[int, ...] = (20,)
    cache_seconds: float = 60.0

    def sides(self) -> list[tuple[str, str]]:
        """(framework, engine) pairs, in the order each cell runs them."""
        return [
            (f, e)
            for f in self.frameworks
            for e in _ordered(self.engines)
            if _variant.base(e) in ENGINES_OF[f]
        ]


def _ints(text: str) -> tuple[int, ...]:
    out = tuple(int(v) for v in text.split(",") if v.strip())
    if any(v < 1 for v in out):
        raise ValueError(f"concurrencies must be whole numbers >= 1, got {text!r}")
    return out


def _ordered(engines: tuple[str, ...]) -> list[str]:
    """The engines in the frameworks' order (naive, wal, tuned, litegate),
    each variant right after the configuration it varies, as given."""

    def key(e: str) -> tuple[int, bool, int]:
        base = _variant.base(e)
        return ENGINES.index(base), e != base, engines.index(e)

    return sorted(engines, key=key)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--framework",
        default=",".join(FRAMEWORKS),
        help="comma-separated: django (gunicorn), fastapi (uvicorn) (both)",
    )
    p.add_argument(
        "--engines",
        default=",".join(ENGINES),
        help="comma-separated (all): naive, wal (django only), tuned, litegate; "
        "litegate+NAME=VALUE[+NAME=VALUE] is litegate with PRAGMAs over its profile's "
        "(a candidate default, e.g. litegate+mmap_size=134217728), or with the write "
        "gate's policy: litegate+fair=strict",
    )
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
        help="other mixes, run at each --mix-c ('' for none)",
    )
    p.add_argument("--mix-c", default="20,64", help="concurrencies of the --mixes cells (20,64)")
    p.add_argument("--workers", type=positive_int, default=2, help="gunicorn / uvicorn workers (2)")
    p.add_argument(
        "--threads", type=positive_int, default=3, help="threads per gunicorn worker (3)"
    )
    p.add_argument(
        "--no-reset",
        action="store_true",
        help="one database per engine for all its cells (the seed's 'three runs on one "
        "seed'); default: a fresh copy of the seeded database per cell",
    )
    p.add_argument("--hey", default=None, help="the hey binary (default: .tools/bin/hey)")
    p.add_argument(
        "--grant-log",
        action="store_true",
        help="litegate's servers log every grant of the write gate (which slows the gate): "
        "per cell, the bounds checked on it and where the time went (held, free while a "
        "writer waited)",
    )
    p.add_argument(
        "--cache",
        default="",
        metavar="LIST",
        help="instead of the seed's cells: the front page (GET /) cached with cache_page by "
        "each of " + ", ".join(_cache.CACHES) + " (none: uncached), the app on "
        "litegate.django, --headline repeats at each --cache-c",
    )
    p.add_argument("--cache-c", default="20", help="concurrencies of the --cache cells (20)")
    p.add_argument(
        "--cache-seconds", type=positive_float, default=60.0,
        help="cache_page's timeout for --cache (60)",
    )  # fmt: skip
    p.add_argument(
        "--profile",
        type=positive_int,
        default=0,
        metavar="N",
        help="instead of the load test: where a Django request's CPU goes, tuned against "
        "litegate, N requests per action and round (no server, no hey)",
    )


def config_from_args(args: argparse.Namespace) -> Config:
    frameworks = tuple(dict.fromkeys(f.strip() for f in args.framework.split(",") if f.strip()))
    bad = [f for f in frameworks if f not in FRAMEWORKS]
    if bad or not frameworks:
        raise ValueError(f"unknown framework(s) {bad}; pick from {', '.join(FRAMEWORKS)}")
    engines = tuple(dict.fromkeys(e.strip() for e in args.engines.split(",") if e.strip()))
    base_of = {e: _variant.base(e) for e in engines}  # (ValueError for a malformed variant)
    bad = [e for e, b in base_of.items() if b not in ENGINES]
    if bad or not engines:
        raise ValueError(f"unknown engine(s) {bad}; pick from {', '.join(ENGINES)}")
    for e in engines:
        _variant.settings(e)  # (ValueError for a policy fair= does not know)
    for f in frameworks:
        if not set(base_of.values()) & set(ENGINES_OF[f]):
            raise ValueError(
                f"none of the engines {', '.join(engines)} runs on {f}; "
                f"its engines: {', '.join(ENGINES_OF[f])}"
            )
    mixes = tuple(m.strip() for m in args.mixes.split(",") if m.strip())
    bad = [m for m in mixes if m not in MIXES]
    if bad:
        raise ValueError(f"unknown mix(es) {bad}; pick from {', '.join(MIXES)}")
    if args.profile:
        return Config(frameworks=("django",), engines=_profile.ENGINES, profile=args.profile)
    caches = tuple(dict.fromkeys(c.strip() for c in args.cache.split(",") if c.strip()))
    bad = [c for c in caches if c not in _cache.CACHES]
    if bad:
        raise ValueError(f"unknown cache(s) {bad}; pick from {', '.join(_cache.CACHES)}")
    if "redis" in caches:
        from ..cache._redis import MISSING, find

        if find() is None:
            raise ValueError(MISSING)
    try:
        hey = _hey.find(args.hey)
    except _hey.HeyMissing as exc:
        raise ValueError(str(exc)) from None
    if caches:
        return Config(frameworks=("django",), engines=("litegate",),
                      seconds=3.0 if args.quick else args.seconds,
                      headline=1 if args.quick else args.headline, sweep=(), mixes=(),
                      workers=args.workers, threads=args.threads, hey=hey, runs=args.runs,
                      caches=caches, cache_c=_ints(args.cache_c),
                      cache_seconds=args.cache_seconds)  # fmt: skip
    if args.quick:
        return Config(frameworks=frameworks, engines=engines, seconds=3.0, headline=1,
                      sweep=(), mixes=(), workers=args.workers, threads=args.threads,
                      reset=True, hey=hey, runs=args.runs,
                      grant_log=args.grant_log)  # fmt: skip
    return Config(
        frameworks=frameworks,
        engines=engines,
        seconds=args.seconds,
        headline=args.headline,
        sweep=_ints(args.sweep),
        mixes=mixes,
        mix_c=_ints(args.mix_c) if mixes else (),
        workers=args.workers,
        threads=args.threads,
        reset=not args.no_reset,
        hey=hey,
        runs=args.runs,
        grant_log=args.grant_log,
    )


def _cells(cfg: Config) -> list[tuple[str, str, int, int]]:
    """(kind, mix, concurrency, repeat) in the order they run."""
    cells = [("headline", "balanced", 20, k) for k in range(cfg.headline)]
    cells += [("sweep", "balanced", n, 0) for n in cfg.sweep]
    cells += [("mix", m, n, 0) for m in cfg.mixes for n in cfg.mix_c]
    return cells


def _seed(path: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "litegate", "web", "seed", path],
        check=True, stdout=subprocess.DEVNULL, timeout=300,
    )  # fmt: skip


# The last line of the traceback of a request that failed on "database is
# locked", and the first line of every failed request's log entry.
_LOCKED = {
    "django": b"django.db.utils.OperationalError: database is locked",
    "fastapi": b"sqlalchemy.exc.OperationalError: (sqlite3.OperationalError) database is locked",
}
_SERVER_ERROR = {"django": b"Internal Server Error:", "fastapi": b"Exception in ASGI application"}


def _count(log: Path, start: int, framework: str) -> tuple[int, int]:
    """Lines of the server's log from ``start`` on: ("database is locked"
    errors, 500 tracebacks), in one pass."""
    locked = errors = 0
    locked_line, error_line = _LOCKED[framework], _SERVER_ERROR[framework]
    with open(log, "rb") as f:
        f.seek(start)
        for line in f:
            locked += line.startswith(locked_line)
            errors += line.startswith(error_line)
    return locked, errors


@dataclass(frozen=True)
class _Side:
    """One framework and engine's files in the run's directory."""

    framework: str
    engine: str
    tmp: str

    @property
    def label(self) -> str:
        return f"{self.framework}-{self.engine}"

    @property
    def db(self) -> str:
        return os.path.join(self.tmp, f"{self.label}.db")

    @property
    def acks(self) -> Path:
        return Path(self.tmp) / f"{self.label}-acks"

    @property
    def log(self) -> Path:
        return Path(self.tmp) / f"{self.label}.log"

    def reset(self, template: str) -> None:
        """A fresh copy of the seeded database, and an empty ledger."""
        for suffix in ("", "-wal", "-shm", "-litegate"):
            if os.path.exists(self.db + suffix):
                os.remove(self.db + suffix)
        shutil.rmtree(self.acks, ignore_errors=True)
        shutil.copyfile(template, self.db)


def _cell(cfg: Config, side: _Side, mix: str, n: int) -> dict[str, Any]:
    log = side.log
    start = log.stat().st_size if log.exists() else 0
    threads = cfg.threads if side.framework == "django" else None
    grants = None
    if cfg.grant_log and _variant.base(side.engine) == _variant.BASE:
        grants = Path(side.tmp) / f"{side.label}-grants"
        shutil.rmtree(grants, ignore_errors=True)
        grants.mkdir()
    env = {diagnostics.GRANT_LOG_ENV: str(grants)} if grants else None
    with Server(side.db, side.engine, log, acks=side.acks, framework=side.framework,
                workers=cfg.workers, threads=threads, env=env) as srv:  # fmt: skip
        threads0, machine0 = srv.thread_sample(), cpu_times()
        summary, _ = _hey.run(cfg.hey, f"{srv.url}/benchmarking/{mix}", n, cfg.seconds)
        threads1 = srv.thread_sample()
        cpu = threads1.cpu_s - threads0.cpu_s
        idle = idle_share(machine0, cpu_times())
        code = srv.stop()
    responses = max(1, summary.responses)
    locked, server_errors = _count(log, start, side.framework)
    return {
        "framework": side.framework,
        "engine": side.engine,
        "mix": mix,
        "c": n,
        "hey": summary.as_dict(),
        "locked": locked,
        "server_errors": server_errors,
        "cpu_s": cpu,
        "cpu_ms_per_request": 1000.0 * cpu / responses,
        # which threads spent it, and how often they slept (voluntary switches)
        "threads": _threads.per_request(threads0, threads1, responses),
        # the whole machine's (hey included): CPU that waited for nothing
        "idle_share": idle,
        "server_exit": code,
        # The server is stopped: the file is what it left.
        "check": _acks.check(side.db, side.acks).as_dict(),
        **(_gate_figures(str(grants), side.db) if grants else {}),
    }


def _gate_figures(folder: str, db: str) -> dict[str, Any]:
    """A cell's grant log: the bounds checked on it (each file's gate apart),
    and where its time went at the app database's gate (a cache on a file of
    its own has a gate of its own: its grants are no hand-overs of this one)."""
    logged = diagnostics.read_grants(folder)
    own = os.path.realpath(db)
    return {
        "grant_log": diagnostics.check_grants(logged),
        "gate_timing": gate_timing([g for g in logged if g.file == own]),
    }


def run(cfg: Config, progress: Progress | None = None) -> dict[str, Any]:
    progress = progress or Progress(0)
    if cfg.profile:
        progress.total = 1.0
        progress.describe(f"profile: {', '.join(_profile.ENGINES)}, {cfg.profile} requests/action")
        with tempfile.TemporaryDirectory(prefix="litegate-bench-web-") as tmp:
            template = os.path.join(tmp, "seeded.db")
            _seed(template)
            profile = _profile.run(cfg.profile, template)
        progress.advance()
        return {"experiment": NAME, "config": asdict(cfg), "profile": profile}
    if cfg.caches:
        progress.total = float(cfg.runs * cfg.headline * len(cfg.cache_c) * len(cfg.caches))
        with tempfile.TemporaryDirectory(prefix="litegate-bench-web-") as tmp:
            template = os.path.join(tmp, "seeded.db")
            _seed(template)
            rows = _cache.run(cfg, template, tmp, progress)
        summary = _cache.summarize(rows)
        return {"experiment": NAME, "config": asdict(cfg), "cache_cells": rows,
                "cache_summary": summary, "targets": _cache.targets(summary)}  # fmt: skip
    cells = _cells(cfg)
    progress.total = float(cfg.runs * len(cells) * len(cfg.sides()))
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="litegate-bench-web-") as tmp:
        template = os.path.join(tmp, "seeded.db")
        _seed(template)
        for r in range(cfg.runs):
            kept: set[_Side] = set()
            for kind, mix, n, k in cells:
                for framework, engine in cfg.sides():
                    progress.describe(f"run {r + 1}: {framework} {engine} {mix} c={n}")
                    side = _Side(framework, engine, tmp)
                    if cfg.reset or side not in kept:
                        side.reset(template)
                        kept.add(side)
                    row = _cell(cfg, side, mix, n)
                    row.update(run=r, kind=kind, repeat=k)
                    results.append(row)
                    progress.advance()
    return {"experiment": NAME, "config": asdict(cfg), "cells": results,
            "summary": summarize(results, cfg)}  # fmt: skip


def _rate(row: dict[str, Any], code: int) -> float:
    h = row["hey"]
    hits: int = h["statuses"].get(str(code), 0)
    answered: int = h["responses"]
    return hits / max(1, answered)


def fives(row: dict[str, Any]) -> int:
    """HTTP 5xx answers of one cell."""
    return sum(v for k, v in row["hey"]["statuses"].items() if k.startswith("5"))


CHECKS = ("integrity", "foreign_keys", "unreadable", "lost", "resurrected", "orphaned")


def _checks(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The database checks of an engine's cells, added up."""
    out: dict[str, Any] = {"cells": len(rows), "violations": 0, "acknowledged": 0}
    out.update({k: 0 for k in CHECKS})
    examples: list[str] = []
    for c in rows:
        ch = c["check"]
        out["violations"] += ch["violations"]
        out["acknowledged"] += sum(ch["acknowledged"].values())
        for k in CHECKS:
            out[k] += len(ch[k]) if k == "integrity" else ch[k]
        examples += ch["integrity"][:2] + ch["examples"]
    out["examples"] = examples[:8]
    return out


def _median_threads(runs: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Each role's figures, median across runs (0 in a run without the role)."""
    roles = sorted({r for run in runs for r in run})
    keys = ("cpu_ms", "voluntary", "involuntary")
    return {
        r: {k: median([run.get(r, {}).get(k, 0.0) for run in runs]) for k in keys} for r in roles
    }


def _engine_summary(mine: list[dict[str, Any]]) -> dict[str, Any]:
    head = [c for c in mine if c["kind"] == "headline"]
    sweep: dict[int, list[dict[str, Any]]] = {}
    for c in mine:
        if c["mix"] == "balanced":
            sweep.setdefault(c["c"], []).append(c)
    mixes: dict[str, dict[str, Any]] = {}
    for c in mine:
        if c["kind"] == "mix":
            mixes.setdefault(c["mix"], {})[str(c["c"])] = {
                "rps": c["hey"]["rps"],
                "p99_s": c["hey"]["percentiles"].get("99", 0.0),
                "slowest_s": c["hey"]["slowest_s"],
                "http_500_rate": _rate(c, 500),
                "http_5xx": fives(c),
                "responses": c["hey"]["responses"],
                "locked": c["locked"],
                "cpu_ms_per_request": c["cpu_ms_per_request"],
                "threads": c.get("threads", {}),  # (absent from results of older runs)
                "idle_share": c.get("idle_share"),
            }
    return {
        "headline": {
            "rps": [c["hey"]["rps"] for c in head],
            "average_s": [c["hey"]["average_s"] for c in head],
            "p90_s": [c["hey"]["percentiles"].get("90", 0.0) for c in head],
            "p99_s": [c["hey"]["percentiles"].get("99", 0.0) for c in head],
            "slowest_s": [c["hey"]["slowest_s"] for c in head],
            "http_500": [c["hey"]["statuses"].get("500", 0) for c in head],
            "http_5xx": [fives(c) for c in head],
            "responses": [c["hey"]["responses"] for c in head],
            "locked": [c["locked"] for c in head],
            "cpu_ms_per_request": [c["cpu_ms_per_request"] for c in head],
            "threads": _median_threads([c.get("threads", {}) for c in head]),
            "idle_share": [c["idle_share"] for c in head if c.get("idle_share") is not None],
        },
        "sweep": {
            str(n): {
                "rps": median([c["hey"]["rps"] for c in rows]),
                "p99_s": median([c["hey"]["percentiles"].get("99", 0.0) for c in rows]),
                "slowest_s": max(c["hey"]["slowest_s"] for c in rows),
                "http_500_rate": median([_rate(c, 500) for c in rows]),
                "http_5xx": sum(fives(c) for c in rows),
                "responses": sum(c["hey"]["responses"] for c in rows),
            }
            for n, rows in sorted(sweep.items())
        },
        "mixes": mixes,
        "checks": _checks(mine),
        **_gate_summary(mine),
    }


def _gate_summary(mine: list[dict[str, Any]]) -> dict[str, Any]:
    """With --grant-log: the gate's timing per cell (the headline's median
    across its runs) and the bounds checked over every cell."""
    logged = [c for c in mine if "gate_timing" in c]
    if not logged:
        return {}
    by_cell: dict[str, list[dict[str, float]]] = {}
    for c in logged:
        by_cell.setdefault(f"{c['mix']} c = {c['c']}", []).append(c["gate_timing"])
    return {
        "gate": {
            cell: {k: median([t[k] for t in runs]) for k in runs[0]}
            for cell, runs in by_cell.items()
        },
        "grant_log": combine_grant_logs([c["grant_log"] for c in logged]),
    }


def summarize(cells: list[dict[str, Any]], cfg: Config) -> dict[str, Any]:
    """Per framework, per engine: the headline's runs, the sweep (medians
    across runs), the mixes, the database checks."""
    out: dict[str, Any] = {}
    for f, e in cfg.sides():
        mine = [c for c in cells if c["framework"] == f and c["engine"] == e]
        out.setdefault(f, {})[e] = _engine_summary(mine)
    return out


def render(result: dict[str, Any]) -> str:
    if "profile" in result:
        return _profile.render(result["profile"])
    if "cache_summary" in result:
        return _cache.render(result)
    from ._render import render as draw

    return draw(result)


def charts(result: dict[str, Any], out: Path) -> list[Path]:
    if "profile" in result:
        return []
    if "cache_summary" in result:
        return _cache.charts(result, out)
    from ._render import charts as draw

    return draw(result, out)
