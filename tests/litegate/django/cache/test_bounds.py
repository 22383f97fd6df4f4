"""Bounded size: first-in-first-out eviction by entries and bytes, expiry in
batches, Django's MAX_ENTRIES/CULL_FREQUENCY; clear() and eviction never
block readers."""

from __future__ import annotations

import threading
import time

import pytest

from litegate.django.cache import LitegateCache
from litegate.django.cache import _store as store_mod
from tests.conftest import wait_until

from .conftest import MakeCache

pytestmark = pytest.mark.usefixtures("by_hand")


def _keys(cache: LitegateCache, n: int) -> list[int]:
    """Which of k0..k(n-1) are there."""
    got = cache.get_many([f"k{i}" for i in range(n)])
    return sorted(int(k[1:]) for k in got)


def test_max_entries_evicts_the_oldest_first(make_cache: MakeCache) -> None:
    cache = make_cache(max_entries=100, max_bytes=None)
    for i in range(150):
        cache.set(f"k{i}", i)
    cache.set("k0", "again")  # a set of a key there keeps its place (as solid_cache)
    swept = cache.sweep()
    # down to the bound less 1 %: the 51 oldest go, k0 among them
    assert swept == {"expired": 0, "evicted": 51}
    assert _keys(cache, 150) == list(range(51, 150))
    assert cache.stats()["entries"] == 99
    assert cache.sweep() == {"expired": 0, "evicted": 0}  # within the bounds now


def test_max_bytes_evicts_the_oldest_first(make_cache: MakeCache) -> None:
    cache = make_cache(max_bytes=100_000)
    value = b"x" * 1000
    for i in range(150):
        cache.set(f"k{i:03}", value)
    per_row = cache.stats()["bytes"] // 150
    assert cache.stats()["bytes"] == 150 * per_row  # every row the same size
    cache.sweep()
    left = sorted(int(k[1:]) for k in cache.get_many([f"k{i:03}" for i in range(150)]))
    assert left == list(range(150 - len(left), 150))  # the newest stay
    total = cache.stats()["bytes"]
    assert total <= 99_000  # the bound less 1 %
    assert total > 99_000 - per_row  # and no row more than that went


def test_the_sweeper_thread_evicts_without_being_asked(
    make_cache: MakeCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_mod, "BACKGROUND", True)
    cache = make_cache(max_entries=50, max_bytes=None)
    cache.set_many({f"k{i}": i for i in range(200)})  # 4 x the bound: wakes the sweeper
    wait_until(lambda: cache.stats()["entries"] <= 50, what="the sweeper's eviction")
    assert _keys(cache, 200)[-1] == 199


def test_expiry_scan_deletes_expired_rows_in_batches(
    make_cache: MakeCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_mod, "SCAN_IDS", 100)
    monkeypatch.setattr(store_mod, "BATCH", 30)
    cache = make_cache()
    cache.set_many({f"e{i}": i for i in range(1000)}, timeout=0.05)
    cache.set_many({f"k{i}": i for i in range(1000)})
    time.sleep(0.1)
    total = 0
    for _ in range(30):  # each sweep reads windows of 100 ids for 20 ms at most
        total += cache.sweep()["expired"]
        if total == 1000:
            break
    assert total == 1000
    assert cache.stats()["entries"] == 1000
    assert len(cache.get_many([f"k{i}" for i in range(1000)])) == 1000


def test_django_max_entries_and_cull_frequency(make_cache: MakeCache) -> None:
    """Django's own options, culled as Django's backends do: with
    MAX_ENTRIES 30, 49 sets leave 29 (CULL_FREQUENCY 3) or 19 (0)."""
    for frequency, left in ((3, 29), (0, 19)):
        cache = make_cache(MAX_ENTRIES=30, CULL_FREQUENCY=frequency, table=f"t{frequency}")
        for i in range(1, 50):
            cache.set(f"cull{i}", "value", 1000)
        assert sum(cache.has_key(f"cull{i}") for i in range(1, 50)) == left
        assert cache.has_key("cull49")
    # FIFO: the culled are the oldest
    kept = [i for i in range(1, 50) if cache.has_key(f"cull{i}")]
    assert kept == list(range(31, 50))


def test_clear_does_not_wait_for_readers(make_cache: MakeCache) -> None:
    """A reader in the middle of a read transaction (its snapshot open) does
    not hold up clear(); it goes on reading its snapshot."""
    cache = make_cache(timeout=2)
    cache.set_many({f"k{i}": i for i in range(100)})
    db = cache._tbl.store.db  # type: ignore[union-attr]
    inside, cleared = threading.Event(), threading.Event()
    seen: list[int] = []

    def reader() -> None:
        with db.read() as conn:
            seen.append(conn.execute('SELECT count(*) FROM "litegate_cache"').fetchone()[0])
            inside.set()
            assert cleared.wait(10)
            seen.append(conn.execute('SELECT count(*) FROM "litegate_cache"').fetchone()[0])

    t = threading.Thread(target=reader)
    t.start()
    assert inside.wait(10)
    cache.clear()  # (a WriteTimeout after 2 s if readers held it up)
    cleared.set()
    t.join()
    assert seen == [100, 100]  # the reader's snapshot
    assert cache.get("k1") is None


def test_reads_go_on_while_a_writer_holds_the_gate(make_cache: MakeCache) -> None:
    """Eviction and clear() write through the gate; reads never wait for it."""
    cache = make_cache(timeout=30)
    cache.set("k", "v")
    db = cache._tbl.store.db  # type: ignore[union-attr]
    held, leave = threading.Event(), threading.Event()

    def writer() -> None:
        with db.write() as conn:
            conn.execute('DELETE FROM "litegate_cache"')  # a clear, not committed yet
            held.set()
            leave.wait(30)

    t = threading.Thread(target=writer)
    t.start()
    assert held.wait(10)
    try:
        got = [cache.get("k") for _ in range(100)]  # while the gate is held
        assert got == ["v"] * 100
        assert cache.has_key("k")
    finally:
        leave.set()
        t.join()
    assert cache.get("k") is None
