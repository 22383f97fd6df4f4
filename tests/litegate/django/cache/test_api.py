"""Django's cache API on LitegateCache, call by call (Django's own suite runs
too: tests/django_suite/cache_run.py)."""

from __future__ import annotations

import asyncio
import os
import pickle
import sqlite3
import time
import warnings
from contextlib import closing
from typing import Any

import pytest
from django.core.cache import CacheKeyWarning

from litegate.django.cache import LitegateCache

from .conftest import MakeCache


def _raw(cache: LitegateCache, key: str) -> tuple[Any, ...] | None:
    """The stored row of a made key, read with plain sqlite3."""
    st = cache.stats()
    with sqlite3.connect(st["path"]) as conn:
        row = conn.execute(
            f'SELECT typeof(value), value, expires FROM "{st["table"]}" WHERE key = ?', (key,)
        ).fetchone()
    conn.close()
    out: tuple[Any, ...] | None = row
    return out


def test_set_get_delete_and_types(cache: LitegateCache) -> None:
    values = {"str": "s", "int": 42, "bool": True, "none": None, "float": 1.5,
              "bytes": b"\x00\xff", "list": [1, 2], "big": 2**80, "neg": -(2**63)}  # fmt: skip
    for k, v in values.items():
        cache.set(k, v)
    for k, v in values.items():
        got = cache.get(k, "missing")
        assert got == v
        assert type(got) is type(v)
    # 64-bit ints are SQLite integers (so incr is one statement); the rest pickled
    assert _raw(cache, ":1:int")[:2] == ("integer", 42)  # type: ignore[index]
    assert _raw(cache, ":1:bool")[0] == "blob"  # type: ignore[index]
    assert _raw(cache, ":1:big")[0] == "blob"  # type: ignore[index]
    assert cache.delete("str") is True
    assert cache.delete("str") is False
    assert cache.get("str", "gone") == "gone"


def test_add_is_insert_or_over_an_expired_entry(cache: LitegateCache) -> None:
    assert cache.add("k", 1) is True
    assert cache.add("k", 2) is False
    assert cache.get("k") == 1
    cache.set("old", "x", timeout=0.05)
    time.sleep(0.1)
    assert cache.add("old", "new") is True
    assert cache.get("old") == "new"


def test_incr_decr(cache: LitegateCache) -> None:
    cache.set("n", 41)
    assert cache.incr("n") == 42
    assert cache.decr("n", 10) == 32
    assert cache.incr("n", -2) == 30
    with pytest.raises(ValueError, match="Key 'nope' not found"):
        cache.incr("nope")
    cache.set("none", None)
    with pytest.raises(TypeError):
        cache.incr("none")
    cache.set("f", 1.5)  # pickled: added in Python, in one transaction
    assert cache.incr("f", 2) == 3.5
    cache.set("max", 2**63 - 1)  # would leave SQLite's 64-bit range: Python's int
    assert cache.incr("max") == 2**63
    assert cache.decr("max") == 2**63 - 1
    assert _raw(cache, ":1:max")[0] == "integer"  # type: ignore[index]
    cache.set("s", "a")
    assert cache.incr("s", "b") == "ab"  # type: ignore[arg-type]  # (Python's + as Django's)


def test_incr_keeps_the_expiry(cache: LitegateCache) -> None:
    cache.set("n", 1, timeout=100)
    before = _raw(cache, ":1:n")[2]  # type: ignore[index]
    cache.incr("n")
    assert _raw(cache, ":1:n")[2] == before  # type: ignore[index]
    cache.set("gone", 1, timeout=0.05)
    time.sleep(0.1)
    with pytest.raises(ValueError, match="not found"):
        cache.incr("gone")


def test_timeouts_none_zero_default_and_touch(make_cache: MakeCache) -> None:
    cache = make_cache(params={"TIMEOUT": 60})
    cache.set("forever", 1, timeout=None)
    cache.set("default", 1)
    cache.set("zero", 1, timeout=0)
    cache.set("negative", 1, timeout=-5)
    assert _raw(cache, ":1:forever")[2] is None  # type: ignore[index]
    assert 55 < _raw(cache, ":1:default")[2] - time.time() <= 60  # type: ignore[index]
    assert cache.get("zero") is None
    assert cache.get("negative") is None
    assert cache.has_key("zero") is False
    assert cache.touch("default", None) is True
    assert _raw(cache, ":1:default")[2] is None  # type: ignore[index]
    assert cache.touch("default", 0) is True
    assert cache.get("default") is None
    assert cache.touch("default") is False  # expired: nothing to touch
    assert cache.touch("missing") is False


@pytest.mark.usefixtures("by_hand")
def test_expired_reads_are_deleted_by_the_sweeper(cache: LitegateCache) -> None:
    cache.set_many({f"k{i}": i for i in range(5)}, timeout=0.05)
    cache.set("live", 1)
    time.sleep(0.1)
    assert cache.get("k0") is None
    assert cache.get_many(["k1", "k2", "live"]) == {"live": 1}
    assert cache.stats()["entries"] == 6  # expired, not yet deleted
    swept = cache.sweep()
    assert swept == {"expired": 5, "evicted": 0}  # 3 seen by reads, 2 by the scan
    assert cache.stats()["entries"] == 1


def test_get_many_set_many_delete_many(cache: LitegateCache) -> None:
    data = {f"k{i}": i for i in range(1200)}  # more than one statement's worth
    assert cache.set_many(data) == []
    assert cache.set_many({}) == []
    assert cache.get_many(data) == data
    assert cache.get_many(iter(["k1", "zz"])) == {"k1": 1}
    assert cache.get_many([]) == {}
    cache.delete_many([f"k{i}" for i in range(1000)])
    cache.delete_many([])
    assert len(cache.get_many(data)) == 200
    assert cache.stats()["entries"] == 200


