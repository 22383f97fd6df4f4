"""Comparing what the writers were told with what the database holds after
a cut.

Per cut, from the ledgers (see ``_work``) and the database as the checker
read it:

- **lost**: an acknowledged unit (a row group, a job put, a job acked)
  that is not there (for an ack: the job is not done);
- **lost before the last sync**: a lost acknowledgement given before the
  write-ahead log's last fsync began; that fsync made everything written
  before it durable, so this would be a real bug in any profile;
- **corrupt**: the database does not open or ``integrity_check`` is not ok;
- **anomalies**: a unit with only some of its rows (a torn transaction),
  a hole (call ``n`` of a thread missing while a later call of the same
  thread is there: a thread's calls commit in order, so a crash keeps a
  prefix of them), a ``transact`` counter that disagrees with its rows, a
  job whose payload is not the one put, a job stored twice, and rows or
  jobs that an earlier check found and that are gone now (regressions).
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from ._work import PARTS, cache_value

_API = re.compile(r"^(?P<api>[a-z_]+?)\d+$")

# The API each ledger line belongs to in the per-API tallies.
QUEUE_PUT, QUEUE_ACK = "queue put", "queue ack"


def api_of(unit: str) -> str:
    """``r3.core1.execute2`` -> ``execute``."""
    m = _API.match(unit.rsplit(".", 1)[-1])
    return m.group("api") if m else unit


@dataclass
class Ledger:
    """Every line of every writer of one cut."""

    acked: dict[str, dict[int, int]] = field(default_factory=lambda: defaultdict(dict))
    failed: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    puts: dict[str, dict[int, tuple[int, int]]] = field(default_factory=lambda: defaultdict(dict))
    acks: dict[int, int] = field(default_factory=dict)  # job id -> when its ack returned
    errors: list[tuple[int, str]] = field(default_factory=list)  # (when, exception name)


def read_ledgers(directory: str) -> Ledger:
    out = Ledger()
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".log"):
            continue
        with open(os.path.join(directory, name), encoding="ascii") as f:
            text = f.read()
        for line in text.split("\n")[:-1]:  # a last line without "\n" was cut short
            parts = line.split()
            kind = parts[0]
            if kind == "A":
                out.acked[parts[1]][int(parts[2])] = int(parts[3])
            elif kind == "P":
                out.puts[parts[1]][int(parts[2])] = (int(parts[3]), int(parts[4]))
            elif kind == "K":
                out.acks[int(parts[1])] = int(parts[2])
            elif kind == "F":
                out.failed[parts[1]].add(int(parts[2]))
                out.errors.append((int(parts[3]), parts[4]))
            elif kind == "X":
                out.errors.append((int(parts[2]), parts[3]))
            else:
                raise ValueError(f"{name}: unknown ledger line {line!r}")
    return out


@dataclass
class Carry:
    """What earlier checks found, that must still be there."""

    rows_per_round: dict[int, int] = field(default_factory=dict)
    last_job: int = 0  # jobs up to this id were checked before
    jobs: int = 0  # how many of them existed
    done: int = 0  # how many of them were done


def _holes(present: set[int], failed: set[int]) -> int:
    if not present:
        return 0
    return sum(1 for n in range(1, max(present)) if n not in present and n not in failed)


def check(
    r: int,
    ledger: Ledger,
    seen: dict[str, Any],
    horizon_ns: int,
    carry: Carry,
    cache_horizon_ns: int = 0,
) -> dict[str, Any]:
    """One cut's verdict. ``horizon_ns``: when the WAL's last fsync began
    (0: none since the file got its durable name); ``cache_horizon_ns``:
    the same for the cache writer's file (its units are ``cache_*``)."""
    acked: Counter[str] = Counter()
    lost: Counter[str] = Counter()
    lost_before_sync = 0
    exposed = 0  # acknowledgements given after the horizon (the ones at risk)
    anomalies: Counter[str] = Counter()

    def tally(api: str, t: int, ok: bool) -> None:
        nonlocal lost_before_sync, exposed
        horizon = cache_horizon_ns if api.startswith("cache_") else horizon_ns
        acked[api] += 1
        if t > horizon:
            exposed += 1
        if not ok:
            lost[api] += 1
            if t <= horizon:
                if api.startswith("cache_"):
                    anomalies["cache lost before its sync"] += 1
                else:
                    lost_before_sync += 1

    error = seen.get("error")
    integrity = seen.get("integrity")
    corrupt = bool(error) or integrity != ["ok"]
    if error and "rows" not in seen:  # nothing readable: every acknowledgement counts as lost
        for unit, got in ledger.acked.items():
            for t in got.values():
                tally(api_of(unit), t, False)
        for got_puts in ledger.puts.values():
            for _jid, t in got_puts.values():
                tally(QUEUE_PUT, t, False)
        for t in ledger.acks.values():
            tally(QUEUE_ACK, t, False)
        return _verdict(acked, lost, lost_before_sync, exposed, anomalies, corrupt, seen)

    # rows: unit -> n -> parts present
    parts: dict[str, dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))
    for w, n, part in seen["rows"]:
        parts[w][n].add(part)
    # the cache writer's entries ("unit:n:part" -> its value), as rows
    for key, value in (seen.get("cache_rows") or {}).items():
        unit, n, part = key.rsplit(":", 2)
        if value != cache_value(key):
            anomalies["cache value"] += 1
            continue
        parts[unit][int(n)].add(int(part))
    for unit in set(parts) | set(ledger.acked):
        api = api_of(unit)
        want = PARTS.get(api, 1)
        have = parts.get(unit, {})
        complete = {n for n, ps in have.items() if len(ps) == want}
        anomalies["torn"] += sum(1 for ps in have.values() if len(ps) != want)
        anomalies["holes"] += _holes(set(have), ledger.failed.get(unit, set()))
        for n, t in ledger.acked.get(unit, {}).items():
            tally(api, t, n in complete)
    counters = dict(seen["counters"])
    for unit, rows in parts.items():
        if api_of(unit) == "transact" and counters.get(unit) != max(rows):
            anomalies["counter"] += 1

    # the queue: jobs of this round, by (unit, n)
    jobs: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    state_of: dict[int, int] = {}
    for jid, state, payload in seen["jobs"]:
        state_of[jid] = state
        p = json.loads(payload)
        if p.get("r") == r:
            jobs[(p["w"], p["n"])].append((jid, state))
    anomalies["duplicate job"] += sum(1 for v in jobs.values() if len(v) > 1)
    for unit, got_puts in ledger.puts.items():
        present = {n for (w, n) in jobs if w == unit}
        anomalies["holes"] += _holes(present, ledger.failed.get(unit, set()))
        for n, (jid, t) in got_puts.items():
            there = jobs.get((unit, n), [])
            if there and all(j != jid for j, _ in there):
                anomalies["job id"] += 1
            tally(QUEUE_PUT, t, any(j == jid for j, _ in there))
    ack_state = dict(seen["acked_states"])  # the acked jobs' states, whatever their round
    for jid, t in ledger.acks.items():
        tally(QUEUE_ACK, t, ack_state.get(jid) == 2)

    # what earlier checks saw must still be there
    earlier = dict(seen["earlier_rows"])
    for rr, count in carry.rows_per_round.items():
        anomalies["regression"] += max(0, count - earlier.get(rr, 0))
    old_jobs, old_done = seen["earlier_jobs"]
    anomalies["regression"] += max(0, carry.jobs - old_jobs) + max(0, carry.done - old_done)
    return _verdict(acked, lost, lost_before_sync, exposed, anomalies, corrupt, seen)


