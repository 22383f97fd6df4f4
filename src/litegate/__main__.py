"""``litegate`` / ``python -m litegate``: the command line.

Commands: ``doctor`` and ``top``, to look at a database in use; ``bench``,
the lab (``litegate bench --help``); ``web``, seed 003's
app in Django or FastAPI (``litegate web --help``); and ``worker``, which runs a function
over a job queue (``litegate worker --help``). The lab lives in
:mod:`litegate.lab` and needs the ``lab`` extra; the worker lives in
:mod:`litegate.queue`. Both are imported only when their command runs, so
``import litegate`` never pays for them.
"""

from __future__ import annotations

import argparse
import os
import sys

import litegate

_INSTALL = "pip install 'litegate[lab]'"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="litegate",
        description="litegate: one SQLite file, many threads and processes.",
    )
    parser.add_argument("--version", action="version", version=f"litegate {litegate.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    sub.add_parser(
        "bench",
        help="run a lab experiment (the seeds); 'litegate bench --help' lists them",
        add_help=False,
    )
    sub.add_parser(
        "doctor",
        help="a read-only report on a database, with what to do; 'litegate doctor --help'",
        add_help=False,
    )
    sub.add_parser(
        "top",
        help="a live view of a database across processes; 'litegate top --help'",
        add_help=False,
    )
    sub.add_parser(
        "web",
        help="seed 003's app (Django or FastAPI): 'litegate web seed DB', 'litegate web serve DB'",
        add_help=False,
    )
    sub.add_parser(
        "worker",
        help="run a function for every job of a queue; 'litegate worker --help' for options",
        add_help=False,
    )
    return parser


def _web(args: list[str]) -> int:
    try:
        from litegate.lab.web._cli import main as web_main
    except ModuleNotFoundError as exc:
        print(
            f"litegate web needs the web extra (missing: {exc.name!r}).\n"
            "Install it with:  pip install 'litegate[web]'",
            file=sys.stderr,
        )
        return 2
    return web_main(args)


def _bench(args: list[str]) -> int:
    from importlib import import_module

    lab = import_module("litegate.lab")
    missing: list[str] = lab.missing_requirements()
    if missing:
        print(
            f"litegate bench needs the lab extra (missing: {', '.join(missing)}).\n"
            f"Install it with:  {_INSTALL}",
            file=sys.stderr,
        )
        return 2
    try:
        cli = import_module("litegate.lab._cli")
    except ModuleNotFoundError as exc:
        print(
            f"litegate bench cannot import {exc.name!r}: the lab extra is incomplete.\n"
            f"Install it with:  {_INSTALL}",
            file=sys.stderr,
        )
        return 2
    code: int = cli.main(args)
    return code


def _run(args: list[str]) -> int:
    if args and args[0] == "bench":
        return _bench(args[1:])
    if args and args[0] in ("doctor", "top"):
        from litegate.ops import _cli as ops_cli

        main_of = ops_cli.doctor_main if args[0] == "doctor" else ops_cli.top_main
        return main_of(args[1:])
    if args and args[0] == "web":
        return _web(args[1:])
    if args and args[0] == "worker":
        from litegate.queue._cli import main as worker_main

        return worker_main(args[1:])
    _parser().parse_args(args)  # prints help or a usage error and exits
    return 2  # pragma: no cover - parse_args always exits here


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``litegate`` command; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        code = _run(args)
        sys.stdout.flush()  # a reader that went away shows here, not at exit
        return code
    except SystemExit as exc:  # argparse: --help exits 0, usage errors exit 2
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of our output went away (`litegate doctor --json | head`):
        # stop quietly. Python flushes stdout again at exit, so point it at
        # /dev/null first, or that flush fails too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 141  # 128 + SIGPIPE: what a shell shows for a command the pipe stopped


if __name__ == "__main__":
    sys.exit(main())
