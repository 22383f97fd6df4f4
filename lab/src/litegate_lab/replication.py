"""``litegate bench replication``: litegate's writers under Litestream, the
replication tool SQLite's production users run (issue 33), against plain
``sqlite3`` writers in the same run.

Per side and run, on fresh files in a temporary directory:

1. ``alone``: W writer processes write for S seconds; writes acknowledged
   per second.
2. ``litestream``: ``litestream replicate DB file://REPLICA`` is started and
   its first snapshot awaited; the same writers write for S seconds while
   the WAL's size is sampled (its peak). Half way through, ``litestream
   restore`` makes a copy while they write (a point-in-time restore). Then
   the writers stop, Litestream is given until its replica stops changing
   (its sync interval is 1 s), is stopped by its PID, and ``litestream
   restore`` makes a second copy.

Reported per side: writes/s alone and with Litestream and their ratio (the
share of its own rate a side keeps), the WAL's peak, the snapshots
Litestream took (files in the replica's snapshot level), and for each copy
``integrity_check`` and the acknowledged writes it lacks: every write for
the final copy (all were acknowledged before Litestream's last sync), and
for the point-in-time copy those acknowledged more than ``SYNC_SLACK``
seconds before the restore began (Litestream ships the WAL once a second).

Writers: litegate's side cycles through the core API (``db.execute``, one
row per write), ``litegate.queue`` (``q.put``) and Django on
``litegate.django`` (an ``atomic()`` block, one row); plain ``sqlite3``'s
are ``sqlite3.connect(timeout=5)`` in autocommit mode with
``synchronous=NORMAL`` (litegate's profiles' setting; SQLite's auto-checkpoint
as it comes), one row per write.
Each writer appends what it wrote to a file of its own only after the write
returned (acknowledged), with the time.

Litestream comes from ``make litestream`` (``.tools/bin/litestream``, built
from the Go module proxy: ``go install
github.com/benbjohnson/litestream/cmd/litestream@v0.5.18``), from PATH, or
``--litestream PATH``. Only ``file://`` replicas, under the temporary
directory; every process is stopped by its PID.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import closing, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ._args import positive_float, positive_int
from ._procs import litegate_src
from ._progress import Progress
from ._report import Column, seed_table
from ._stats import cv, median

NAME = "replication"
HELP = "writers under Litestream (file:// replica), restore, integrity; against plain sqlite3"
SIDES = ("litegate", "sqlite3")
LITEGATE_WRITERS = ("core", "queue", "django")
SYNC_SLACK = 2.0  # a write acknowledged this long before a restore began must be in it
_LIMIT = 120.0  # seconds any one step may take beyond its plan
_ACKS = "CREATE TABLE IF NOT EXISTS acks (w INTEGER, seq INTEGER, PRIMARY KEY (w, seq))"


@dataclass(frozen=True)
class Config:
    sides: tuple[str, ...] = SIDES
    writers: int = 3
    seconds: float = 10.0
    runs: int = 1
    litestream: str = ""
    checkpoints: str = "auto"  # litegate's side: "auto" (it finds Litestream), or "litestream"
    src: str = ""  # where the writers import litegate from (default: this one's)
    kinds: tuple[str, ...] = LITEGATE_WRITERS  # litegate's writers, in turn
    reader: bool = True  # also the phase with a long read transaction, no Litestream


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sides", default=",".join(SIDES), help="comma-separated (default: both)")
    p.add_argument(
        "--writers", type=positive_int, default=3,
        help="writer processes per side (3); litegate's cycle through core, queue, django",
    )  # fmt: skip
    p.add_argument(
        "--seconds", type=positive_float, default=10.0, help="seconds of writing per phase (10)"
    )
    p.add_argument("--litestream", default="", metavar="PATH", help="the litestream binary")
    p.add_argument(
        "--src", default="", metavar="DIR",
        help="import litegate from DIR in the writers (another checkout's src, for an A/B)",
    )  # fmt: skip
    p.add_argument(
        "--kinds", default=",".join(LITEGATE_WRITERS),
        help="litegate's writers, in turn (default: core,queue,django)",
    )  # fmt: skip
    p.add_argument(
        "--no-reader", action="store_true",
        help="skip the phase with a long read transaction in another process",
    )  # fmt: skip
    p.add_argument(
        "--checkpoints", choices=("auto", "litestream"), default="auto",
        help='litegate side: connect(checkpoints=...) True (it finds Litestream on the file; '
        'the default) or "litestream"',
    )  # fmt: skip


def config_from_args(args: argparse.Namespace) -> Config:
    sides = tuple(s.strip() for s in args.sides.split(",") if s.strip())
    unknown = [s for s in sides if s not in SIDES]
    if unknown or not sides:
        raise ValueError(f"unknown side(s) {unknown}; pick from {', '.join(SIDES)}")
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    if not kinds or any(k not in LITEGATE_WRITERS for k in kinds):
        raise ValueError(f"--kinds: pick from {', '.join(LITEGATE_WRITERS)}, got {args.kinds!r}")
    binary = find_litestream(args.litestream)
    if binary is None:
        raise ValueError(
            "litestream not found: run `make litestream` (needs Go; it builds v0.5.18 into "
            ".tools/bin), put it on PATH, or pass --litestream PATH"
        )
    return Config(
        sides=sides,
        writers=args.writers,
        seconds=3.0 if args.quick else args.seconds,
        runs=args.runs,
        litestream=binary,
        checkpoints=args.checkpoints,
        src=args.src,
        kinds=kinds,
        reader=not args.no_reader,
    )


def find_litestream(given: str = "") -> str | None:
    """The litestream binary: ``given``, the project's ``.tools/bin``, PATH."""
    if given:
        return given if os.access(given, os.X_OK) else None
    here = Path(__file__).resolve().parents[3] / ".tools" / "bin" / "litestream"
    for candidate in (Path.cwd() / ".tools" / "bin" / "litestream", here):
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("litestream")


