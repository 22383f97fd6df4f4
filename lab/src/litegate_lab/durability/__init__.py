"""``litegate bench durability``: power cuts at random moments (issue 21).

Per profile (default, conservative, balanced, aggressive), a database on a
FUSE filesystem that keeps every write since the last fsync in memory
(``_fs``; :class:`PowerCutMount` drives it), and, per cut:

1. five writer processes start on it: two on the core API (``db.execute``
   from several threads, so they share group commits, ``db.executemany``,
   ``db.write()``, ``db.transact``; in half the cuts one thread also calls
   ``db.checkpoint()`` at random), a ``litegate.queue`` producer (``put``,
   ``put_many``), a queue worker (``claim``, ``ack``, ``ack_many``) and a
   Django process on ``ENGINE: "litegate.django"`` (``atomic()`` blocks and
   autocommit writes). Each writes what it was told to a ledger outside the
   mount before counting it as acknowledged;
2. after U(0, ``--run-max``) seconds the power goes: the filesystem
   freezes, every process using it is SIGKILLed, what was never synced is
   lost (or, in half the cuts with ``--keep mixed``, a random part of it
   reached the disk first), and it is mounted again, cold;
3. a fresh process opens the database (WAL recovery), runs
   ``integrity_check`` and reads everything back; the check compares it
   with the ledgers (``_check``).

Reported per profile: cuts, acknowledged writes, lost acknowledged writes
(and the most in one cut), losses of writes acknowledged before the WAL's
last fsync (a bug in any profile), corruptions, anomalies (torn
transactions, holes, regressions), recovery time, and what the cuts
interrupted (a commit, a group-commit batch, a checkpoint, a claim).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .._args import csv, positive_float, positive_int
from .._progress import Progress
from .._report import Column, seed_table
from . import _run, _work
from ._mount import FuseUnavailable, PowerCutMount, fuse_problem
from ._run import PROFILES, Config

NAME = "durability"
HELP = "power cuts at random moments on a FUSE filesystem that drops unsynced writes (issue 21)"

__all__ = [
    "HELP",
    "NAME",
    "Config",
    "FuseUnavailable",
    "PowerCutMount",
    "add_arguments",
    "charts",
    "config_from_args",
    "fuse_problem",
    "render",
    "run",
]

QUICK_CUTS = 3


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--cuts", type=positive_int, default=50, metavar="N",
        help=f"power cuts per profile (default 50; --quick {QUICK_CUTS})",
    )  # fmt: skip
    p.add_argument(
        "--profiles", type=csv(PROFILES), default=PROFILES, metavar="LIST",
        help="comma-separated profiles (default: all four)",
    )  # fmt: skip
    p.add_argument(
        "--run-max", type=positive_float, default=1.5, metavar="S",
        help="the writers run U(0, S) seconds before each cut (default 1.5)",
    )  # fmt: skip
    p.add_argument(
        "--keep", choices=_run.KEEPS, default="mixed",
        help="none: every unsynced write is lost at a cut (LazyFS's model); mixed (default): "
        "half the cuts let a random part of them reach the disk first; all: nothing is lost "
        "by the OS, so each cut is a process crash (SIGKILL of every writer)",
    )  # fmt: skip
    p.add_argument(
        "--by-hand", type=float, default=0.5, metavar="P",
        help="share of cuts with a thread calling db.checkpoint() at random (default 0.5)",
    )  # fmt: skip
    p.add_argument(
        "--writers", type=csv(tuple(a.name for a in _work.ALL_ACTORS)),
        default=tuple(a.name for a in _work.ACTORS), metavar="LIST",
        help="writer processes (default: core1,core2,producer,worker,django; cache: "
        "LitegateCache on its own file beside the database)",
    )  # fmt: skip
    p.add_argument(
        "--cache-pragmas", type=_pragmas, default=(), metavar="NAME=VALUE[,...]",
        help="the cache writer's PRAGMAs over LitegateCache's own (e.g. synchronous=OFF)",
    )  # fmt: skip
    p.add_argument("--seed", type=int, default=None, help="random seed (default: a fresh one)")
    p.add_argument(
        "--work-dir", default=None, metavar="DIR",
        help="where the filesystem's backing directories go (default: the system's temp dir)",
    )  # fmt: skip


def _pragmas(text: str) -> tuple[tuple[str, str], ...]:
    out = []
    for item in text.split(","):
        name, eq, value = item.strip().partition("=")
        if not eq or not name.isidentifier() or not value:
            raise argparse.ArgumentTypeError(f"NAME=VALUE, comma-separated; got {text!r}")
        out.append((name, value))
    return tuple(out)


def config_from_args(args: argparse.Namespace) -> Config:
    if args.runs != 1:
        raise ValueError("--runs does not apply to durability: every cut is a run; use --cuts")
    if not 0.0 <= args.by_hand <= 1.0:
        raise ValueError(f"--by-hand must be between 0 and 1, got {args.by_hand}")
    problem = fuse_problem()
    if problem:
        raise ValueError(f"cannot cut the power here: {problem}")
    return Config(
        profiles=tuple(args.profiles),
        cuts=QUICK_CUTS if args.quick else args.cuts,
        run_max=min(args.run_max, 0.8) if args.quick else args.run_max,
        keep=args.keep,
        by_hand=args.by_hand,
        seed=args.seed,
        work_dir=args.work_dir,
        actors=tuple(args.writers),
        cache_pragmas=tuple(args.cache_pragmas),
    )


def run(cfg: Config, progress: Progress | None = None) -> dict[str, Any]:
    return _run.run(cfg, progress)


def _ms(v: float | None) -> str:
    return "-" if v is None else (f"{v:.1f}" if v < 10 else f"{v:.0f}")


def render(result: dict[str, Any]) -> str:
    cfg = result["config"]
    profiles = result["profiles"]
    what = "process crash(es)" if cfg["keep"] == "all" else "power cut(s)"
    head = (
        f"litegate bench durability: {cfg['cuts']} {what} per profile at random moments "
        f"(writers run U(0, {cfg['run_max']:g}) s; keep={cfg['keep']}; seed {cfg['seed']}). "
        "ACKED: writes the callers were told are committed (rows, queue puts and acks, Django "
        "transactions). LOST: of those, not there after the cut. BEFORE SYNC: lost although "
        "acknowledged before the WAL's last fsync began. RECOVERY: opening a copy of the "
        "durable files on the real disk (WAL recovery), p50 / max."
    )
    cols = [Column("PROFILE", "left"), Column("SYNC", "left"), Column("CUTS"),
            Column("ACKED"), Column("LOST"), Column("CUTS WITH LOSS"),
            Column("MOST IN ONE CUT"), Column("BEFORE SYNC"), Column("CORRUPT"),
            Column("ANOMALIES"), Column("RECOVERY ms")]  # fmt: skip
    rows = []
    for name, p in profiles.items():
        s = p["summary"]
        rows.append([
            name, p["synchronous"], str(s["cuts"]), f"{s['acked']:,}", f"{s['lost']:,}",
            str(s["cuts_with_loss"]), str(s["lost_max"]), str(s["lost_before_sync"]),
            str(s["corruptions"]), str(sum(s["anomalies"].values())),
            f"{_ms(s['recovery_ms_p50'])} / {_ms(s['recovery_ms_max'])}",
        ])  # fmt: skip
    parts = [head, "", seed_table(cols, [rows])]

    apis = sorted({a for p in profiles.values() for a in p["summary"]["by_api"]})
    api_cols = [Column("API", "left")] + [Column(f"{n} acked / lost") for n in profiles]
    api_rows = []
    for api in apis:
        row = [api]
        for p in profiles.values():
            got = p["summary"]["by_api"].get(api, {"acked": 0, "lost": 0})
            row.append(f"{got['acked']:,} / {got['lost']:,}")
        api_rows.append(row)
    parts += ["", "Per API:", seed_table(api_cols, [api_rows])]

    m_cols = [Column("PROFILE", "left"), Column("MID-COMMIT"), Column("MID-BATCH"),
              Column("MID-CHECKPOINT"), Column("MID-CLAIM"), Column("ALL LOST"),
              Column("LAST WAL SYNC BEFORE CUT ms p50 / max")]  # fmt: skip
    m_rows = []
    for name, p in profiles.items():
        s = p["summary"]
        mo = s["moments"]
        m_rows.append([
            name, str(mo.get("commit", 0)), str(mo.get("batch", 0)),
            str(mo.get("checkpoint", 0)), str(mo.get("claim", 0)),
            f"{s['keep_none']} of {s['cuts']}",
            f"{_ms(s['since_sync_ms_p50'])} / {_ms(s['since_sync_ms_max'])}",
        ])  # fmt: skip
    parts += ["", "What the cuts interrupted (a cut can be several), and how much was at risk:",
              seed_table(m_cols, [m_rows])]  # fmt: skip

    o_cols = [Column("PROFILE", "left"), Column("CUTS"), Column("ACKED"), Column("LOST"),
              Column("MOST IN ONE CUT"), Column("MEDIAN"),
              Column("LAST WAL SYNC BEFORE CUT ms p50 / max")]  # fmt: skip
    o_rows = []
    for name, p in profiles.items():
        o = p["summary"]["own"]
        o_rows.append([
            name, str(o["cuts"]), f"{o['acked']:,}", f"{o['lost']:,}", str(o["lost_max"]),
            f"{o['lost_median']:g}", f"{_ms(o['since_sync_ms_p50'])} / "
            f"{_ms(o['since_sync_ms_max'])}",
        ])  # fmt: skip
    parts += ["", "The cuts with litegate's own checkpoints only (no db.checkpoint() by hand):",
              seed_table(o_cols, [o_rows])]  # fmt: skip

    notes = []
    for name, p in profiles.items():
        s = p["summary"]
        if s["anomalies"]:
            notes.append(f"{name}: anomalies {s['anomalies']}")
        if s["errors_before_cut"]:
            notes.append(f"{name}: calls that raised before the cut {s['errors_before_cut']}")
        if s.get("cache_corruptions"):
            notes.append(
                f"{name}: the cache file was corrupt after {s['cache_corruptions']} cut(s)"
            )
        if s["crashed"] or s["never_ready"]:
            notes.append(
                f"{name}: {s['crashed']} cut(s) with a writer that ended before the cut, "
                f"{s['never_ready']} with one never ready (see the JSON)"
            )
    if notes:
        parts += ["", *notes]
    parts += ["", "Targets:"]
    for t in result["targets"]:
        parts.append(f"  [{'met' if t['met'] else 'MISSED'}] {t['target']}: {t['value']}")
    return "\n".join(parts)


def charts(result: dict[str, Any], out: Path) -> list[Path]:
    from .._charts import HistPanel, histograms

    panels = []
    for name, p in result["profiles"].items():
        lost = [float(c["lost"]) for c in p["cuts"]]
        s = p["summary"]
        panels.append(HistPanel(
            f"{name} ({p['synchronous']})", lost, {},
            note=f"{s['cuts']} cuts, {s['lost']} of {s['acked']} acknowledged writes lost",
        ))  # fmt: skip
    path = out / "durability-lost-per-cut.png"
    return [histograms(path, title="Acknowledged writes lost per power cut", panels=panels,
                       xlabel="lost acknowledged writes in one cut", ylabel="cuts")]  # fmt: skip
