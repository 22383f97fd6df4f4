"""``profile``, ``pragmas``, ``timeout`` and ``fair``: from the URL's query
string or ``connect_args``, checked, and turned into what a new connection
applies."""

from __future__ import annotations

import os
import sqlite3
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import _profiles
from .._errors import ConfigError as _CoreConfigError
from .._fair import BOUNDED, Budget
from .._settings import budget_of, resolve_settings
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
                "sqlite+litegate: ?pragmas= must be NAME=VALUE items separated by commas, "
                f"got {part!r} (for example ?pragmas=synchronous=FULL,cache_size=-40000)"
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
        # sqlite3's timeout= sets the connections' busy timeout
        settings = resolve_settings(profile, pragmas, timeout, busy_from_timeout=True)
    except _CoreConfigError as exc:
        raise ConfigError(f"sqlite+litegate: {exc}") from None
    return Settings(settings.pragmas, settings.timeout, settings.every, budget)


# What a URL's query string may hold: litegate's settings, then the sqlite3
# arguments SQLAlchemy's pysqlite dialect passes on (with their types). The
# rest, with uri=true, are SQLite's own URI parameters.
LITEGATE_KEYS = ("profile", "pragmas", "fair")
DRIVER_KEYS: dict[str, type] = {
    "timeout": float,
    "uri": bool,
    "check_same_thread": bool,
    "detect_types": int,
    "cached_statements": int,
}
_TRUE = ("true", "yes", "on", "y", "t", "1")
_FALSE = ("false", "no", "off", "n", "f", "0")
# SQLite URI parameters that turn off what several processes on one file need.
_UNSAFE_URI = {
    "nolock": "it turns SQLite's locks off, and other processes would read and write the "
    "file without them (a corrupt file)",
    "immutable": "it tells SQLite nobody changes the file, and litegate's writers do",
}


def check_url(query: Mapping[str, str | tuple[str, ...]]) -> None:
    """Every value of a ``sqlite+litegate`` URL's query string, checked at
    ``create_engine``: :class:`ConfigError` saying what to write instead."""
    for key, value in query.items():
        if not isinstance(value, str):
            raise ConfigError(
                f"sqlite+litegate: ?{key}= is given {len(value)} times in the URL "
                f"({', '.join(map(repr, value))}); give it once"
            )
    uri = False
    for key, kind in DRIVER_KEYS.items():
        text = query.get(key)
        if not isinstance(text, str):
            continue
        if kind is bool:
            if text.strip().lower() not in _TRUE + _FALSE:
                raise ConfigError(f"sqlite+litegate: ?{key}= must be true or false, got {text!r}")
            if key == "uri":
                uri = text.strip().lower() in _TRUE
            continue
        try:
            number = kind(text)
        except ValueError:
            example = "?timeout=10" if key == "timeout" else f"?{key}=0"
            what = "a number of seconds" if kind is float else "a whole number"
            raise ConfigError(
                f"sqlite+litegate: ?{key}= must be {what}, got {text!r} (for example {example})"
            ) from None
        if kind is int and number < 0:
            raise ConfigError(f"sqlite+litegate: ?{key}= must be 0 or more, got {text!r}")
    if "isolation_level" in query:
        raise ConfigError(
            "sqlite+litegate: ?isolation_level= in the URL is not applied (SQLAlchemy's pysqlite "
            "dialect passes it to nothing); pass create_engine(url, isolation_level=...) or "
            "use execution_options(isolation_level=...)"
        )
    known = (*LITEGATE_KEYS, *DRIVER_KEYS)
    others = [k for k in query if k not in known]
    if others and not uri:
        raise ConfigError(
            f"sqlite+litegate: the URL's {', '.join(map(repr, others))} is not a setting; "
            f"use {', '.join(known)}, or uri=true for SQLite's own URI parameters"
        )
    for key in others:
        why = _UNSAFE_URI.get(key.lower())
        if why is not None and str(query[key]).strip().lower() not in _FALSE:
            raise ConfigError(f"sqlite+litegate: ?{key}= is refused: {why}; remove it")
        if key.lower() == "vfs" and query[key] != "unix":
            raise ConfigError(
                f"sqlite+litegate: ?vfs={query[key]} is refused: litegate's processes share the "
                "file through the default unix VFS's locks; remove it"
            )


def check_pragma_names(pragmas: Mapping[str, object]) -> None:
    """Each PRAGMA SQLite must know as a setting, as a connection finds out
    when it opens the file: asked now of a throwaway database file (an
    in-memory one has no ``mmap_size``)."""
    if not pragmas:
        return
    with tempfile.TemporaryDirectory(prefix="litegate-pragmas-") as folder:
        probe = sqlite3.connect(os.path.join(folder, "probe.db"))
        try:
            for name in pragmas:
                if probe.execute(f"PRAGMA {name}").fetchone() is None:
                    raise ConfigError(
                        f"sqlite+litegate: SQLite does not know PRAGMA {name!r} (or it is not a "
                        "setting); check the spelling"
                    )
        finally:
            probe.close()