# -- the writers (processes of their own) ----------------------------------------

# Run with ``python -c``: only litegate (from ``--src`` if given, so that two
# versions can be compared in one run), Django and sqlite3 are imported.
_WRITER = """
import os, sqlite3, sys, time
kind, w, path, acks, until, checkpoints = sys.argv[1:7]
w, until = int(w), float(until)
fd = os.open(acks, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
lines = []
def ack(n):
    lines.append(b"%d %d\\n" % (n, time.monotonic_ns()))
    if len(lines) >= 64:
        os.write(fd, b"".join(lines))
        lines.clear()
kw = {"checkpoints": "litestream"} if checkpoints == "litestream" else {}
try:
    if kind == "sqlite3":
        conn = sqlite3.connect(path, timeout=5, isolation_level=None)
        conn.execute("PRAGMA synchronous = NORMAL")
        n = 0
        while time.monotonic() < until:
            n += 1
            try:
                conn.execute("INSERT INTO acks (w, seq) VALUES (?, ?)", (w, n))
            except sqlite3.OperationalError:
                continue
            ack(n)
        conn.close()
    elif kind == "core":
        import litegate
        db = litegate.connect(path, **kw)
        n = 0
        while time.monotonic() < until:
            n += 1
            db.execute("INSERT INTO acks (w, seq) VALUES (?, ?)", (w, n))
            ack(n)
        db.close()
    elif kind == "queue":
        import litegate
        from litegate.queue import Queue
        qdb = litegate.connect(path, **kw)
        q = Queue(qdb, "replication")
        while time.monotonic() < until:
            ack(q.put({"w": w}))
        q.close()
        qdb.close()
    elif kind == "django":
        import django
        from django.conf import settings
        settings.configure(
            DATABASES={"default": {"ENGINE": "litegate.django", "NAME": path}},
            INSTALLED_APPS=[], USE_TZ=True,
        )
        django.setup()
        from django.db import connection, transaction
        n = 0
        while time.monotonic() < until:
            n += 1
            with transaction.atomic(), connection.cursor() as cur:
                cur.execute("INSERT INTO acks (w, seq) VALUES (%s, %s)", [w, n])
            ack(n)
        connection.close()
    elif kind == "reader":  # one read transaction held open all along (a report, a backup)
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("BEGIN")
        conn.execute("SELECT count(*) FROM acks").fetchone()
        while time.monotonic() < until:
            time.sleep(0.05)
        conn.execute("COMMIT")
        conn.close()
finally:
    if lines:
        os.write(fd, b"".join(lines))
    os.close(fd)
"""


