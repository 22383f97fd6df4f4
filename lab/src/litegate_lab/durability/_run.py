"""The power-cut runs: per profile, a database on the power-cut filesystem,
writers on every API, a cut at a random moment, the check, again."""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import shutil
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from typing import Any

import litegate

from .._progress import Progress
from .._stats import median
from . import _check, _work
from ._mount import CutReport, PowerCutMount

DB = "app.db"
PROFILES = ("default", "conservative", "balanced", "aggressive")
KEEPS = ("none", "mixed", "all")
_CHILD_LIMIT = 120.0  # seconds a setup or check process may take


@dataclass(frozen=True)
class Config:
    profiles: tuple[str, ...] = PROFILES
    cuts: int = 50  # per profile
    run_max: float = 1.5  # the writers run U(0, run_max) s before the cut
    # none: every unsynced write is lost at a cut; mixed: half the cuts keep a
    # random part of them; all: every write reaches the disk, so a "cut" is a
    # process crash (SIGKILL of every writer, the machine keeps running)
    keep: str = "mixed"
    by_hand: float = 0.5  # the share of cuts with a thread calling db.checkpoint() at random
    seed: int | None = None
    work_dir: str | None = None  # where the backing directories go (default: the system's temp)
    actors: tuple[str, ...] = tuple(a.name for a in _work.ACTORS)
    # the cache writer's PRAGMAs over LitegateCache's own (with --writers ...,cache)
    cache_pragmas: tuple[tuple[str, str], ...] = ()


