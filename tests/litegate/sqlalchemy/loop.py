"""A witness that the event loop keeps running (for the asyncio tests)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Ticker:
    """Counts 1 ms sleeps on the loop, from start() to stop()."""

    def __init__(self) -> None:
        self.ticks = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> Ticker:
        self._task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        while True:
            self.ticks += 1
            await asyncio.sleep(0.001)

    async def during(self, seconds: float) -> int:
        """How many times the loop ticked in the next ``seconds``."""
        before = self.ticks
        await asyncio.sleep(seconds)
        return self.ticks - before

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()


async def until(value: Callable[[], object], expected: object, what: str,
                timeout: float = 10.0) -> None:  # fmt: skip
    """Poll ``value()`` on the loop until it equals ``expected``; fail (not
    hang) after ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while value() != expected:
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.001)
