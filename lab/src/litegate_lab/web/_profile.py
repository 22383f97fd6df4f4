"""Where a Django request's CPU goes, per engine: ``litegate bench web --profile N``.

Each engine configuration runs in a process of its own (Django's settings
are per process) on a fresh copy of one seeded database. The app is called
in that process through Django's test client, without a server, so only the
request's own work is counted. Per action of the seed's app (one
``POST /benchmarking/<action>``, the redirect a write answers with not
followed):

- Python opcodes per request, exact (the same on a busy machine as on a
  quiet one), split by where they run: litegate's own code, Django's
  database layer (``django/db``: the ORM, the stock SQLite backend that
  ``litegate.django`` subclasses), the rest of Django, the app, the
  standard library and others;
- CPU time per request (``time.process_time``, untraced, median of rounds):
  includes the C work (SQLite, the profile's PRAGMAs at work) that opcodes
  do not see;
- the functions that cost litegate's engine most (cProfile, own time).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from types import FrameType
from typing import Any

from .._stats import median
from ._actions import ACTIONS

ENGINES = ("tuned", "litegate")
AREAS = ("litegate", "django.db", "django", "app", "other")
ROUNDS = 5  # untraced timing rounds per action


def _area(filename: str) -> str:
    path = filename.replace(os.sep, "/")
    if "/litegate_lab/" in path:
        return "app"
    if "/litegate/" in path:
        return "litegate"
    if "/django/db/" in path:
        return "django.db"
    if "/django/" in path:
        return "django"
    return "other"


def _count(call: Callable[[], Any], n: int) -> dict[str, float]:
    """Opcodes per call of ``call``, by area."""
    counts: Counter[str] = Counter()
    areas: dict[Any, str] = {}

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode":
            code = frame.f_code
            area = areas.get(code)
            if area is None:
                area = areas[code] = _area(code.co_filename)
            counts[area] += 1
        return tracer

    sys.settrace(tracer)
    try:
        for _ in range(n):
            call()
    finally:
        sys.settrace(None)
    return {a: counts[a] / n for a in AREAS}


def _top(call: Callable[[], Any], n: int, top: int = 12) -> list[tuple[str, float]]:
    """cProfile: the ``top`` functions by own time, µs per call, litegate's first."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    try:
        for _ in range(n):
            call()
    finally:
        prof.disable()
    rows: list[tuple[str, float]] = []
    for (filename, line, name), row in pstats.Stats(prof).stats.items():  # type: ignore[attr-defined]
        if _area(filename) == "litegate":
            rows.append((f"{os.path.basename(filename)}:{line}:{name}", row[2] / n * 1e6))
    rows.sort(key=lambda r: -r[1])
    return rows[:top]


def child(engine: str, db: str, n: int) -> dict[str, Any]:
    """In a fresh process: profile every action on ``db`` under ``engine``."""
    os.environ["LITEGATE_WEB_DB"] = db
    os.environ["LITEGATE_WEB_ENGINE"] = engine
    os.environ["DJANGO_SETTINGS_MODULE"] = "litegate_lab.web.app.settings"
    import django

    django.setup()
    from django.test import Client

    client = Client()
    out: dict[str, Any] = {}
    for action in ACTIONS:
        url = f"/benchmarking/{action}"

        def call(url: str = url) -> None:
            status = client.post(url).status_code
            if status not in (200, 302):
                raise RuntimeError(f"{url} answered {status}")

        for _ in range(max(20, n // 5)):  # warm: connections, statement caches
            call()
        rounds = []
        for _ in range(ROUNDS):
            t0 = time.process_time()
            for _ in range(n):
                call()
            rounds.append((time.process_time() - t0) / n * 1e6)
        out[action] = {
            "cpu_us": median(rounds),
            "opcodes": _count(call, max(10, n // 5)),
            "top": _top(call, n) if engine == "litegate" else [],
        }
    return out


def run(n: int, seeded: str) -> dict[str, Any]:
    """Every engine of :data:`ENGINES`, ``n`` requests per action and round,
    each on its own copy of the seeded database ``seeded``."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="litegate-web-profile-") as tmp:
        for engine in ENGINES:
            db = os.path.join(tmp, f"{engine}.db")
            shutil.copyfile(seeded, db)
            done = subprocess.run(
                [sys.executable, "-m", "litegate_lab.web._profile", engine, db, str(n)],
                check=True, capture_output=True, text=True, timeout=1800,
            )  # fmt: skip
            out[engine] = json.loads(done.stdout.splitlines()[-1])
    return out


def render(profile: dict[str, Any]) -> str:
    a, b = ENGINES
    lines = [
        "-- a Django request's cost per engine (bench web --profile): one POST /benchmarking/"
        "<action> through Django's test client, no server; opcodes per request, exact; "
        "CPU µs per request, median of rounds",
        "",
        f"{'ACTION':<16}{a + ' CPU':>11}{b + ' CPU':>14}{'RATIO':>7}"
        f"{a + ' OPS':>11}{b + ' OPS':>14}  {b.upper()} OPCODES BY AREA",
    ]
    for action in ACTIONS:
        pa, pb = profile[a][action], profile[b][action]
        ops_a, ops_b = sum(pa["opcodes"].values()), sum(pb["opcodes"].values())
        areas = ", ".join(f"{k} {pb['opcodes'][k]:.0f}" for k in AREAS)
        lines.append(
            f"{action:<16}{pa['cpu_us']:>11.0f}{pb['cpu_us']:>14.0f}"
            f"{pb['cpu_us'] / pa['cpu_us']:>6.2f}x{ops_a:>11.0f}{ops_b:>14.0f}  {areas}"
        )
    lines.append("")
    lines.append(f"{a} opcodes by area: " + "; ".join(
        f"{action} " + ", ".join(f"{k} {profile[a][action]['opcodes'][k]:.0f}" for k in AREAS)
        for action in ACTIONS[:2]))  # fmt: skip
    for action in ("post_create", "post_show"):
        lines.append("")
        lines.append(f"{b}, {action}: litegate's functions by own time (cProfile, µs/request)")
        for site, us in profile[b][action]["top"]:
            lines.append(f"  {us:8.2f}  {site}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(json.dumps(child(sys.argv[1], sys.argv[2], int(sys.argv[3]))))