def _ctx() -> Any:
    """forkserver with the writers' modules loaded once: a writer process
    starts in milliseconds, without the threads of this one."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["litegate_lab.durability._work", "litegate.queue", "django.db"])
    return ctx


def _call(conn: Connection, fn: Any, args: tuple[Any, ...]) -> None:
    try:
        conn.send(("ok", fn(*args)))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


def in_child(fn: Any, *args: Any, timeout: float = _CHILD_LIMIT) -> Any:
    """``fn(*args)`` in a fresh process; its value (or its traceback, raised).
    The controller never opens a file on the mount itself: a cut would have
    to kill it."""
    ctx = _ctx()
    recv, send = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_call, args=(send, fn, args), daemon=True)
    p.start()
    send.close()
    try:
        if not recv.poll(timeout):
            raise TimeoutError(f"{fn.__name__} took more than {timeout:g} s")
        try:
            status, value = recv.recv()
        except EOFError:
            p.join(5)
            status, value = "error", f"it ended without an answer (exit code {p.exitcode})"
    finally:
        recv.close()
        p.join(5)
        if p.is_alive():
            p.kill()
            p.join()
    if status != "ok":
        raise RuntimeError(f"{fn.__name__} failed in its process:\n{value}")
    return value


def _sync_level(profile: str) -> str:
    return str(litegate.PROFILES[profile].get("synchronous", "FULL")).upper()


def run(cfg: Config, progress: Progress | None = None) -> dict[str, Any]:
    progress = progress or Progress(0)
    progress.total = float(len(cfg.profiles) * cfg.cuts)
    seed = cfg.seed if cfg.seed is not None else random.randrange(1 << 31)
    rng = random.Random(seed)
    actors = tuple(a for a in _work.ALL_ACTORS if a.name in cfg.actors)
    out: dict[str, Any] = {}
    for profile in cfg.profiles:
        cuts = _profile(cfg, profile, actors, rng, progress)
        out[profile] = {"synchronous": _sync_level(profile), "cuts": cuts,
                        "summary": summarise(cuts)}  # fmt: skip
    return {
        "experiment": "durability",
        "config": {**asdict(cfg), "seed": seed},
        "profiles": out,
        "targets": targets(out, cfg),
    }


def _profile(
    cfg: Config,
    profile: str,
    actors: tuple[_work.Actor, ...],
    rng: random.Random,
    progress: Progress,
) -> list[dict[str, Any]]:
    cuts: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="litegate-powercut-", dir=cfg.work_dir) as tmp:
        backing, mnt, ledgers = (os.path.join(tmp, d) for d in ("disk", "mnt", "ledgers"))
        for d in (backing, mnt, ledgers):
            os.mkdir(d)
        mount = PowerCutMount(backing, mnt)
        mount.start()
        try:
            in_child(_work.setup, os.path.join(mnt, DB), profile)
            if any(a.kind == "cache" for a in actors):
                in_child(_work.setup_cache, os.path.join(mnt, DB), dict(cfg.cache_pragmas))
            mount.sync()  # installed, then synced: the starting point is durable
            carry = _check.Carry()
            for r in range(1, cfg.cuts + 1):
                progress.describe(f"{profile}: cut {r}/{cfg.cuts}")
                one, carry = _one_cut(cfg, profile, actors, mount, tmp, ledgers, r, rng, carry)
                cuts.append(one)
                progress.advance()
        finally:
            mount.close()
    return cuts


def _one_cut(
    cfg: Config,
    profile: str,
    actors: tuple[_work.Actor, ...],
    mount: PowerCutMount,
    tmp: str,
    ledgers: str,
    r: int,
    rng: random.Random,
    carry: _check.Carry,
) -> tuple[dict[str, Any], _check.Carry]:
    rdir = os.path.join(ledgers, f"r{r}")
    os.mkdir(rdir)
    phase = os.path.join(rdir, "phase.bin")
    _work.new_phase_table(phase)
    ctx = _ctx()
    path = os.path.join(mount.mountpoint, DB)
    by_hand = rng.random() < cfg.by_hand
    procs = []
    for i, (actor, slot) in enumerate(zip(actors, _work.slots_of(actors), strict=True)):
        spec = {
            "name": actor.name, "kind": actor.kind, "apis": list(actor.apis),
            "db": path, "profile": profile, "round": r, "index": i, "slot": slot,
            "log": os.path.join(rdir, f"{actor.name}.log"), "phase": phase,
            "seed": rng.randrange(1 << 31), "seconds": cfg.run_max + 60.0,
            "by_hand": by_hand, "cache_pragmas": dict(cfg.cache_pragmas),
        }  # fmt: skip
        p = ctx.Process(target=_work.run_actor, args=(spec,), daemon=True)
        p.start()
        procs.append(p)
    t_start = time.monotonic()
    deadline = t_start + 60.0
    while not all(_work.read_phase_table(phase, actors)["ready"]):
        if time.monotonic() > deadline or any(p.exitcode is not None for p in procs):
            break  # cut anyway; the record says who never got ready
        time.sleep(0.005)
    ready_s = time.monotonic() - t_start
    delay = rng.uniform(0.0, cfg.run_max)
    time.sleep(delay)
    before = _work.read_phase_table(phase, actors)
    if cfg.keep == "all":
        keep = 1.0
    else:
        keep = 0.0 if cfg.keep == "none" or rng.random() < 0.5 else rng.random()
    report = mount.cut(keep=keep, seed=rng.randrange(1 << 31))
    exits = []
    for p in procs:
        p.join(10)
        if p.is_alive():  # not using the mount (it never got that far): stop it anyway
            p.kill()
            p.join()
        exits.append(p.exitcode)
    wal = os.path.join(mount.backing, DB + "-wal")
    wal_bytes = os.path.getsize(wal) if os.path.exists(wal) else 0
    recovery_s = _recover_copy(mount.backing, tmp, profile)
    ledger = _check.read_ledgers(rdir)
    crashed = {
        a.name: _tail(os.path.join(rdir, f"{a.name}.err"))
        for a, code in zip(actors, exits, strict=True)
        if code != -9  # not killed by the cut: it ended (or failed) before
    }
    mount.start()
    seen = in_child(_work.look, path, profile, r, carry.last_job, sorted(ledger.acks))
    has_cache = any(a.kind == "cache" for a in actors)
    if has_cache:
        seen.update(in_child(_work.look_cache, _work.cache_path(path), r))
    horizon = _horizon(report)
    cache_horizon = _horizon(report, _work.CACHE_DB) if has_cache else 0
    verdict = _check.check(r, ledger, seen, horizon, carry, cache_horizon)
    carry = _check.advance(carry, r, seen)
    cut_ns = int(report.at_cut["monotonic_ns"])
    shutil.rmtree(rdir)
    one = {
        "round": r,
        "ready_s": round(ready_s, 3),
        "never_ready": [a.name for a, ok in zip(actors, before["ready"], strict=True) if not ok],
        "delay_s": round(delay, 3),
        "by_hand": by_hand,
        "crashed": crashed,
        "keep": round(keep, 3),
        "inside": before["inside"],
        "moments": moments(before, report, actors),
        "killed": len(report.killed),
        "exit_codes": exits,
        "wal_bytes": wal_bytes,
        "recovery_ms": None if recovery_s is None else recovery_s * 1000,
        "open_ms_on_mount": 1000 * seen["open_seconds"] if "open_seconds" in seen else None,
        "since_sync_ms": (cut_ns - horizon) / 1e6 if horizon else None,
        "unsynced": {k: v["unsynced_blocks"] for k, v in report.at_cut["files"].items()},
        "kept": report.dropped,
        "cut_seconds": report.seconds,
        "errors_before_cut": sorted({e for t, e in ledger.errors if t < cut_ns}),
        **verdict,
    }
    return one, carry


def _tail(path: str, chars: int = 2000) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()[-chars:]
    except OSError:
        return ""


def _horizon(report: CutReport, db: str = DB) -> int:
    """When the WAL's last fsync began (everything written before it was
    durable from then on), or 0."""
    wal = report.at_cut["files"].get("/" + db + "-wal")
    if not wal or not wal["durable_name"]:
        return 0
    return int(wal["last_sync_ns"])


def _recover_copy(backing: str, tmp: str, profile: str) -> float | None:
    """Seconds to open a copy of the durable files (database and WAL; the
    -shm is rebuilt) on the real disk and read from it: WAL recovery as a
    rebooted machine would run it, without the FUSE layer's cost."""
    copy = os.path.join(tmp, "recovery")
    shutil.rmtree(copy, ignore_errors=True)
    os.mkdir(copy)
    try:
        for suffix in ("", "-wal"):
            src = os.path.join(backing, DB + suffix)
            if os.path.exists(src):
                shutil.copyfile(src, os.path.join(copy, DB + suffix))
        if not os.path.exists(os.path.join(copy, DB)):
            return None
        t0 = time.perf_counter()
        try:
            with litegate.connect(os.path.join(copy, DB), profile=profile, readers=1) as db:
                db.query("SELECT count(*) FROM sqlite_master")
                return time.perf_counter() - t0
        except Exception:
            return None  # the check on the mount reports why
    finally:
        shutil.rmtree(copy, ignore_errors=True)


