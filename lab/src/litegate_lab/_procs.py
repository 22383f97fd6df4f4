"""Ending an experiment's child processes: bounded, by PID."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import litegate


def litegate_src() -> str:
    """The directory this process imports ``litegate`` from."""
    return str(Path(litegate.__file__).resolve().parents[1])


def pythonpath(*first: str) -> str:
    """A PYTHONPATH for a child process that imports what this one does:
    ``first``, then the directories of ``litegate_lab`` and ``litegate``
    (two distributions, two source trees in a checkout), then ours."""
    lab_src = str(Path(__file__).resolve().parents[1])
    parts = [*first, lab_src, litegate_src(), os.environ.get("PYTHONPATH", "")]
    return os.pathsep.join(dict.fromkeys(p for p in parts if p))


def reap(procs: Iterable[Any], results: Any, timeout: float) -> None:
    """Join each process for up to ``timeout`` s, SIGKILL one that is still
    alive, then close the results queue and wait for its feeder thread."""
    for p in procs:
        p.join(timeout=timeout)
        if p.is_alive():
            p.kill()
            p.join()
    results.close()
    results.join_thread()
