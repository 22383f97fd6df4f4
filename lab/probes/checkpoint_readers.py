"""Writers beside readers: what the checkpointer's gated turns cost them.

Two writer threads insert one row at a time while two reader threads hold
read transactions of ``--read-ms`` each, back to back, for ``--seconds``.
Printed: writes/s, reads, the WAL file's peak (sampled every 5 ms) and the
checkpointer's turns (``db.stats()["checkpoints"]["restart"]``, with
``restart_at``, the log length that starts a turn). Run it against two
checkouts to compare turn policies (docs/results/queue.md, "The batched
row's peak WAL"): ``PYTHONPATH=<checkout>/src python
lab/probes/checkpoint_readers.py --read-ms 20``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
import threading
import time

import litegate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--read-ms", type=float, default=20.0, help="each read's length")
    parser.add_argument("--seconds", type=float, default=6.0, help="how long the writers write")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="litegate-probe-")
    path = os.path.join(folder, "app.db")
    try:
        run(path, args.read_ms / 1000, args.seconds)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run(path: str, read_s: float, seconds: float) -> None:
    db = litegate.connect(path)
    db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB)")
    db.executemany("INSERT INTO t(v) VALUES (?)", [(os.urandom(200),) for _ in range(20_000)])
    stop = time.monotonic() + seconds
    writes = [0, 0]
    reads = [0, 0]
    peak = [0]

    def writer(i: int) -> None:
        while time.monotonic() < stop:
            db.execute("INSERT INTO t(v) VALUES (?)", (os.urandom(200),))
            writes[i] += 1

    def reader(i: int) -> None:
        while time.monotonic() < stop:
            with db.read() as conn:
                conn.execute("SELECT count(*) FROM t").fetchone()
                until = time.monotonic() + read_s
                while time.monotonic() < until:  # a read transaction held this long
                    conn.execute("SELECT v FROM t WHERE id = 1").fetchone()
            reads[i] += 1

    def sampler() -> None:
        while time.monotonic() < stop:
            with contextlib.suppress(OSError):  # (not there yet)
                peak[0] = max(peak[0], os.path.getsize(path + "-wal"))
            time.sleep(0.005)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
    threads += [threading.Thread(target=reader, args=(i,)) for i in range(2)]
    threads.append(threading.Thread(target=sampler))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    checkpoints = db.stats()["checkpoints"]
    db.close()
    turns = checkpoints["restart"]
    print(
        f"reads of {read_s * 1000:g} ms: {sum(writes) / seconds:,.0f} writes/s, "
        f"{sum(reads)} reads, peak WAL {peak[0] / 2**20:.1f} MiB; turns {turns['count']} "
        f"({turns['skipped']} gave up, {turns['total_ms']:.0f} ms in all), "
        f"restart_at {checkpoints.get('restart_at', '-')}"
    )


if __name__ == "__main__":
    main()
