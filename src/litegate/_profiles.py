"""PRAGMA profiles and how they are applied and read back."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping

from ._errors import ConfigError

PragmaValue = int | float | str | bool

# Exactly the three configurations of seed 004 ("SQLite Queue Concurrency
# Benchmark Report", Configurations A, B and C).
PROFILES: dict[str, dict[str, PragmaValue]] = {
    "conservative": {
        "journal_mode": "WAL",
        "synchronous": "FULL",
        "busy_timeout": 10000,
        "wal_autocheckpoint": 500,
        "cache_size": -2000,
    },
    "balanced": {
        "journal_mode": "WAL",
        "synchronous": "NORMAL",
        "busy_timeout": 5000,
        "wal_autocheckpoint": 1000,
        "cache_size": -20000,
        "temp_store": "MEMORY",
    },
    "aggressive": {
        "journal_mode": "WAL",
        "synchronous": "NORMAL",
        "busy_timeout": 2000,
        "wal_autocheckpoint": 5000,
        "cache_size": -20000,
        "mmap_size": 134217728,
    },
}
# litegate's own default. Until `litegate bench micro` (A/B of profiles) has
# measured a better choice on real workloads, it is "balanced" plus
# foreign_keys, which seed 004's production section also turns on.
PROFILES["default"] = {**PROFILES["balanced"], "foreign_keys": "ON"}

# Only the writer may switch the journal mode; read-only connections skip it.
WRITER_ONLY = frozenset({"journal_mode"})

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_VALUE = re.compile(r"^-?[A-Za-z0-9_.]+$")


def resolve(
    profile: str, overrides: Mapping[str, PragmaValue | None] | None
) -> dict[str, PragmaValue]:
    """The PRAGMAs for ``profile`` with ``overrides`` applied (None removes one)."""
    try:
        pragmas = dict(PROFILES[profile])
    except (KeyError, TypeError):
        names = ", ".join(PROFILES)
        raise ConfigError(f"unknown profile {profile!r}; pick one of {names}") from None
    for name, value in (overrides or {}).items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigError(f"bad PRAGMA name {name!r}: use a bare name such as 'cache_size'")
        key = name.lower()
        if value is None:
            pragmas.pop(key, None)
            continue
        if isinstance(value, bool):
            value = int(value)
        if not isinstance(value, (int, float, str)) or not _VALUE.match(str(value)):
            raise ConfigError(
                f"bad value {value!r} for PRAGMA {name}: use a number or a bare word "
                "such as 'NORMAL'"
            )
        pragmas[key] = value
    return pragmas


def apply(
    conn: sqlite3.Connection, pragmas: Mapping[str, PragmaValue], *, writer: bool
) -> dict[str, object]:
    """Set ``pragmas`` on ``conn`` and return what SQLite reports is in force."""
    in_force: dict[str, object] = {}
    for name, value in pragmas.items():
        if name in WRITER_ONLY and not writer:
            continue
        conn.execute(f"PRAGMA {name} = {value}")
    for name in pragmas:
        row = conn.execute(f"PRAGMA {name}").fetchone()
        if row is None:
            raise ConfigError(
                f"SQLite does not know PRAGMA {name!r} (or it is not a setting); check the spelling"
            )
        in_force[name] = row[0]
    return in_force
