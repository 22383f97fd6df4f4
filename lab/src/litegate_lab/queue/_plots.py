"""The PNG charts of ``bench queue`` (matplotlib, imported only here).

Named ``queue-<chart>.png``; in a combined run (``--backend
sqlite,postgres``) each backend draws its own, ``queue-<backend>-<chart>.png``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._charts import Bar, grouped_bars, lines
from ._run import find, size_keys

MIB = 1024 * 1024
SHORT = {"conservative": "cons", "balanced": "bal", "aggressive": "aggr", "postgres": "pg"}


def _backend(result: dict[str, Any]) -> str:
    return str(result["config"].get("backend", "sqlite"))


def _on(result: dict[str, Any]) -> str:
    return "PostgreSQL" if _backend(result) == "postgres" else "SQLite"


THROUGHPUT = {
    "single": "throughput",
    "concurrent": "throughput",
    "mixed": "claim_throughput",
    "stress": "throughput",
    "e2e": "throughput",
}


def _bar(entry: dict[str, Any] | None, figure: str) -> Bar:
    if entry is None or entry["na"] or entry["figures"].get(figure) is None:
        return Bar(0.0, 0.0, 0.0)
    s = entry["figures"][figure]
    return Bar(s["median"], s["min"], s["max"])


def throughput_chart(result: dict[str, Any], out: Path, prefix: str = "queue") -> Path | None:
    """One panel per scenario: throughput per side, grouped by profile and variant."""
    summary = result["summary"]
    sides = list(result["config"]["sides"])
    panels = []
    for scenario, figure in THROUGHPUT.items():
        mine = [e for e in summary if e["scenario"] == scenario]
        if not mine:
            continue
        keys = list(dict.fromkeys((e["profile"], e["variant"]) for e in mine))
        labels = [f"{SHORT.get(p, p)}\n{v.replace(' workers', 'w')}" for p, v in keys]
        series: dict[str, list[Bar]] = {}
        for side in sides:
            if not any(e["side"] == side for e in mine):
                continue  # (an end-to-end-only side in another scenario)
            series[side] = [
                _bar(find(summary, scenario, prof, variant, side), figure) for prof, variant in keys
            ]
        unit = "claims/s" if scenario == "mixed" else "jobs/s"
        panels.append((f"{scenario} ({unit})", labels, series))
    if not panels:
        return None
    return grouped_bars(
        out / f"{prefix}-throughput.png",
        title=f"litegate bench queue (seed 004) on {_on(result)}: throughput per side, "
        "median (bars: min..max)",
        panels=panels,
        ylabel="per second (symlog)",
    )


def wal_chart(result: dict[str, Any], out: Path, prefix: str = "queue") -> list[Path]:
    """WAL bytes (on PostgreSQL: database bytes) over time in the long run,
    one line per side (first run)."""
    from matplotlib.figure import Figure

    pg = _backend(result) == "postgres"
    series_key = size_keys(_backend(result))[2]
    paths = []
    for prof in result["config"]["long_profiles"]:
        runs = [
            r
            for r in result["raw"]
            if r["scenario"] == "long" and r["profile"] == prof and r["run"] == 1 and not r["na"]
        ]
        if not runs:
            continue
        fig = Figure(figsize=(9, 4.5), layout="constrained")
        ax = fig.subplots()
        for r in runs:
            series = r.get(series_key) or []
            ax.plot(
                [t for t, _ in series],
                [b / MIB for _, b in series],
                label=r["side"],
                linewidth=1.2,
            )
        ax.set_xlabel("seconds")
        if pg:
            ax.set_ylabel("database size, MiB")
            ax.set_title("long run on PostgreSQL: pg_database_size over time")
        else:
            ax.set_ylabel("WAL size, MiB")
            ax.set_title(f"long run, profile {prof}: size of the -wal file over time")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        path = out / (f"{prefix}-dbsize-{prof}.png" if pg else f"{prefix}-wal-{prof}.png")
        fig.savefig(path, dpi=100)
        paths.append(path)
    return paths


def stress_chart(result: dict[str, Any], out: Path, prefix: str = "queue") -> list[Path]:
    """Throughput against the number of workers, per profile."""
    cfg = result["config"]
    summary = result["summary"]
    paths = []
    for prof in cfg["profiles"]:
        xs = list(cfg["stress_workers"])
        series: dict[str, list[float]] = {}
        for side in cfg["sides"]:
            ys = []
            for n in xs:
                e = find(summary, "stress", prof, f"{n} workers", side)
                ys.append(_bar(e, "throughput").median)
            if any(ys):
                series[side] = ys
        if not series:
            continue
        paths.append(
            lines(
                out / f"{prefix}-stress-{prof}.png",
                title=f"stress ramp on {_on(result)}, profile {prof}: put -> claim -> ack "
                "cycles per second",
                x=[float(x) for x in xs],
                series=series,
                xlabel="worker processes",
                ylabel="cycles/s (symlog)",
            )
        )
    return paths


def charts(result: dict[str, Any], out: Path, prefix: str = "queue") -> list[Path]:
    if "results" in result:  # a combined run: each backend's charts, its name in theirs
        return [
            path
            for backend, part in result["results"].items()
            if "error" not in part
            for path in charts(part, out, f"{prefix}-{backend}")
        ]
    paths: list[Path] = []
    tp = throughput_chart(result, out, prefix)
    if tp is not None:
        paths.append(tp)
    paths += stress_chart(result, out, prefix)
    paths += wal_chart(result, out, prefix)
    return paths
