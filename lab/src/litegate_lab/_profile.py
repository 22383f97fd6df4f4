"""Where one call's cost goes: ``litegate bench micro --profile``.

Each latency workload's litegate call is run two ways, on a fresh database:

- counted: ``sys.settrace`` with opcode events counts the Python bytecode
  instructions each function executes per call. The count is exact and the
  same on a busy machine as on a quiet one, so a change to the hot path can
  be judged by it without a benchmark's noise;
- timed: ``cProfile`` gives each function's own time per call (under the
  profiler's overhead: for where the time goes, not for how long a call
  takes).

The workloads and their statements are the latency part's (``micro``
opens each); settrace and cProfile see only the calling thread.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from types import FrameType
from typing import Any

Op = Callable[[int], Any]


def _site(code: Any) -> str:
    name = os.path.basename(code.co_filename)
    return f"{name}:{code.co_name}"


def count_opcodes(fn: Op, calls: int) -> tuple[float, dict[str, float]]:
    """Python opcodes per call of ``fn``, in all and per function."""
    counts: Counter[str] = Counter()

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode":
            counts[_site(frame.f_code)] += 1
        return tracer

    sys.settrace(tracer)
    try:
        for i in range(calls):
            fn(i)
    finally:
        sys.settrace(None)
    total = sum(counts.values()) / calls
    return total, {site: c / calls for site, c in counts.most_common()}


def time_functions(fn: Op, calls: int) -> dict[str, dict[str, float]]:
    """cProfile: each function's own time (us) and calls, per call of ``fn``."""
    prof = cProfile.Profile()
    prof.enable()
    try:
        for i in range(calls):
            fn(i)
    finally:
        prof.disable()
    stats = pstats.Stats(prof)
    out: dict[str, dict[str, float]] = {}
    for (filename, _line, name), row in stats.stats.items():  # type: ignore[attr-defined]
        _cc, ncalls, tottime, _cum, _callers = row
        site = f"{os.path.basename(filename)}:{name}" if filename != "~" else name
        out[site] = {"us": tottime / calls * 1e6, "calls": ncalls / calls}
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["us"]))


Opener = Callable[[str, str], tuple[Op, Callable[[], None]]]


def run(open_workload: Opener, workloads: tuple[str, ...], calls: int) -> dict[str, Any]:
    """Profile each workload's litegate call; ``calls`` timed calls each
    (opcodes are counted over a tenth of them, at least 50).
    ``open_workload(name, path)`` sets the workload up on a fresh database at
    ``path`` and gives its call and what closes it."""
    out: dict[str, Any] = {}
    for workload in workloads:
        with tempfile.TemporaryDirectory(prefix="litegate-profile-") as d:
            fn, close = open_workload(workload, os.path.join(d, "p.db"))
            try:
                for i in range(200):  # warm: statement caches, the pool, the gate kept
                    fn(i)
                total, by_function = count_opcodes(fn, max(50, calls // 10))
                out[workload] = {
                    "opcodes_per_call": total,
                    "opcodes": by_function,
                    "time": time_functions(fn, calls),
                }
            finally:
                close()
    return out


def render(profile: dict[str, Any], top: int = 12) -> str:
    lines = [
        "-- where a call goes (bench micro --profile): Python opcodes per call, exact; "
        "cProfile's own time per call, under the profiler"
    ]
    for workload, p in profile.items():
        lines.append("")
        lines.append(f"{workload}: {p['opcodes_per_call']:.0f} opcodes per call")
        lines.append(f"  {'OPCODES':>8}  {'OWN us':>8}  {'CALLS':>5}  FUNCTION")
        timed = p["time"]
        sites = list(p["opcodes"])[:top]
        for site in sorted(timed, key=lambda s: -timed[s]["us"])[:top]:
            if site not in sites:
                sites.append(site)
        for site in sites:
            ops = p["opcodes"].get(site)
            t = timed.get(site, {})
            lines.append(
                f"  {'' if ops is None else f'{ops:.0f}':>8}  "
                f"{t.get('us', 0.0):8.2f}  {t.get('calls', 0.0):5.1f}  {site}"
            )
    return "\n".join(lines)
