"""The check of a cut, on made-up ledgers and databases: every kind of
loss and anomaly it must report, and nothing when all is there. No FUSE."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from litegate_lab.durability._check import Carry, Ledger, advance, api_of, check, read_ledgers


def _seen(rows: list[tuple[str, int, int]], **kw: Any) -> dict[str, Any]:
    return {
        "error": None,
        "integrity": ["ok"],
        "rows": rows,
        "counters": kw.get("counters", []),
        "earlier_rows": kw.get("earlier_rows", []),
        "jobs": kw.get("jobs", []),
        "earlier_jobs": kw.get("earlier_jobs", (0, 0)),
        "acked_states": kw.get("acked_states", []),
    }


def _ledger(text: str, tmp_path: Path) -> Ledger:
    (tmp_path / "w.log").write_text(text)
    return read_ledgers(str(tmp_path))


def test_api_of_unit() -> None:
    assert api_of("r3.core1.execute12") == "execute"
    assert api_of("r3.producer.put_many2") == "put_many"


def test_everything_there_is_nothing_lost(tmp_path: Path) -> None:
    ledger = _ledger(
        "A r1.c.write0 1 100\nA r1.c.write0 2 200\nA r1.c.transact1 1 150\n"
        "P r1.p.put0 1 7 120\nK 7 130\nA r1.c.execute2 1 300\n"
        "F r1.c.execute2 2 310 OperationalError\nA r1.c.execute2",  # a line cut short
        tmp_path,
    )
    rows = [("r1.c.write0", 1, 0), ("r1.c.write0", 1, 1), ("r1.c.write0", 2, 0),
            ("r1.c.write0", 2, 1), ("r1.c.transact1", 1, 0), ("r1.c.execute2", 1, 0)]  # fmt: skip
    seen = _seen(
        rows,
        counters=[("r1.c.transact1", 1)],
        jobs=[(7, 2, json.dumps({"r": 1, "w": "r1.p.put0", "n": 1}))],
        acked_states=[(7, 2)],
    )
    v = check(1, ledger, seen, horizon_ns=0, carry=Carry())
    assert (v["acked"], v["lost"], v["anomalies"], v["corrupt"]) == (6, 0, {}, False)
    assert v["acked_by_api"] == {"write": 2, "transact": 1, "queue put": 1, "queue ack": 1,
                                 "execute": 1}  # fmt: skip
    assert v["exposed"] == 6


def test_losses_are_split_at_the_last_sync(tmp_path: Path) -> None:
    ledger = _ledger("A r1.c.execute0 1 100\nA r1.c.execute0 2 200\nA r1.c.execute0 3 300\n",
                     tmp_path)  # fmt: skip
    # the WAL's last fsync began at 150: call 1 (acknowledged at 100) must be there
    v = check(1, ledger, _seen([]), horizon_ns=150, carry=Carry())
    assert (v["lost"], v["lost_before_sync"], v["exposed"]) == (3, 1, 2)
    v = check(1, ledger, _seen([("r1.c.execute0", 1, 0)]), horizon_ns=150, carry=Carry())
    assert (v["lost"], v["lost_before_sync"]) == (2, 0)


def test_torn_units_holes_and_counters_are_anomalies(tmp_path: Path) -> None:
    ledger = _ledger("A r1.c.write0 1 1\nF r1.c.execute1 2 5 WriteTimeout\n", tmp_path)
    rows = [("r1.c.write0", 1, 0),  # half of a two-row write(): torn (and lost)
            ("r1.c.execute1", 1, 0), ("r1.c.execute1", 3, 0),  # 2 failed: no hole
            ("r1.c.execute1", 6, 0),  # 4 and 5 missing under 6: two holes
            ("r1.c.transact2", 1, 0), ("r1.c.transact2", 2, 0)]  # fmt: skip
    seen = _seen(rows, counters=[("r1.c.transact2", 1)])  # should be 2
    v = check(1, ledger, seen, horizon_ns=0, carry=Carry())
    assert v["lost"] == 1
    assert v["anomalies"] == {"torn": 1, "holes": 2, "counter": 1}


def test_queue_puts_acks_and_duplicates(tmp_path: Path) -> None:
    ledger = _ledger("P r1.p.put0 1 10 1\nP r1.p.put0 2 11 1\nK 10 2\nK 3 2\n", tmp_path)
    jobs = [(10, 1, json.dumps({"r": 1, "w": "r1.p.put0", "n": 1})),
            (12, 0, json.dumps({"r": 1, "w": "r1.p.put0", "n": 2})),  # another id: job id
            (13, 0, json.dumps({"r": 1, "w": "r1.p.put0", "n": 2}))]  # fmt: skip
    seen = _seen([], jobs=jobs, acked_states=[(10, 1), (3, 2)])  # 10 is not done any more
    v = check(1, ledger, seen, horizon_ns=0, carry=Carry())
    assert v["lost_by_api"] == {"queue put": 1, "queue ack": 1}
    assert v["anomalies"] == {"duplicate job": 1, "job id": 1}


def test_what_an_earlier_check_saw_must_stay(tmp_path: Path) -> None:
    carry = Carry(rows_per_round={1: 5, 2: 3}, last_job=20, jobs=20, done=12)
    seen = _seen([], earlier_rows=[(1, 5), (2, 1)], earlier_jobs=(19, 11))
    v = check(3, _ledger("", tmp_path), seen, horizon_ns=0, carry=carry)
    assert v["anomalies"] == {"regression": 2 + 1 + 1}
    nxt = advance(carry, 3, _seen([("u", 1, 0)], earlier_rows=[(1, 5), (2, 3)],
                                  jobs=[(21, 2, "{}")], earlier_jobs=(20, 12)))  # fmt: skip
    assert nxt == Carry(rows_per_round={1: 5, 2: 3, 3: 1}, last_job=21, jobs=21, done=13)


@pytest.mark.parametrize(
    "seen",
    [{"error": "open: OpenError: not a database"}, {**_seen([]), "integrity": ["*** main ***"]}],
)
def test_a_database_that_does_not_open_or_check_is_corrupt(
    tmp_path: Path, seen: dict[str, Any]
) -> None:
    v = check(1, _ledger("A r1.c.execute0 1 1\n", tmp_path), seen, horizon_ns=0, carry=Carry())
    assert v["corrupt"] is True
    assert v["lost"] == 1


def test_an_unknown_ledger_line_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown ledger line"):
        _ledger("Z what\n", tmp_path)


def test_the_cache_writers_entries(tmp_path: Path) -> None:
    """The cache writer's units: an entry there with its value counts, a
    set_many with some of its three keys is torn, a wrong value is an
    anomaly, and its own file's last sync splits its losses."""
    from litegate_lab.durability._work import cache_value

    ledger = _ledger(
        "A r1.cache.cache_set0 1 100\nA r1.cache.cache_set0 2 200\n"
        "A r1.cache.cache_set_many2 1 110\nA r1.cache.cache_set_many2 2 210\n",
        tmp_path,
    )
    keys = ["r1.cache.cache_set0:1:0", *(f"r1.cache.cache_set_many2:1:{p}" for p in range(3)),
            "r1.cache.cache_set_many2:2:0"]  # fmt: skip
    entries: dict[str, Any] = {k: cache_value(k) for k in keys}
    seen = {**_seen([]), "cache_integrity": ["ok"], "cache_rows": entries, "cache_error": None}
    v = check(1, ledger, seen, horizon_ns=0, carry=Carry(), cache_horizon_ns=150)
    assert v["acked_by_api"] == {"cache_set": 2, "cache_set_many": 2}
    assert v["lost_by_api"] == {"cache_set": 1, "cache_set_many": 1}
    assert (v["lost_before_sync"], v["anomalies"], v["corrupt"]) == (0, {"torn": 1}, False)
    entries["r1.cache.cache_set0:1:0"] = "something else"
    v = check(1, ledger, seen, horizon_ns=0, carry=Carry(), cache_horizon_ns=150)
    # acknowledged at 100, before its file's sync at 150: counted for the cache file
    assert v["anomalies"] == {"torn": 1, "cache value": 1, "cache lost before its sync": 1}
    assert v["lost_before_sync"] == 0  # (the database's figure)
    bad = {**seen, "cache_integrity": ["*** in database main ***"]}
    v = check(1, ledger, bad, horizon_ns=0, carry=Carry(), cache_horizon_ns=150)
    assert (v["corrupt"], v["cache_corrupt"]) == (False, True)  # the database is fine
