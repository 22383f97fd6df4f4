"""The web bench's terminal report (the seed's summary style, then tables)
and its charts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._stats import mean, median


def _ms(s: float) -> str:
    return f"{1000 * s:,.0f} ms" if s < 10 else f"{s:,.1f} s"


def _list(values: list[float], fmt: str) -> str:
    return "[" + ", ".join(format(v, fmt) for v in values) + "]"


def render(result: dict[str, Any]) -> str:
    cfg = result["config"]
    summ = result["summary"]
    lines = [
        f"litegate bench web (seed 003): gunicorn gthread {cfg['workers']} workers x "
        f"{cfg['threads']} threads, keep-alive 0; hey -z {cfg['seconds']:g}s -m POST; "
        + ("a fresh seeded database per cell" if cfg["reset"] else "one database per engine"),
        "",
        f"Headline: hey -c 20 -z {cfg['seconds']:g}s -m POST /benchmarking/balanced, "
        f"{cfg['headline']} run(s) per engine",
    ]
    for engine, s in summ.items():
        h = s["headline"]
        if not h["rps"]:
            continue
        total = sum(h["responses"]) or 1
        lines.append(
            f"  {engine:<9} rps {mean(h['rps']):,.0f} {_list(h['rps'], '.0f')}; "
            f"average {_ms(mean(h['average_s']))}; p90 {_ms(mean(h['p90_s']))}; "
            f"p99 {_ms(mean(h['p99_s']))}; slowest {_ms(max(h['slowest_s']))}; "
            f"HTTP 500 {sum(h['http_500'])} of {total} ({sum(h['http_500']) / total:.1%}), "
            f"'database is locked' {sum(h['locked'])}; server CPU "
            f"{median(h['cpu_ms_per_request']):.1f} ms/request"
        )
    sweep_ns = sorted({int(n) for s in summ.values() for n in s["sweep"]})
    if len(sweep_ns) > 1:
        lines += ["", "balanced by concurrency (median across its runs): rps / p99 / HTTP 500"]
        lines.append("  " + f"{'c':>5}" + "".join(f"{e:>26}" for e in summ))
        for n in sweep_ns:
            row = f"  {n:>5}"
            for s in summ.values():
                c = s["sweep"].get(str(n))
                row += (
                    f"{c['rps']:>8,.0f} {_ms(c['p99_s']):>8} {c['http_500_rate']:>7.1%}"
                    if c
                    else f"{'-':>26}"
                )
            lines.append(row)
    mixes = sorted({m for s in summ.values() for m in s["mixes"]})
    for m in mixes:
        lines += ["", f"{m}, c = 20: rps / p99 / slowest / HTTP 500 / 'database is locked'"]
        for engine, s in summ.items():
            c = s["mixes"].get(m)
            if c:
                lines.append(
                    f"  {engine:<9} {c['rps']:>8,.0f} {_ms(c['p99_s']):>9} "
                    f"{_ms(c['slowest_s']):>9} {c['http_500_rate']:>7.1%} {c['locked']:>6}"
                )
    lines += _targets(result)
    return "\n".join(lines)


def _targets(result: dict[str, Any]) -> list[str]:
    """Issue 9's targets, as measured (reported, not asserted)."""
    summ = result["summary"]
    if "litegate" not in summ:
        return []
    lg = summ["litegate"]
    out = ["", "Targets (issue 9):"]
    mine = [c for c in result["cells"] if c["engine"] == "litegate"]
    fives = sum(c["hey"]["statuses"].get("500", 0) for c in mine)
    answered = sum(c["hey"]["responses"] for c in mine)
    out.append(f"  litegate HTTP 500, every cell: {fives} of {answered} responses (target 0)")
    for other, rps_k in (("tuned", 1.0), ("naive", 1.5)):
        if other in summ and summ[other]["headline"]["rps"] and lg["headline"]["rps"]:
            a, b = median(lg["headline"]["rps"]), median(summ[other]["headline"]["rps"])
            out.append(f"  rps litegate / {other} at c=20: {a / b:.2f} (target >= {rps_k:g})")
    if "tuned" in summ:
        t = summ["tuned"]
        for n in ("20", "64"):
            ours = lg["sweep"].get(n)
            theirs = t["sweep"].get(n)
            if ours and theirs and theirs["p99_s"] > 0 and theirs["slowest_s"] > 0:
                out.append(
                    f"  c={n}: p99 litegate / tuned {ours['p99_s'] / theirs['p99_s']:.2f} "
                    f"(target <= 0.8); slowest {ours['slowest_s'] / theirs['slowest_s']:.2f} "
                    "(target <= 0.5)"
                )
    return out


def charts(result: dict[str, Any], out: Path) -> list[Path]:
    from .._charts import lines

    summ = result["summary"]
    made: list[Path] = []
    ns = sorted({int(n) for s in summ.values() for n in s["sweep"]})
    if len(ns) > 1:
        for key, label, name in (
            ("rps", "requests/s", "web-rps.png"),
            ("p99_s", "p99 (ms)", "web-p99.png"),
        ):
            scale = 1000.0 if key == "p99_s" else 1.0
            series = {
                e: [
                    scale * s["sweep"][str(n)][key] if str(n) in s["sweep"] else float("nan")
                    for n in ns
                ]
                for e, s in summ.items()
            }
            made.append(
                lines(
                    out / name,
                    title=f"balanced: {label} by concurrency (seed 003)",
                    x=ns,
                    series=series,
                    xlabel="hey -c N",
                    ylabel=label,
                )
            )
    made.append(_histogram(result, out / "web-latency-c20.png"))
    return made


def _histogram(result: dict[str, Any], path: Path) -> Path:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 4.5), layout="constrained")
    ax = fig.subplots()
    for engine in result["summary"]:
        rows = [c for c in result["cells"] if c["engine"] == engine and c["kind"] == "headline"]
        if not rows:
            continue
        hist = rows[0]["hey"]["histogram"]
        ax.step([1000 * t for t, _ in hist], [n for _, n in hist], where="post", label=engine)
    ax.set_xlabel("response time (ms), hey's buckets")
    ax.set_ylabel("requests")
    ax.set_title("balanced, c = 20: latency histogram (first headline run)")
    ax.set_yscale("symlog", linthresh=1.0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=100)
    return path
