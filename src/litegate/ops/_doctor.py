"""``litegate doctor PATH``: a report on a database file and who is using
it, with what to do about anything that needs it. Read-only: the file is
opened with ``mode=ro`` (no checkpoint, no WAL clean-up on close), the
sidecar and the -shm file are only read, and the lock table comes from
/proc."""

from __future__ import annotations

import os
import sqlite3
import time
from contextlib import closing
from dataclasses import asdict, dataclass, field
from typing import Any

from .._profiles import PROFILES
from ._inspect import gate_snapshot, sqlite_locks, wal_index

OK, WARN, ACTION = "ok", "warn", "action"

# A WAL above this is growing past what litegate's checkpointer and
# journal_size_limit keep it to: a reader that never lets go, or checkpoints
# that cannot finish.
WAL_LARGE = 64 * 1024 * 1024
# How long doctor watches a gate holder to tell a long transaction.
HOLD_PROBE = 0.25


@dataclass
class Finding:
    check: str
    status: str  # ok, warn, action
    detail: str
    advice: str = ""  # what to do, and the command for it
    reason: str = ""


@dataclass
class Report:
    path: str
    facts: dict[str, Any] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)

    @property
    def needs_action(self) -> bool:
        return any(f.status == ACTION for f in self.findings)

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "needs_action": self.needs_action,
            "facts": self.facts,
            "findings": [asdict(f) for f in self.findings],
        }


class NotADatabase(Exception):
    pass


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _mib(n: int) -> str:
    return f"{n / 1048576:.1f} MiB" if n >= 1048576 else f"{n / 1024:.0f} KiB"


def diagnose(path: str, *, check: bool = True) -> Report:
    """The report for ``path``. Raises :class:`NotADatabase` (with the
    reason) for a missing file or one that is not SQLite."""
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise NotADatabase(f"{path} does not exist or is not a file")
    with open(path, "rb") as f:
        if f.read(16) != b"SQLite format 3\x00":
            raise NotADatabase(f"{path} is not a SQLite database (its header says otherwise)")
    rep = Report(path)
    uri = "file:" + path.replace("?", "%3f").replace("#", "%23") + "?mode=ro"
    with closing(sqlite3.connect(uri, uri=True, timeout=0.5)) as conn:
        conn.execute("PRAGMA query_only = 1")
        pragmas = {
            name: conn.execute(f"PRAGMA {name}").fetchone()[0]
            for name in (
                "journal_mode",
                "page_size",
                "page_count",
                "freelist_count",
                "auto_vacuum",
                "user_version",
            )
        }
        quick = "skipped"
        if check:
            try:
                rows = conn.execute("PRAGMA quick_check(10)").fetchall()
                quick = "ok" if rows == [("ok",)] else "; ".join(r[0] for r in rows)
            except sqlite3.OperationalError as exc:  # e.g. locked past the timeout
                quick = f"not run: {exc}"
    wal = _size(path + "-wal")
    facts = rep.facts
    facts.update(pragmas)
    facts.update(
        file_bytes=_size(path),
        wal_bytes=wal,
        shm=os.path.exists(path + "-shm"),
        quick_check=quick,
    )
    _file_findings(rep, pragmas, quick, wal)
    _lock_findings(rep)
    return rep


def _file_findings(rep: Report, p: dict[str, Any], quick: str, wal: int) -> None:
    path, add = rep.path, rep.findings.append
    if quick == "ok":
        add(Finding("integrity", OK, "quick_check: ok"))
    elif quick.startswith(("skipped", "not run")):
        add(
            Finding(
                "integrity",
                WARN,
                f"quick_check {quick}",
                f"run again when the file is quieter: litegate doctor {path}",
            )
        )
    else:
        add(
            Finding(
                "integrity",
                ACTION,
                f"quick_check found damage: {quick}",
                f"restore the latest backup, or salvage: sqlite3 {path} .recover > dump.sql",
                "a damaged file can lose more data with every write",
            )
        )
    mode = str(p["journal_mode"]).lower()
    want = str(PROFILES["default"]["journal_mode"]).lower()
    per_connection = ", ".join(
        f"{k}={v}" for k, v in PROFILES["default"].items() if k != "journal_mode"
    )
    add(
        Finding(
            "profile",
            OK,
            f"litegate's default profile sets journal_mode={want} in the file and, on each "
            f"connection it opens, {per_connection} (the file keeps only the journal mode; "
            f"auto_vacuum here is {p['auto_vacuum']}, page_size {p['page_size']})",
        )
    )
    if mode == want:
        add(Finding("journal mode", OK, f"journal_mode={mode}, as litegate's profiles want"))
    else:
        add(
            Finding(
                "journal mode",
                ACTION,
                f"journal_mode={mode}; litegate's profiles use {want}",
                f'open it once with litegate (it switches the file): python -c "import '
                f"litegate; litegate.connect('{path}').close()\"",
                "without WAL, readers and the writer block each other",
            )
        )
    size = max(1, int(p["page_count"]) * int(p["page_size"]))
    free = int(p["freelist_count"]) * int(p["page_size"])
    if free > 0.25 * size and free > 4 * 1048576:
        add(
            Finding(
                "free pages",
                WARN,
                f"{_mib(free)} of {_mib(size)} is free pages",
                f"python -c \"import litegate; print(litegate.connect('{path}').vacuum())\"",
                "VACUUM returns them to the filesystem; it takes the write gate while it runs",
            )
        )
    else:
        add(Finding("free pages", OK, f"{_mib(free)} free of {_mib(size)}"))
    if wal > WAL_LARGE:
        add(
            Finding(
                "WAL size",
                ACTION,
                f"the WAL is {_mib(wal)} (the database is {_mib(size)})",
                f'find the long reader (see the locks below), then python -c "import litegate; '
                f"print(litegate.connect('{path}').checkpoint('TRUNCATE'))\"",
                "a WAL that keeps growing slows every read and fills the disk; a checkpoint "
                "cannot pass a reader that keeps an old snapshot",
            )
        )
    else:
        # Up to litegate's journal_size_limit (32 MiB with the default
        # profile) is a WAL in normal use: it is reused, not grown.
        add(Finding("WAL size", OK, f"the WAL is {_mib(wal)}"))