def test_versions_prefix_and_key_function(make_cache: MakeCache) -> None:
    plain = make_cache()
    prefixed = make_cache(params={"KEY_PREFIX": "p"})
    v2 = make_cache(params={"VERSION": 2})
    custom = make_cache(params={"KEY_FUNCTION": lambda k, p, v: f"custom-{k}"})
    plain.set("k", "plain")
    prefixed.set("k", "prefixed")
    assert plain.get("k") == "plain"
    assert prefixed.get("k") == "prefixed"
    assert v2.get("k") is None
    assert v2.get("k", version=1) == "plain"
    assert plain.incr_version("k") == 2
    assert v2.get("k") == "plain"
    assert plain.get("k") is None
    assert v2.decr_version("k") == 1
    assert plain.get("k") == "plain"
    custom.set("k", "custom")
    assert _raw(custom, "custom-k")[1] == pickle.dumps("custom", pickle.HIGHEST_PROTOCOL)  # type: ignore[index]


def test_get_or_set_and_has_key(cache: LitegateCache) -> None:
    assert cache.get_or_set("k", lambda: 7) == 7
    assert cache.get_or_set("k", 8) == 7
    assert cache.has_key("k") is True
    assert "k" in cache
    assert cache.has_key("nope") is False


def test_clear_empties_and_counts_stay_exact(cache: LitegateCache) -> None:
    cache.set_many({f"k{i}": "v" * i for i in range(100)})
    stats = cache.stats()
    assert stats["entries"] == 100
    assert stats["bytes"] == sum(len(f":1:k{i}") + len(pickle.dumps("v" * i, 5)) + 32
                                 for i in range(100))  # fmt: skip
    cache.clear()
    assert cache.stats()["entries"] == 0
    assert cache.stats()["bytes"] == 0
    cache.set("after", 1)  # the delete trigger is back
    cache.delete("after")
    assert cache.stats()["entries"] == 0


def test_keys_django_warns_about(cache: LitegateCache) -> None:
    with pytest.warns(CacheKeyWarning, match="characters that will cause errors"):
        cache.set("has space", 1)
    with pytest.warns(CacheKeyWarning, match="longer than 250"):
        cache.set("k" * 300, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CacheKeyWarning)
        assert cache.get("has space") == 1
        assert cache.get("k" * 300) == 1


def test_async_api_runs_on_litegate_aio(cache: LitegateCache) -> None:
    async def main() -> None:
        await cache.aset("a", 1)
        assert await cache.aget("a") == 1
        assert await cache.aadd("a", 2) is False
        assert await cache.aadd("b", [1]) is True
        assert await cache.aincr("a", 4) == 5
        assert await cache.adecr("a") == 4
        cache.set("f", 0.5)
        assert await cache.aincr("f") == 1.5
        with pytest.raises(ValueError, match="not found"):
            await cache.aincr("nope")
        assert await cache.aset_many({"c": 3, "d": 4}) == []
        assert await cache.aget_many(["a", "b", "c", "x"]) == {"a": 4, "b": [1], "c": 3}
        assert await cache.ahas_key("d") is True
        assert await cache.atouch("d", None) is True
        assert await cache.adelete("d") is True
        assert await cache.adelete("d") is False
        await cache.adelete_many(["a", "b"])
        assert await cache.aget_or_set("g", 9) == 9
        assert await cache.aincr_version("g") == 2
        await cache.aclear()
        assert await cache.aget("c") is None
        await cache.aclose()

    asyncio.run(main())
    # the asyncio face of the same litegate Database: no sync_to_async thread
    store = cache._tbl.store  # type: ignore[union-attr]
    assert store._adb is not None
    assert store._adb.sync is store.db


def test_async_writes_share_group_commits(cache: LitegateCache) -> None:
    async def main() -> None:
        await asyncio.gather(*(cache.aset(f"k{i}", i) for i in range(200)))

    asyncio.run(main())
    assert cache.get_many([f"k{i}" for i in range(200)]) == {f"k{i}": i for i in range(200)}
    sizes = cache._tbl.store.db.stats()["writes"]["group_commit"]  # type: ignore[union-attr]
    assert sizes["max"] > 1  # several tasks' sets in one commit


def test_shutdown_closes_the_file_whole_and_the_next_use_reopens_it(
    make_cache: MakeCache, tmp_path: Any
) -> None:
    """shutdown() closes the file's connections in this process (the WAL
    checkpointed into the file, which then holds every entry on its own);
    this cache and any other of the process on the file open it again on
    their next use."""
    path = str(tmp_path / "cache.sqlite3")
    one, two = make_cache(), make_cache()
    one.set("a", 1)
    two.set("b", 2)
    one.shutdown()
    assert not os.path.exists(path + "-wal") or os.path.getsize(path + "-wal") == 0
    with closing(sqlite3.connect(path)) as plain:  # the file alone has both
        (n,) = plain.execute("SELECT count(*) FROM litegate_cache").fetchone()
    assert n == 2
    assert (two.get("a"), one.get("b")) == (1, 2)  # both reopen it
    one.shutdown()
    assert asyncio.run(two.aget("a")) == 1  # the asyncio face reopens it too
    one.shutdown()
    one.shutdown()  # twice: nothing left to close
    assert one.add("c", 3)
    assert two.get("c") == 3
