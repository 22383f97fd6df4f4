"""``litegate doctor PATH`` and ``litegate top PATH``."""

from __future__ import annotations

import argparse
import json
import math
import sys

from ._doctor import NotADatabase, diagnose, probe, render

# --interval beyond this is a typo, not a refresh rate (and the terminal
# wait underneath refuses timeouts past a few weeks)
MAX_INTERVAL = 3600.0


def doctor_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="litegate doctor",
        description="A read-only report on a SQLite database and the processes using it "
        "(journal mode, sizes, quick_check, who holds SQLite's write lock and litegate's "
        "gate), with what to do about anything that needs it. Exit status: 0 nothing needs "
        "action, 1 something does, 2 not a database.",
    )
    p.add_argument("path", metavar="PATH", help="the database file")
    p.add_argument("--json", action="store_true", help="the report as JSON on stdout")
    p.add_argument("--no-check", action="store_true", help="skip quick_check (it reads every page)")
    args = p.parse_args(argv)
    try:
        rep = diagnose(args.path, check=not args.no_check)
    except NotADatabase as exc:
        if args.json:
            print(json.dumps({"path": args.path, "error": str(exc)}))
        print(f"litegate doctor: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(rep.as_dict(), indent=2) if args.json else render(rep))
    return 1 if rep.needs_action else 0


def top_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="litegate top",
        description="A live view of a database across every process using it: the gate's "
        "holder and queue, SQLite's lock holders, commits/s, WAL size and checkpointing. "
        "It only reads; press q or Ctrl-C to leave. Exit status 2: not a database "
        "(missing, a directory, not SQLite), or a bad option.",
    )
    p.add_argument("path", metavar="PATH", help="the database file")
    p.add_argument("--interval", type=float, default=0.5, help="seconds between refreshes")
    p.add_argument("--iterations", type=int, default=None, help="stop after N refreshes")
    args = p.parse_args(argv)
    if not (args.interval > 0 and math.isfinite(args.interval)) or args.interval > MAX_INTERVAL:
        p.error(f"--interval must be a number of seconds > 0 and <= {MAX_INTERVAL:g}")
    if args.iterations is not None and args.iterations < 1:
        p.error("--iterations must be at least 1")
    try:
        path = probe(args.path)
    except NotADatabase as exc:
        print(f"litegate top: {exc}", file=sys.stderr)
        return 2
    try:
        from ._top import run
    except ImportError as exc:  # pragma: no cover - rich missing
        print(f"litegate top needs rich ({exc}): pip install 'litegate[ops]'", file=sys.stderr)
        return 2
    return run(path, interval=args.interval, iterations=args.iterations)
