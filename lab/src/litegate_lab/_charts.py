"""PNG charts with matplotlib's Agg backend (no display needed).

Only the object-oriented API is used (``Figure``, no ``pyplot``): no global
figure state, nothing left open between charts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from matplotlib.figure import Figure


@dataclass(frozen=True)
class Bar:
    """One bar: the median across runs, with the runs' min..max as an error bar."""

    median: float
    low: float
    high: float


def grouped_bars(
    path: Path,
    *,
    title: str,
    panels: Sequence[tuple[str, Sequence[str], Mapping[str, Sequence[Bar]]]],
    ylabel: str,
    target: float | None = None,
    target_label: str = "",
) -> Path:
    """One panel per ``(subtitle, x labels, {series: bars})``; bars grouped
    per x label. The y axis is symmetric-log (linear within ±1), so 1 ms and
    600 ms both read, and negative values stay visible."""
    fig = Figure(figsize=(13, 4.2 * len(panels)), layout="constrained")
    axes = fig.subplots(len(panels), 1, squeeze=False)
    for ax, (subtitle, labels, series) in zip(axes[:, 0], panels, strict=False):
        n = max(1, len(series))
        width = 0.8 / n
        for i, (name, bars) in enumerate(series.items()):
            xs = [x - 0.4 + width * (i + 0.5) for x in range(len(labels))]
            med = [b.median for b in bars]
            err = [
                [max(0.0, b.median - b.low) for b in bars],
                [max(0.0, b.high - b.median) for b in bars],
            ]
            ax.bar(xs, med, width=width, label=name, yerr=err, capsize=2)
        if target is not None:
            ax.axhline(target, color="black", linestyle="--", linewidth=1, label=target_label)
        ax.axhline(0, color="grey", linewidth=0.5)
        ax.set_yscale("symlog", linthresh=1.0)
        lo, hi = ax.get_ylim()
        ax.set_ylim(lo * 1.5 if lo < 0 else lo, hi * 1.5 if hi > 0 else hi)
        ax.set_xticks(range(len(labels)), labels, rotation=0)
        ax.set_ylabel(ylabel)
        ax.set_title(subtitle, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.suptitle(title)
    fig.savefig(path, dpi=100)
    return path


@dataclass(frozen=True)
class HistPanel:
    label: str
    values: Sequence[float]  # wait times, ms
    marks: Mapping[str, float]  # vertical lines, e.g. {"p50": 90.1, "p99": 95.0}
    note: str = ""


def histograms(
    path: Path,
    *,
    title: str,
    panels: Sequence[HistPanel],
    xlabel: str,
    ylabel: str = "requests",
) -> Path:
    """One histogram per panel, stacked; counts on a log axis so that a few
    starved requests next to thousands of quick ones both show."""
    fig = Figure(figsize=(9, 2.3 * max(1, len(panels)) + 0.6), layout="constrained")
    axes = fig.subplots(max(1, len(panels)), 1, squeeze=False)
    for ax, panel in zip(axes[:, 0], panels, strict=False):
        vals = list(panel.values)
        if vals:
            top = max(vals)
            ax.hist(vals, bins=100, range=(0.0, top if top > 0 else 1.0), color="tab:blue")
            ax.set_yscale("log")
        colours = ("tab:orange", "tab:red", "tab:purple", "tab:green")
        for (name, x), colour in zip(panel.marks.items(), colours, strict=False):
            ax.axvline(x, color=colour, linestyle="--", linewidth=1, label=f"{name} {x:.1f}")
        ax.set_title(f"{panel.label}  {panel.note}".strip(), fontsize=10)
        ax.set_ylabel(ylabel)
        if panel.marks:
            ax.legend(fontsize=8, loc="upper right")
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel(xlabel)
    fig.suptitle(title)
    fig.savefig(path, dpi=100)
    return path


def lines(
    path: Path,
    *,
    title: str,
    x: Sequence[float],
    series: Mapping[str, Sequence[float]],
    xlabel: str,
    ylabel: str,
    logy: bool = True,
    logx: bool = False,
) -> Path:
    """A simple line chart (one line per series)."""
    fig = Figure(figsize=(8, 4.5), layout="constrained")
    ax = fig.subplots()
    for name, ys in series.items():
        ax.plot(list(x), list(ys), marker="o", label=name)
    if logy:
        ax.set_yscale("symlog", linthresh=1.0)
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=100)
    return path
