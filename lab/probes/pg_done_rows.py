"""A PostgreSQL queue whose finished jobs pile up: what they cost the hot path.

On a throwaway PostgreSQL server (``fsync=on``), one queue holds ``--live``
jobs while ``--jobs`` pass through it in batches of 100 (put_many, claim,
ack_many), and the done ones stay, as a queue keeps its done jobs for a
retention period. Printed: the rate while the done jobs pile up, the size
of the hot table (``litegate_jobs`` with its indexes) and of the done table
if there is one, one-job claim + ack latencies (p50 / p95) with that many
done jobs, and how long a ``VACUUM`` of the hot table takes. Run it
against two checkouts to compare schemas (PostgreSQL schema 2 kept done
jobs in ``litegate_jobs``; schema 3 moves them to ``litegate_done_jobs``):
``PYTHONPATH=<checkout>/src:<checkout>/lab/src
python lab/probes/pg_done_rows.py``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from litegate_lab._pgserver import PgServer

from litegate.queue import Queue


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200_000, help="jobs put in all")
    parser.add_argument("--live", type=int, default=10_000, help="jobs left not done")
    parser.add_argument("--singles", type=int, default=2_000, help="one-job claim + ack rounds")
    args = parser.parse_args()
    server = PgServer(fsync=True).start()
    try:
        run(server.create_database("probe"), args.jobs, args.live, args.singles)
    finally:
        server.close()


def _size(conn: Any, table: str) -> int:
    row = conn.execute(
        "SELECT coalesce(pg_total_relation_size(to_regclass(%s)), 0)", (table,)
    ).fetchone()
    return int(row[0])


def run(url: str, jobs: int, live: int, singles: int) -> None:
    import psycopg

    q = Queue(url)
    for start in range(0, live, 100):
        q.put_many(range(start, min(start + 100, live)))
    t0 = time.perf_counter()
    finished = 0
    while finished < jobs - live:  # a steady queue: as many put as finished
        q.put_many(range(100))
        batch = q.claim(n=100)
        q.ack_many(batch)
        finished += len(batch)
    took = time.perf_counter() - t0
    print(f"put_many + claim + ack of {finished:,} jobs: {finished / took:,.0f} jobs/s")
    latencies = []
    for _ in range(singles):
        t = time.perf_counter()
        (job,) = q.claim()
        q.ack(job)
        latencies.append((time.perf_counter() - t) * 1e3)
        q.put("again")  # (the live count stays)
    cuts = statistics.quantiles(latencies, n=20)
    print(f"one-job claim + ack, {singles:,} rounds: p50 {cuts[9]:.2f} ms, p95 {cuts[18]:.2f} ms")
    with psycopg.connect(url, autocommit=True) as conn:
        hot, done = _size(conn, "litegate_jobs"), _size(conn, "litegate_done_jobs")
        mib = 2**20
        print(f"hot table with its indexes: {hot / mib:.1f} MiB; done table: {done / mib:.1f} MiB")
        t = time.perf_counter()
        conn.execute("VACUUM litegate_jobs")
        print(f"VACUUM litegate_jobs: {(time.perf_counter() - t) * 1e3:.0f} ms")
    print("counts:", q.counts())
    q.close()


if __name__ == "__main__":
    main()
