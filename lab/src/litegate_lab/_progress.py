"""Progress display for long lab runs: a rich progress bar on stderr, or
nothing at all (not a terminal, ``--json``, or ``--no-progress``)."""

from __future__ import annotations

import sys
from types import TracebackType
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.progress import Progress as RichProgress
    from rich.progress import TaskID


class Progress:
    """Counts units of work (cells, requests) and shows them on stderr.

    The disabled version does nothing, so experiments call it
    unconditionally. Only the thread that runs the experiment calls it.
    """

    def __init__(self, total: float, description: str = "", *, enabled: bool = False) -> None:
        self._total = total
        self.done = 0.0
        self.description = description
        self._bar: RichProgress | None = None
        self._task: TaskID | None = None
        if enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(
                TextColumn("[progress.description]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                console=Console(file=sys.stderr),
                transient=True,
            )
            self._task = self._bar.add_task(description, total=total)

    @staticmethod
    def wanted(stream: TextIO, *, json_mode: bool, disabled: bool) -> bool:
        """Show progress only on an interactive terminal, and not with --json."""
        return not (json_mode or disabled) and stream.isatty()

    @property
    def total(self) -> float:
        return self._total

    @total.setter
    def total(self, value: float) -> None:
        self._total = value
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, total=value)

    @property
    def enabled(self) -> bool:
        return self._bar is not None

    def __enter__(self) -> Progress:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._bar is not None:
            self._bar.stop()

    def describe(self, text: str) -> None:
        """Say what is running now."""
        self.description = text
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, description=text)

    def advance(self, amount: float = 1.0) -> None:
        self.set_done(self.done + amount)

    def set_done(self, done: float) -> None:
        self.done = done
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=done)
