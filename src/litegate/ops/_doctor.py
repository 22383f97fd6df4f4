"""``litegate doctor PATH``: a report on a database file and who is using
it, with what to do about anything that needs it. Read-only, and it leaves
nothing behind: a file nobody uses is read as immutable (no -wal or -shm
created), one in use with ``mode=ro`` (no checkpoint, no WAL clean-up on
close); the sidecar and the -shm file are only read, without dropping this
process's locks (see ``_inspect.read_here``), and the lock table comes from
/proc. Its verdict on the sidecar and on the path follows the rules
``litegate.connect()`` applies."""

from __future__ import annotations

import json
import os
import shlex
import sqlite3
import stat
import time
from contextlib import closing
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import quote

from .._checkpoint import litestream_markers, wal_reset_fixed
from .._errors import OpenError, sqlite_code
from .._files import SIDECAR, check_path, openers, orphan_log
from .._profiles import PROFILES
from ..queue import _sqlite as queue_sql
from ._inspect import (
    GateSnapshot,
    Ticket,
    gate_snapshot,
    litestream_asked,
    mappers,
    read_here,
    sqlite_locks,
    wal_index,
)

OK, WARN, ACTION = "ok", "warn", "action"

# A WAL above this is growing past what litegate's checkpointer and
# journal_size_limit keep it to: a reader that never lets go, or checkpoints
# that cannot finish.
WAL_LARGE = 64 * 1024 * 1024
# How long doctor watches a gate holder to tell a long transaction.
HOLD_PROBE = 0.25


@dataclass
class Finding:
    """One check of ``litegate doctor``: its name, its status (``"ok"``,
    ``"warn"`` or ``"action"``), what it found, and what to do about it with
    the command (``advice``) and why (``reason``)."""

    check: str
    status: str  # ok, warn, action
    detail: str
    advice: str = ""  # what to do, and the command for it
    reason: str = ""


@dataclass
class Report:
    """What ``diagnose(path)`` found: the file's facts (journal mode, sizes,
    SQLite version, ...) and the findings, in the order ``litegate doctor``
    prints them."""

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


class NotADatabase(OpenError):
    """The path is not a SQLite database (missing, not a file, or SQLite
    says so): ``litegate doctor`` and ``litegate top`` exit 2."""


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _mib(n: int) -> str:
    return f"{n / 1048576:.1f} MiB" if n >= 1048576 else f"{n / 1024:.0f} KiB"


_SQLITE_NOTADB = 26
# Errors that say nothing about the file itself: another process has it
# locked, or this one may not open or write what SQLite wanted (a hot
# journal to roll back, a -shm to create), or the disk failed a read.
# BUSY, LOCKED, READONLY, IOERR, CANTOPEN; any other error reading the
# schema or pages means SQLite cannot use the file.
_NOT_THE_FILE = (5, 6, 8, 10, 14)
_PRAGMAS = ("page_size", "page_count", "freelist_count", "auto_vacuum", "user_version")