def _lock_findings(rep: Report) -> None:
    path, add = rep.path, rep.findings.append
    sl = sqlite_locks(path)
    gate = gate_snapshot(path)
    held_for = 0.0
    if gate.holder is not None:
        # One more look a moment later: the same ticket still holding means a
        # transaction of at least that long (the table keeps no start times).
        time.sleep(HOLD_PROBE)
        again = gate_snapshot(path)
        if again.holder is not None and again.holder.ticket == gate.holder.ticket:
            held_for = HOLD_PROBE
    rep.facts["sqlite_locks"] = asdict(sl)
    rep.facts["gate"] = asdict(gate)
    if sl.writer_pids:
        litegate_pids = set(gate.pids)
        foreign = [p for p in sl.writer_pids if p not in litegate_pids]
        holder = gate.holder.pid if gate.holder else None
        if foreign:
            add(
                Finding(
                    "SQLite write lock",
                    WARN,
                    f"held by pid {', '.join(map(str, foreign))}, a process that does not "
                    "use litegate's gate",
                    "litegate's writers wait (their busy strategy) until it lets go; if it "
                    "stays, see what that process does: ls -l /proc/PID/exe",
                    "a writer outside the gate is not ordered with litegate's",
                )
            )
        else:
            add(
                Finding(
                    "SQLite write lock",
                    OK,
                    f"held by pid {', '.join(map(str, sl.writer_pids))}"
                    + (" (the gate's holder)" if holder in sl.writer_pids else ""),
                )
            )
    else:
        add(Finding("SQLite write lock", OK, "free"))
    if not gate.sidecar:
        add(Finding("litegate gate", OK, "no sidecar: no litegate process has opened the file"))
    elif not gate.valid:
        add(
            Finding(
                "litegate gate",
                ACTION,
                f"{path}-litegate is not a litegate lock file",
                f"if no process uses the database: rm {path}-litegate",
                "litegate cannot open the database while it is there",
            )
        )
    else:
        who = (
            f"held by ticket {gate.holder.ticket} (pid {gate.holder.pid or '?'})"
            + (f" for at least {held_for:g} s" if held_for else "")
            if gate.holder
            else "free"
        )
        waiting = ", ".join(f"{w.ticket} (pid {w.pid or '?'})" for w in gate.waiting)
        add(
            Finding(
                "litegate gate",
                WARN if held_for else OK,
                f"{who}; {len(gate.waiting)} waiting"
                + (f": {waiting}" if waiting else "")
                + f"; {len(gate.pids)} process(es) have it open",
            )
        )
    if sl.reader_pids:
        add(Finding("readers", OK, f"pids {', '.join(map(str, sl.reader_pids))} hold read marks"))
    wi = wal_index(path)
    if wi is not None:
        rep.facts["wal_index"] = asdict(wi)


def render(rep: Report) -> str:
    f = rep.facts
    lines = [
        f"litegate doctor {rep.path}",
        f"  journal_mode {f['journal_mode']}, page_size {f['page_size']}, "
        f"{f['page_count']} pages ({_mib(f['file_bytes'])}), {f['freelist_count']} free, "
        f"WAL {_mib(f['wal_bytes'])}",
        "",
    ]
    marks = {OK: "ok    ", WARN: "warn  ", ACTION: "ACTION"}
    for x in rep.findings:
        lines.append(f"  [{marks[x.status]}] {x.check}: {x.detail}")
        if x.reason:
            lines.append(f"           why: {x.reason}")
        if x.advice:
            lines.append(f"           do:  {x.advice}")
    lines += ["", "needs action" if rep.needs_action else "nothing needs action"]
    return "\n".join(lines)