def advance(carry: Carry, r: int, seen: dict[str, Any]) -> Carry:
    """What the next check must find again."""
    if seen.get("error") or "rows" not in seen:
        return carry
    rows = dict(carry.rows_per_round)
    for rr, count in seen["earlier_rows"]:
        rows[rr] = count
    rows[r] = len(seen["rows"])
    ids = [jid for jid, _s, _p in seen["jobs"]]
    old_jobs, old_done = seen["earlier_jobs"]
    return Carry(
        rows_per_round=rows,
        last_job=max([carry.last_job, *ids]),
        jobs=old_jobs + len(ids),
        done=old_done + sum(1 for _j, s, _p in seen["jobs"] if s == 2),
    )


def _verdict(
    acked: Counter[str],
    lost: Counter[str],
    lost_before_sync: int,
    exposed: int,
    anomalies: Counter[str],
    corrupt: bool,
    seen: dict[str, Any],
) -> dict[str, Any]:
    return {
        "acked": sum(acked.values()),
        "lost": sum(lost.values()),
        "lost_before_sync": lost_before_sync,
        "exposed": exposed,
        "acked_by_api": dict(acked),
        "lost_by_api": dict(lost),
        "corrupt": corrupt,
        "cache_corrupt": bool(
            seen.get("cache_error")
            or ("cache_integrity" in seen and seen["cache_integrity"] != ["ok"])
        ),
        "error": seen.get("error"),
        "cache_error": seen.get("cache_error"),
        "integrity": (seen.get("integrity") or [])[:5],
        "anomalies": {k: v for k, v in anomalies.items() if v},
    }
