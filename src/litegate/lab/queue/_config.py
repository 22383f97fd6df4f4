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
from ._sides import PEER_MODULES, SIDES

SCENARIOS = ("single", "concurrent", "mixed", "stress", "long", "e2e")
PROFILES = ("conservative", "balanced", "aggressive")
E2E_MODES = ("batched", "one-job")
INSTALL = "pip install 'litegate[queue]'"


@dataclass(frozen=True)
class Config:
    scenarios: tuple[str, ...] = SCENARIOS
    sides: tuple[str, ...] = SIDES
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
    cell_timeout: float = 60.0  # every cell with a fixed amount of work stops after this
    start_method: str = "spawn"
    noise_k: float = _stats.NOISE_K

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Config:
        """Back from ``to_json`` (lists become tuples again)."""
        fields: dict[str, Any] = {
            k: tuple(v) if isinstance(v, list) else v for k, v in data.items()
        }
        return cls(**fields)


def quick(cfg: Config) -> Config:
    """The ``--quick`` sizes: one profile, short runs (~90 s in all)."""
    return Config(
        scenarios=cfg.scenarios,
        sides=cfg.sides,
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
        cell_timeout=30.0,
        noise_k=cfg.noise_k,
    )


def missing_peers(sides: Sequence[str]) -> list[str]:
    """The chosen sides whose third-party module this Python lacks."""
    return [
        s for s in sides if s in PEER_MODULES and importlib.util.find_spec(PEER_MODULES[s]) is None
    ]


def _ints(text: str) -> tuple[int, ...]:
    try:
        items = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"comma-separated whole numbers, got {text!r}") from None
    if not items or any(n < 1 for n in items):
        raise argparse.ArgumentTypeError(f"whole numbers of at least 1, got {text!r}")
    return items


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("queue options")
    g.add_argument(
        "--scenarios",
        type=_csv(SCENARIOS),
        default=None,
        metavar="LIST",
        help=f"which scenarios (default all: {','.join(SCENARIOS)})",
    )
    g.add_argument(
        "--sides",
        type=_csv(SIDES),
        default=None,
        metavar="LIST",
        help=f"which queues (default all: {','.join(SIDES)})",
    )
    g.add_argument(
        "--profiles",
        type=_csv(PROFILES),
        default=None,
        metavar="LIST",
        help="PRAGMA profiles for single, concurrent, mixed and stress "
        "(default conservative,balanced,aggressive; --quick balanced)",
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
        type=_ints,
        default=None,
        metavar="LIST",
        help="the stress ramp (default 1,2,4,8,16; quick 1,4,16)",
    )
    g.add_argument(
        "--concurrent-workers",
        type=_ints,
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
        "--cell-timeout",
        type=_seconds,
        default=None,
        metavar="S",
        help="a cell with a fixed amount of work stops after this long (default 60; quick 30)",
    )


def config_from_args(args: argparse.Namespace) -> Config:
    base = Config(runs=args.runs, noise_k=args.noise_k)
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
        "cell_timeout",
    ):
        value = getattr(args, name, None)
        if value is not None:
            changes[name] = value
    if args.seconds is not None:
        changes["mixed_seconds"] = args.seconds
        changes["long_seconds"] = args.seconds
    if args.long_seconds is not None:
        changes["long_seconds"] = args.long_seconds
    cfg = Config(**{**asdict(cfg), **changes})
    missing = missing_peers(cfg.sides)
    if missing:
        modules = ", ".join(PEER_MODULES[s] for s in missing)
        others = ",".join(s for s in cfg.sides if s not in missing) or "litegate"
        raise ValueError(
            f"the {', '.join(missing)} side(s) need {modules} (the queue extra). "
            f"Install it with:  {INSTALL}  (or leave them out: --sides {others})"
        )
    return cfg
