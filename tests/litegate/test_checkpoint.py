"""Checkpoints run off the commit path and keep the WAL bounded."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import litegate
from tests.conftest import wait_until


def wal_size(path: str) -> int:
    try:
        return os.path.getsize(path + "-wal")
    except OSError:
        return 0


def test_checkpointer_replaces_auto_checkpoint(db_path: str) -> None:
    db = litegate.connect(db_path, pragmas={"wal_autocheckpoint": 50})
    db.execute("CREATE TABLE t(v)")
    for i in range(200):
        db.execute("INSERT INTO t VALUES (?)", (i,))
    wait_until(lambda: db.stats()["checkpoints"]["passive"]["count"] >= 1,
               what="a background checkpoint")  # fmt: skip
    s = db.stats()
    assert s["pragmas"]["writer"]["wal_autocheckpoint"] == 0
    assert s["checkpoints"]["errors"] == 0
    db.close()


def test_checkpointer_stops_on_close(db_path: str) -> None:
    db = litegate.connect(db_path)
    ckpt = db._process_state().checkpointer
    assert ckpt is not None
    assert ckpt._thread.is_alive()
    assert ckpt._thread.name == "litegate-checkpointer"
    db.close()
    db.close()
    assert not ckpt._thread.is_alive()  # (other tests' checkpointers are not this one)


def _load(path: str, checkpoints: bool, writes: int) -> int:
    """Writers plus readers that never stop reading; returns the largest WAL seen."""
    db = litegate.connect(
        path, readers=3, checkpoints=checkpoints,
        pragmas={"wal_autocheckpoint": 100 if checkpoints else 0},
    )  # fmt: skip
    db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
    stop = threading.Event()
    biggest = [0]

    def reader(hold: bool) -> None:
        while not stop.is_set():
            if hold:  # a snapshot held for a moment, again and again
                with db.read() as conn:
                    conn.execute("SELECT count(*) FROM t").fetchone()
            else:
                db.query("SELECT max(id) FROM t")

    def writer(k: int) -> None:
        payload = "x" * 500
        for i in range(writes):
            db.execute("INSERT INTO t(v) VALUES (?)", (payload,))
            if i % 50 == 0:
                biggest[0] = max(biggest[0], wal_size(path))

    readers = [threading.Thread(target=reader, args=(h,)) for h in (True, False)]
    writers = [threading.Thread(target=writer, args=(k,)) for k in range(2)]
    for t in readers + writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    for t in readers:
        t.join()
    biggest[0] = max(biggest[0], wal_size(path))
    assert db.query("SELECT count(*) FROM t") == [(2 * writes,)]
    db.close()
    return biggest[0]


def test_wal_stays_bounded_under_continuous_reads(tmp_path: Path) -> None:
    writes = 6000  # x 2 writers x ~600 bytes: ~7 MB of data
    bounded = _load(str(tmp_path / "on.db"), checkpoints=True, writes=writes)
    # Control, same run: no checkpoints at all. The WAL holds everything, which
    # shows this measurement can tell a growing WAL from a bounded one.
    unbounded = _load(str(tmp_path / "off.db"), checkpoints=False, writes=writes)
    assert unbounded > 30_000_000
    # The TRUNCATE threshold is 4 x 100 frames (1.6 MB); between rounds the
    # WAL overshoots by what is written while old readers drain (2-4 MB here).
    # 8 MB leaves room for a loaded CI machine and still fails a WAL that
    # grows with the work: before the checkpointer waited for readers to drain,
    # this same run reached 41 MB.
    assert bounded < 8_000_000, (bounded, unbounded)


def test_the_checkpointers_turn_takes_the_gate_in_line(tmp_path: Path) -> None:
    """The background checkpointer's gated turn never takes the gate past
    sleepers, whatever the databases' policy: on a fair="strict" file every
    grant, its turns included, is a strict one (a turn with the default
    bounded budget used to barge there). Checked on the grant log, which
    records each grant's budget."""
    from litegate import _grantlog

    folder = str(tmp_path / "grants")
    with _grantlog.logging_to(folder):
        db = litegate.connect(
            str(tmp_path / "strict.db"), fair="strict", pragmas={"wal_autocheckpoint": 10}
        )
        db.execute("CREATE TABLE t(v)")
        i = 0
        while db.stats()["checkpoints"]["restart"]["count"] < 2:  # two gated turns
            db.execute("INSERT INTO t VALUES (?)", (i,))
            i += 1
            assert i < 200_000, "no gated checkpoint turn came"
        db.close()
    grants = _grantlog.read(folder)
    assert len(grants) >= i + 3  # CREATE, every insert, and the two turns at least
    assert {(g.overtakes, g.budget_us) for g in grants} == {(0, 0)}
