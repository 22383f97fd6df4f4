"""A LitegateCache on a fresh file per test (closed after it)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from litegate.django.cache import LitegateCache
from litegate.django.cache._store import forget_store

MakeCache = Callable[..., LitegateCache]


@pytest.fixture(autouse=True, scope="module")
def _no_store_outlives_its_module() -> Iterator[None]:
    """Close every cache file a module's tests opened and left open (a
    forked child's test, the app database's): their sweepers would go on
    writing, in the test process, through every later test (the chaos soak
    logged their grants among its own)."""
    from litegate.django.cache import _store

    before = set(_store._STORES)
    yield
    for path in set(_store._STORES) - before:
        forget_store(path)


@pytest.fixture
def make_cache(tmp_path: Path) -> Iterator[MakeCache]:
    """``make_cache(**OPTIONS)``: a cache on ``tmp_path/cache.sqlite3``
    (``location=`` for another file, ``params=`` for Django's other keys)."""
    paths: set[str] = set()

    def make(location: str | None = None, params: dict[str, Any] | None = None,
             **options: Any) -> LitegateCache:  # fmt: skip
        path = location if location is not None else str(tmp_path / "cache.sqlite3")
        if path:
            paths.add(path)
        return LitegateCache(path, {**(params or {}), "OPTIONS": options})

    yield make
    for p in paths:
        forget_store(p)


@pytest.fixture
def by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    """No sweeper thread: the test sweeps with cache.sweep(), and counts are exact."""
    from litegate.django.cache import _store

    monkeypatch.setattr(_store, "BACKGROUND", False)


@pytest.fixture
def cache(make_cache: MakeCache) -> LitegateCache:
    return make_cache()