def _not_a_file(path: str) -> str:
    """Why ``path`` cannot be a database file ("" if it can)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return orphan_log(path) or (
            f"{path} does not exist; check the path (the database file itself, not a folder)"
        )
    except (OSError, ValueError) as exc:
        return f"{path} cannot be looked at ({exc}); check the path and its permissions"
    if stat.S_ISDIR(st.st_mode):
        return f"{path} is a directory; pass the database file in it"
    if not stat.S_ISREG(st.st_mode):
        return f"{path} is not a regular file (a pipe, device or socket); pass a database file"
    return ""


def _untouched(path: str) -> tuple[int, ...] | None:
    """The file's identity and age if it can be read as a lone file: no
    process has it (or its -wal or -shm) open, its WAL holds no frames and
    no rollback journal waits beside it. None otherwise."""
    if os.path.lexists(path + "-journal") or _size(path + "-wal") > 0:
        return None
    if openers([path, path + "-wal", path + "-shm"]):  # this process included
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _read(path: str, check: bool, immutable: bool) -> tuple[dict[str, Any], str]:
    """The file's PRAGMAs and its quick_check verdict, read on a connection
    of our own. Raises :class:`NotADatabase` if SQLite says it is not one."""
    uri = "file:" + quote(path, safe="/") + ("?mode=ro&immutable=1" if immutable else "?mode=ro")
    pragmas: dict[str, Any] = {}
    quick = "skipped"
    try:
        with closing(sqlite3.connect(uri, uri=True, timeout=0.5)) as conn:
            # a damaged file's text (quick_check's messages, names) need not be UTF-8
            conn.text_factory = lambda b: b.decode("utf-8", "replace")
            conn.execute("PRAGMA query_only = 1")
            # immutable: SQLite reads the file as a lone snapshot and says
            # "delete" whatever the header says; the header tells (below)
            for name in _PRAGMAS if immutable else ("journal_mode", *_PRAGMAS):
                pragmas[name] = conn.execute(f"PRAGMA {name}").fetchone()[0]
            # the schema, which every connection reads first (a schema format
            # SQLite does not know fails here, and connect() with it)
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            pragmas["litestream_tables"] = (
                conn.execute(
                    "SELECT count(*) FROM sqlite_master WHERE type = 'table' "
                    "AND name IN ('_litestream_seq', '_litestream_lock')"
                ).fetchone()[0]
                > 0
            )
            if check:
                rows = conn.execute("PRAGMA quick_check(10)").fetchall()
                quick = "ok" if rows == [("ok",)] else "; ".join(str(r[0]) for r in rows)
                if quick == "ok":
                    pragmas["queue_counts"] = _queue_counts_off(conn)
    except sqlite3.DatabaseError as exc:
        code = sqlite_code(exc)
        if code == _SQLITE_NOTADB:
            raise NotADatabase(
                f"{path} is not a SQLite database (SQLite says: {exc}); pass a SQLite file, "
                "or restore the database from a backup if this was one"
            ) from None
        damaged = code not in _NOT_THE_FILE
        quick = f"SQLite cannot read it: {exc}" if damaged else f"not run: {exc}"
    except UnicodeDecodeError as exc:
        # sqlite3 could not even decode SQLite's error message: a damaged
        # schema ("malformed database schema (<bytes of the file>)")
        quick = f"SQLite cannot read it: its schema holds bytes that are not text ({exc})"
    return pragmas, quick


def _queue_counts_off(conn: sqlite3.Connection) -> list[tuple[str, str, int, int]] | None:
    """The queue's counts that disagree with its jobs: (queue, state, kept,
    counted); None if the file has no queue of the current schema."""
    found = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (queue_sql.COUNTS_TABLE,)
    ).fetchone()
    if (
        found is None
        or conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (queue_sql.JOBS,)
        ).fetchone()
        is None
    ):
        return None
    names = {0: "ready", queue_sql.SCHEDULED_STATE: "scheduled", 1: "leased", 2: "done", 3: "dead"}
    return [
        (str(q), names.get(int(state), str(state)), int(kept), int(counted))
        for q, state, kept, counted in conn.execute(queue_sql.COUNTS_OFF)
    ]


def _queue_findings(rep: Report, off: list[tuple[str, str, int, int]] | None) -> None:
    if off is None:
        return
    if not off:
        rep.findings.append(Finding("queue counts", OK, "match the jobs"))
        return
    queues = sorted({q for q, _, _, _ in off})
    detail = "; ".join(f"queue {q!r} {st}: {kept} kept, {n} counted" for q, st, kept, n in off)
    rep.findings.append(
        Finding(
            "queue counts",
            ACTION,
            f"litegate.queue's counts disagree with its jobs ({detail})",
            "rebuild them: "
            + _python(
                f"from litegate.queue import Queue; print(Queue({_py(rep.path)}, "
                f"{queues[0]!r}).recount())"
            ),
            "the queue counts in its own statements; SQL written by hand that changes its "
            "tables is not counted (q.counts() and workers' burst mode read the counts)",
        )
    )


def _read_database(path: str, check: bool) -> tuple[dict[str, Any], str]:
    """Read the file without disturbing it. A file nobody is using, whose
    WAL is empty, is all in its main file: it is read as immutable, so that
    SQLite opens nothing beside it (opened the ordinary way, even read-only,
    a WAL-mode file gets a -wal and -shm that stay after close, and SQLite
    changes the mode of an empty -wal or -shm to the database's); if someone
    started using it meanwhile, it is read again the ordinary way. A file in
    use (or with frames to recover) is read with ``mode=ro`` and SQLite's
    locks."""
    before = _untouched(path)
    if before is not None:
        pragmas, quick = _read(path, check, immutable=True)
        if _untouched(path) == before:
            header = read_here(path, 20) or b""
            wal = len(header) == 20 and header[18] == 2  # file format: 2 is WAL
            return {"journal_mode": "wal" if wal else "delete", **pragmas}, quick
    return _read(path, check, immutable=False)


def _resolved(path: str) -> str:
    """The path as connect() names the file (symlinks resolved: one file, one
    gate and one set of -wal/-shm, whatever names it)."""
    try:
        return os.path.realpath(os.path.abspath(path))
    except ValueError:  # a NUL in it: refused by _not_a_file, by that name
        return os.path.abspath(path)


def probe(path: str) -> str:
    """The absolute path if it is a SQLite database litegate could open;
    raises :class:`NotADatabase` (with the reason) otherwise. Reads as
    little as it can, and disturbs nothing (as :func:`diagnose`)."""
    path = _resolved(path)
    why = _not_a_file(path)
    if why:
        raise NotADatabase(why)
    _read_database(path, check=False)
    return path


def diagnose(path: str, *, check: bool = True) -> Report:
    """The report for ``path``. Raises :class:`NotADatabase` (with the
    reason) for a missing file or one that is not SQLite."""
    path = _resolved(path)
    why = _not_a_file(path)
    if why:
        raise NotADatabase(why)
    rep = Report(path)
    refused = _refused(path)  # before SQLite has opened anything
    pragmas, quick = _read_database(path, check)
    wal = _size(path + "-wal")
    facts = rep.facts
    facts.update(pragmas)
    facts.update(
        file_bytes=_size(path),
        wal_bytes=wal,
        shm=os.path.exists(path + "-shm"),
        quick_check=quick,
    )
    journal = _hot_journal(path)
    if journal:
        facts["hot_journal_bytes"] = journal
        quick = "not run: a rollback journal must be rolled back first (see 'rollback journal')"
        facts["quick_check"] = quick
    off = facts.pop("queue_counts", None)
    _file_findings(rep, pragmas, quick, wal)
    _queue_findings(rep, off)
    if journal:
        _journal_finding(rep, journal)
    if refused:
        rep.findings.append(
            Finding(
                "open",
                ACTION,
                f"litegate.connect() refuses it as this user: {refused}",
                reason="every litegate process (and litegate.django) opens it the same way",
            )
        )
    _lock_findings(rep)
    return rep


def _refused(path: str) -> str:
    """What connect() would say about the path and its companions as this
    user ("" if nothing): the same checks, which only look."""
    try:
        check_path(path)
    except OpenError as exc:
        return str(exc)
    return ""


# A rollback journal's first 8 bytes while it holds a transaction to undo
# (SQLite's aJournalMagic); a journal whose header was zeroed holds none.
_JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")


def _hot_journal(path: str) -> int:
    """The size of ``path``'s hot rollback journal (0 if there is none): a
    journal with a transaction in it that no live writer owns. A process
    stopped in the middle of a write transaction in rollback-journal mode
    leaves one; SQLite rolls it back on the next open that may write, and a
    read-only connection cannot (it fails with "readonly database")."""
    journal = path + "-journal"
    head = read_here(journal, len(_JOURNAL_MAGIC))
    if head != _JOURNAL_MAGIC or sqlite_locks(path).writer_pids:
        return 0
    return _size(journal)


def _journal_finding(rep: Report, size: int) -> None:
    path = rep.path
    rep.findings.append(
        Finding(
            "rollback journal",
            ACTION,
            f"{path}-journal ({_mib(size)}) holds a write transaction that never finished: a "
            "process was killed (or the machine stopped) in the middle of it, in rollback-"
            "journal mode. Until it is rolled back, the file's pages may be half-written; "
            "read-only opens (this doctor's included) cannot roll it back",
            "open the database once with write access, which rolls it back (litegate also "
            "switches the file to WAL): "
            + _python(f"import litegate; litegate.connect({_py(path)}).close()")
            + f"; then run litegate doctor {_sh(path)} again. Do not delete the journal: "
            "without it the half-written pages stay",
            "SQLite rolls a hot journal back on the next connection that may write",
        )
    )


def _sh(path: str) -> str:
    return shlex.quote(path)


def _python(code: str) -> str:
    """A shell command running ``code``, quoted for any path in it."""
    return f"python -c {shlex.quote(code)}"


def _py(path: str) -> str:
    """``path`` as a Python string literal in double quotes (JSON's escapes
    are Python's), so that the shell quoting around it stays readable."""
    return json.dumps(path)


def _file_findings(rep: Report, p: dict[str, Any], quick: str, wal: int) -> None:
    path, add = rep.path, rep.findings.append
    if quick == "ok":
        add(Finding("integrity", OK, "quick_check: ok"))
    elif quick.startswith(("skipped", "not run")):
        again = (
            "roll the journal back first (below), then"
            if "rollback journal" in quick
            else "run again when the file is quieter:"
        )
        add(
            Finding(
                "integrity", WARN, f"quick_check {quick}", f"{again} litegate doctor {_sh(path)}"
            )
        )
    else:
        add(
            Finding(
                "integrity",
                ACTION,
                f"quick_check found damage: {quick}",
                f"restore the latest backup, or salvage: sqlite3 {_sh(path)} .recover > dump.sql",
                "a damaged file can lose more data with every write",
            )
        )
    if "journal_mode" not in p or "page_count" not in p:
        return  # SQLite could not say (see integrity)
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
    elif _size(path) == 0:
        add(
            Finding(
                "journal mode",
                OK,
                f"an empty file: a new database; litegate switches it to {want} when it first "
                "opens it",
            )
        )
    else:
        add(
            Finding(
                "journal mode",
                ACTION,
                f"journal_mode={mode}; litegate's profiles use {want}",
                "open it once with litegate (it switches the file): "
                + _python(f"import litegate; litegate.connect({_py(path)}).close()"),
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
                _python(f"import litegate; print(litegate.connect({_py(path)}).vacuum())"),
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
                "find the long reader (see the locks below), then "
                + _python(
                    f'import litegate; print(litegate.connect({_py(path)}).checkpoint("TRUNCATE"))'
                ),
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
    _gate_finding(rep, gate, held_for)
    _checkpoint_findings(rep, gate)
    if sl.reader_pids:
        add(Finding("readers", OK, f"pids {', '.join(map(str, sl.reader_pids))} hold read marks"))
    wi = wal_index(path)
    if wi is not None:
        rep.facts["wal_index"] = asdict(wi)


def _checkpoint_findings(rep: Report, gate: GateSnapshot) -> None:
    """Who checkpoints the file, SQLite's WAL-reset bug, Litestream, mmap."""
    path, add, facts = rep.path, rep.findings.append, rep.facts
    users = sorted(set(gate.pids) | set(openers([path, path + "-wal", path + "-shm"])))
    users = [p for p in users if p != os.getpid()]
    foreign = [p for p in users if p not in gate.pids]
    version = sqlite3.sqlite_version
    fixed = wal_reset_fixed(version)
    facts["sqlite_version"] = version
    facts["wal_reset_fixed"] = fixed
    if fixed:
        add(Finding("SQLite library", OK, f"{version} (this Python's), with the fix for SQLite's "
                    "WAL-reset bug"))  # fmt: skip
    else:
        detail = (
            f"{version} (this Python's) is older than the fix for SQLite's WAL-reset bug "
            "(3.51.3, or 3.50.7 and 3.44.6 on their lines): a checkpoint that starts while "
            "another connection's commit restarts the WAL can corrupt the database. litegate's "
            "own checkpoints never run while a litegate commit can restart the WAL (docs: "
            '"How it works"); it cannot do that for connections that do not go through '
            "litegate (the sqlite3 shell, another program, Litestream's own checkpoints)"
        )
        if foreign:
            add(Finding(
                "SQLite library", WARN,
                detail + f"; pid(s) {', '.join(map(str, foreign))} have the database open "
                "without litegate",
                "use a Python whose sqlite3 links SQLite 3.51.3 or later (python -c 'import "
                "sqlite3; print(sqlite3.sqlite_version)'), or keep other programs' writes and "
                "checkpoints off this file while litegate's processes run",
                "SQLite's wal.html, section \"The WAL-Reset Bug\"",
            ))  # fmt: skip
        else:
            add(Finding("SQLite library", OK, detail + "; no process has it open without "
                        "litegate now"))  # fmt: skip
    if gate.checkpointer_pid:
        facts["checkpointer_pid"] = gate.checkpointer_pid
        n = len(gate.pids)
        detail = f"pid {gate.checkpointer_pid} checkpoints this file (one per file, elected "
        add(Finding("checkpointer", OK, detail + f"among the {n} litegate process(es))"))
    elif gate.pids:
        detail = "none seated: the litegate processes using the file run with checkpoints=False"
        add(Finding("checkpointer", OK, detail + " (SQLite's auto-checkpoint, inside commits)"))
    markers = litestream_markers(path) or bool(facts.get("litestream_tables"))
    asked = litestream_asked(path)
    if markers or asked:
        why = " and ".join(
            w
            for w, on in (
                ("its tables or its .<name>-litestream folder are there", markers),
                ('a process opened it with checkpoints="litestream"', asked),
            )
            if on
        )
        detail = f"set up on this file ({why}): litegate's checkpointer copies frames back "
        add(Finding("Litestream", OK, detail + "(PASSIVE) but leaves restarting the WAL to it"))
    mapping = [p for p in mappers(path) if p != os.getpid()]
    if mapping and len(users) > 1:
        add(Finding(
            "memory-mapped I/O", WARN,
            f"pid(s) {', '.join(map(str, mapping))} read the database through memory-mapped "
            f"I/O (mmap_size > 0) while {len(users)} processes use the file",
            "set mmap_size to 0 for them (pragmas={\"mmap_size\": 0}, or a profile without "
            "it: default, balanced, conservative)",
            "SQLite's mmap.html: with memory-mapped I/O an I/O error is a signal that ends the "
            "process instead of an error, and the OS must keep mapped and read() pages the same "
            "\"especially in situations where two processes are accessing the same database "
            "file\"; a damaged page is read by every process that maps it",
        ))  # fmt: skip


def _sidecar_advice(sidecar: str, gate: GateSnapshot) -> str:
    """How to get rid of a sidecar litegate cannot use, safely: a fresh one
    is made on the next open, but removing one that processes still use
    would give the file two gates."""
    if gate.problem.startswith("is a directory"):
        moved = _sh(sidecar + ".moved")
        return f"move it away (litegate creates its file there): mv {_sh(sidecar)} {moved}"
    if gate.problem.startswith("is read-only"):
        return (
            f"give this user write access (chmod g+w {_sh(sidecar)} for a shared group), or run "
            "as the user that owns it"
        )
    using = gate.pids
    first = (
        f"stop the processes using the database (pids {', '.join(map(str, using))}), then "
        if using
        else "no process has it open: "
    )
    return first + f"rm {_sh(sidecar)} (litegate creates a fresh one on the next open)"


def _ticket(t: Ticket) -> str:
    return f"{t.ticket} (pid {t.pid or '?'})"


def _gate_finding(rep: Report, gate: GateSnapshot, held_for: float) -> None:
    sidecar = rep.path + SIDECAR
    add = rep.findings.append
    if not gate.sidecar:
        add(Finding("litegate gate", OK, "no sidecar: no litegate process has opened the file"))
        return
    if not gate.valid:
        add(
            Finding(
                "litegate gate",
                ACTION,
                f"{sidecar} {gate.problem}",
                _sidecar_advice(sidecar, gate),
                "litegate.connect() raises OpenError while it is there",
            )
        )
        return
    who = (
        f"held (grant {gate.holder.ticket}, pid {gate.holder.pid or '?'})"
        + (f" for at least {held_for:g} s" if held_for else "")
        if gate.holder
        else "free"
    )
    waiting = ", ".join(map(_ticket, gate.waiting))
    detail = (
        f"{who}; {len(gate.waiting)} waiting"
        + (f": {waiting}" if waiting else "")
        + f"; {len(gate.pids)} process(es) have it open"
    )
    for t in gate.dead:
        # The kernel dropped their locks; the queue goes on without them.
        detail += f"; ticket {t.ticket} died {t.state} (the queue moves past it)"
    add(Finding("litegate gate", WARN if held_for else OK, detail))


def render(rep: Report) -> str:
    f = rep.facts
    lines = [
        f"litegate doctor {rep.path}",
        f"  journal_mode {f.get('journal_mode', '?')}, page_size {f.get('page_size', '?')}, "
        f"{f.get('page_count', '?')} pages ({_mib(f['file_bytes'])}), "
        f"{f.get('freelist_count', '?')} free, WAL {_mib(f['wal_bytes'])}",
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