_WRITES = {"execute", "executemany", "write", "transact", "put", "put_many", "claim", "ack",
           "ack_many", "atomic", "autocommit", "cache_set", "cache_set_many"}  # fmt: skip
_BATCHED = {"execute", "executemany", "transact", "put", "put_many", "claim", "ack", "ack_many",
            "cache_set", "cache_set_many"}  # fmt: skip


def moments(
    before: dict[str, Any], report: CutReport, actors: tuple[_work.Actor, ...]
) -> list[str]:
    """What the cut interrupted: a commit (a thread inside a write call), a
    batch (two or more threads of one process inside group-committed
    calls), a checkpoint (the database file held unsynced writes, which only
    a checkpoint makes, or a thread was inside ``db.checkpoint``), a claim."""
    inside = before["inside"]
    out = []
    if any(api in _WRITES for _a, api in inside):
        out.append("commit")
    per_proc = Counter(a for a, api in inside if api in _BATCHED)
    if any(n >= 2 for n in per_proc.values()):
        out.append("batch")
    db_file = report.at_cut["files"].get("/" + DB, {})
    if db_file.get("unsynced_blocks") or any(api == "checkpoint" for _a, api in inside):
        out.append("checkpoint")
    if any(api == "claim" for _a, api in inside):
        out.append("claim")
    return out


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))]


