"""The web bench's terminal report (per framework: the seed's summary style,
then tables, the database checks and the issue's targets) and its charts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._report import render_grant_logs
from .._stats import mean, median

TITLES = {
    "django": "Django under gunicorn (gthread, {workers} worker(s) x {threads} threads)",
    "fastapi": "FastAPI + SQLAlchemy asyncio under uvicorn ({workers} worker(s))",
}


def _ms(s: float) -> str:
    return f"{1000 * s:,.0f} ms" if s < 10 else f"{s:,.1f} s"


def _pct(values: list[float]) -> str:
    """A percentile across runs; hey prints none (0 here) for a run with
    fewer answers than the percentile needs (p99: 100)."""
    return _ms(mean(values)) if values and min(values) > 0 else "n/a"


def _list(values: list[float], fmt: str) -> str:
    return "[" + ", ".join(format(v, fmt) for v in values) + "]"


def _share(part: int, whole: int) -> str:
    return f"{part} of {whole} ({part / max(1, whole):.1%})"


def render(result: dict[str, Any]) -> str:
    cfg = result["config"]
    lines = [
        f"litegate bench web (seed 003): hey -z {cfg['seconds']:g}s -m POST; keep-alive 0; "
        + ("a fresh seeded database per cell" if cfg["reset"] else "one database per engine"),
    ]
    for framework, summ in result["summary"].items():
        title = TITLES[framework].format(**cfg)
        lines += ["", f"== {title} ==", ""]
        lines += _framework(result, framework, summ)
    return "\n".join(lines)


def _framework(result: dict[str, Any], framework: str, summ: dict[str, Any]) -> list[str]:
    cfg = result["config"]
    lines = [
        f"Headline: hey -c 20 -z {cfg['seconds']:g}s -m POST /benchmarking/balanced, "
        f"{cfg['headline']} run(s) per engine",
    ]
    w = max(9, *(len(e) for e in summ))  # variants (litegate+NAME=VALUE) are longer
    for engine, s in summ.items():
        h = s["headline"]
        if not h["rps"]:
            continue
        total = sum(h["responses"])
        lines.append(
            f"  {engine:<{w}} rps {mean(h['rps']):,.0f} {_list(h['rps'], '.0f')}; "
            f"average {_ms(mean(h['average_s']))}; p90 {_pct(h['p90_s'])}; "
            f"p99 {_pct(h['p99_s'])}; slowest {_ms(max(h['slowest_s']))}; "
            f"HTTP 5xx {_share(sum(h['http_5xx']), total)}, "
            f"'database is locked' {sum(h['locked'])}; server CPU "
            f"{median(h['cpu_ms_per_request']):.1f} ms/request"
        )
    lines += _by_thread(summ, w)
    sweep_ns = sorted({int(n) for s in summ.values() for n in s["sweep"]})
    if len(sweep_ns) > 1:
        lines += ["", "balanced by concurrency (median across its runs): rps / p99 / HTTP 500"]
        lines.append("  " + f"{'c':>5}" + "".join(f"{e:>26}" for e in summ))
        for n in sweep_ns:
            row = f"  {n:>5}"
            for s in summ.values():
                c = s["sweep"].get(str(n))
                row += (
                    f"{c['rps']:>8,.0f} {_pct([c['p99_s']]):>8} {c['http_500_rate']:>7.1%}"
                    if c
                    else f"{'-':>26}"
                )
            lines.append(row)
    cells = sorted({(m, int(n)) for s in summ.values() for m, by in s["mixes"].items() for n in by})
    for m, n in cells:
        lines += [
            "",
            f"{m}, c = {n}: rps / p99 / slowest / HTTP 500 / 'database is locked' / "
            "server CPU ms per request / machine idle",
        ]
        for engine, s in summ.items():
            c = s["mixes"].get(m, {}).get(str(n))
            if c:
                # (absent from results of older runs)
                cpu, idle = c.get("cpu_ms_per_request"), c.get("idle_share")
                lines.append(
                    f"  {engine:<{w}} {c['rps']:>8,.0f} {_pct([c['p99_s']]):>9} "
                    f"{_ms(c['slowest_s']):>9} {c['http_500_rate']:>7.1%} {c['locked']:>6}"
                    + (f" {cpu:>8.1f}" if cpu is not None else "")
                    + (f" {idle:>7.1%}" if idle is not None else "")
                )
    lines += _checks(summ)
    lines += _gate(summ, w)
    lines += _targets_django(result, summ) if framework == "django" else _targets_fastapi(summ)
    return lines


def _by_thread(summ: dict[str, Any], w: int) -> list[str]:
    """Where the headline's server CPU goes by thread, and how idle the
    machine stayed: CPU a request did not use is time it waited."""
    rows = {e: s["headline"].get("threads") for e, s in summ.items()}
    rows = {e: r for e, r in rows.items() if r}  # (absent from results of older runs)
    if not rows:
        return []
    roles = sorted(
        {r for by in rows.values() for r in by},
        key=lambda r: -max(by.get(r, {}).get("cpu_ms", 0.0) for by in rows.values()),
    )
    out = [
        "",
        "Headline server CPU by thread, ms per request (voluntary context switches per request), "
        "median of its runs; the machine's idle share (hey included)",
    ]
    for engine, by in rows.items():
        parts = [
            f"{role} {by[role]['cpu_ms']:.2f} ({by[role]['voluntary']:.1f})"
            for role in roles
            if role in by and (by[role]["cpu_ms"] >= 0.005 or by[role]["voluntary"] >= 0.05)
        ]
        idle = summ[engine]["headline"].get("idle_share") or []
        tail = f"; idle {median(idle):.1%}" if idle else ""
        out.append(f"  {engine:<{w}} " + ", ".join(parts) + tail)
    return out


def _gate(summ: dict[str, Any], w: int) -> list[str]:
    """With --grant-log: where each cell's time went at the write gate, and
    the bounds checked on the log."""
    logged = {e: s for e, s in summ.items() if "gate" in s}
    if not logged:
        return []
    out = [
        "",
        "Write gate, from its grant log (--grant-log; logging slows the gate; a repeated "
        "cell: median of its runs): held / holds p50, p90 / free while a writer waited "
        "(hand-over p50; to another process) / grants",
    ]
    for engine, s in logged.items():
        for cell, t in s["gate"].items():
            out.append(
                f"  {engine:<{w}} {cell:<20} held {t['held_share']:6.1%} / "
                f"{t['hold_p50_ns'] / 1e6:.2f}, {t['hold_p90_ns'] / 1e6:.2f} ms / free "
                f"{t['free_waiting_share']:6.1%} ({t['handover_p50_ns'] / 1e6:.2f} ms; "
                f"{t['cross_process']:.0%}) / {t['grants']:,.0f}"
            )
    out.append("")
    out += render_grant_logs(
        {e: s["grant_log"] for e, s in logged.items()},
        head="The bounds on those logs (every cell; counts added up, the worst of any):",
    ).splitlines()
    return out


def _checks(summ: dict[str, Any]) -> list[str]:
    """The database checks after every cell, per engine."""
    out = [
        "",
        "Database after every cell: integrity_check, foreign_key_check, every acknowledged "
        "write there",
    ]
    for engine, s in summ.items():
        ch = s["checks"]
        head = f"  {engine:<9} {ch['cells']} cell(s), {ch['acknowledged']:,} acknowledged writes: "
        if not ch["violations"]:
            out.append(head + "0 violations")
            continue
        parts = [
            f"{ch[k]} {label}"
            for k, label in (
                ("integrity", "integrity errors"),
                ("foreign_keys", "foreign-key violations"),
                ("lost", "acknowledged rows missing"),
                ("resurrected", "acknowledged deletes undone"),
                ("orphaned", "comments of deleted posts left"),
                ("unreadable", "unreadable ledger lines"),
            )
            if ch[k]
        ]
        out.append(head + f"{ch['violations']} VIOLATIONS: " + ", ".join(parts))
        out += [f"            e.g. {x}" for x in ch["examples"][:4]]
    return out


def _targets_django(result: dict[str, Any], summ: dict[str, Any]) -> list[str]:
    """Issue 9's targets, as measured (reported, not asserted)."""
    if "litegate" not in summ:
        return []
    lg = summ["litegate"]
    out = ["", "Targets (issue 9):"]
    mine = [c for c in result["cells"] if c["engine"] == "litegate" and c["framework"] == "django"]
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
            if ours and theirs and min(ours["p99_s"], theirs["p99_s"], theirs["slowest_s"]) > 0:
                out.append(
                    f"  c={n}: p99 litegate / tuned {ours['p99_s'] / theirs['p99_s']:.2f} "
                    f"(target <= 0.8); slowest {ours['slowest_s'] / theirs['slowest_s']:.2f} "
                    "(target <= 0.5)"
                )
    return out


