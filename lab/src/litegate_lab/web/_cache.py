"""``bench web --cache``: the Django app's front page (``GET /``, the latest
100 posts) cached with ``cache_page`` by each of Django's cache backends, on
the same app (ENGINE ``litegate.django``) under the same gunicorn, loaded
with ``hey -m GET``; ``none`` is the same page uncached. Backends as ``bench
cache`` sets them up: ``litegate`` (LitegateCache, its own file),
``database`` (DatabaseCache in the app's database), ``filebased``, ``redis``
(RedisCache on a throwaway redis-server on 127.0.0.1). Each cell: a fresh
copy of the seeded database, an empty cache, a fresh server."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._progress import Progress
from .._report import cpu_times, idle_share
from .._stats import median
from . import _hey
from ._server import Server

CACHES = ("none", "litegate", "database", "filebased", "redis")


@dataclass(frozen=True)
class _Where:
    """One cache backend's files in the run's directory."""

    cache: str
    tmp: str

    @property
    def dir(self) -> str:
        return os.path.join(self.tmp, f"cache-{self.cache}")

    @property
    def db(self) -> str:
        return os.path.join(self.dir, "app.db")

    @property
    def log(self) -> Path:
        return Path(self.dir) / "server.log"

    @property
    def acks(self) -> Path:
        return Path(self.dir) / "acks"

    def fresh(self, template: str) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        shutil.copyfile(template, self.db)


def _env(w: _Where, redis_url: str, seconds: float) -> dict[str, str]:
    location = {
        "litegate": os.path.join(w.dir, "cache.sqlite3"),
        "filebased": os.path.join(w.dir, "filebased"),
        "redis": redis_url,
    }.get(w.cache, "")
    return {
        "LITEGATE_WEB_CACHE": "" if w.cache == "none" else w.cache,
        "LITEGATE_WEB_CACHE_LOCATION": location,
        "LITEGATE_WEB_CACHE_SECONDS": f"{seconds:g}",
    }


def _flush(url: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    try:
        client.flushall()
    finally:
        client.close()


def cell(cfg: Any, w: _Where, template: str, redis_url: str, n: int) -> dict[str, Any]:
    w.fresh(template)
    if w.cache == "redis":
        _flush(redis_url)
    env = _env(w, redis_url, cfg.cache_seconds)
    with Server(w.db, "litegate", w.log, acks=w.acks, framework="django", workers=cfg.workers,
                threads=cfg.threads, env=env) as srv:  # fmt: skip
        threads0, machine0 = srv.thread_sample(), cpu_times()
        summary, _ = _hey.run(cfg.hey, f"{srv.url}/", n, cfg.seconds, method="GET")
        cpu = srv.thread_sample().cpu_s - threads0.cpu_s
        idle = idle_share(machine0, cpu_times())
        code = srv.stop()
    responses = max(1, summary.responses)
    return {
        "cache": w.cache,
        "c": n,
        "hey": summary.as_dict(),
        "cpu_ms_per_request": 1000.0 * cpu / responses,
        "idle_share": idle,
        "server_exit": code,
    }


def run(cfg: Any, template: str, tmp: str, progress: Progress) -> list[dict[str, Any]]:
    from ..cache._redis import RedisServer

    server = RedisServer().start() if "redis" in cfg.caches else None
    rows: list[dict[str, Any]] = []
    try:
        for r in range(cfg.runs):
            for k in range(cfg.headline):
                for n in cfg.cache_c:
                    for cache in cfg.caches:
                        progress.describe(f"run {r + 1}: front page, cache {cache}, c={n}")
                        row = cell(cfg, _Where(cache, tmp), template,
                                   server.url if server else "", n)  # fmt: skip
                        row.update(run=r, repeat=k)
                        rows.append(row)
                        progress.advance()
    finally:
        if server is not None:
            server.stop()
    return rows


def _non_200(row: dict[str, Any]) -> int:
    return sum(v for k, v in row["hey"]["statuses"].items() if k != "200")


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for row in rows:
        out.setdefault(str(row["c"]), {}).setdefault(row["cache"], []).append(row)
    return {
        c: {
            cache: {
                "rps": [x["hey"]["rps"] for x in mine],
                "p50_s": median([x["hey"]["percentiles"].get("50", 0.0) for x in mine]),
                "p99_s": median([x["hey"]["percentiles"].get("99", 0.0) for x in mine]),
                "responses": sum(x["hey"]["responses"] for x in mine),
                "non_200": sum(_non_200(x) for x in mine),
                "errors": sum(sum(x["hey"]["errors"].values()) for x in mine),
                "cpu_ms_per_request": median([x["cpu_ms_per_request"] for x in mine]),
            }
            for cache, mine in by.items()
        }
        for c, by in out.items()
    }


def targets(summary: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for c, by in summary.items():
        if "litegate" in by and "redis" in by:
            mine, theirs = median(by["litegate"]["rps"]), median(by["redis"]["rps"])
            ratio = mine / theirs if theirs else 0.0
            out.append({
                "target": f"the cached app's requests/s / the same app on RedisCache >= 1x "
                          f"(GET /, c = {c})",
                "value": f"{ratio:.2f}x ({mine:,.0f} / {theirs:,.0f} requests/s)",
                "ratio": ratio,
                "met": ratio >= 1.0,
            })  # fmt: skip
    return out


def render(result: dict[str, Any]) -> str:
    cfg = result["config"]
    lines = [
        f"litegate bench web --cache: the front page (GET /, the latest 100 posts) under "
        f"cache_page({cfg['cache_seconds']:g} s), Django under gunicorn (gthread, "
        f"{cfg['workers']} worker(s) x {cfg['threads']} threads), ENGINE litegate.django; "
        f"hey -z {cfg['seconds']:g}s -m GET; {cfg['headline']} repeat(s) x {cfg['runs']} "
        "run(s); a fresh database and an empty cache per cell",
    ]
    for c, by in result["cache_summary"].items():
        lines += ["", f"c = {c}: requests/s median [runs]; p50 / p99; non-200; server CPU "
                      "ms/request"]  # fmt: skip
        for cache, s in by.items():
            runs = ", ".join(f"{v:,.0f}" for v in s["rps"])
            lines.append(
                f"  {cache:<10} {median(s['rps']):>8,.0f} [{runs}]; {1000 * s['p50_s']:.1f} / "
                f"{1000 * s['p99_s']:.1f} ms; {s['non_200'] + s['errors']} of "
                f"{s['responses']:,}; {s['cpu_ms_per_request']:.2f}"
            )
    if result["targets"]:
        lines += ["", "Targets (issue 37):"]
        for t in result["targets"]:
            lines.append(f"  [{'met' if t['met'] else 'MISSED'}] {t['target']}: {t['value']}")
    return "\n".join(lines)


def charts(result: dict[str, Any], out: Path) -> list[Path]:
    from .._charts import Bar, grouped_bars

    panels = []
    for c, by in result["cache_summary"].items():
        series = {cache: [Bar(median(s["rps"]), min(s["rps"]), max(s["rps"]))]
                  for cache, s in by.items()}  # fmt: skip
        panels.append((f"GET /, c = {c}", ["front page"], series))
    path = out / "web-cache-rps.png"
    return [grouped_bars(path, title="The front page cached by each Django cache backend",
                         panels=panels, ylabel="requests/s")]  # fmt: skip