def summarise(cuts: list[dict[str, Any]]) -> dict[str, Any]:
    by_api: dict[str, dict[str, int]] = {}
    for c in cuts:
        for api, n in c["acked_by_api"].items():
            by_api.setdefault(api, {"acked": 0, "lost": 0})["acked"] += n
        for api, n in c["lost_by_api"].items():
            by_api.setdefault(api, {"acked": 0, "lost": 0})["lost"] += n
    anomalies: Counter[str] = Counter()
    for c in cuts:
        anomalies.update(c["anomalies"])
    rec = [c["recovery_ms"] for c in cuts if c["recovery_ms"] is not None]
    opened = [c["open_ms_on_mount"] for c in cuts if c["open_ms_on_mount"] is not None]
    since = [c["since_sync_ms"] for c in cuts if c["since_sync_ms"] is not None]
    lost = [c["lost"] for c in cuts]
    own = [c for c in cuts if not c["by_hand"]]  # litegate's own checkpoints only
    own_lost = [c["lost"] for c in own]
    own_since = [c["since_sync_ms"] for c in own if c["since_sync_ms"] is not None]
    moment_counts: Counter[str] = Counter()
    for c in cuts:
        moment_counts.update(c["moments"])
    errors: Counter[str] = Counter()
    for c in cuts:
        errors.update(c["errors_before_cut"])
    return {
        "cuts": len(cuts),
        "acked": sum(c["acked"] for c in cuts),
        "lost": sum(lost),
        "lost_max": max(lost, default=0),
        "lost_median": median([float(x) for x in lost]) if lost else 0.0,
        "cuts_with_loss": sum(1 for x in lost if x),
        "lost_before_sync": sum(c["lost_before_sync"] for c in cuts),
        "exposed_max": max((c["exposed"] for c in cuts), default=0),
        "corruptions": sum(1 for c in cuts if c["corrupt"]),
        "cache_corruptions": sum(1 for c in cuts if c.get("cache_corrupt")),
        "anomalies": dict(anomalies),
        "recovery_ms_p50": _pct(rec, 0.5),
        "recovery_ms_max": max(rec, default=None),
        "open_ms_on_mount_p50": _pct(opened, 0.5),
        "open_ms_on_mount_max": max(opened, default=None),
        "wal_bytes_max": max((c["wal_bytes"] for c in cuts), default=0),
        "since_sync_ms_p50": _pct(since, 0.5),
        "since_sync_ms_max": max(since, default=None),
        "moments": dict(moment_counts),
        "own": {
            "cuts": len(own),
            "acked": sum(c["acked"] for c in own),
            "lost": sum(own_lost),
            "lost_max": max(own_lost, default=0),
            "lost_median": median([float(x) for x in own_lost]) if own_lost else 0.0,
            "since_sync_ms_p50": _pct(own_since, 0.5),
            "since_sync_ms_max": max(own_since, default=None),
        },
        "crashed": sum(1 for c in cuts if c["crashed"]),
        "keep_none": sum(1 for c in cuts if c["keep"] == 0),
        "by_api": by_api,
        "errors_before_cut": dict(errors),
        "never_ready": sum(1 for c in cuts if c["never_ready"]),
    }


LONG_RUN_CUTS = 200  # the bar for synchronous=FULL


def targets(profiles: dict[str, Any], cfg: Config) -> list[dict[str, Any]]:
    out = []
    # the power-cut target (not for --keep all, where a cut is a process crash)
    full = [p for p, v in profiles.items() if v["synchronous"] == "FULL" and cfg.keep != "all"]
    for p in full:
        s = profiles[p]["summary"]
        out.append({
            "target": f"{p} (synchronous=FULL): 0 acknowledged writes lost, 0 corruptions, "
                      f">= {LONG_RUN_CUTS} cuts",
            "value": f"{s['lost']} lost of {s['acked']}, {s['corruptions']} corrupt, "
                     f"{s['cuts']} cuts",
            "met": s["lost"] == 0 and s["corruptions"] == 0 and s["cuts"] >= LONG_RUN_CUTS,
        })  # fmt: skip
    if cfg.keep == "all":  # process crashes: the OS loses nothing, so nobody may
        for p, v in profiles.items():
            s = v["summary"]
            out.append({
                "target": f"{p}: a process crash (SIGKILL of every writer) loses nothing "
                          "acknowledged",
                "value": f"{s['lost']} lost of {s['acked']} in {s['cuts']} crashes",
                "met": s["lost"] == 0,
            })  # fmt: skip
    if "cache" in cfg.actors:
        pragmas = ", ".join(f"{k}={v}" for k, v in cfg.cache_pragmas) or "its own PRAGMAs"
        for p, v in profiles.items():
            s = v["summary"]
            got = s["by_api"]
            acked = sum(x["acked"] for a, x in got.items() if a.startswith("cache_"))
            lost = sum(x["lost"] for a, x in got.items() if a.startswith("cache_"))
            early = s["anomalies"].get("cache lost before its sync", 0)
            wrong = s["anomalies"].get("cache value", 0)
            out.append({
                "target": f"{p}: the cache file ({pragmas}) is never corrupted and keeps what "
                          "was set before its last fsync; a cut may lose recent sets",
                "value": f"{s['cache_corruptions']} corrupt in {s['cuts']} cuts, {early} lost "
                         f"before its last fsync; {lost} of {acked} acknowledged sets lost",
                "met": s["cache_corruptions"] == 0 and early == 0 and wrong == 0,
            })  # fmt: skip
    for p, v in profiles.items():
        s = v["summary"]
        bad = sum(n for k, n in s["anomalies"].items() if not k.startswith("cache "))
        out.append({
            "target": f"{p}: 0 corruptions, 0 anomalies, nothing lost that was acknowledged "
                      "before the WAL's last fsync",
            "value": f"{s['corruptions']} corrupt, {bad} anomalies, "
                     f"{s['lost_before_sync']} lost before the last sync",
            "met": s["corruptions"] == 0 and bad == 0 and s["lost_before_sync"] == 0,
        })  # fmt: skip
    return out