def cell_at(s: dict[str, Any], mix: str, n: int) -> dict[str, float] | None:
    """An engine's (rps, p99, HTTP 5xx, responses) for ``mix`` at c = ``n``:
    balanced at 20 from the headline runs (medians; 5xx summed), else from
    the sweep; the other mixes from their cells; None if not measured."""
    h = s["headline"]
    if mix == "balanced" and n == 20 and h["rps"]:
        return {"rps": median(h["rps"]), "p99_s": median(h["p99_s"]),
                "http_5xx": sum(h["http_5xx"]), "responses": sum(h["responses"])}  # fmt: skip
    c = s["sweep"].get(str(n)) if mix == "balanced" else s["mixes"].get(mix, {}).get(str(n))
    if not c:
        return None
    keys = ("rps", "p99_s", "http_5xx", "responses")
    return {k: c[k] for k in keys}


def _targets_fastapi(summ: dict[str, Any]) -> list[str]:
    """Issue 20's targets for the FastAPI app, as measured (reported, not
    asserted): every mix at c = 20 and c = 64, litegate 0 HTTP 5xx, rps >=
    1.0 x tuned's and p99 <= tuned's; the naive engine's error share."""
    out = ["", "Targets (issue 20), every mix at c = 20 and 64 that ran:"]
    lg, tuned, naive = summ.get("litegate"), summ.get("tuned"), summ.get("naive")
    for mix in ("read_heavy", "balanced", "write_heavy"):
        for n in (20, 64):
            ours = cell_at(lg, mix, n) if lg else None
            theirs = cell_at(tuned, mix, n) if tuned else None
            base = cell_at(naive, mix, n) if naive else None
            parts = []
            if ours:
                parts.append(f"litegate HTTP 5xx {int(ours['http_5xx'])} (target 0)")
            if ours and theirs and theirs["rps"] > 0:
                parts.append(f"rps / tuned {ours['rps'] / theirs['rps']:.2f} (target >= 1.0)")
            # hey prints no p99 below 100 responses (0 here): no ratio then.
            if ours and theirs and ours["p99_s"] > 0 and theirs["p99_s"] > 0:
                parts.append(f"p99 / tuned {ours['p99_s'] / theirs['p99_s']:.2f} (target <= 1.0)")
            if base:
                share = base["http_5xx"] / max(1.0, base["responses"])
                parts.append(f"naive HTTP 5xx {share:.1%}")
            if parts:
                out.append(f"  {mix} c={n}: " + "; ".join(parts))
    return out if len(out) > 2 else []


