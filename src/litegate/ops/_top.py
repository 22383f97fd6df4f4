"""``litegate top PATH``: a live view of one database across every process
that uses it. It only reads shared state (the sidecar's ticket table, the
-shm file's WAL index header, /proc); it never takes the gate."""

from __future__ import annotations

import os
import select
import sys
import termios
import time
import tty
from dataclasses import dataclass, field
from typing import Any

from .._checkpoint import litestream_markers
from ._inspect import (
    GateSnapshot,
    SqliteLocks,
    WalIndex,
    gate_snapshot,
    litestream_asked,
    sqlite_locks,
    wal_index,
)


@dataclass
class Sample:
    at: float
    gate: GateSnapshot
    locks: SqliteLocks
    wal: WalIndex | None
    wal_bytes: int
    litestream: bool = False  # asked for (checkpoints="litestream") or its folder is there


@dataclass
class View:
    """What the screen shows, from the samples so far."""

    path: str
    held_since: dict[int, float] = field(default_factory=dict)  # ticket -> first seen
    last: Sample | None = None
    commits_per_s: float = 0.0
    backfill_per_s: float = 0.0
    grants_per_s: float = 0.0  # tickets served by the gate per second
    refreshes: int = 0

    def update(self, s: Sample) -> None:
        prev, self.last = self.last, s
        self.refreshes += 1
        if s.gate.holder is not None:
            self.held_since.setdefault(s.gate.holder.ticket, s.at)
            for t in list(self.held_since):
                if t != s.gate.holder.ticket:
                    del self.held_since[t]
        else:
            self.held_since.clear()
        if prev is None:
            return
        dt = max(1e-6, s.at - prev.at)
        if s.wal is not None and prev.wal is not None:
            self.commits_per_s = max(0, s.wal.changes - prev.wal.changes) / dt
            self.backfill_per_s = max(0, s.wal.backfilled - prev.wal.backfilled) / dt
        self.grants_per_s = max(0, s.gate.grants - prev.gate.grants) / dt


def sample(path: str) -> Sample:
    try:
        wal_bytes = os.path.getsize(path + "-wal")
    except OSError:
        wal_bytes = 0
    litestream = litestream_asked(path) or litestream_markers(path)
    return Sample(
        time.time(), gate_snapshot(path), sqlite_locks(path), wal_index(path), wal_bytes,
        litestream,
    )  # fmt: skip


def _mib(n: int) -> str:
    return f"{n / 1048576:.1f} MiB"


def render(view: View) -> Any:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    s = view.last
    assert s is not None
    g = s.gate
    head = Text(f"litegate top  {view.path}  {time.strftime('%H:%M:%S')}   q: quit", style="bold")
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="cyan", no_wrap=True)
    t.add_column()
    if not g.sidecar:
        t.add_row("gate", "no litegate process has opened this file")
    elif not g.valid:
        t.add_row("gate", f"the -litegate sidecar {g.problem}: litegate doctor says what to do")
    else:
        if g.holder is not None:
            since = view.held_since.get(g.holder.ticket, s.at)
            t.add_row(
                "gate holder",
                f"pid {g.holder.pid or '?'}  ticket {g.holder.ticket}  "
                f"held {1000 * (s.at - since):,.0f} ms+",
            )
        elif g.waiting:
            t.add_row("gate holder", "none: handing over to the first waiter")
        else:
            t.add_row("gate holder", "free")
        waiting = " ".join(f"{w.pid or '?'}" for w in g.waiting) or "-"
        t.add_row("queue", f"{len(g.waiting)} waiting  (pids {waiting})")
        t.add_row("processes", " ".join(map(str, g.pids)) or "-")
        if g.dead:
            t.add_row("died", " ".join(f"pid {d.pid or '?'} ({d.state})" for d in g.dead))
        t.add_row("gate turns/s", f"{view.grants_per_s:,.0f}")
        who = f"pid {g.checkpointer_pid}" if g.checkpointer_pid else "none"
        t.add_row("checkpointer", who + ("  (Litestream restarts the WAL)" if s.litestream else ""))
    lk = s.locks
    t.add_row("SQLite writer", " ".join(map(str, lk.writer_pids)) or "free")
    t.add_row("readers", " ".join(map(str, lk.reader_pids)) or "-")
    t.add_row("commits/s", f"{view.commits_per_s:,.0f}")
    if s.wal is not None:
        t.add_row(
            "WAL",
            f"{_mib(s.wal_bytes)} on disk, {s.wal.frames} frames in use, "
            f"{s.wal.backfilled} checkpointed",
        )
        t.add_row("checkpointing", f"{view.backfill_per_s:,.0f} frames/s")
    else:
        t.add_row("WAL", f"{_mib(s.wal_bytes)} (no WAL index: not in WAL mode, or not open)")
    return Group(head, t)


def run(path: str, *, interval: float = 0.5, iterations: int | None = None) -> int:
    """Refresh in place until ``q``, Ctrl-C, or ``iterations`` refreshes."""
    from rich.console import Console
    from rich.live import Live

    path = os.path.realpath(os.path.abspath(path))  # as connect() names it
    view = View(path)
    console = Console()
    fd = sys.stdin.fileno() if sys.stdin.isatty() else None
    saved = termios.tcgetattr(fd) if fd is not None else None
    try:
        if fd is not None:
            tty.setcbreak(fd)  # single keys, no echo; Ctrl-C still interrupts
        view.update(sample(path))
        with Live(render(view), console=console, auto_refresh=False, transient=False) as live:
            while iterations is None or view.refreshes < iterations:
                if fd is not None:
                    ready, _, _ = select.select([fd], [], [], interval)
                    if ready and os.read(fd, 32).lower().startswith(b"q"):
                        break
                else:
                    time.sleep(interval)
                view.update(sample(path))
                live.update(render(view), refresh=True)
    except KeyboardInterrupt:
        pass
    finally:
        if fd is not None and saved is not None:
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)
    return 0
