"""The configuration of ``bench queue`` and its command-line options."""

from __future__ import annotations

import argparse
import importlib.util
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .. import _stats
from .._args import csv as _csv
from .._args import positive_float as _seconds
from .._args import positive_int as _count
from .._args import whole_numbers
from ._pg import is_url, redact
from ._scale import ScaleConfig
from ._sides import ALL_SIDES, BACKENDS, PEER_MODULES, SIDES, SIDES_BY_BACKEND

SCENARIOS = ("single", "concurrent", "mixed", "stress", "long", "e2e", "frames")
SQLITE_ONLY_SCENARIOS = ("frames",)
"""Scenarios that measure SQLite's files (the WAL index): a PostgreSQL part
leaves them out."""
PROFILES = ("conservative", "balanced", "aggressive")
PG_PROFILE = "postgres"
"""The one "profile" on PostgreSQL: the server's own settings (seed 004's
PRAGMA profiles are SQLite's)."""
PG_CELL_TIMEOUT = 300.0
QUICK_E2E_ONLY = ("litegate-bounded", "litegate-combined")
"""``--quick`` with the default sides runs these in the end-to-end rows only:
the second policy and the combined writes are shown where the queue's
throughput is judged, without the ~20 s each adds to the quick run in the
other cells."""
E2E_MODES = ("batched", "one-job")
INSTALL = "pip install litegate-lab"
PG_INSTALL = "pip install litegate-lab"


@dataclass(frozen=True)
class Config:
    backend: str = "sqlite"
    pg_url: str | None = None  # an existing server; None: a throwaway PgServer for the run
    pg_fsync: bool = True  # the throwaway server's fsync
    scenarios: tuple[str, ...] = SCENARIOS
    sides: tuple[str, ...] = SIDES  # on postgres, the SQLite default becomes PG_SIDES
    e2e_only_sides: tuple[str, ...] = ()  # sides that run the end-to-end rows only (quick)
    profiles: tuple[str, ...] = PROFILES  # single, concurrent, mixed, stress
    long_profiles: tuple[str, ...] = ("balanced",)
    e2e_profiles: tuple[str, ...] = ("balanced",)
    runs: int = 1
    single_puts: int = 1_000  # the seed's 1,000 insertions
    concurrent_total: int = 4_000  # split over the workers (the seed: 1,000)
    concurrent_workers: tuple[int, ...] = (2, 4, 8)
    mixed_seconds: float = 10.0  # the seed's 10 s
    mixed_writers: int = 2
    mixed_claimers: int = 2
    stress_workers: tuple[int, ...] = (1, 2, 4, 8, 16)
    stress_seconds: float = 2.0  # per step
    long_seconds: float = 60.0
    long_sample_s: float = 0.25
    e2e_jobs: int = 40_000
    e2e_producers: int = 4
    e2e_workers: int = 4
    e2e_threads: int = 8  # threads per process, one-job row (litegate, huey, litequeue)
    seed_threads: int = 1  # the seed's approach: one connection per worker process
    batch: int = 100
    frames_ops: int = 400  # frames: single-job puts, then as many claims, then acks
    frames_backlog: int = 3_000  # frames: jobs queued before them
    cell_timeout: float = 60.0  # every cell with a fixed amount of work stops after this
    start_method: str = "spawn"
    noise_k: float = _stats.NOISE_K
    grant_log: bool = False  # litegate on SQLite: log every grant, check the bounds on it

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, not {self.backend!r}")
        if self.backend == "postgres":
            # The SQLite defaults (sides, PRAGMA profiles) stand for "every
            # side" and "the one configuration" on PostgreSQL.
            if self.sides == SIDES:
                object.__setattr__(self, "sides", SIDES_BY_BACKEND["postgres"])
            kept = tuple(s for s in self.scenarios if s not in SQLITE_ONLY_SCENARIOS)
            if not kept:
                raise ValueError(
                    f"--scenarios {','.join(self.scenarios)}: the WAL frames are SQLite's "
                    "(its -shm file); PostgreSQL has no such file here: add another "
                    "scenario, or run it with --backend sqlite"
                )
            object.__setattr__(self, "scenarios", kept)
            for name in ("profiles", "long_profiles", "e2e_profiles"):
                if set(getattr(self, name)) <= set(PROFILES):
                    object.__setattr__(self, name, (PG_PROFILE,))
        valid = SIDES_BY_BACKEND[self.backend]
        wrong = [s for s in self.sides if s not in valid]
        if wrong:
            raise ValueError(
                f"side(s) {', '.join(wrong)} do not run on {self.backend}; "
                f"pick from {','.join(valid)}"
            )
        profiles = (PG_PROFILE,) if self.backend == "postgres" else PROFILES
        for name in ("profiles", "long_profiles", "e2e_profiles"):
            bad = [p for p in getattr(self, name) if p not in profiles]
            if bad:
                raise ValueError(f"{name} {bad} are not {self.backend}'s ({', '.join(profiles)})")
        if self.grant_log and self.backend != "sqlite":
            raise ValueError(
                "--grant-log logs the grants of litegate's write gate on SQLite; "
                f"{self.backend} has no such gate: add sqlite to --backend, or drop --grant-log"
            )
        if self.pg_url is not None and (self.backend != "postgres" or not is_url(self.pg_url)):
            raise ValueError("--pg-url takes a postgresql:// URL, with --backend postgres")

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if self.pg_url is not None:
            data["pg_url"] = redact(self.pg_url)  # never a password in the results
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Config:
        """Back from ``to_json`` (lists become tuples again)."""
        fields: dict[str, Any] = {
            k: tuple(v) if isinstance(v, list) else v for k, v in data.items()
        }
        return cls(**fields)


