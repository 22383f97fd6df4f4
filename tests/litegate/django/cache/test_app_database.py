"""OPTIONS["database"]: the cache's table in an app database (here the
litegate.django test database), joining the thread's atomic() block."""

from __future__ import annotations

import itertools
import sqlite3

import pytest
from django.db import connection, transaction

from litegate.django import read_only
from litegate.django.cache import LitegateCache

_N = itertools.count()


@pytest.fixture
def cache() -> LitegateCache:
    """A fresh table per test in the app database."""
    return LitegateCache("", {"OPTIONS": {"database": "default", "table": f"c{next(_N)}"}})


def test_the_table_lives_in_the_app_database(cache: LitegateCache) -> None:
    cache.set("k", "v")
    assert cache.get("k") == "v"
    st = cache.stats()
    assert st["path"] == str(connection.settings_dict["NAME"])
    with sqlite3.connect(st["path"]) as conn:
        assert conn.execute(f'SELECT count(*) FROM "{st["table"]}"').fetchone() == (1,)
    conn.close()


def test_inside_atomic_the_cache_joins_the_transaction(cache: LitegateCache) -> None:
    cache.set("kept", 0)
    seen = []

    def fail_inside() -> None:
        with transaction.atomic():
            cache.set("k", "in the transaction")
            seen.append(cache.get("k"))  # its own write, not yet committed
            seen.append(cache.incr("kept"))
            seen.append(cache.add("a", 1))
            raise RuntimeError("roll back")

    with pytest.raises(RuntimeError):
        fail_inside()
    assert seen == ["in the transaction", 1, True]
    assert cache.get("k") is None  # rolled back with it
    assert cache.get("kept") == 0
    assert cache.get("a") is None
    with transaction.atomic():
        cache.set("k", "committed")
    assert cache.get("k") == "committed"


def test_a_read_only_block_writes_through_litegate(cache: LitegateCache) -> None:
    with read_only():
        cache.set("k", "v")  # no gate held by this thread: litegate's own writer
        assert cache.get("k") == "v"
    assert cache.get("k") == "v"
