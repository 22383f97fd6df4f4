"""``hey``: where it is, how it is run, and what its summary says."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

VERSION = "v0.1.5"
INSTALL = f"make hey  (GOBIN=.tools/bin go install github.com/rakyll/hey@{VERSION})"


class HeyMissing(RuntimeError):
    pass


def find(explicit: str | None = None) -> str:
    """The hey binary: ``explicit``, $LITEGATE_HEY, the project's
    ``.tools/bin/hey`` (from the current directory or the source checkout),
    or ``hey`` on PATH."""
    candidates = [explicit, os.environ.get("LITEGATE_HEY")]
    candidates.append(str(Path.cwd() / ".tools" / "bin" / "hey"))
    candidates.append(str(Path(__file__).resolve().parents[4] / ".tools" / "bin" / "hey"))
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    found = shutil.which("hey")
    if found:
        return found
    raise HeyMissing(f"hey was not found; install it into the project with: {INSTALL}")


@dataclass
class Summary:
    """What hey printed for one run."""

    total_s: float = 0.0
    slowest_s: float = 0.0
    fastest_s: float = 0.0
    average_s: float = 0.0
    rps: float = 0.0
    percentiles: dict[int, float] = field(default_factory=dict)  # 10, 25, 50, ... 99
    histogram: list[tuple[float, int]] = field(default_factory=list)  # (bucket top s, count)
    statuses: dict[int, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)  # hey's "Error distribution"

    @property
    def responses(self) -> int:
        return sum(self.statuses.values())

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["percentiles"] = {str(k): v for k, v in self.percentiles.items()}
        d["statuses"] = {str(k): v for k, v in self.statuses.items()}
        d["responses"] = self.responses
        return d


_FIELDS = {
    "Total": "total_s",
    "Slowest": "slowest_s",
    "Fastest": "fastest_s",
    "Average": "average_s",
    "Requests/sec": "rps",
}
_FIELD = re.compile(r"^\s+(Total|Slowest|Fastest|Average|Requests/sec):\s+([\d.]+)")
_PCT = re.compile(r"^\s+(\d+)%+ in ([\d.]+) secs")  # hey 0.1.5 prints "99%% in"
_BUCKET = re.compile(r"^\s+([\d.]+) \[(\d+)\]\s+\|")
_STATUS = re.compile(r"^\s+\[(\d+)\]\s+(\d+) responses")
_ERROR = re.compile(r"^\s+\[(\d+)\]\s+(.+)$")


def parse(text: str) -> Summary:
    """hey's default (summary) output, as a :class:`Summary`."""
    s = Summary()
    section = ""
    for line in text.splitlines():
        head = line.strip()
        if head.endswith(":") and not line.startswith(" "):
            section = head[:-1]
            continue
        if m := _FIELD.match(line):
            setattr(s, _FIELDS[m[1]], float(m[2]))
        elif section == "Latency distribution" and (m := _PCT.match(line)):
            s.percentiles[int(m[1])] = float(m[2])
        elif section == "Response time histogram" and (m := _BUCKET.match(line)):
            s.histogram.append((float(m[1]), int(m[2])))
        elif section == "Status code distribution" and (m := _STATUS.match(line)):
            s.statuses[int(m[1])] = int(m[2])
        elif section == "Error distribution" and (m := _ERROR.match(line)):
            s.errors[m[2].strip()] = s.errors.get(m[2].strip(), 0) + int(m[1])
    return s


def run(
    hey: str, url: str, concurrency: int, seconds: float, method: str = "POST"
) -> tuple[Summary, str]:
    """``hey -c N -z Ss -m POST url``: the parsed summary and the raw text.
    Bounded: hey stops itself after ``seconds``; it is killed after twice
    that (plus a margin) if it does not."""
    cmd = [hey, "-c", str(concurrency), "-z", f"{seconds:g}s", "-m", method, url]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=2 * seconds + 60)
    if proc.returncode != 0:
        raise RuntimeError(f"hey failed ({proc.returncode}): {proc.stderr.strip()[:500]}")
    return parse(proc.stdout), proc.stdout