def quick(cfg: Config) -> Config:
    """The ``--quick`` sizes: one profile, short runs (about two minutes in
    all); with the default sides, litegate-bounded in the end-to-end rows only."""
    return Config(
        backend=cfg.backend,
        pg_url=cfg.pg_url,
        pg_fsync=cfg.pg_fsync,
        scenarios=cfg.scenarios,
        sides=cfg.sides,
        e2e_only_sides=QUICK_E2E_ONLY if cfg.sides == SIDES else cfg.e2e_only_sides,
        profiles=("balanced",),
        long_profiles=("balanced",),
        e2e_profiles=("balanced",),
        runs=cfg.runs,
        single_puts=500,
        concurrent_total=2_000,
        concurrent_workers=(4,),
        mixed_seconds=2.0,
        stress_workers=(1, 4, 16),
        stress_seconds=0.7,
        long_seconds=5.0,
        long_sample_s=0.1,
        e2e_jobs=8_000,
        frames_ops=300,
        cell_timeout=30.0,
        noise_k=cfg.noise_k,
        grant_log=cfg.grant_log,
    )


BOTH = "both"
"""``--backend both``: every backend, as ``sqlite,postgres``."""


@dataclass(frozen=True)
class Combined:
    """One invocation over several backends (``--backend sqlite,postgres``):
    a :class:`Config` per backend, run one after the other in this order
    into one report, one JSON and one set of charts."""

    parts: tuple[Config, ...]

    def __post_init__(self) -> None:
        backends = [c.backend for c in self.parts]
        # Always SQLite's matrix first: the throwaway PostgreSQL server is then
        # started only once SQLite's cells are over and takes no CPU from them.
        if len(backends) < 2 or backends != [b for b in BACKENDS if b in backends]:
            raise ValueError(
                f"a combined run takes two or more backends in the order {','.join(BACKENDS)}, "
                f"not {','.join(backends)}"
            )

    @property
    def backends(self) -> tuple[str, ...]:
        return tuple(c.backend for c in self.parts)

    @property
    def runs(self) -> int:
        return max(c.runs for c in self.parts)

    def to_json(self) -> dict[str, Any]:
        # Each part's own config sits in its result; this is what the whole ran.
        return {"backends": list(self.backends), "runs": self.runs}


def parse_backends(text: str) -> tuple[str, ...]:
    """``--backend``: one backend, a comma list of them, or ``both``; always
    in the order of BACKENDS (SQLite first), once each."""
    items = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in items if x not in (*BACKENDS, BOTH)]
    if bad or not items:
        raise argparse.ArgumentTypeError(
            f"pick from {', '.join(BACKENDS)} (comma-separated) or {BOTH}, got {text!r}"
        )
    chosen = set(BACKENDS) if BOTH in items else set(items)
    return tuple(b for b in BACKENDS if b in chosen)


def peer_modules(side: str) -> list[str]:
    return [m for m in PEER_MODULES.get(side, "").split(",") if m]


