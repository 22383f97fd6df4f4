"""The settings every face resolves alike: the gate's policy (``fair=``), the
profile's PRAGMAs with the user's overrides, the timeout, and the checkpoint
policy. ``connect()``, Django's OPTIONS and SQLAlchemy's URL all go through
:func:`resolve_settings` and :func:`budget_of`, so a value means the same,
and is refused with the same words, whichever face it is given to; each face
only says where the value came from."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from . import _profiles
from ._errors import ConfigError
from ._fair import BOUNDED, STRICT, UNFAIR, Budget
from ._profiles import PragmaValue
from ._time import seconds

Fairness = bool | str | Budget


def budget_of(fair: object) -> Budget:
    """The gate's budget for ``connect(fair=...)``."""
    if isinstance(fair, Budget):
        k, t = fair
        if (
            isinstance(k, bool)
            or not isinstance(k, (int, float))
            or not isinstance(t, (int, float))
            or math.isnan(k)
            or math.isnan(t)
            or k < 0
            or t < 0
        ):
            raise ConfigError(
                f"fair=Bounded(overtakes, seconds) takes two numbers >= 0 (inf: no bound), "
                f"got {fair!r}"
            )
        return Budget(float(k), float(t))
    if fair is True:
        return BOUNDED
    if fair is False:
        return UNFAIR
    if fair == "strict":
        return STRICT
    raise ConfigError(
        f"fair must be True (bounded fairness), 'strict', False or "
        f"litegate.Bounded(overtakes, seconds), got {fair!r}"
    )


@dataclass(frozen=True)
class Settings:
    pragmas: dict[str, PragmaValue]
    """What each new connection applies."""
    timeout: float
    """Seconds a caller may wait for the write gate or a read connection (inf:
    no limit)."""
    every: int
    """Commits between background checkpoints."""


def resolve_settings(
    profile: str,
    overrides: Mapping[str, PragmaValue | None] | None,
    timeout: object,
    *,
    checkpoints: bool = True,
    busy_from_timeout: bool = False,
) -> Settings:
    """The PRAGMAs of ``profile`` with ``overrides``, the timeout (None: the
    profile's ``busy_timeout``) and the checkpoint policy. Raises ConfigError.

    With litegate's checkpointer (``checkpoints``), the profile's
    ``wal_autocheckpoint`` (in pages) becomes the number of commits between
    background checkpoints, and SQLite's own auto-checkpoint, which runs
    inside the COMMIT that crosses it, is turned off. ``busy_from_timeout``:
    the connections are opened with sqlite3's ``timeout=``, which sets
    ``busy_timeout`` itself, so the PRAGMA is left out."""
    pragmas = _profiles.resolve(profile, overrides)
    if timeout is None:
        busy_ms = int(pragmas.get("busy_timeout", 5000))
        if busy_ms <= 0:
            raise ConfigError(
                "busy_timeout=0 would make every wait for the gate or a read connection fail "
                "at once; give busy_timeout > 0 (milliseconds) or timeout= (seconds)"
            )
        timeout = busy_ms / 1000.0
    limit = seconds("timeout", timeout)
    every = int(pragmas.get("wal_autocheckpoint", 1000)) or 1000
    if checkpoints:
        pragmas["wal_autocheckpoint"] = 0
        pragmas.setdefault("journal_size_limit", 8 * every * 4096)
    if busy_from_timeout:
        pragmas.pop("busy_timeout", None)
    return Settings(pragmas, limit, every)
