"""SIGKILL in the middle of group commits, many times: every acknowledged
write is there, no write is half there, the file is intact."""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

import litegate
from tests.conftest import wait_until
from tests.litegate import workers


def acked(path: Path) -> list[int]:
    if not path.exists():
        return []
    return [int(x) for x in path.read_text().split()]


@pytest.mark.slow
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_sigkill_mid_batch_loses_no_acknowledged_write(tmp_path: Path, method: str) -> None:
    db_path = str(tmp_path / "crash.db")
    db = litegate.connect(db_path)
    db.execute("CREATE TABLE pairs(k INTEGER NOT NULL, part INTEGER NOT NULL)")
    db.close()
    ctx: Any = mp.get_context(method)
    rnd = random.Random(1234)
    rounds = 6 if method == "fork" else 3
    for round_no in range(rounds):
        acks = tmp_path / f"acks{round_no}.txt"
        p = ctx.Process(
            target=workers.ack_writer, args=(db_path, str(acks), 6, round_no * 1_000_000)
        )
        p.start()
        # Let it commit a while, then kill it at a different point each round.
        target = rnd.randint(50, 400)

        def enough(acks: Path = acks, t: int = target) -> bool:
            return len(acked(acks)) >= t

        wait_until(enough, timeout=60, what="acknowledged writes")
        os.kill(p.pid, signal.SIGKILL)
        p.join()
        with closing(sqlite3.connect(db_path)) as conn:
            rows = conn.execute("SELECT k, count(*) FROM pairs GROUP BY k").fetchall()
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        present = dict(rows)
        assert all(n == 2 for n in present.values()), "a write is half there"
        missing = [k for k in acked(acks) if k not in present]
        assert missing == [], f"acknowledged but lost: {missing[:5]}"
    # the database still works for the next user
    after = litegate.connect(db_path)
    after.execute("INSERT INTO pairs VALUES (-1, 1)")
    after.close()