def missing_peers(sides: Sequence[str]) -> list[str]:
    """The chosen sides whose third-party modules this Python lacks."""
    return [s for s in sides if any(importlib.util.find_spec(m) is None for m in peer_modules(s))]


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("queue options")
    g.add_argument(
        "--scale",
        action="store_true",
        help="instead of the seed's scenarios: grow one queue's backlog from --scale-min to "
        "--scale-max jobs (ready, scheduled, done) and time put, put_many, claim, ack, "
        "counts(), next_due(), purge, bytes per job and the WAL's peak at each size "
        "(on each --backend)",
    )
    g.add_argument(
        "--scale-max",
        type=_count,
        default=None,
        metavar="N",
        help="with --scale: the largest backlog (default 10,000,000; quick 100,000)",
    )
    g.add_argument(
        "--scale-min",
        type=_count,
        default=None,
        metavar="N",
        help="with --scale: the smallest backlog, the first size measured (default 10,000)",
    )
    g.add_argument(
        "--scale-budget",
        type=_seconds,
        default=None,
        metavar="S",
        help="with --scale: stop growing (per backend) before a size that would end more "
        "than S seconds after the backend's start (default: no limit)",
    )
    g.add_argument(
        "--backend",
        type=parse_backends,
        default=("sqlite",),
        metavar="LIST",
        help="sqlite: one SQLite file per cell, sides "
        f"{','.join(SIDES)}; postgres: one database per cell on a PostgreSQL server, "
        f"sides {','.join(SIDES_BY_BACKEND['postgres'])}; sqlite,postgres (or {BOTH}): "
        "SQLite's cells, then PostgreSQL's, into one report (default sqlite)",
    )
    g.add_argument(
        "--pg-url",
        default=None,
        metavar="URL",
        help="with --backend postgres (or both): the server to use (a postgresql:// URL whose user "
        "may CREATE DATABASE; a database per cell is created and dropped). Default: a "
        "throwaway server started for the run (needs PostgreSQL's server binaries)",
    )
    g.add_argument(
        "--pg-fsync",
        choices=("on", "off"),
        default="on",
        help="fsync of the throwaway server (default on: commits reach the disk)",
    )
    g.add_argument(
        "--scenarios",
        type=_csv(SCENARIOS),
        default=None,
        metavar="LIST",
        help=f"which scenarios (default all: {','.join(SCENARIOS)})",
    )
    g.add_argument(
        "--sides",
        type=_csv(ALL_SIDES),
        default=None,
        metavar="LIST",
        help=f"which queues (default all of the backend's: {','.join(SIDES)} on sqlite, "
        f"{','.join(SIDES_BY_BACKEND['postgres'])} on postgres; with both backends each "
        "takes the listed sides it has)",
    )
    g.add_argument(
        "--profiles",
        type=_csv(PROFILES),
        default=None,
        metavar="LIST",
        help="PRAGMA profiles for single, concurrent, mixed and stress "
        "(default conservative,balanced,aggressive; --quick balanced; SQLite only)",
    )
    g.add_argument(
        "--long-profiles",
        type=_csv(PROFILES),
        default=None,
        metavar="LIST",
        help="profiles for the long run (default balanced)",
    )
    g.add_argument(
        "--e2e-profiles",
        type=_csv(PROFILES),
        default=None,
        metavar="LIST",
        help="profiles for the end-to-end rows (default balanced)",
    )
    g.add_argument(
        "--seconds",
        type=_seconds,
        default=None,
        metavar="S",
        help="length of the mixed run and of the long run (default 10 and 60; quick 2 and 5)",
    )
    g.add_argument(
        "--long-seconds",
        type=_seconds,
        default=None,
        metavar="S",
        help="length of the long run (overrides --seconds for it)",
    )
    g.add_argument(
        "--stress-seconds",
        type=_seconds,
        default=None,
        metavar="S",
        help="length of each step of the stress ramp (default 2; quick 0.7)",
    )
    g.add_argument(
        "--stress-workers",
        type=whole_numbers(),
        default=None,
        metavar="LIST",
        help="the stress ramp (default 1,2,4,8,16; quick 1,4,16)",
    )
    g.add_argument(
        "--concurrent-workers",
        type=whole_numbers(),
        default=None,
        metavar="LIST",
        help="worker processes of the concurrent-writers scenario (default 2,4,8; quick 4)",
    )
    g.add_argument(
        "--concurrent-total",
        type=_count,
        default=None,
        metavar="N",
        help="puts in all, split over the concurrent writers (default 4,000; the seed's "
        "1,000 is over in a few ms here; quick 2,000)",
    )
    g.add_argument(
        "--single-puts",
        type=_count,
        default=None,
        metavar="N",
        help="puts of the single writer (default 1,000 as in the seed; quick 500)",
    )
    g.add_argument(
        "--e2e-jobs",
        type=_count,
        default=None,
        metavar="N",
        help="jobs in each end-to-end cell (default 40,000; quick 8,000)",
    )
    g.add_argument(
        "--e2e-threads",
        type=_count,
        default=None,
        metavar="N",
        help="threads per producer and worker process in the one-job row (default 8)",
    )
    g.add_argument(
        "--seed-threads",
        type=_count,
        default=None,
        metavar="N",
        help="threads (each with its own connection) per process for the seed's approach "
        "in the one-job row (default 1: one connection per worker, as in the seed)",
    )
    g.add_argument(
        "--frames-ops",
        type=_count,
        default=None,
        metavar="N",
        help="frames scenario: single-job puts measured, then as many claims and acks "
        "(default 400; quick 300)",
    )
    g.add_argument(
        "--frames-backlog",
        type=_count,
        default=None,
        metavar="N",
        help="frames scenario: jobs queued before the operations measured (default 3,000)",
    )
    g.add_argument(
        "--cell-timeout",
        type=_seconds,
        default=None,
        metavar="S",
        help="a cell with a fixed amount of work stops after this long (default 60, "
        f"{PG_CELL_TIMEOUT:g} on postgres; quick 30)",
    )
    g.add_argument(
        "--grant-log",
        action="store_true",
        help="litegate on SQLite: its worker processes log every grant of the write gate, and "
        "each cell's log is checked against the bounds (two holders at once, ticket order, "
        "overtakes against the budget, the gate free while a head waited); logging slows "
        "the gate, so those throughputs are not comparable with a run without it (with "
        "--backend sqlite,postgres: the SQLite part only)",
    )


