"""The four engine configurations of the web lab (no environment read here:
``settings`` picks one)."""

from __future__ import annotations

from typing import Any

from .._variant import settings

ENGINES = ("naive", "wal", "tuned", "litegate")


_TUNED_PRAGMAS = (
    "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; "
    "PRAGMA mmap_size = 134217728; PRAGMA journal_size_limit = 67108864; "
    "PRAGMA cache_size = 2000"
)


def database(engine: str, name: str) -> dict[str, Any]:
    """The DATABASES["default"] of one engine configuration (or a variant:
    ``litegate+NAME=VALUE``, see ``_variant``)."""
    engine, pragmas, fair = settings(engine)
    if engine in ("naive", "wal"):  # wal: the file is put in WAL mode (`litegate web serve`)
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": name}
    if engine == "tuned":
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": name,
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": 5,
                "init_command": _TUNED_PRAGMAS,
            },
            "CONN_MAX_AGE": 600,
            "CONN_HEALTH_CHECKS": True,
        }
    return {
        "ENGINE": "litegate.django",
        "NAME": name,
        "OPTIONS": {
            "timeout": 5,
            **({"pragmas": pragmas} if pragmas else {}),
            **({"fair": fair} if fair is not None else {}),
        },
        "CONN_MAX_AGE": 600,
        "CONN_HEALTH_CHECKS": True,
    }


CACHES = ("litegate", "database", "filebased", "redis")


def cache_settings(cache: str, location: str) -> dict[str, Any]:
    """CACHES["default"] for ``bench web --cache``: one of Django's backends
    as bench cache sets it up; "" (no cache): Django's default, unused."""
    if not cache:
        return {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    if cache == "litegate":
        return {"BACKEND": "litegate.django.cache.LitegateCache", "LOCATION": location}
    if cache == "database":  # in the app's database (its table made by `litegate web serve`)
        return {"BACKEND": "django.core.cache.backends.db.DatabaseCache",
                "LOCATION": "web_cache", "OPTIONS": {"MAX_ENTRIES": 10**6}}  # fmt: skip
    if cache == "filebased":
        return {"BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
                "LOCATION": location, "OPTIONS": {"MAX_ENTRIES": 10**6}}  # fmt: skip
    if cache == "redis":
        return {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": location}
    raise RuntimeError(f"LITEGATE_WEB_CACHE must be one of {CACHES}, got {cache!r}")
