"""``litegate bench <experiment> [options]``."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, Protocol

from . import cache, contention, durability, fairness, micro, queue, replication, tasks, web
from ._args import positive_float as _positive_float
from ._args import positive_int as _positive_int
from ._progress import Progress
from ._report import (
    cpu_times,
    environment,
    idle_share,
    out_dir,
    timestamp,
    to_json,
    write_json,
)


class Experiment(Protocol):
    NAME: str
    HELP: str

    def add_arguments(self, p: argparse.ArgumentParser) -> None: ...
    def config_from_args(self, args: argparse.Namespace) -> Any: ...
    def run(self, cfg: Any, progress: Progress | None = None) -> dict[str, Any]: ...
    def render(self, result: dict[str, Any]) -> str: ...
    def charts(self, result: dict[str, Any], out: Path) -> list[Path]: ...


EXPERIMENTS: dict[str, Experiment] = {
    cache.NAME: cache,
    contention.NAME: contention,
    durability.NAME: durability,
    fairness.NAME: fairness,
    micro.NAME: micro,
    queue.NAME: queue,
    replication.NAME: replication,
    tasks.NAME: tasks,
    web.NAME: web,
}

_EPILOG = """\
Every run works on a fresh database in a temporary directory. Results go to
--out DIR (default ./results/<experiment>-<timestamp>/): <experiment>.json
with every raw figure, report.txt (the table) and PNG charts. With --runs N
the tables show the median of each figure across runs and its coefficient of
variation; a difference smaller than --noise-k x CV is marked "~" (within
noise). Never trust one run's p99 or max (seed 002).
"""


def _common(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("common options")
    g.add_argument(
        "--runs",
        type=_positive_int,
        default=1,
        metavar="N",
        help="repeat the whole experiment N times; report medians across runs and their "
        "coefficient of variation (default 1; 5 to trust a p99)",
    )
    g.add_argument("--quick", action="store_true", help="a small configuration that runs fast")
    g.add_argument(
        "--out",
        metavar="DIR",
        default=None,
        help="where to write JSON, report and charts (default ./results/<experiment>-<timestamp>)",
    )
    g.add_argument(
        "--json",
        action="store_true",
        help="print the JSON (every raw figure) on stdout instead of the table",
    )
    g.add_argument("--no-charts", action="store_true", help="skip the PNG charts")
    g.add_argument(
        "--no-progress", action="store_true", help="no progress bar (it is on for a terminal)"
    )
    g.add_argument(
        "--noise-k",
        type=_positive_float,
        default=2.0,
        metavar="K",
        help='a difference smaller than K x CV is "within noise" (default 2)',
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="litegate bench",
        description="Run one of the lab's experiments (the seeds) and report the results.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="experiment", metavar="EXPERIMENT", required=True)
    for name, exp in EXPERIMENTS.items():
        sp = sub.add_parser(
            name,
            help=exp.HELP,
            description=_doc(exp),
            epilog=_EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        _common(sp)
        exp.add_arguments(sp)
    return parser


def _doc(exp: Experiment) -> str:
    return str(getattr(exp, "__doc__", "") or "")


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (None where the OS has none)."""
    try:
        return list(os.getloadavg())
    except (AttributeError, OSError):
        return None


def cpu_busy(seconds: float = 0.5) -> float | None:
    """The fraction of all CPUs busy over the next ``seconds`` (Linux's
    /proc/stat; None elsewhere). Taken just before a run, it is other
    people's work: this process is idle while it samples."""
    a = cpu_times()
    time.sleep(seconds)
    idle = idle_share(a, cpu_times())
    return None if idle is None else 1.0 - idle


BUSY_LIMIT = 0.25
"""Warn when more than this fraction of the CPUs was busy before a run."""


def busy_machine_warning(busy: float | None) -> str:
    """A warning when something else was already using the CPUs: the
    figures of a latency benchmark are then partly someone else's."""
    if busy is None or busy <= BUSY_LIMIT:
        return ""
    return (
        f"WARNING: {100 * busy:.0f} % of the CPUs were busy with other work just before "
        "this run: the figures may be disturbed; rerun on a quiet machine."
    )


def main(argv: list[str]) -> int:
    """Run ``litegate bench``; returns the exit code (argparse errors raise
    ``SystemExit(2)``)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    exp = EXPERIMENTS[args.experiment]
    try:
        cfg = exp.config_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    stamp = timestamp()
    out = out_dir(args.out, exp.NAME, stamp)
    show = Progress.wanted(sys.stderr, json_mode=args.json, disabled=args.no_progress)
    load_before = load_average()
    busy_before = cpu_busy()
    with Progress(0, exp.NAME, enabled=show) as progress:
        result = exp.run(cfg, progress)
    result["env"] = environment()
    result["env"]["loadavg_before"] = load_before
    result["env"]["loadavg_after"] = load_average()
    result["env"]["cpu_busy_before"] = busy_before
    result["out_dir"] = str(out)
    files: list[Path] = []
    text = exp.render(result)
    warning = busy_machine_warning(busy_before)
    if warning:
        text += "\n\n" + warning
        if args.json:
            print(warning, file=sys.stderr)
    (out / "report.txt").write_text(text + "\n", encoding="utf-8")
    files.append(out / "report.txt")
    if not args.no_charts:
        files.extend(exp.charts(result, out))
    json_path = out / f"{exp.NAME}.json"
    files.append(json_path)
    result["files"] = [str(f) for f in files]
    write_json(json_path, result)
    listing = ", ".join(f.name for f in files)
    if args.json:
        sys.stdout.write(to_json(result) + "\n")
        print(f"results in {out}/: {listing}", file=sys.stderr)
    else:
        print(text)
        print(f"\nresults in {out}/: {listing}")
    return 0