def _backends_of(args: argparse.Namespace) -> tuple[str, ...]:
    backend = getattr(args, "backend", ("sqlite",))
    # a plain string: a Namespace built by hand (tests), not by the parser
    return parse_backends(backend) if isinstance(backend, str) else tuple(backend)


def _backend_args(args: argparse.Namespace, backends: tuple[str, ...]) -> dict[str, Any]:
    """``--pg-url``, ``--pg-fsync`` checked against the backends: the
    PostgreSQL part's keyword arguments (none without it)."""
    url = getattr(args, "pg_url", None)
    fsync = getattr(args, "pg_fsync", "on")
    if "postgres" not in backends:
        if url is not None or fsync != "on":
            raise ValueError("--pg-url and --pg-fsync go with --backend postgres")
        return {}
    if backends == ("postgres",):
        # With SQLite in the run too these are its part's options.
        for name in ("profiles", "long_profiles", "e2e_profiles"):
            if getattr(args, name, None) is not None:
                flag = "--" + name.replace("_", "-")
                raise ValueError(
                    f"{flag}: the PRAGMA profiles are SQLite's; not with --backend postgres"
                )
    if url is not None and not is_url(url):
        raise ValueError(f"--pg-url takes a postgresql:// URL, got {redact(url)!r}")
    if url is not None and fsync != "on":
        raise ValueError("--pg-fsync is for the throwaway server; not with --pg-url")
    if importlib.util.find_spec("psycopg") is None:
        raise ValueError(f"--backend postgres needs psycopg 3. Install it with:  {PG_INSTALL}")
    if url is None:
        from .._pgserver import MISSING_HELP, find_bindir

        if find_bindir() is None:
            raise ValueError(f"{MISSING_HELP} Or use a server you run: --pg-url URL")
    return {"backend": "postgres", "pg_url": url, "pg_fsync": fsync == "on"}


def _sides_for(
    backends: tuple[str, ...], sides: tuple[str, ...] | None
) -> dict[str, tuple[str, ...] | None]:
    """``--sides`` split over the backends of a combined run: each part takes
    the listed sides it has (litegate is on both). A backend left with none
    is an error, not a part silently skipped."""
    if sides is None:
        return {b: None for b in backends}
    out: dict[str, tuple[str, ...] | None] = {}
    for b in backends:
        mine = tuple(s for s in sides if s in SIDES_BY_BACKEND[b])
        if not mine:
            raise ValueError(
                f"--sides {','.join(sides)} has no side that runs on {b} "
                f"({','.join(SIDES_BY_BACKEND[b])}); add one, or leave {b} out of --backend"
            )
        out[b] = mine
    return out


