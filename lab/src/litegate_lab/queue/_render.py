"""The report of ``bench queue``: seed 004's markdown tables, one per
scenario, with the sides as extra rows under each configuration. On
PostgreSQL the same tables, with the server's one configuration, the
database's size where SQLite has its WAL's, and lock conflicts where it has
SQLITE_BUSY. A combined run (``--backend sqlite,postgres``): a summary line
per backend with its end-to-end figures, then each backend's report as a
section of its own."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._report import fmt_pct, render_grant_logs
from ._config import Config
from ._frames import OPS
from ._run import at_a_glance, find, has_gate, median_of, size_keys
from ._sides import E2E_ONLY_SIDES, FRAMES_NA, side_title, worker_shape

PROFILE_TITLES = {
    "conservative": "Conservative",
    "balanced": "Balanced",
    "aggressive": "Aggressive",
    "postgres": "PostgreSQL",
}

BACKEND_TITLES = {"sqlite": "SQLite", "postgres": "PostgreSQL"}

WORDS = {
    "sqlite": {
        "peak": "Peak WAL",
        "final": "Final WAL",
        "busy": "BUSY",
        "busy_errors": "SQLITE_BUSY Errors",
        "busy_text": "BUSY counts every SQLITE_BUSY seen, retried or not",
        "size_text": "WAL size sampled",
    },
    "postgres": {
        "peak": "Peak DB size",
        "final": "Final DB size",
        "busy": "Conflicts",
        "busy_errors": "Lock conflicts",
        "busy_text": "Lock conflicts: serialization failures, deadlocks, lock not available",
        "size_text": "database size (pg_database_size) sampled",
    },
}


def _w(cfg: Config, word: str) -> str:
    return WORDS[cfg.backend][word]


def _size(cfg: Config, e: dict[str, Any], final: bool = False) -> str:
    peak, last, _ = size_keys(cfg.backend)
    return fmt_bytes(median_of(e, last if final else peak))


def md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A markdown table like the seed's, columns padded to line up."""
    widths = [len(h) for h in headers]
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"row has {len(row)} cells for {len(headers)} columns: {row!r}")
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    out = [line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out.extend(line(r) for r in rows)
    return "\n".join(out)


def _num(v: float | None, decimals: int = 0) -> str:
    if v is None:
        return "-"
    return f"{v:,.{decimals}f}"


def _ms(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 100 else f"{v:,.0f}"


def fmt_bytes(v: float | None) -> str:
    if v is None:
        return "-"
    if v < 1024 * 1024:
        return f"{v / 1024:,.0f} KiB"
    return f"{v / (1024 * 1024):,.1f} MiB"


def _cv(e: dict[str, Any], figure: str) -> str:
    s = e["figures"].get(figure)
    return "-" if s is None else fmt_pct(s["cv"])


def _entries(
    summary: Sequence[dict[str, Any]],
    scenario: str,
    profile: str,
    variant: str,
    sides: Sequence[str],
) -> list[dict[str, Any]]:
    return [e for s in sides if (e := find(summary, scenario, profile, variant, s)) is not None]


def _na_row(e: dict[str, Any], width: int) -> list[str]:
    return [str(e["na"])] + ["n/a"] * (width - 1)


def _flags(e: dict[str, Any]) -> str:
    notes = []
    if e["setup_errors"]:
        notes.append("SETUP ERROR")
    if e["timed_out"]:
        notes.append("TIMED OUT")
    if e["lost"]:
        notes.append(f"LOST {e['lost']}")
    if e["duplicates"]:
        notes.append(f"RUN TWICE {e['duplicates']}")
    if e["unknown"] or e["extra"]:
        notes.append(f"UNACCOUNTED {e['unknown'] + e['extra']}")
    return " ".join(notes)


def _jain(e: dict[str, Any], prefix: str = "") -> str:
    """Jain's index over the worker processes (median across runs)."""
    v = median_of(e, prefix + "jain")
    return "-" if v is None else f"{v:.3f}"


def _rsd(e: dict[str, Any], prefix: str = "") -> str:
    """The RSD (stdev / mean) of the per-process counts, as a percentage."""
    return fmt_pct(median_of(e, prefix + "rsd"))


def _errors(e: dict[str, Any]) -> str:
    return _num(median_of(e, "errors"))


def _busy(e: dict[str, Any]) -> str:
    return _num(median_of(e, "busy"))


HANDOFFS = "Forced hand-offs"
HANDOFFS_TEXT = (
    "Forced hand-offs (litegate's sides only: the other queues have no write gate): the "
    "share of the gate's grants across processes that a release handed to a waiting "
    "process because the head of the line was due (under strict, the litegate side's "
    "policy, every release with a process waiting; under bounded, litegate-bounded's, "
    "only once the head has been overtaken 16 times or has waited 2 ms)."
)


def _gated(cfg: Config) -> bool:
    """Whether the tables get the write gate's columns: on SQLite, with litegate."""
    return any(has_gate(cfg.backend, s) for s in cfg.sides)


def _handoffs(e: dict[str, Any]) -> str:
    """The gate's forced hand-off share (median across runs); ``-`` for a
    side without litegate's gate."""
    return fmt_pct(median_of(e, "handoff_share"))


COMMITS = "Commits/job all / workers"
COMMITS_TEXT = (
    "Commits/job (litegate's sides): write transactions committed (a group commit is one) "
    "per job, by all the processes / by the worker processes alone."
)


def _commits(e: dict[str, Any]) -> str:
    both = median_of(e, "commits_per_job"), median_of(e, "worker_commits_per_job")
    return "-" if None in both else " / ".join(f"{v:.3f}" for v in both if v is not None)


def grant_log_lines(result: dict[str, Any], scenario: str, variant: str | None = None) -> list[str]:
    """A line per litegate cell of the scenario (``variant``: of that one
    only) whose grant log was checked (``--grant-log``), after its table;
    nothing without one."""
    logs = {
        f"{PROFILE_TITLES.get(e['profile'], e['profile'])} {e['variant']} {e['side']}": e[
            "grant_log"
        ]
        for e in result["summary"]
        if e["scenario"] == scenario and variant in (None, e["variant"]) and e.get("grant_log")
    }
    return ["", render_grant_logs(logs)] if logs else []


def _first_col(cfg: Config, profile: str, side: str, first: bool) -> list[str]:
    title = PROFILE_TITLES.get(profile, profile) if first else ""
    return [f"**{title}**" if title and profile == "balanced" else title, side]


def single_table(result: dict[str, Any], cfg: Config) -> str:
    summary = result["summary"]
    runs = cfg.runs
    headers = [
        "Configuration",
        "Side",
        "Throughput (tasks/sec)",
        "Median Latency (ms)",
        "P95 Latency (ms)",
        "P99 Latency (ms)",
        "Errors",
        _w(cfg, "busy"),
        _w(cfg, "peak"),
    ]
    if runs > 1:
        headers += ["CV tput", "CV p99"]
    rows = []
    for prof in cfg.profiles:
        for i, e in enumerate(_entries(summary, "single", prof, "1 writer", cfg.sides)):
            row = _first_col(cfg, prof, e["side"], i == 0)
            if e["na"]:
                rows.append(row + _na_row(e, len(headers) - 2))
                continue
            row += [
                _num(median_of(e, "throughput")),
                _ms(median_of(e, "p50")),
                _ms(median_of(e, "p95")),
                _ms(median_of(e, "p99")),
                _errors(e) + (f" {_flags(e)}" if _flags(e) else ""),
                _busy(e),
                _size(cfg, e),
            ]
            if runs > 1:
                row += [_cv(e, "throughput"), _cv(e, "p99")]
            rows.append(row)
    return md_table(headers, rows)


def concurrent_table(result: dict[str, Any], cfg: Config, n: int) -> str:
    summary = result["summary"]
    headers = [
        "Configuration",
        "Side",
        "Throughput (tasks/sec)",
        "Median Latency (ms)",
        "Error Rate (%)",
        _w(cfg, "busy_errors"),
        "P95 (ms)",
        "P99 (ms)",
        _w(cfg, "peak"),
    ]
    if cfg.runs > 1:
        headers += ["CV tput", "CV p99"]
    total = cfg.concurrent_total
    rows = []
    for prof in cfg.profiles:
        for i, e in enumerate(_entries(summary, "concurrent", prof, f"{n} workers", cfg.sides)):
            row = _first_col(cfg, prof, e["side"], i == 0)
            if e["na"]:
                rows.append(row + _na_row(e, len(headers) - 2))
                continue
            busy = median_of(e, "busy") or 0.0
            rate = median_of(e, "error_rate_pct")
            flags = _flags(e)
            row += [
                _num(median_of(e, "throughput")),
                _ms(median_of(e, "p50")),
                ("-" if rate is None else f"{rate:.1f}") + (f" {flags}" if flags else ""),
                f"{busy:,.0f}/{total:,}",
                _ms(median_of(e, "p95")),
                _ms(median_of(e, "p99")),
                _size(cfg, e),
            ]
            if cfg.runs > 1:
                row += [_cv(e, "throughput"), _cv(e, "p99")]
            rows.append(row)
    return md_table(headers, rows)


NOTES = {
    "huey": "no lease/ack: dequeue deletes",
    "bare": "no lease: a dead worker loses its jobs",
    "seed": "retries BUSY 3x",
    "litequeue": "lock, no lease expiry",
    "litegate": "lease + ack",
    "litegate-bounded": "lease + ack; fair=True",
    "litegate-combined": "lease + ack; writes combined across processes",
    "litegate-worker": "its Worker: settles finished jobs with the next claim",
    "procrastinate": "fetch_job/finish_job, 1 job per query",
    "pgqueuer": "dequeue/log_jobs",
}


def mixed_table(result: dict[str, Any], cfg: Config, scenario: str) -> str:
    summary = result["summary"]
    variant = f"{cfg.mixed_writers}W+{cfg.mixed_claimers}C"
    headers = [
        "Configuration",
        "Side",
        "Write Throughput",
        "Claim Throughput",
        "Claim P50 (ms)",
        "Claim P95 (ms)",
        "Claim P99 (ms)",
        "Total Errors",
        _w(cfg, "busy"),
        _w(cfg, "peak"),
        _w(cfg, "final"),
        "Jain W / C",
        "RSD W / C",
        *([HANDOFFS] if _gated(cfg) else []),
        "Notes",
    ]
    if cfg.runs > 1:
        headers += ["CV claim/s", "CV p95"]
    profiles = cfg.profiles if scenario == "mixed" else cfg.long_profiles
    rows = []
    for prof in profiles:
        for i, e in enumerate(_entries(summary, scenario, prof, variant, cfg.sides)):
            row = _first_col(cfg, prof, e["side"], i == 0)
            if e["na"]:
                rows.append(row + _na_row(e, len(headers) - 2))
                continue
            flags = _flags(e)
            row += [
                f"{_num(median_of(e, 'write_throughput'))}/sec",
                f"{_num(median_of(e, 'claim_throughput'))}/sec",
                _ms(median_of(e, "p50")),
                _ms(median_of(e, "p95")),
                _ms(median_of(e, "p99")),
                _errors(e),
                _busy(e),
                _size(cfg, e),
                _size(cfg, e, final=True),
                f"{_jain(e, 'writer_')} / {_jain(e, 'claimer_')}",
                f"{_rsd(e, 'writer_')} / {_rsd(e, 'claimer_')}",
                *([_handoffs(e)] if _gated(cfg) else []),
                NOTES.get(e["side"], "") + (f"; {flags}" if flags else ""),
            ]
            if cfg.runs > 1:
                row += [_cv(e, "claim_throughput"), _cv(e, "p95")]
            rows.append(row)
    return md_table(headers, rows)


def stress_table(result: dict[str, Any], cfg: Config) -> str:
    summary = result["summary"]
    headers = [
        "Configuration",
        "Side",
        "Workers",
        "Throughput (cycles/sec)",
        "P50 (ms)",
        "P99 (ms)",
        "Jain",
        "RSD",
        *([HANDOFFS] if _gated(cfg) else []),
        "Errors",
        _w(cfg, "busy"),
        _w(cfg, "peak"),
    ]
    if cfg.runs > 1:
        headers += ["CV tput", "CV p99"]
    rows = []
    for prof in cfg.profiles:
        first = True
        for side in cfg.sides:
            for j, n in enumerate(cfg.stress_workers):
                e = find(summary, "stress", prof, f"{n} workers", side)
                if e is None:
                    continue
                row = _first_col(cfg, prof, side if j == 0 else "", first)
                first = False
                row.append(str(n))
                if e["na"]:
                    rows.append(row + _na_row(e, len(headers) - 3))
                    continue
                flags = _flags(e)
                row += [
                    _num(median_of(e, "throughput")),
                    _ms(median_of(e, "p50")),
                    _ms(median_of(e, "p99")),
                    _jain(e),
                    _rsd(e),
                    *([_handoffs(e)] if _gated(cfg) else []),
                    _errors(e) + (f" {flags}" if flags else ""),
                    _busy(e),
                    _size(cfg, e),
                ]
                if cfg.runs > 1:
                    row += [_cv(e, "throughput"), _cv(e, "p99")]
                rows.append(row)
    return md_table(headers, rows)


def breaking_points(result: dict[str, Any], cfg: Config) -> list[str]:
    """Per side and profile: where throughput peaked and where errors began."""
    lines = []
    for prof in cfg.profiles:
        for side in cfg.sides:
            points = []
            for n in cfg.stress_workers:
                e = find(result["summary"], "stress", prof, f"{n} workers", side)
                if e is None or e["na"]:
                    continue
                points.append(
                    (n, median_of(e, "throughput") or 0.0, (median_of(e, "errors") or 0.0))
                )
            if not points:
                continue
            best = max(points, key=lambda p: p[1])
            errs = [n for n, _, err in points if err > 0]
            title = PROFILE_TITLES.get(prof, prof)
            text = f"  {title} / {side}: peak {best[1]:,.0f}/s at {best[0]} workers"
            if errs:
                text += f"; first errors at {errs[0]} workers"
            else:
                text += f"; no errors up to {points[-1][0]} workers"
            lines.append(text)
    return lines


E2E_BASELINES = {
    "sqlite": (("batched", "bare"), ("one-job", "seed")),
    # on PostgreSQL every side runs both rows: each is set against litegate's
    "postgres": (("batched", "litegate"), ("one-job", "litegate")),
}


def e2e_table(result: dict[str, Any], cfg: Config) -> str:
    summary = result["summary"]
    headers = [
        "Row",
        "Configuration",
        "Side",
        "Jobs",
        "Jobs/sec",
        "vs litegate" if cfg.backend == "postgres" else "vs baseline",
        "Claim P50 (ms)",
        "Claim P95 (ms)",
        "Claim P99 (ms)",
        "Worker share min/max",
        "Jain",
        "RSD",
        *([HANDOFFS, COMMITS] if _gated(cfg) else []),
        "Errors",
        _w(cfg, "busy"),
        _w(cfg, "peak"),
    ]
    if cfg.runs > 1:
        headers += ["CV jobs/s"]
    rows = []
    for prof in cfg.e2e_profiles:
        for variant, base_side in E2E_BASELINES[cfg.backend]:
            base = median_of(find(summary, "e2e", prof, variant, base_side), "throughput")
            first = True
            for side in cfg.sides:
                e = find(summary, "e2e", prof, variant, side)
                if e is None:
                    continue
                row = [variant if first else "", PROFILE_TITLES.get(prof, prof) if first else ""]
                first = False
                row.append(side + _threads_note(cfg, variant, side))
                if e["na"]:
                    rows.append(row + _na_row(e, len(headers) - 3))
                    continue
                tput = median_of(e, "throughput")
                lo, hi = median_of(e, "share_min"), median_of(e, "share_max")
                ratio = f"{tput / base:.2f}x" if tput is not None and base else "-"
                if side == base_side:
                    ratio = "baseline"
                flags = _flags(e)
                row += [
                    _num(median_of(e, "jobs")),
                    _num(tput),
                    ratio,
                    _ms(median_of(e, "p50")),
                    _ms(median_of(e, "p95")),
                    _ms(median_of(e, "p99")),
                    f"{_num(lo)} / {_num(hi)}" + (f" ({hi / lo:.1f}x)" if lo and hi else ""),
                    _jain(e),
                    _rsd(e),
                    *([_handoffs(e), _commits(e)] if _gated(cfg) else []),
                    _errors(e) + (f" {flags}" if flags else ""),
                    _busy(e),
                    _size(cfg, e),
                ]
                if cfg.runs > 1:
                    row.append(_cv(e, "throughput"))
                rows.append(row)
    return md_table(headers, rows)


def _threads_note(cfg: Config, variant: str, side: str) -> str:
    if cfg.backend == "postgres":
        return _pg_note(cfg, variant, side)
    if side in E2E_ONLY_SIDES:  # its own Worker, shaped as the harness's consumers are
        threads, batch = (1, cfg.batch) if variant == "batched" else (cfg.e2e_threads, 1)
        concurrency, prefetch = worker_shape(threads, batch)
        put = f"batches of {cfg.batch}" if variant == "batched" else f"{threads} threads/process"
        return f" ({put}; Worker concurrency {concurrency}, prefetch {prefetch})"
    if variant == "batched":
        return f" (batches of {cfg.batch})"
    t = cfg.seed_threads if side == "seed" else cfg.e2e_threads
    return f" ({t} thread{'s' if t > 1 else ''}/process)"


def _pg_note(cfg: Config, variant: str, side: str) -> str:
    """How each side ran an end-to-end row on PostgreSQL (see _run._plan_pg_e2e)."""
    t, b = cfg.e2e_threads, cfg.batch
    if side == "litegate":
        return f" (batches of {b})" if variant == "batched" else f" ({t} threads/process)"
    put = f"batches of {b}" if variant == "batched" else f"puts from {t} threads/process"
    if side == "procrastinate":
        return f" ({put}; its worker, concurrency {t}, 1 job per fetch)"
    size = b if variant == "batched" else 1
    return f" ({put}; its worker, batch_size {size})"


def _frames_cell(e: dict[str, Any], op: str) -> str:
    mean = median_of(e, f"{op}_frames")
    if mean is None:
        return FRAMES_NA.get(e["side"], {}).get(op, "-")
    p50, top = median_of(e, f"{op}_frames_p50"), median_of(e, f"{op}_frames_max")
    return f"{mean:.2f} (median {_num(p50)}, max {_num(top)})"


def frames_table(result: dict[str, Any], cfg: Config) -> str:
    summary = result["summary"]
    headers = ["Configuration", "Side", *(f"{op.capitalize()} (frames/op)" for op in OPS)]
    headers += ["Log restarts", _w(cfg, "peak"), "Notes"]
    if cfg.runs > 1:
        headers += ["CV " + " / ".join(OPS)]
    rows = []
    for prof in cfg.e2e_profiles:
        for i, e in enumerate(_entries(summary, "frames", prof, "single-job", cfg.sides)):
            row = _first_col(cfg, prof, e["side"], i == 0)
            if e["na"]:
                rows.append(row + _na_row(e, len(headers) - 2))
                continue
            restarts = sum(median_of(e, f"{op}_restarts") or 0.0 for op in OPS)
            flags = _flags(e)
            errors = median_of(e, "errors") or 0.0
            notes = [NOTES.get(e["side"], "")]
            if errors:
                notes.append(f"{errors:,.0f} errors")
            if flags:
                notes.append(flags)
            row += [_frames_cell(e, op) for op in OPS]
            row += [_num(restarts), _size(cfg, e), "; ".join(n for n in notes if n)]
            if cfg.runs > 1:
                row.append(" / ".join(_cv(e, f"{op}_frames") for op in OPS))
            rows.append(row)
    return md_table(headers, rows)


def target_lines(result: dict[str, Any]) -> list[str]:
    where = " on PostgreSQL" if result.get("backend") == "postgres" else ""
    lines = [f"Targets (litegate{where}; medians; reported, never asserted):"]
    for t in result["targets"]:
        status = "met " if t["met"] else "MISS"
        lines.append(f"  [{status}] {t['target']}: {t['detail']}")
    if len(lines) == 1:
        lines.append("  (none: litegate or the scenarios they need were not run)")
    return lines


def _problems(result: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for e in result["summary"]:
        label = f"{e['scenario']} {e['profile']} {e['variant']} {e['side']}"
        for s in e["setup_errors"]:
            last = s.strip().splitlines()[-1] if s.strip() else s
            lines.append(f"  {label}: {last}")
    msgs: dict[str, int] = {}
    for e in result["summary"]:
        for m, n in e["errors_seen"].items():
            key = f"{e['side']}: {m}"
            msgs[key] = msgs.get(key, 0) + n
    out = []
    if lines:
        out += ["", "Setup problems:", *sorted(set(lines))[:12]]
    if msgs:
        out += ["", "Errors seen (side: message x count):"]
        out += [f"  {m} x {n}" for m, n in sorted(msgs.items(), key=lambda kv: -kv[1])[:12]]
    return out


PG_E2E_TEXT = (
    " On PostgreSQL litegate runs the claim/ack loop above; procrastinate and pgqueuer "
    "consume with their own worker loop (procrastinate: App.run_worker_async; pgqueuer: "
    "PgQueuer.run), started with the cell, running as in production until the producers "
    "are done, then in their drain mode (wait=False; mode=drain) until the queue is empty. "
    "Their jobs count when the worker runs them (no claim latency to time); producers use "
    "defer_async / batch_defer_async and Queries.enqueue (lists in the batched row)."
)


WORKER_E2E_TEXT = (
    " litegate-worker: the litegate side's producers; its worker processes run "
    "litegate.queue.Worker (defaults but concurrency and prefetch: lease 30 s, ack_delay "
    "10 ms, ack_batch 100) as in production until the producers are done and counts() "
    "shows nothing ready, scheduled or leased (looked at every 5 ms, a read), then stop(). "
    "Its jobs count when the handler runs them (no claim latency to time)."
)

FRAMES_TEXT = (
    "Frames per operation: the WAL frames (pages written) each operation appended, read "
    "from the WAL-index header in the -shm file before and after it (mxFrame; a new salt "
    "means the log restarted, and then every frame of it is the operation's); the mean, "
    "with the median and the largest. Log restarts: operations during which a writer "
    "started the log again after a checkpoint (counted, not lost). Each side's own "
    "client, one job per call, its PRAGMAs the profile's."
)


def server_line(result: dict[str, Any]) -> str:
    s = result.get("server")
    if not s:
        return ""
    return (
        f"Server: {s.get('version', '?')}, {s.get('server', '?')}; fsync={s.get('fsync')}, "
        f"synchronous_commit={s.get('synchronous_commit')}, "
        f"shared_buffers={s.get('shared_buffers')}"
    )


def render(result: dict[str, Any]) -> str:
    if "results" in result:
        return render_combined(result)
    return render_part(result)


def render_part(result: dict[str, Any], level: int = 1) -> str:
    """One backend's report; ``level`` 2 makes its title a section of a
    combined report (its scenarios are ### either way)."""
    cfg = Config.from_json(result["config"])
    runs = cfg.runs
    what = f"median of {runs} runs" if runs > 1 else "one run"
    pg = cfg.backend == "postgres"
    on = BACKEND_TITLES[cfg.backend]
    parts = [
        f"{'#' * level} queue (seed 004) on {on}: {what}; worker processes "
        f"started with {cfg.start_method}, together (barrier); a fresh database per cell",
        "",
    ]
    if pg:
        parts += [server_line(result), ""]
    parts += [
        "Sides: "
        + "; ".join(
            f"{s} = {side_title(cfg.backend, s)}"
            + (" (end-to-end rows only)" if s in cfg.e2e_only_sides or s in E2E_ONLY_SIDES else "")
            for s in cfg.sides
        )
    ]
    sc = cfg.scenarios
    if "single" in sc:
        parts += [
            "",
            f"### Scenario 1: Single Writer Baseline ({cfg.single_puts:,} task insertions, "
            "one process)",
            "",
            single_table(result, cfg),
            *grant_log_lines(result, "single"),
        ]
    if "concurrent" in sc:
        for n in cfg.concurrent_workers:
            each = cfg.concurrent_total // n
            parts += [
                "",
                f"### Scenario 2: Concurrent Writers ({n} Workers)",
                "",
                f"**Test**: {n} worker processes each inserting ~{each:,} tasks "
                f"({cfg.concurrent_total:,} total); {_w(cfg, 'busy_text')}; "
                "Error Rate = inserts that failed",
                "",
                concurrent_table(result, cfg, n),
                *grant_log_lines(result, "concurrent", f"{n} workers"),
            ]
    if "mixed" in sc:
        parts += [
            "",
            f"### Scenario 3: Mixed Workload ({cfg.mixed_writers} writers + "
            f"{cfg.mixed_claimers} claimers, {cfg.mixed_seconds:g} s)",
            "",
            "Writers put as fast as they can; claimers claim one job and ack it, polling "
            "every 1 ms when the queue is empty. Claim latency: one claim call that "
            "returned a job. Jain W / C: Jain's index over the writer processes' puts / "
            "the claimer processes' jobs (1.000 = equal shares); RSD: their standard "
            "deviation over their mean." + (f" {HANDOFFS_TEXT}" if _gated(cfg) else ""),
            "",
            mixed_table(result, cfg, "mixed"),
            *grant_log_lines(result, "mixed"),
        ]
    if "stress" in sc:
        parts += [
            "",
            f"### Scenario 4: Stress Test (each worker process: put -> claim -> ack, "
            f"{cfg.stress_seconds:g} s per step)",
            "",
            "Jain: Jain's index over the cycles each worker process completed (1.000 = "
            "equal shares); RSD: their standard deviation over their mean."
            + (f" {HANDOFFS_TEXT}" if _gated(cfg) else ""),
            "",
            stress_table(result, cfg),
            *grant_log_lines(result, "stress"),
            "",
            "Breaking points:",
            *breaking_points(result, cfg),
        ]
    if "long" in sc:
        parts += [
            "",
            f"### Scenario 5: Long-Running ({cfg.long_seconds:g} s of the mixed workload; "
            f"{_w(cfg, 'size_text')} every {cfg.long_sample_s:g} s)",
            "",
            mixed_table(result, cfg, "long"),
            *grant_log_lines(result, "long"),
        ]
    if "e2e" in sc:
        parts += [
            "",
            f"### End to end: {cfg.e2e_producers} producer + {cfg.e2e_workers} worker "
            f"processes, {cfg.e2e_jobs:,} jobs",
            "",
            f"batched: put_many of {cfg.batch}, claim(n={cfg.batch}), ack_many; one-job: put, "
            "claim(1), ack. Jobs/sec: jobs acknowledged over the time from the first "
            "producer's start to the last worker's end. Worker share: jobs per worker process; "
            "Jain: Jain's index over those shares (1.000 = equal, 1/n = one process did "
            "everything); RSD: their standard deviation over their mean."
            + (PG_E2E_TEXT if pg else "")
            + (WORKER_E2E_TEXT if set(E2E_ONLY_SIDES) & set(cfg.sides) else "")
            + (f" {HANDOFFS_TEXT} {COMMITS_TEXT}" if _gated(cfg) else ""),
            "",
            e2e_table(result, cfg),
            *grant_log_lines(result, "e2e"),
        ]
    if "frames" in sc and not pg:
        parts += [
            "",
            f"### WAL frames per operation: {cfg.frames_ops:,} single-job puts, then "
            f"{cfg.frames_ops:,} claims of one job, then {cfg.frames_ops:,} acks, after a "
            f"backlog of {cfg.frames_backlog:,} jobs (one process, one thread)",
            "",
            FRAMES_TEXT,
            "",
            frames_table(result, cfg),
        ]
    parts += _problems(result)
    parts += ["", *target_lines(result)]
    return "\n".join(parts)


# --------------------------------------------------------------------------
# a combined run (--backend sqlite,postgres)


def _shape(cfg: dict[str, Any]) -> str:
    return (
        f"{cfg['e2e_producers']} producer + {cfg['e2e_workers']} worker processes, "
        f"{cfg['e2e_jobs']:,} jobs"
    )


def glance_lines(result: dict[str, Any]) -> list[str]:
    """One line per backend (and SQLite e2e profile) with every side's
    end-to-end jobs/s, litegate first, then litegate on each later backend
    against the first: the two backends at a glance."""
    rows = at_a_glance(result)
    parts = result["results"]
    shapes = {_shape(p["config"]) for p in parts.values() if "e2e" in p["config"]["scenarios"]}
    head = "; " + shapes.pop() if len(shapes) == 1 else ""
    lines = [f"At a glance: end to end, jobs/s (medians{head}):"]
    labelled: list[tuple[str, str]] = []  # (label, figures), padded to line up below
    for backend, part in parts.items():
        title = BACKEND_TITLES[backend]
        if "error" in part:
            labelled.append((title, f"FAILED: {part['error'].splitlines()[-1]}"))
            continue
        mine = [r for r in rows if r["backend"] == backend]
        if not mine:
            scenarios = ",".join(part["config"]["scenarios"])
            labelled.append((title, f"no end-to-end rows in this run (--scenarios {scenarios})"))
            continue
        for prof in dict.fromkeys(r["profile"] for r in mine):
            label = title if backend == "postgres" else f"{title} ({PROFILE_TITLES[prof]})"
            label += "" if head else f" [{_shape(part['config'])}]"
            texts = []
            for variant in ("batched", "one-job"):
                cells = [
                    _glance_cell(part, r)
                    for r in mine
                    if (r["profile"], r["variant"]) == (prof, variant)
                ]
                if cells:
                    texts.append(f"{variant}: " + ", ".join(cells))
            labelled.append((label, " | ".join(texts)))
    width = max(len(label) for label, _ in labelled) + 1
    lines += [f"  {label + ':':<{width}} {text}" for label, text in labelled]
    return lines + _litegate_across(result, rows)


def _glance_cell(part: dict[str, Any], row: dict[str, Any]) -> str:
    """``side jobs/s``, with what went wrong when the cell was not clean (a
    fast row that lost jobs is no figure to compare)."""
    note = ""
    if not row["clean"]:
        e = find(part["summary"], "e2e", row["profile"], row["variant"], row["side"])
        flags = _flags(e) if e is not None else ""
        note = f" ({flags or _num(median_of(e, 'errors')) + ' errors'})"
    return f"{row['side']} {_num(row['jobs_per_s'])}{note}"


def _litegate_across(result: dict[str, Any], rows: Sequence[dict[str, Any]]) -> list[str]:
    """litegate's end-to-end jobs/s on each later backend over the first's,
    each backend's first e2e profile (SQLite: balanced by default)."""
    lg: dict[tuple[str, str], tuple[str, float]] = {}
    for r in rows:
        if r["side"] == "litegate" and r["jobs_per_s"] is not None:
            lg.setdefault((r["backend"], r["variant"]), (r["profile"], r["jobs_per_s"]))
    backends = list(result["results"])
    first = backends[0]
    out = []
    for other in backends[1:]:
        ratios, profs = [], set()
        for variant in ("batched", "one-job"):
            base, mine = lg.get((first, variant)), lg.get((other, variant))
            if base and mine and base[1]:
                ratios.append(f"{variant} {mine[1] / base[1]:.2f}x")
                profs.add(PROFILE_TITLES.get(base[0], base[0]))
        if ratios:
            where = f" ({', '.join(sorted(profs))})" if first == "sqlite" else ""
            out.append(
                f"  litegate on {BACKEND_TITLES[other]} / on {BACKEND_TITLES[first]}{where}: "
                + ", ".join(ratios)
            )
    return out


def render_combined(result: dict[str, Any]) -> str:
    titles = [BACKEND_TITLES[b] for b in result["backends"]]
    parts = [
        f"# queue (seed 004) on {' and '.join(titles)}: one invocation, "
        f"{', then '.join(titles)} (a section each)",
        "",
        *glance_lines(result),
    ]
    for backend in result["backends"]:
        part = result["results"][backend]
        parts.append("")
        if "error" in part:
            parts += [
                f"## queue (seed 004) on {BACKEND_TITLES[backend]}: FAILED",
                "",
                "This backend's part raised before it finished; the other backends' "
                "results stand. The traceback is in the JSON (results."
                f"{backend}.traceback).",
                "",
                f"    {part['error']}",
            ]
        else:
            parts.append(render_part(part, level=2))
    return "\n".join(parts)
