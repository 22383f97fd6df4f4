"""A handler module that is slow to import in worker processes (not in the
supervisor), so that a test can signal the supervisor while they start."""

from __future__ import annotations

import multiprocessing
import time

from tests.litegate.queue.handlers import record

if multiprocessing.parent_process() is not None:
    time.sleep(1.0)

__all__ = ["record"]
