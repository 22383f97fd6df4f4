"""Ending an experiment's child processes: bounded, by PID."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


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