def _spawn(cfg: Config, kind: str, w: int, path: str, acks: str, until: float) -> Any:
    src = cfg.src or litegate_src()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (src, os.environ.get("PYTHONPATH", "")) if p
    )}  # fmt: skip
    args = [kind, str(w), path, acks, repr(until), cfg.checkpoints]
    return subprocess.Popen([sys.executable, "-c", _WRITER, *args], env=env)


def _kinds(side: str, writers: int, kinds: tuple[str, ...] = LITEGATE_WRITERS) -> list[str]:
    if side == "sqlite3":
        return ["sqlite3"] * writers
    return [kinds[i % len(kinds)] for i in range(writers)]


def _fresh(path: str, side: str, cfg: Config) -> None:
    """The database with its tables (and the queue's), in WAL mode."""
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA journal_mode = wal")
        conn.execute(_ACKS)
        conn.commit()
    if side == "litegate":  # (the queue's tables, by the litegate the writers use)
        code = (
            "import sys, litegate; from litegate.queue import Queue; "
            "db = litegate.connect(sys.argv[1]); Queue(db, 'replication').close(); db.close()"
        )
        src = cfg.src or litegate_src()
        env = {**os.environ, "PYTHONPATH": src}
        subprocess.run([sys.executable, "-c", code, path], env=env, check=True, timeout=_LIMIT)


def _write(
    cfg: Config, side: str, path: str, folder: str, sample_wal: bool, reader: bool = False
) -> dict[str, Any]:
    """Run the side's writers for cfg.seconds; the acknowledged writes and rate.
    ``reader``: also a process holding one read transaction all along."""
    kinds = _kinds(side, cfg.writers, cfg.kinds)
    start = time.monotonic() + 1.5  # (new interpreters take a moment to start)
    until = start + cfg.seconds
    procs = []
    for w, kind in enumerate(kinds):
        acks = os.path.join(folder, f"acks-{w}-{kind}.txt")
        procs.append(_spawn(cfg, kind, w, path, acks, until))
    if reader:
        procs.append(_spawn(cfg, "reader", -1, path, os.devnull, until))
    peak = [0]
    stop = threading.Event()

    def sampler() -> None:
        while not stop.wait(0.02):
            with suppress(OSError):
                peak[0] = max(peak[0], os.path.getsize(path + "-wal"))

    t = threading.Thread(target=sampler, daemon=True)
    if sample_wal:
        t.start()
    for p in procs:
        try:
            p.wait(cfg.seconds + _LIMIT)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    stop.set()
    if sample_wal:
        t.join()
    acked = _read_acks(folder, kinds)
    total = sum(len(v) for v in acked.values())
    return {
        "writes": total,
        "per_s": total / cfg.seconds,
        "exit_codes": [p.returncode for p in procs],
        "wal_peak_bytes": peak[0],
        "acked": acked,
    }


def _read_acks(folder: str, kinds: list[str]) -> dict[tuple[int, str], list[tuple[int, int]]]:
    out: dict[tuple[int, str], list[tuple[int, int]]] = {}
    for w, kind in enumerate(kinds):
        name = os.path.join(folder, f"acks-{w}-{kind}.txt")
        rows: list[tuple[int, int]] = []
        try:
            with open(name) as f:
                for line in f:
                    a, b = line.split()
                    rows.append((int(a), int(b)))
        except OSError:
            pass
        out[(w, kind)] = rows
    return out