def _part(
    args: argparse.Namespace, backend: str, pg: dict[str, Any], sides: tuple[str, ...] | None
) -> Config:
    """The Config of one backend from the options (``sides`` None: as given,
    else this backend's share of them)."""
    base = Config(runs=args.runs, noise_k=args.noise_k, **(pg if backend == "postgres" else {}))
    cfg = quick(base) if args.quick else base
    changes: dict[str, Any] = {}
    for name in (
        "scenarios",
        "sides",
        "profiles",
        "long_profiles",
        "e2e_profiles",
        "stress_seconds",
        "stress_workers",
        "concurrent_workers",
        "concurrent_total",
        "single_puts",
        "e2e_jobs",
        "e2e_threads",
        "seed_threads",
        "frames_ops",
        "frames_backlog",
        "cell_timeout",
    ):
        value = getattr(args, name, None)
        if value is not None:
            changes[name] = value
    if sides is not None:
        changes["sides"] = sides
    if "sides" in changes:  # sides asked for by name run every scenario, --quick or not
        changes["e2e_only_sides"] = ()
    if backend == "sqlite":  # (PostgreSQL has no write gate to log)
        changes["grant_log"] = bool(getattr(args, "grant_log", False))
    if cfg.backend == "postgres" and getattr(args, "cell_timeout", None) is None and not args.quick:
        # procrastinate's worker runs a few hundred jobs/s here: 40,000 jobs
        # take minutes, not the 60 s that bound every SQLite cell.
        changes["cell_timeout"] = PG_CELL_TIMEOUT
    if args.seconds is not None:
        changes["mixed_seconds"] = args.seconds
        changes["long_seconds"] = args.seconds
    if args.long_seconds is not None:
        changes["long_seconds"] = args.long_seconds
    # On PostgreSQL, Config turns SQLite's PRAGMA profiles into its one configuration.
    return Config(**{**asdict(cfg), **changes})


def scale_config(args: argparse.Namespace, backends: tuple[str, ...]) -> ScaleConfig:
    """``--scale``: the scale curve's configuration (the seed's options do not apply)."""
    for name in ("scenarios", "sides", "profiles", "seconds", "long_seconds"):
        if getattr(args, name, None) is not None:
            flag = "--" + name.replace("_", "-")
            raise ValueError(f"{flag} is for the seed's scenarios, not with --scale")
    if getattr(args, "grant_log", False):
        raise ValueError("--grant-log is for the seed's scenarios, not with --scale")
    if getattr(args, "runs", 1) != 1:
        raise ValueError("--scale runs once (a backlog of millions is built once); drop --runs")
    pg = _backend_args(args, backends)
    quick_max = 100_000 if getattr(args, "quick", False) else 10_000_000
    low = getattr(args, "scale_min", None) or 10_000
    return ScaleConfig(
        backends=backends,
        scale_min=low,
        scale_max=getattr(args, "scale_max", None) or max(quick_max, low),
        budget_s=getattr(args, "scale_budget", None),
        pg_url=pg.get("pg_url"),
        pg_fsync=pg.get("pg_fsync", True),
    )


def config_from_args(args: argparse.Namespace) -> Config | Combined | ScaleConfig:
    """A Config for one backend; for several a Combined of one per backend;
    with ``--scale`` the scale curve's."""
    backends = _backends_of(args)
    if getattr(args, "scale", False):
        return scale_config(args, backends)
    for name in ("scale_max", "scale_min", "scale_budget"):
        if getattr(args, name, None) is not None:
            raise ValueError(f"--{name.replace('_', '-')} goes with --scale")
    if getattr(args, "grant_log", False) and "sqlite" not in backends:
        raise ValueError(
            "--grant-log logs the grants of litegate's write gate on SQLite; PostgreSQL has "
            "no such gate: add sqlite to --backend, or drop --grant-log"
        )
    pg = _backend_args(args, backends)
    sides = _sides_for(backends, getattr(args, "sides", None)) if len(backends) > 1 else {}
    # (one backend: --sides go to Config as given, which names any side it lacks)
    parts = tuple(_part(args, b, pg, sides.get(b)) for b in backends)
    missing = missing_peers(tuple(dict.fromkeys(s for c in parts for s in c.sides)))
    if missing:
        modules = ", ".join(m for s in missing for m in peer_modules(s))
        listed = dict.fromkeys(s for c in parts for s in c.sides)
        others = ",".join(s for s in listed if s not in missing) or "litegate"
        raise ValueError(
            f"the {', '.join(missing)} side(s) need {modules}, which litegate-lab depends on. "
            f"Install it with:  {INSTALL}  (or leave them out: --sides {others})"
        )
    return parts[0] if len(parts) == 1 else Combined(parts)
