"""The lab: ``litegate bench <experiment>`` reproduces the seeds'
experiments and measures litegate against the usual ways of doing the same
thing; ``litegate web`` serves the web app in Django or FastAPI.

A distribution of its own, ``litegate-lab`` (``pip install litegate-lab``;
``make .venv/.installed`` in a checkout): the ``litegate`` command finds
``bench`` and ``web`` through its ``litegate.commands`` entry points, which
name :func:`bench_main` and :func:`web_main`.

This package stays light on import: the child processes of an experiment
import its module under ``spawn``, and must not pay for matplotlib.
"""

from __future__ import annotations

import importlib.util
import sys
from importlib import import_module

INSTALL = "pip install litegate-lab"
"""How to get the lab and everything it needs."""

LAB_REQUIREMENTS = ("matplotlib", "rich", "sqlalchemy")
"""Top-level modules ``litegate bench`` needs before any experiment runs."""


def missing_requirements() -> list[str]:
    """The lab's required modules that cannot be imported here."""
    return [name for name in LAB_REQUIREMENTS if importlib.util.find_spec(name) is None]


def bench_main(args: list[str]) -> int:
    """``litegate bench ARGS``; returns the exit code."""
    missing = missing_requirements()
    if missing:
        print(
            f"litegate bench needs {', '.join(missing)}, which litegate-lab depends on.\n"
            f"Install it with:  {INSTALL}",
            file=sys.stderr,
        )
        return 2
    try:
        cli = import_module("litegate_lab._cli")
    except ModuleNotFoundError as exc:
        print(
            f"litegate bench cannot import {exc.name!r}: litegate-lab is incompletely installed.\n"
            f"Install it with:  {INSTALL}",
            file=sys.stderr,
        )
        return 2
    code: int = cli.main(args)
    return code


def web_main(args: list[str]) -> int:
    """``litegate web ARGS``; returns the exit code."""
    try:
        cli = import_module("litegate_lab.web._cli")
    except ModuleNotFoundError as exc:
        print(
            f"litegate web needs {exc.name!r}, which litegate-lab depends on.\n"
            f"Install it with:  {INSTALL}",
            file=sys.stderr,
        )
        return 2
    code: int = cli.main(args)
    return code