def _present(copy: str, w: int, kind: str) -> set[int]:
    with closing(sqlite3.connect(f"file:{copy}?mode=ro", uri=True)) as conn:
        if kind == "queue":
            return {r[0] for r in conn.execute("SELECT id FROM litegate_queue_jobs")}
        return {r[0] for r in conn.execute("SELECT seq FROM acks WHERE w = ?", (w,))}


def _check_copy(
    copy: str, acked: dict[tuple[int, str], list[tuple[int, int]]], before_ns: float
) -> dict[str, Any]:
    """integrity_check of a restored copy, and the acknowledged writes
    (those acknowledged before ``before_ns``) it lacks."""
    with closing(sqlite3.connect(f"file:{copy}?mode=ro", uri=True)) as conn:
        integrity = "; ".join(r[0] for r in conn.execute("PRAGMA integrity_check"))
    expected = missing = rows = 0
    for (w, kind), entries in acked.items():
        have = _present(copy, w, kind)
        rows += len(have)
        due = [n for n, t in entries if t < before_ns]
        expected += len(due)
        missing += sum(1 for n in due if n not in have)
    return {"integrity": integrity, "rows": rows, "expected": expected, "missing": missing}


# -- Litestream ------------------------------------------------------------------


def _snapshots(replica: str) -> int:
    return len(glob.glob(os.path.join(replica, "ltx", "9", "*.ltx")))


def _replica_state(replica: str) -> tuple[int, float]:
    files = glob.glob(os.path.join(replica, "ltx", "*", "*.ltx"))
    newest = max((os.path.getmtime(f) for f in files), default=0.0)
    return len(files), newest


def _restore(binary: str, replica: str, out: str, log: Any) -> float:
    t0 = time.monotonic()
    subprocess.run(
        [binary, "restore", "-o", out, "file://" + replica],
        stdout=log, stderr=subprocess.STDOUT, check=True, timeout=_LIMIT,
    )  # fmt: skip
    return time.monotonic() - t0


