"""litegate showcase: several processes x threads share one SQLite file.

Every thread runs ORM-style transactions (read a balance, then write two
rows) through ``db.write()`` and reads through ``db.query()``; a bank-transfer
invariant (the sum of balances never changes) is checked on every read. At the
end each process reports what ``db.stats()`` measured.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import litegate

ACCOUNTS = 20
OPENING = 1_000


def worker(path: str, threads: int, seconds: float, seed: int, out: Any) -> None:
    db = litegate.connect(path, readers=4, timeout=30)
    counts = {"transfers": 0, "reads": 0, "errors": 0, "invariant_broken": 0}
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def run(k: int) -> None:
        rnd = random.Random(seed * 100 + k)
        mine = dict.fromkeys(counts, 0)
        while time.monotonic() < stop_at:
            a, b = rnd.sample(range(ACCOUNTS), 2)
            amount = rnd.randint(1, 20)
            try:
                with db.write() as conn:  # read, then write: never "database is locked"
                    (bal,) = conn.execute("SELECT bal FROM acct WHERE id = ?", (a,)).fetchone()
                    if bal >= amount:
                        conn.execute("UPDATE acct SET bal = bal - ? WHERE id = ?", (amount, a))
                        conn.execute("UPDATE acct SET bal = bal + ? WHERE id = ?", (amount, b))
                mine["transfers"] += 1
                (total,) = db.query("SELECT sum(bal) FROM acct")[0]
                mine["reads"] += 1
                if total != ACCOUNTS * OPENING:
                    mine["invariant_broken"] += 1
            except litegate.Error:
                mine["errors"] += 1
        with lock:
            for key, value in mine.items():
                counts[key] += value

    ts = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    out.put((os.getpid(), counts, db.stats()))
    db.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="litegate-showcase-") as tmp:
        path = os.path.join(tmp, "bank.db")
        db = litegate.connect(path)
        db.execute("CREATE TABLE acct(id INTEGER PRIMARY KEY, bal INTEGER NOT NULL)")
        db.executemany("INSERT INTO acct VALUES (?, ?)", [(i, OPENING) for i in range(ACCOUNTS)])
        print(
            f"litegate showcase: {args.processes} processes x {args.threads} threads, "
            f"{args.seconds:g} s of read-then-write transfers on one file\n"
        )
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        t0 = time.monotonic()
        procs = [
            ctx.Process(target=worker, args=(path, args.threads, args.seconds, i, out))
            for i in range(args.processes)
        ]
        for p in procs:
            p.start()
        # Halfway through: what `litegate top` shows of the file right now
        # (it only reads shared state: the gate's ticket table, the WAL index).
        time.sleep(args.seconds / 2)
        print("litegate top, mid-run (3 refreshes, 0.3 s apart):")
        subprocess.run(
            [sys.executable, "-m", "litegate", "top", path, "--iterations", "3",
             "--interval", "0.3"],
            check=False, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        print()
        results = [out.get(timeout=args.seconds + 120) for _ in procs]
        for p in procs:
            p.join()
        elapsed = time.monotonic() - t0

        hdr = (
            f"{'PID':>7} {'TRANSFERS':>9} {'READS':>7} {'ERRORS':>6} "
            f"{'GATE p50':>9} {'p99':>8} {'max':>8} {'POOL p99':>9} {'X-PROC':>7} {'BUSY':>5}"
        )
        print(hdr)
        print("-" * len(hdr))
        totals = dict.fromkeys(("transfers", "reads", "errors", "invariant_broken"), 0)
        for pid, counts, stats in sorted(results):
            for key in totals:
                totals[key] += counts[key]
            g, pool = stats["gate"], stats["pool"]
            print(
                f"{pid:>7} {counts['transfers']:>9} {counts['reads']:>7} {counts['errors']:>6} "
                f"{g['p50_ms']:>7.2f}ms {g['p99_ms']:>6.2f}ms {g['max_ms']:>6.1f}ms "
                f"{pool['p99_ms']:>7.2f}ms {g['cross_process_waits']:>7} "
                f"{stats['busy_retries']:>5}"
            )
        (total,) = db.query("SELECT sum(bal) FROM acct")[0]
        (check,) = db.query("PRAGMA integrity_check")[0]
        s = db.stats()
        print(
            f"\n{totals['transfers']} transfers ({totals['transfers'] / elapsed:,.0f}/s) and "
            f"{totals['reads']} reads in {elapsed:.1f} s; errors: {totals['errors']}; "
            f"invariant broken: {totals['invariant_broken']} times"
        )
        print(
            f"sum of balances {total} (expected {ACCOUNTS * OPENING}); integrity_check: {check}; "
            f"WAL {s['wal_bytes'] / 1024:.0f} KiB"
        )
        print(f"PRAGMAs in force (writer): {s['pragmas']['writer']}")
        print()
        sys.stdout.flush()
        # The report a user gets on the file (read-only), this process still using it.
        subprocess.run([sys.executable, "-m", "litegate", "doctor", path], check=False)
        db.close()
        ok = totals["errors"] == 0 and total == ACCOUNTS * OPENING and check == "ok"
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
