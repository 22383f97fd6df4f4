"""Output of a lab run: tables in the seeds' own format, the JSON file with
every raw figure, and where the files go."""

from __future__ import annotations

import datetime as _dt
import itertools
import json
import math
import os
import platform
import sqlite3
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import litegate
from litegate.diagnostics import Grant

from ._stats import percentiles


@dataclass(frozen=True)
class Column:
    title: str
    align: Literal["left", "right", "center"] = "right"


def seed_table(columns: Sequence[Column], groups: Sequence[Sequence[Sequence[str]]]) -> str:
    """A table like seed 000's: centred titles, cells padded by two spaces
    and separated by ``|``, a blank line between groups of rows."""
    widths = [len(c.title) for c in columns]
    for rows in groups:
        for row in rows:
            if len(row) != len(columns):
                raise ValueError(f"row has {len(row)} cells for {len(columns)} columns: {row!r}")
            for i, cell in enumerate(row):
                widths[i] = max(widths[i], len(cell))

    def line(cells: Sequence[str], header: bool) -> str:
        parts = []
        for col, cell, w in zip(columns, cells, widths, strict=False):
            if header or col.align == "center":
                parts.append(f"  {cell.center(w)}  ")
            elif col.align == "left":
                parts.append(f"  {cell.ljust(w)}  ")
            else:
                parts.append(f"  {cell.rjust(w)}  ")
        return "|".join(parts).rstrip()

    out = [line([c.title for c in columns], header=True)]
    for i, rows in enumerate(groups):
        if i and rows:
            out.append("")
        out.extend(line(row, header=False) for row in rows)
    return "\n".join(out)


def fmt_ms(value: float | None, decimals: int = 0) -> str:
    """Milliseconds for a table cell; ``-`` when missing."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if decimals == 0:
        return str(round(value))
    return f"{value:.{decimals}f}"


def fmt_pct(fraction: float | None) -> str:
    """A CV (a fraction) as a percentage, one decimal below 10 %; ``-`` when
    undefined (one run)."""
    if fraction is None:
        return "-"
    pct = 100.0 * fraction
    return f"{pct:.1f}%" if pct < 10 else f"{pct:.0f}%"


def combine_grant_logs(checks: Sequence[Mapping[str, int]]) -> dict[str, int]:
    """One cell's grant-log checks (``litegate.diagnostics.check_grants``) over its runs: the
    counts add up, the worst figures (and the bound of the worst overtaken
    head) are the worst of any run."""
    return {
        key: (max if key.startswith(("worst_", "overtakes_")) else sum)(c[key] for c in checks)
        for key in checks[0]
    }


def gate_timing(grants: Sequence[Grant]) -> dict[str, float]:
    """Where a run's time went at the gate, from its grant log (any order):

    - ``held_share``: the share of the logged span with the gate held;
    - ``hold_p50_ns``, ``hold_p90_ns``: how long a grant kept it;
    - ``handovers``: grants whose taker was already waiting when the grant
      before it ended, and ``free_waiting_share``, ``handover_p50_ns``: how
      long the gate stayed free before such a taker had it (a hand-over's
      cost: its wake-up, and its process's GIL and CPU), as a share of the
      span and at p50;
    - ``cross_process``: the share of those hand-overs to another process.
    """
    g = sorted(grants, key=lambda x: x.grant_ns)
    out = dict.fromkeys(
        ("grants", "span_ns", "held_share", "hold_p50_ns", "hold_p90_ns", "handovers",
         "free_waiting_share", "handover_p50_ns", "cross_process"),
        0.0,
    )  # fmt: skip
    if not g:
        return out
    span = max(1, max(x.release_ns for x in g) - g[0].grant_ns)
    holds = [x.release_ns - x.grant_ns for x in g]
    gaps: list[int] = []
    cross = 0
    for a, b in itertools.pairwise(g):
        if b.arrive_ns < a.release_ns:  # it waited for this grant to end
            gaps.append(max(0, b.grant_ns - a.release_ns))
            cross += a.pid != b.pid
    hold = percentiles(holds, (50, 90))
    out.update(
        grants=len(g),
        span_ns=span,
        held_share=sum(holds) / span,
        hold_p50_ns=hold[50],
        hold_p90_ns=hold[90],
        handovers=len(gaps),
        free_waiting_share=sum(gaps) / span,
        handover_p50_ns=percentiles(gaps, (50,))[50] if gaps else 0.0,
        cross_process=cross / len(gaps) if gaps else 0.0,
    )
    return out


GRANT_LOG_HEAD = (
    "grant log (--grant-log: every grant logged, which slows the gate; counts over all runs, "
    "the worst of any run):"
)


def render_grant_logs(logs: Mapping[str, Mapping[str, int]], head: str = GRANT_LOG_HEAD) -> str:
    """The bounds checked on each litegate cell's grant log (``--grant-log``),
    a line per cell; the keys are the cells' labels, as each line starts."""
    lines = [head]
    for label, c in logs.items():
        k = c["overtakes_bound"]
        bound = "no bound" if k < 0 else f"bound {k} + 1"
        lines.append(
            f"  {label}: {c['grants']:,} grants, {c['queued']:,} slept in the line; "
            f"worst overtakes of a head {c['worst_overtakes']} ({bound}); "
            + (
                f"at most {max(0, c['worst_over_budget_ns']) / 1e6:.2f} ms past a head's time "
                "budget and the turns meanwhile; "
                if c["timed"]
                else "no time budget; "
            )
            + f"gate free at most {c['worst_free_gap_ns'] / 1e6:.2f} ms while a "
            f"head waited; violations (must be 0): {c['overlaps']} two holders at once, "
            f"{c['out_of_order']} out of ticket order, {c['over_overtakes']} overtaken past "
            "the bound"
        )
    return "\n".join(lines)


def environment() -> dict[str, Any]:
    """What ran the experiment, stored in every JSON file."""
    return {
        "litegate": litegate.__version__,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "argv": list(sys.argv),
    }


def cpu_times() -> tuple[int, int] | None:
    """(all, idle) clock ticks of the machine's CPUs so far, iowait counted
    as idle (Linux's /proc/stat; None elsewhere)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields), idle


def idle_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """The share of the machine's CPU time that was idle between two
    :func:`cpu_times` readings (None without them, or with no tick between)."""
    if before is None or after is None or after[0] <= before[0]:
        return None
    return (after[1] - before[1]) / (after[0] - before[0])


def timestamp() -> str:
    return _dt.datetime.now().strftime("%Y%m%d-%H%M%S")


def out_dir(out: str | None, experiment: str, stamp: str) -> Path:
    """``--out DIR`` as given, else ``./results/<experiment>-<timestamp>/``."""
    path = Path(out) if out else Path("results") / f"{experiment}-{stamp}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _clean(obj: Any) -> Any:
    """JSON has no NaN or infinity: write them as null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


def to_json(result: dict[str, Any]) -> str:
    return json.dumps(_clean(result), indent=1, allow_nan=False)


def write_json(path: Path, result: dict[str, Any]) -> Path:
    path.write_text(to_json(result) + "\n", encoding="utf-8")
    return path
