"""``litegate bench cache``: Django's cache backends on one machine, in one
run (issue 37).

Backends (each as its documentation sets it up, entries never expiring):

- ``litegate``: ``litegate.django.cache.LitegateCache`` on its own file;
- ``database``: Django's ``DatabaseCache`` on SQLite with Django's tuned
  settings (WAL, ``transaction_mode: IMMEDIATE``, 5 s timeout, persistent
  connections), ``MAX_ENTRIES`` above the key space;
- ``filebased``: Django's ``FileBasedCache`` in a directory, the same;
- ``redis``: Django's ``RedisCache`` (redis-py) on Debian's ``redis-server``,
  started here on 127.0.0.1 with a throwaway configuration (no
  persistence) and stopped by its PID.

Workloads: ``get``, ``set``, ``mix90`` (90 % get, 10 % set), ``mix50``,
``incr`` (on 100 counters); keys drawn from a Zipf distribution (exponent
``--zipf``) over ``--keys`` keys, values of ``--sizes`` bytes (random, so
incompressible). Every key is filled before the cells, so a get hits.
Cells: ``--cells`` P x T, P processes of T threads each, ``--seconds``
each. Every backend's processes are started once per run and kept for its
cells; cells run cell-major (every backend, then the next cell). Figures
per cell: operations per second, p50 and p99 of one call's latency (a
histogram within ~2 %), errors raised, gets that missed, and for ``incr``
the increments lost (the counters' sum against the calls that returned).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .._args import csv, positive_float, positive_int
from .._progress import Progress
from .._report import fmt_pct
from .._stats import cv, median
from . import _redis
from ._worker import BACKENDS, WORKLOADS, percentile_us

__all__ = ["BACKENDS", "HELP", "NAME", "WORKLOADS", "Config", "add_arguments", "charts",
           "config_from_args", "render", "run", "summarize", "targets"]  # fmt: skip

NAME = "cache"
HELP = "Django caches: LitegateCache, DatabaseCache, FileBasedCache and RedisCache (issue 37)"
SIZES = (100, 10240)
CELLS = ((1, 1), (1, 8), (1, 32), (4, 1), (4, 8), (4, 32))
HEADLINE = (4, 8)  # the cell: 8 threads x 4 processes
_LIMIT = 600.0  # seconds any one answer of a worker may take


@dataclass(frozen=True)
class Config:
    backends: tuple[str, ...] = BACKENDS
    workloads: tuple[str, ...] = WORKLOADS
    sizes: tuple[int, ...] = SIZES
    cells: tuple[tuple[int, int], ...] = CELLS
    seconds: float = 2.0
    keys: int = 10_000
    zipf: float = 0.99
    runs: int = 1
    skipped: tuple[str, ...] = ()  # backends left out, and why


def _cells(text: str) -> tuple[tuple[int, int], ...]:
    out = []
    for item in text.split(","):
        p, x, t = item.strip().partition("x")
        if not x or not p.isdigit() or not t.isdigit() or int(p) < 1 or int(t) < 1:
            raise argparse.ArgumentTypeError(
                f"cells are PxT (processes x threads), comma-separated, e.g. 1x1,4x8; got {text!r}"
            )
        out.append((int(p), int(t)))
    return tuple(dict.fromkeys(out))


def _sizes(text: str) -> tuple[int, ...]:
    try:
        out = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"sizes in bytes, comma-separated: {text!r}") from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"sizes must be at least 1 byte: {text!r}")
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backends", type=csv(BACKENDS), default=BACKENDS, metavar="LIST",
                   help="comma-separated: " + ", ".join(BACKENDS) + " (all; redis is left "
                   "out with a note where redis-server is not installed)")  # fmt: skip
    p.add_argument("--workloads", type=csv(WORKLOADS), default=WORKLOADS, metavar="LIST",
                   help="comma-separated: " + ", ".join(WORKLOADS) + " (all)")  # fmt: skip
    p.add_argument("--sizes", type=_sizes, default=SIZES, metavar="LIST",
                   help="value sizes in bytes (100,10240)")  # fmt: skip
    p.add_argument("--cells", type=_cells, default=CELLS, metavar="LIST",
                   help="PxT cells (1x1,1x8,1x32,4x1,4x8,4x32)")  # fmt: skip
    p.add_argument("--seconds", type=positive_float, default=2.0, help="per cell (2)")
    p.add_argument("--keys", type=positive_int, default=10_000, help="key space (10000)")
    p.add_argument("--zipf", type=positive_float, default=0.99, help="Zipf exponent (0.99)")


def config_from_args(args: argparse.Namespace) -> Config:
    backends = tuple(args.backends)
    skipped: tuple[str, ...] = ()
    if "redis" in backends and _redis.find() is None:
        if args.backends != BACKENDS:  # asked for by name
            raise ValueError(_redis.MISSING)
        backends = tuple(b for b in backends if b != "redis")
        skipped = (f"redis: {_redis.MISSING}",)
    if args.quick:
        return Config(backends=backends, workloads=("mix90", "incr"), sizes=(100,),
                      cells=((1, 1), (4, 8)), seconds=1.0, keys=2000, zipf=args.zipf,
                      runs=args.runs, skipped=skipped)  # fmt: skip
    return Config(
        backends=backends,
        workloads=tuple(args.workloads),
        sizes=tuple(args.sizes),
        cells=tuple(args.cells),
        seconds=args.seconds,
        keys=args.keys,
        zipf=args.zipf,
        runs=args.runs,
        skipped=skipped,
    )


class _Proc:
    """One worker process and its end of the pipe."""

    def __init__(self, ctx: Any, backend: str, settings: dict[str, Any]) -> None:
        from . import _worker

        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker.main, args=(child, backend, settings), daemon=True)
        self.proc.start()
        child.close()
        if not self.conn.poll(120):
            raise RuntimeError(f"the {backend} worker did not start")
        self.conn.recv()

    def ask(self, cmd: str, arg: Any = None) -> Any:
        self.conn.send((cmd, arg))
        return self.answer()

    def answer(self) -> Any:
        if not self.conn.poll(_LIMIT):
            raise RuntimeError("a worker did not answer")
        status, value = self.conn.recv()
        if status != "ok":
            raise RuntimeError(f"a worker failed: {value}")
        return value

    def stop(self) -> None:
        try:
            self.conn.send(("quit", None))
            self.conn.poll(10)
        except OSError:
            pass
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


def _one_cell(procs: list[_Proc], spec: dict[str, Any]) -> dict[str, Any]:
    for i, p in enumerate(procs):
        p.conn.send(("cell", {**spec, "seed": spec["seed"] + i}))
    for p in procs:
        if not p.conn.poll(_LIMIT) or p.conn.recv() != "ready":
            raise RuntimeError("a worker was not ready")
    for p in procs:
        p.conn.send("go")
    parts = [p.answer() for p in procs]
    hist: dict[int, int] = {}
    for part in parts:
        for idx, c in part["hist"].items():
            hist[int(idx)] = hist.get(int(idx), 0) + c
    ops = sum(x["ops"] for x in parts)
    seconds = max(x["seconds"] for x in parts)
    return {
        "ops": ops,
        "ops_s": ops / seconds if seconds else 0.0,
        "p50_us": percentile_us(hist, 50),
        "p99_us": percentile_us(hist, 99),
        "errors": sum(x["errors"] for x in parts),
        "error": next((x["error"] for x in parts if x["error"]), ""),
        "misses": sum(x["misses"] for x in parts),
        "incrs": sum(x["incrs"] for x in parts),
    }


def run(cfg: Config, progress: Progress | None = None) -> dict[str, Any]:
    progress = progress or Progress(0)
    per_run = len(cfg.sizes) * len(cfg.workloads) * len(cfg.cells) * len(cfg.backends)
    progress.total = float(cfg.runs * per_run)
    most = max(p for p, _ in cfg.cells)
    ctx = mp.get_context("spawn")
    cells: list[dict[str, Any]] = []
    fills: list[dict[str, Any]] = []
    redis_version = ""
    for r in range(cfg.runs):
        server = _redis.RedisServer().start() if "redis" in cfg.backends else None
        if server is not None:
            redis_version = server.version()
        procs: dict[str, list[_Proc]] = {}
        try:
            with tempfile.TemporaryDirectory(prefix="litegate-bench-cache-") as tmp:
                from ._worker import settings_for

                for b in cfg.backends:
                    progress.describe(f"run {r + 1}: starting {b}")
                    settings = settings_for(b, tmp, server.url if server else "")
                    procs[b] = [_Proc(ctx, b, settings) for _ in range(most)]
                    procs[b][0].ask("setup")
                for size in cfg.sizes:
                    for b in cfg.backends:
                        progress.describe(f"run {r + 1}: filling {b}, {size} B values")
                        secs = procs[b][0].ask("fill", (size, cfg.keys))
                        fills.append({"run": r, "backend": b, "size": size, "seconds": secs})
                    for workload in cfg.workloads:
                        for p, t in cfg.cells:
                            for b in cfg.backends:
                                progress.describe(f"run {r + 1}: {workload} {size} B {p}x{t} {b}")
                                cells.append(_cell(cfg, procs[b][:p], b, workload, size, p, t, r))
                                progress.advance()
        finally:
            for ps in procs.values():
                for proc in ps:
                    proc.stop()
            if server is not None:
                server.stop()
    summary = summarize(cells)
    return {"experiment": NAME, "config": asdict(cfg), "cells": cells, "fills": fills,
            "redis_version": redis_version, "summary": summary,
            "targets": targets(summary, cfg)}  # fmt: skip


def _cell(cfg: Config, procs: list[_Proc], backend: str, workload: str, size: int,
          p: int, t: int, r: int) -> dict[str, Any]:  # fmt: skip
    if workload == "incr":
        procs[0].ask("reset")
    spec = {"workload": workload, "size": size, "threads": t, "seconds": cfg.seconds,
            "keys": cfg.keys, "zipf": cfg.zipf, "seed": 1000 * r + 10 * p + t}  # fmt: skip
    row = _one_cell(procs, spec)
    if workload == "incr":
        total = procs[0].ask("sum")
        row["counted"] = total
        row["lost"] = row["incrs"] - total
    row.update(run=r, backend=backend, workload=workload, size=size, processes=p, threads=t)
    return row


def _key(c: dict[str, Any]) -> str:
    return f"{c['workload']}/{c['size']}/{c['processes']}x{c['threads']}/{c['backend']}"


def summarize(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Per workload/size/PxT/backend: medians across runs, CV of ops/s,
    errors and lost increments over all runs."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for c in cells:
        groups.setdefault(_key(c), []).append(c)
    out: dict[str, Any] = {}
    for k, rows in groups.items():
        rate = [x["ops_s"] for x in rows]
        out[k] = {
            "ops_s": median(rate),
            "ops_s_cv": cv(rate),
            "ops_s_runs": rate,
            "p50_us": median([x["p50_us"] for x in rows]),
            "p99_us": median([x["p99_us"] for x in rows]),
            "errors": sum(x["errors"] for x in rows),
            "error": next((x["error"] for x in rows if x["error"]), ""),
            "misses": sum(x["misses"] for x in rows),
            "ops": sum(x["ops"] for x in rows),
            "lost": sum(x.get("lost", 0) for x in rows),
            "incrs": sum(x["incrs"] for x in rows),
        }
    return out


# (workload, litegate over this backend at least, target text)
_RATIO_TARGETS = (
    ("mix90", "database", 5.0, "ops/s, 90/10 mix, 8 threads x 4 processes, / DatabaseCache"),
    ("get", "redis", 2.0, "get ops/s / RedisCache"),
    ("set", "redis", 0.5, "set ops/s / RedisCache"),
    ("mix90", "redis", 1.0, "90/10 mix / RedisCache"),
)


def targets(summary: dict[str, Any], cfg: Config) -> list[dict[str, Any]]:
    """The issue's targets, at 8 threads x 4 processes and the smallest
    value size, as measured in this run (missing cells: not measured)."""
    out = []
    size = min(cfg.sizes)
    p, t = HEADLINE
    for workload, other, bar, text in _RATIO_TARGETS:
        mine = summary.get(f"{workload}/{size}/{p}x{t}/litegate")
        theirs = summary.get(f"{workload}/{size}/{p}x{t}/{other}")
        if mine is None or theirs is None or not theirs["ops_s"]:
            continue
        ratio = mine["ops_s"] / theirs["ops_s"]
        out.append({
            "target": f"{text} >= {bar:g}x ({size} B values, {p}x{t})",
            "value": f"{ratio:.2f}x ({mine['ops_s']:,.0f} / {theirs['ops_s']:,.0f} ops/s)",
            "ratio": ratio,
            "met": ratio >= bar,
        })  # fmt: skip
    incr = [v for k, v in summary.items() if k.startswith("incr/") and k.endswith("/litegate")]
    if incr:
        lost = sum(v["lost"] for v in incr)
        errors = sum(v["errors"] for v in incr)
        calls = sum(v["incrs"] for v in incr)
        out.append({
            "target": "incr across threads and processes: exact count, 0 errors (LitegateCache)",
            "value": f"{lost} lost of {calls:,}, {errors} errors",
            "met": lost == 0 and errors == 0,
        })  # fmt: skip
    return out


def _fmt_rate(s: dict[str, Any]) -> str:
    cvs = f" ({fmt_pct(s['ops_s_cv'])})" if s["ops_s_cv"] is not None else ""
    return f"{s['ops_s']:,.0f}{cvs}"


def render(result: dict[str, Any]) -> str:
    cfg = result["config"]
    summ = result["summary"]
    backends = cfg["backends"]
    lines = [
        f"litegate bench cache: {cfg['runs']} run(s), {cfg['seconds']:g} s per cell, "
        f"{cfg['keys']:,} keys (Zipf {cfg['zipf']:g}), every key filled first. Per cell: "
        "ops/s median (CV across runs); p50 / p99 of one call in microseconds; errors raised "
        "(misses: gets that found nothing; lost: increments the counters do not show).",
        f"redis: {result.get('redis_version') or 'not run'}",
    ]
    lines += [f"left out: {s}" for s in cfg.get("skipped", [])]
    w = 30
    for size in cfg["sizes"]:
        for workload in cfg["workloads"]:
            lines += ["", f"== {workload}, {size:,} B values =="]
            lines.append(f"  {'P x T':<7}" + "".join(f"{b:>{w}}" for b in backends))
            for p, t in cfg["cells"]:
                row = f"  {f'{p} x {t}':<7}"
                for b in backends:
                    s = summ.get(f"{workload}/{size}/{p}x{t}/{b}")
                    if s is None:
                        row += f"{'-':>{w}}"
                        continue
                    cell = f"{_fmt_rate(s)} {s['p50_us']:,.0f}/{s['p99_us']:,.0f}"
                    extra = []
                    if s["errors"]:
                        extra.append(f"E{s['errors']}")
                    if s["misses"]:
                        extra.append(f"M{s['misses']}")
                    if workload == "incr":
                        extra.append(f"L{s['lost']}")
                    row += f"{cell + (' ' + ','.join(extra) if extra else ''):>{w}}"
                lines.append(row)
    errors = {k: v["error"] for k, v in summ.items() if v["error"]}
    if errors:
        lines += ["", "First error per cell (E: errors, M: misses, L: lost increments):"]
        lines += [f"  {k}: {e}" for k, e in list(errors.items())[:12]]
    incr = {k: v for k, v in summ.items() if k.startswith("incr/")}
    if incr:
        lines += ["", "incr: increments that returned vs what the counters show, all runs:"]
        for b in backends:
            mine = [v for k, v in incr.items() if k.endswith(f"/{b}")]
            if mine:
                calls = sum(v["incrs"] for v in mine)
                lost = sum(v["lost"] for v in mine)
                errs = sum(v["errors"] for v in mine)
                lines.append(f"  {b:<10} {calls:>12,} returned, {lost:>10,} lost, {errs:,} raised")
    if result["targets"]:
        lines += ["", "Targets (issue 37):"]
        for tg in result["targets"]:
            lines.append(f"  [{'met' if tg['met'] else 'MISSED'}] {tg['target']}: {tg['value']}")
    return "\n".join(lines)


def charts(result: dict[str, Any], out: Path) -> list[Path]:
    from .._charts import Bar, grouped_bars

    cfg = result["config"]
    summ = result["summary"]
    files = []
    labels = [f"{p}x{t}" for p, t in cfg["cells"]]
    for size in cfg["sizes"]:
        panels = []
        for workload in cfg["workloads"]:
            series: dict[str, list[Bar]] = {}
            for b in cfg["backends"]:
                bars = []
                for p, t in cfg["cells"]:
                    s = summ.get(f"{workload}/{size}/{p}x{t}/{b}")
                    runs = s["ops_s_runs"] if s else [0.0]
                    bars.append(Bar(median(runs), min(runs), max(runs)))
                series[b] = bars
            panels.append((f"{workload}, {size:,} B values (processes x threads)", labels,
                           series))  # fmt: skip
        path = out / f"cache-ops-{size}.png"
        files.append(grouped_bars(path, title=f"Django cache backends: ops/s, {size:,} B values",
                                  panels=panels, ylabel="ops/s"))  # fmt: skip
    return files
