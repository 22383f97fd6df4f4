"""PRAGMA profiles and how they are applied and read back."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Mapping

from ._errors import ConfigError

PragmaValue = int | float | str | bool

# Exactly the three configurations of the "SQLite Queue Concurrency
# Benchmark Report" (its configurations A, B and C), so the lab's figures
# compare with the report's.
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
"""The PRAGMA profiles by name, for ``connect(profile=...)``: ``conservative``,
``balanced`` and ``aggressive``, and litegate's ``default`` (``balanced`` plus
``foreign_keys=ON``)."""

# litegate's own default. Until `litegate bench micro` (A/B of profiles) has
# measured a better choice on real workloads, it is "balanced" plus
# foreign_keys, which that report's production section also turns on.
PROFILES["default"] = {**PROFILES["balanced"], "foreign_keys": "ON"}

# Only the writer may switch the journal mode; read-only connections skip it.
WRITER_ONLY = frozenset({"journal_mode"})

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_VALUE = re.compile(r"^-?[A-Za-z0-9_.]+$")


# -- what litegate accepts per PRAGMA ------------------------------------------
# Each rule turns a user's value into the value to set and the value SQLite
# reads back (None: not compared, e.g. a limit SQLite may cap), or raises
# ConfigError saying what is allowed. PRAGMAs outside the table are passed
# through as before (a number or a bare word), and SQLite must know them.


class _Rule:
    __slots__ = ("check", "help")

    def __init__(self, check: Callable[[str, PragmaValue], tuple[PragmaValue, object]], help: str):
        self.check = check
        self.help = help


def _whole(name: str, value: PragmaValue) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value.strip()):
        return int(value)
    raise ConfigError(f"PRAGMA {name} takes a whole number, got {value!r}")


def _int_rule(lo: int | None = None, hi: int | None = None, compare: bool = True) -> _Rule:
    def check(name: str, value: PragmaValue) -> tuple[PragmaValue, object]:
        n = _whole(name, value)
        if (lo is not None and n < lo) or (hi is not None and n > hi):
            raise ConfigError(f"PRAGMA {name} must be {span}, got {value!r}")
        return n, (n if compare else None)

    if lo is not None and hi is not None:
        span = f"between {lo} and {hi}"
    elif lo is not None:
        span = f">= {lo}"
    else:
        span = "a whole number"
    return _Rule(check, f"whole number, {span}")


def _enum_rule(*names: str, numbers: bool = True, read_back: bool = True) -> _Rule:
    """One of ``names`` (or its position as a number): read back as that number."""

    def check(name: str, value: PragmaValue) -> tuple[PragmaValue, object]:
        if numbers and not isinstance(value, bool) and isinstance(value, int):
            if 0 <= value < len(names):
                return value, (value if read_back else None)
        elif isinstance(value, str) and value.upper() in names:
            return value.upper(), (names.index(value.upper()) if read_back else None)
        elif isinstance(value, str) and numbers and value.strip().isdigit():
            return check(name, int(value))
        allowed = ", ".join(names) + (f" (or 0-{len(names) - 1})" if numbers else "")
        raise ConfigError(f"PRAGMA {name} must be one of {allowed}, got {value!r}")

    return _Rule(check, "one of " + ", ".join(names))


_TRUE = ("1", "ON", "TRUE", "YES")
_FALSE = ("0", "OFF", "FALSE", "NO")


def _flag(name: str, value: PragmaValue) -> int:
    if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
        return int(value)
    word = str(value).strip().upper() if isinstance(value, (int, str)) else ""
    if word in _TRUE:
        return 1
    if word in _FALSE:
        return 0
    raise ConfigError(
        f"PRAGMA {name} is on or off: use True/False, 1/0 or 'ON'/'OFF', got {value!r}"
    )


def _bool_check(name: str, value: PragmaValue) -> tuple[PragmaValue, object]:
    n = _flag(name, value)
    return n, n


def _refuse(why: str) -> _Rule:
    def check(name: str, value: PragmaValue) -> tuple[PragmaValue, object]:
        raise ConfigError(f"PRAGMA {name} = {value!r}: {why}")

    return _Rule(check, "refused")


def _only(allowed: str, read_back: str, why: str) -> _Rule:
    def check(name: str, value: PragmaValue) -> tuple[PragmaValue, object]:
        if isinstance(value, str) and value.strip().upper() == allowed:
            return allowed, read_back
        raise ConfigError(f"PRAGMA {name} = {value!r}: {why}")

    return _Rule(check, f"only {allowed}")


def _page_size(name: str, value: PragmaValue) -> tuple[PragmaValue, object]:
    n = _whole(name, value)
    if n < 512 or n > 65536 or n & (n - 1):
        raise ConfigError(
            f"PRAGMA page_size must be a power of two from 512 to 65536, got {value!r}"
        )
    return n, n


def _secure_delete(name: str, value: PragmaValue) -> tuple[PragmaValue, object]:
    if isinstance(value, str) and value.strip().upper() == "FAST":
        return "FAST", 2
    return _bool_check(name, value)


_BOOL = _Rule(_bool_check, "on or off")
_JOURNAL_WHY = (
    "litegate runs readers beside the writer, which needs WAL; other journal modes make "
    "writes fail with 'database is locked' while anyone reads. Leave journal_mode out (WAL "
    "is set for you); for a standalone copy in another mode use db.backup()"
)

PRAGMA_RULES: dict[str, _Rule] = {
    "journal_mode": _only("WAL", "wal", _JOURNAL_WHY),
    "locking_mode": _only(
        "NORMAL",
        "normal",
        "EXCLUSIVE locking keeps every other connection (litegate's readers, other "
        "processes) out of the file; litegate's gate already serialises writers. Leave "
        "locking_mode out",
    ),
    "query_only": _refuse(
        "the writer must write; litegate's read connections are query-only already. For "
        "reads use db.query() or db.read()"
    ),
    "writable_schema": _refuse("it can corrupt the database; litegate does not set it"),
    "schema_version": _refuse(
        "writing the schema cookie can corrupt the database; litegate does not set it"
    ),
    "temp_store_directory": _refuse(
        "it is deprecated and process-wide; set the SQLITE_TMPDIR environment variable instead"
    ),
    "hard_heap_limit": _refuse(
        "it is process-wide, and once SQLite's memory (every connection's page cache in this "
        "process, litegate's pool included) reaches it, every statement on every connection "
        "fails with MemoryError. Set soft_heap_limit, which SQLite meets by shrinking its "
        "caches, or a smaller cache_size"
    ),
    "soft_heap_limit": _int_rule(0, compare=False),
    "default_cache_size": _int_rule(-(2**31), 2**31 - 1, compare=False),  # deprecated
    "synchronous": _enum_rule("OFF", "NORMAL", "FULL", "EXTRA"),
    "temp_store": _enum_rule("DEFAULT", "FILE", "MEMORY"),
    "auto_vacuum": _enum_rule("NONE", "FULL", "INCREMENTAL", read_back=False),
    "busy_timeout": _int_rule(0, 2**31 - 1, compare=False),  # the writer's is set to 0
    "wal_autocheckpoint": _int_rule(0, 2**31 - 1),
    "cache_size": _int_rule(-(2**31), 2**31 - 1),
    "mmap_size": _int_rule(0, compare=False),  # SQLite caps it at its compile-time maximum
    "journal_size_limit": _int_rule(-1),
    "max_page_count": _int_rule(1, compare=False),  # never below the file's current size
    "threads": _int_rule(0, 64, compare=False),  # capped by SQLite's compile-time limit
    "analysis_limit": _int_rule(0, 2**31 - 1),
    "cache_spill": _int_rule(0, 2**31 - 1, compare=False),
    "page_size": _Rule(_page_size, "a power of two from 512 to 65536"),
    "secure_delete": _Rule(_secure_delete, "on, off or FAST"),
    **{
        name: _BOOL
        for name in (
            "foreign_keys",
            "recursive_triggers",
            "automatic_index",
            "cell_size_check",
            "checkpoint_fullfsync",
            "fullfsync",
            "ignore_check_constraints",
            "reverse_unordered_selects",
            "trusted_schema",
            "defer_foreign_keys",
            "legacy_alter_table",
            "read_uncommitted",
        )
    },
}

# PRAGMAs that, changed on the write connection, break what litegate
# guarantees: refused on db.execute() and on the writer's connection.
GUARDED = frozenset(
    {
        "journal_mode",
        "locking_mode",
        "query_only",
        "writable_schema",
        "schema_version",
        "hard_heap_limit",
    }
)


def guarded_change(name: str, value: object) -> str | None:
    """Why setting PRAGMA ``name`` to ``value`` on the writer is refused, or
    None if it is allowed (``value`` as SQLite hands it to an authorizer)."""
    name = name.lower()
    if name not in GUARDED or value is None:
        return None
    text = str(value).strip().strip("'\"").upper()
    if name == "journal_mode" and text == "WAL":
        return None
    if name == "locking_mode" and text == "NORMAL":
        return None
    if name == "query_only" and text in _FALSE:
        return None
    if name == "writable_schema" and text in _FALSE:
        return None
    try:
        PRAGMA_RULES[name].check(name, value)  # type: ignore[arg-type]
    except ConfigError as exc:
        return str(exc)
    return None  # pragma: no cover - every refused value raised above


def resolve(
    profile: str, overrides: Mapping[str, PragmaValue | None] | None
) -> dict[str, PragmaValue]:
    """The PRAGMAs for ``profile`` with ``overrides`` applied (None removes
    one), each checked against :data:`PRAGMA_RULES`."""
    try:
        pragmas = dict(PROFILES[profile])
    except (KeyError, TypeError):
        names = ", ".join(PROFILES)
        raise ConfigError(f"unknown profile {profile!r}; pick one of {names}") from None
    if overrides is not None and not isinstance(overrides, Mapping):
        raise ConfigError(
            f"pragmas must be a mapping of PRAGMA name to value, e.g. "
            f"{{'synchronous': 'FULL'}}, got {type(overrides).__name__}"
        )
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
        rule = PRAGMA_RULES.get(key)
        pragmas[key] = value if rule is None else rule.check(key, value)[0]
    return pragmas


def _expected(name: str, value: PragmaValue) -> object:
    rule = PRAGMA_RULES.get(name)
    if rule is None:
        return None
    try:
        return rule.check(name, value)[1]
    except ConfigError:
        return None  # litegate's own internal values (query_only on readers)


def apply(
    conn: sqlite3.Connection, pragmas: Mapping[str, PragmaValue], *, writer: bool
) -> dict[str, object]:
    """Set ``pragmas`` on ``conn`` and return what SQLite reports is in force.
    A value SQLite silently ignored (a page size an existing WAL file cannot
    take, a limit below the file's size) is a ConfigError."""
    in_force: dict[str, object] = {}
    # page_size first: it can change only before the file is in WAL mode.
    order = sorted(pragmas, key=lambda n: n != "page_size")
    for name in order:
        if name in WRITER_ONLY and not writer:
            continue
        conn.execute(f"PRAGMA {name} = {pragmas[name]}")
    for name in order:
        row = conn.execute(f"PRAGMA {name}").fetchone()
        if row is None:
            raise ConfigError(
                f"SQLite does not know PRAGMA {name!r} (or it is not a setting); check the spelling"
            )
        in_force[name] = row[0]
        want = _expected(name, pragmas[name])
        if want is not None and writer and in_force[name] != want:
            hint = (
                "; the page size of an existing WAL database cannot change: leave page_size out"
                if name == "page_size"
                else ""
            )
            raise ConfigError(
                f"SQLite did not take PRAGMA {name} = {pragmas[name]} (it reads back "
                f"{in_force[name]!r}){hint}"
            )
    return in_force