def _stop(proc: subprocess.Popen[bytes]) -> int:
    """SIGTERM (Litestream syncs what is left and exits), SIGKILL if it lingers."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(30)


def _with_litestream(cfg: Config, side: str, path: str, folder: str) -> dict[str, Any]:
    replica = os.path.join(folder, "replica")
    log = open(os.path.join(folder, "litestream.log"), "ab")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(
        [cfg.litestream, "replicate", path, "file://" + replica], stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    out: dict[str, Any] = {}
    try:
        deadline = time.monotonic() + 30
        while _snapshots(replica) == 0:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"litestream did not take its first snapshot (see {log.name})")
            time.sleep(0.05)
        pit: dict[str, Any] = {}

        def point_in_time() -> None:
            time.sleep(1.5 + 0.75 * cfg.seconds)  # three quarters through the writing
            began = time.monotonic_ns()
            copy = os.path.join(folder, "pit.db")
            try:
                pit["seconds"] = _restore(cfg.litestream, replica, copy, log)
                pit["began_ns"] = began
                pit["copy"] = copy
            except (subprocess.SubprocessError, OSError) as exc:
                pit["error"] = str(exc)

        t = threading.Thread(target=point_in_time)
        t.start()
        out = _write(cfg, side, path, folder, sample_wal=True)
        t.join()
        # Litestream ships the WAL every second: wait until the replica stops changing.
        settle = time.monotonic()
        last = _replica_state(replica)
        quiet = time.monotonic()
        while time.monotonic() - quiet < 2.5 and time.monotonic() - settle < _LIMIT:
            time.sleep(0.25)
            now = _replica_state(replica)
            if now != last:
                last, quiet = now, time.monotonic()
        out["settle_seconds"] = time.monotonic() - settle
    finally:
        out["litestream_exit"] = _stop(proc)
    out["snapshots"] = _snapshots(replica)
    final = os.path.join(folder, "restored.db")
    out["restore_seconds"] = _restore(cfg.litestream, replica, final, log)
    log.close()
    acked = out["acked"]
    out["final"] = _check_copy(final, acked, float("inf"))
    if "copy" in pit:
        got = _check_copy(pit["copy"], acked, pit["began_ns"] - SYNC_SLACK * 1e9)
        got["seconds"] = pit["seconds"]
        out["point_in_time"] = got
    else:
        out["point_in_time"] = {"error": pit.get("error", "no restore")}
    return out


# -- a run ---------------------------------------------------------------------


def _side(cfg: Config, side: str, tmp: str) -> dict[str, Any]:
    res: dict[str, Any] = {}
    for phase in ("alone", "litestream", "reader") if cfg.reader else ("alone", "litestream"):
        folder = os.path.join(tmp, side, phase)
        os.makedirs(folder)
        path = os.path.join(folder, "app.db")
        _fresh(path, side, cfg)
        if phase == "litestream":
            got = _with_litestream(cfg, side, path, folder)
        else:
            got = _write(cfg, side, path, folder, sample_wal=True, reader=phase == "reader")
        got.pop("acked", None)
        res[phase] = got
    alone = res["alone"]["per_s"]
    res["share"] = res["litestream"]["per_s"] / alone if alone else None
    if cfg.reader:
        res["reader_share"] = res["reader"]["per_s"] / alone if alone else None
    return res


def run(cfg: Config, progress: Progress | None = None) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    if progress is not None:
        progress.total = float(cfg.runs * len(cfg.sides))
    with tempfile.TemporaryDirectory(prefix="litegate-replication-") as tmp:
        for r in range(cfg.runs):
            one: dict[str, Any] = {}
            for side in cfg.sides:
                if progress is not None:
                    progress.describe(f"run {r + 1}/{cfg.runs}: {side}")
                one[side] = _side(cfg, side, os.path.join(tmp, f"run{r}"))
                if progress is not None:
                    progress.advance()
            runs.append(one)
    version = subprocess.run(
        [cfg.litestream, "version"], capture_output=True, text=True, timeout=30
    ).stdout.strip()
    return {
        "config": asdict(cfg),
        "litestream_version": version,
        "sqlite_version": sqlite3.sqlite_version,
        "runs": runs,
        "summary": _summary(cfg, runs),
        "targets": _targets(cfg, runs),
    }


def _summary(cfg: Config, runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for side in cfg.sides:
        rs = [r[side] for r in runs]

        def fig(get: Any, rs: list[dict[str, Any]] = rs) -> dict[str, float | None]:
            values = [float(get(r)) for r in rs if get(r) is not None]
            return {"median": median(values) if values else None, "cv": cv(values)}

        out[side] = {
            "alone_per_s": fig(lambda r: r["alone"]["per_s"]),
            "litestream_per_s": fig(lambda r: r["litestream"]["per_s"]),
            "share": fig(lambda r: r["share"]),
            "reader_per_s": fig(lambda r: r.get("reader", {}).get("per_s")),
            "reader_share": fig(lambda r: r.get("reader_share")),
            "wal_peak_reader_bytes": fig(lambda r: r.get("reader", {}).get("wal_peak_bytes")),
            "wal_peak_bytes": fig(lambda r: r["litestream"]["wal_peak_bytes"]),
            "wal_peak_alone_bytes": fig(lambda r: r["alone"]["wal_peak_bytes"]),
            "snapshots": fig(lambda r: r["litestream"]["snapshots"]),
            "missing": sum(r["litestream"]["final"]["missing"] for r in rs),
            "expected": sum(r["litestream"]["final"]["expected"] for r in rs),
            "integrity": sorted({r["litestream"]["final"]["integrity"] for r in rs}),
            "pit_missing": sum(r["litestream"]["point_in_time"].get("missing", 0) for r in rs),
            "pit_expected": sum(r["litestream"]["point_in_time"].get("expected", 0) for r in rs),
            "pit_integrity": sorted(
                {r["litestream"]["point_in_time"].get("integrity", "-") for r in rs}
            ),
        }
    return out


def _targets(cfg: Config, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    s = _summary(cfg, runs)
    out = []
    for side in cfg.sides:
        out.append({
            "target": f"{side}: 0 acknowledged writes missing after restore (final and "
            "point in time)",
            "value": s[side]["missing"] + s[side]["pit_missing"],
            "met": s[side]["missing"] + s[side]["pit_missing"] == 0
            and s[side]["integrity"] == ["ok"] and s[side]["pit_integrity"] == ["ok"],
        })  # fmt: skip
    if "litegate" in s and "sqlite3" in s:
        lg, sq = s["litegate"]["share"]["median"], s["sqlite3"]["share"]["median"]
        out.append({
            "target": "litegate keeps at least the share of its own rate that plain sqlite3 "
            "keeps under Litestream",
            "value": f"{lg:.2f} against {sq:.2f}" if lg is not None and sq is not None else "-",
            "met": lg is not None and sq is not None and lg >= sq,
        })  # fmt: skip
        lg, sq = s["litegate"]["reader_share"]["median"], s["sqlite3"]["reader_share"]["median"]
        if lg is not None and sq is not None:
            out.append({
                "target": "... and with a long read transaction in another process",
                "value": f"{lg:.2f} against {sq:.2f}",
                "met": lg >= sq,
            })  # fmt: skip
    return out


def _mb(n: float | None) -> str:
    return "-" if n is None else f"{n / 1e6:.1f} MB"


def _rate(f: dict[str, float | None]) -> str:
    m = f["median"]
    if m is None:
        return "-"
    spread = f.get("cv")
    return f"{m:,.0f}" + (f"  ±{100 * spread:.0f}%" if spread else "")


def render(result: dict[str, Any]) -> str:
    cfg = result["config"]
    cols = [
        Column("SIDE", "left"), Column("ALONE/s"), Column("LITESTREAM/s"), Column("SHARE"),
        Column("READER/s"), Column("SHARE"), Column("WAL PEAK"), Column("SNAPSHOTS"),
        Column("MISSING"), Column("INTEGRITY"), Column("PIT MISSING"), Column("PIT INTEGRITY"),
    ]  # fmt: skip
    rows = []

    def ratio(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f}"

    for side, s in result["summary"].items():
        rows.append([
            side, _rate(s["alone_per_s"]), _rate(s["litestream_per_s"]),
            ratio(s["share"]["median"]), _rate(s["reader_per_s"]),
            ratio(s["reader_share"]["median"]),
            _mb(s["wal_peak_bytes"]["median"]),
            "-" if s["snapshots"]["median"] is None else f"{s['snapshots']['median']:.0f}",
            f"{s['missing']} of {s['expected']:,}", ", ".join(s["integrity"]),
            f"{s['pit_missing']} of {s['pit_expected']:,}", ", ".join(s["pit_integrity"]),
        ])  # fmt: skip
    head = (
        f"litegate bench replication: {cfg['writers']} writer processes per side, "
        f"{cfg['seconds']:g} s per phase, {len(result['runs'])} run(s); "
        f"{result['litestream_version']} (file:// replica), SQLite {result['sqlite_version']}\n"
        "READER: no Litestream, another process holds one read transaction all along; "
        "WAL PEAK: under Litestream\n"
        "MISSING: acknowledged writes not in the copy restored after the run (all were "
        "acknowledged before Litestream's last sync); PIT: the copy restored while the writers "
        f"ran, writes acknowledged more than {SYNC_SLACK:g} s before it began\n"
    )
    targets = "\n".join(
        f"  [{'met' if t['met'] else 'MISSED'}] {t['target']}: {t['value']}"
        for t in result["targets"]
    )
    return head + "\n" + seed_table(cols, [rows]) + "\n\ntargets:\n" + targets


def charts(result: dict[str, Any], out: Path) -> list[Path]:
    return []
