"""Engine variants: ``litegate+NAME=VALUE[+NAME=VALUE…]`` is the ``litegate``
configuration with PRAGMAs that override its profile's, so that a candidate
for the default profile is measured in the same run as the default
(``--engines tuned,litegate,litegate+mmap_size=134217728``). ``fair`` is
not a PRAGMA but the write gate's policy (``litegate+fair=strict``:
litegate.django's ``OPTIONS["fair"]``, sqlite+litegate's ``fair``). Each
server process reads the variant back from its engine name;
nothing else changes.
"""

from __future__ import annotations

import re

# The configuration variants apply to: the others have no profile to override.
BASE = "litegate"
_ITEM = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(-?[A-Za-z0-9_.]+)$")


def split(engine: str) -> tuple[str, dict[str, str]]:
    """``"litegate+mmap_size=134217728"`` -> ``("litegate", {"mmap_size":
    "134217728"})``; a plain name -> ``(name, {})``. ValueError says what a
    variant looks like."""
    base, plus, rest = engine.partition("+")
    if not plus:
        return engine, {}
    if base != BASE:
        raise ValueError(
            f"engine {engine!r}: only {BASE} takes PRAGMA overrides "
            f"({BASE}+NAME=VALUE, e.g. {BASE}+mmap_size=134217728)"
        )
    pragmas: dict[str, str] = {}
    for item in rest.split("+"):
        m = _ITEM.match(item)
        if m is None:
            raise ValueError(
                f"engine {engine!r}: {item!r} is not NAME=VALUE (a PRAGMA name and a number or "
                f"a bare word, e.g. {BASE}+mmap_size=134217728+cache_size=2000)"
            )
        pragmas[m.group(1)] = m.group(2)
    return base, pragmas


# The one variant item that is litegate's setting, not a PRAGMA: the write
# gate's policy (litegate.django's OPTIONS["fair"], sqlite+litegate's fair
# connect argument), e.g. litegate+fair=strict.
FAIR: dict[str, bool | str] = {"bounded": True, "strict": "strict", "unfair": False}


def settings(engine: str) -> tuple[str, dict[str, str], bool | str | None]:
    """:func:`split`, with ``fair`` taken out of the PRAGMAs: ``(base,
    pragmas, fair)``, ``fair`` None when the variant does not set it."""
    name, pragmas = split(engine)
    if "fair" not in pragmas:
        return name, pragmas, None
    value = pragmas.pop("fair")
    if value not in FAIR:
        raise ValueError(
            f"engine {engine!r}: fair={value} is not a policy; pick from {', '.join(FAIR)}"
        )
    return name, pragmas, FAIR[value]


def base(engine: str) -> str:
    """The configuration an engine name is (a variant of)."""
    return split(engine)[0]