def _series(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each framework and engine's summary, under a label for the charts."""
    return {
        f"{framework} {engine}": s
        for framework, summ in result["summary"].items()
        for engine, s in summ.items()
    }


def charts(result: dict[str, Any], out: Path) -> list[Path]:
    from .._charts import lines

    named = _series(result)
    made: list[Path] = []
    ns = sorted({int(n) for s in named.values() for n in s["sweep"]})
    if len(ns) > 1:
        for key, label, name in (
            ("rps", "requests/s", "web-rps.png"),
            ("p99_s", "p99 (ms)", "web-p99.png"),
        ):
            scale = 1000.0 if key == "p99_s" else 1.0
            series = {
                label_: [
                    scale * s["sweep"][str(n)][key] if str(n) in s["sweep"] else float("nan")
                    for n in ns
                ]
                for label_, s in named.items()
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
    for framework, summ in result["summary"].items():
        for engine in summ:
            rows = [
                c
                for c in result["cells"]
                if (c["framework"], c["engine"], c["kind"]) == (framework, engine, "headline")
            ]
            if not rows:
                continue
            hist = rows[0]["hey"]["histogram"]
            ax.step(
                [1000 * t for t, _ in hist],
                [n for _, n in hist],
                where="post",
                label=f"{framework} {engine}",
            )
    ax.set_xlabel("response time (ms), hey's buckets")
    ax.set_ylabel("requests")
    ax.set_title("balanced, c = 20: latency histogram (first headline run)")
    ax.set_yscale("symlog", linthresh=1.0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=100)
    return path
