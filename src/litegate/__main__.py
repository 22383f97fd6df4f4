"""``litegate`` / ``python -m litegate``: the command line.

Commands: ``doctor`` and ``top``, to look at a database in use, and
``worker``, which runs a function over a job queue (``litegate worker
--help``). Other distributions add commands through the ``litegate.commands``
entry point group (a name, and a function that takes the arguments after it
and returns the exit code): the lab, ``litegate-lab``, adds ``bench`` and
``web``. Each command is imported only when it runs, so ``import litegate``
never pays for them.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from importlib.metadata import entry_points

import litegate

COMMANDS_GROUP = "litegate.commands"
"""The entry point group where other distributions register commands."""

_BUILTIN = {
    "doctor": "a read-only report on a database, with what to do; 'litegate doctor --help'",
    "top": "a live view of a database across processes; 'litegate top --help'",
    "worker": "run a function for every job of a queue; 'litegate worker --help' for options",
}

# The lab's commands, named in the help and answered with how to install the
# lab when it is absent.
_LAB = {
    "bench": "run a lab experiment (the seeds); 'litegate bench --help' lists them",
    "web": "the web app (Django or FastAPI): 'litegate web seed DB', 'litegate web serve DB'",
}
_LAB_INSTALL = (
    "pip install litegate-lab\n"
    "(in a checkout of litegate: make .venv/.installed, or pip install -e lab)"
)


def _plugins() -> dict[str, str]:
    """Command name -> entry point value, for every registered command
    that is not a built-in one."""
    return {
        ep.name: ep.value for ep in entry_points(group=COMMANDS_GROUP) if ep.name not in _BUILTIN
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="litegate",
        description="litegate: one SQLite file, many threads and processes.",
    )
    parser.add_argument("--version", action="version", version=f"litegate {litegate.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    plugins = _plugins()
    helps = dict(_BUILTIN)
    for name in sorted({*_LAB, *plugins}):
        text = _LAB.get(name, f"from {plugins.get(name, '')}")
        helps[name] = text if name in plugins else f"{text} (needs litegate-lab)"
    for name in sorted(helps):
        sub.add_parser(name, help=helps[name], add_help=False)
    return parser


def _plugin(name: str) -> Callable[[list[str]], int] | None:
    """The function the ``name`` command's entry point names, or None."""
    for ep in entry_points(group=COMMANDS_GROUP):
        if ep.name == name:
            main_of: Callable[[list[str]], int] = ep.load()
            return main_of
    return None


def _external(name: str, args: list[str]) -> int | None:
    """Run command ``name`` from its entry point; None when no distribution
    registers it (2, with how to install, for one of the lab's)."""
    try:
        main_of = _plugin(name)
    except ModuleNotFoundError as exc:  # registered, but its distribution is broken
        print(
            f"litegate {name} cannot import {exc.name!r}; reinstall the distribution "
            f"that provides it ({_plugins().get(name, '?')}).",
            file=sys.stderr,
        )
        return 2
    if main_of is not None:
        return main_of(args)
    if name in _LAB:
        print(
            f"litegate {name} is part of litegate's lab, which is not installed.\n"
            f"Install it with:  {_LAB_INSTALL}",
            file=sys.stderr,
        )
        return 2
    return None


def _run(args: list[str]) -> int:
    if args and args[0] in ("doctor", "top"):
        from litegate.ops import _cli as ops_cli

        main_of = ops_cli.doctor_main if args[0] == "doctor" else ops_cli.top_main
        return main_of(args[1:])
    if args and args[0] == "worker":
        from litegate.queue._cli import main as worker_main

        return worker_main(args[1:])
    if args and not args[0].startswith("-"):
        code = _external(args[0], args[1:])
        if code is not None:
            return code
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
