"""``profile``, ``pragmas``, ``timeout`` and ``fair``: from the URL's query
string or ``connect_args``, checked, and turned into what a new connection
applies."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import _profiles
from .._database import budget_of
from .._errors import ConfigError as _CoreConfigError
from .._fair import BOUNDED, Budget
from ._errors import ConfigError

# litegate's "default" profile minus foreign_keys=ON: SQLAlchemy's stock
# driver leaves SQLite's foreign keys unenforced, and changing the URL should
# not start enforcing them (?profile=default, or pragmas foreign_keys=ON, does).
DEFAULT_PROFILE = "balanced"


@dataclass(frozen=True)
class Settings:
    pragmas: dict[str, _profiles.PragmaValue]  # applied to every new connection
    timeout: float  # seconds: the gate wait, and sqlite3's busy timeout
    every: int  # commits between background checkpoints
    budget: Budget = BOUNDED  # the write gate's policy (fair=)


def parse_pragmas(text: str) -> dict[str, str | None]:
    """``"synchronous=FULL,cache_size=-40000,mmap_size="`` (from a URL) ->
    overrides; an empty value removes the profile's PRAGMA."""
    out: dict[str, str | None] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        if not sep or not name.strip():
            raise ConfigError(
                f"pragmas: expected NAME=VALUE items separated by commas, got {part!r} "
                "(for example ?pragmas=synchronous=FULL,cache_size=-40000)"
            )
        out[name.strip()] = value.strip() or None
    return out


# ?fair= in a URL is text; connect_args take what connect(fair=...) takes
_FAIR_WORDS: dict[str, bool | str] = {"true": True, "strict": "strict", "false": False}


def resolve(profile: Any, pragmas: Any, timeout: Any, fair: Any = True) -> Settings:
    """The connection settings, or :class:`ConfigError` saying what to fix."""
    if isinstance(fair, str) and fair.lower() in _FAIR_WORDS:
        fair = _FAIR_WORDS[fair.lower()]
    try:
        budget = budget_of(fair)
    except _CoreConfigError as exc:
        raise ConfigError(
            f"sqlite+litegate: {exc} (in a URL: ?fair=true, ?fair=strict or ?fair=false)"
        ) from None
    if pragmas is not None and not isinstance(pragmas, Mapping):
        raise ConfigError(
            f"pragmas must be a mapping such as {{'synchronous': 'FULL'}}, got {pragmas!r}"
        )
    try:
        resolved = _profiles.resolve(profile, pragmas)
    except _CoreConfigError as exc:
        raise ConfigError(f"sqlite+litegate: {exc}") from None
    if timeout is None:
        timeout = int(resolved.get("busy_timeout", 5000)) / 1000.0
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not timeout > 0
        or math.isnan(timeout)
    ):
        raise ConfigError(
            f"sqlite+litegate: timeout must be a number of seconds greater than zero, got "
            f"{timeout!r}"
        )
    # Checkpoints run on litegate's background thread, not inside COMMIT.
    every = int(resolved.get("wal_autocheckpoint", 1000)) or 1000
    resolved["wal_autocheckpoint"] = 0
    resolved.setdefault("journal_size_limit", 8 * every * 4096)
    resolved.pop("busy_timeout", None)  # sqlite3's timeout= sets it
    return Settings(resolved, float(timeout), every, budget)
