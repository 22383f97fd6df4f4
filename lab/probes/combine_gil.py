"""Combined writes beside a combiner process that runs CPU-bound Python.

A process opens the file first (so it holds the combiner role when
combining), puts one job, then runs a CPU-bound loop on a thread (``--hog``)
or nothing. Then ``--putters`` other processes put one job at a time, 1,500
each, at once. Printed: puts/s and the put latency, with ``combine`` off and
on, without and with the loop. (docs/results/queue.md, "Combined writes for
the queue"; run: ``python lab/probes/combine_gil.py --putters 1`` and
``--putters 3``.)
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import tempfile
import threading
import time
from typing import Any

import litegate
from litegate.queue import Queue

PUTS = 1500


def _combiner_process(path: str, combine: bool, hog: bool, ready: Any, stop: Any) -> None:
    db = litegate.connect(path, fair="strict", combine=combine)
    q = Queue(db)
    q.put({"first": 1})  # opened first: the combiner, when combining
    ready.set()

    def spin() -> None:
        x = 0
        while not stop.is_set():
            for i in range(10_000):
                x += i

    if hog:
        threading.Thread(target=spin, daemon=True).start()
    stop.wait()
    q.close()
    db.close()


def _putter(path: str, combine: bool, go: Any, out: Any) -> None:
    db = litegate.connect(path, fair="strict", combine=combine)
    q = Queue(db)
    go.wait()
    lat = []
    for k in range(PUTS):
        t0 = time.perf_counter()
        q.put({"k": k})
        lat.append(time.perf_counter() - t0)
    out.put(lat)
    q.close()
    db.close()


def cell(putters: int, combine: bool, hog: bool) -> str:
    ctx = mp.get_context("spawn")
    path = os.path.join(tempfile.mkdtemp(prefix="combine-gil-"), "q.db")
    ready, stop, go, out = ctx.Event(), ctx.Event(), ctx.Event(), ctx.Queue()
    first = ctx.Process(target=_combiner_process, args=(path, combine, hog, ready, stop))
    first.start()
    try:
        if not ready.wait(60):
            raise RuntimeError("the first process did not open the file")
        procs = [ctx.Process(target=_putter, args=(path, combine, go, out)) for _ in range(putters)]
        for p in procs:
            p.start()
        time.sleep(1.0)  # (every putter has opened the file)
        started = time.perf_counter()
        go.set()
        lats = sorted(v for _ in procs for v in out.get(timeout=600))
        wall = time.perf_counter() - started
        for p in procs:
            p.join(30)
    finally:
        stop.set()
        first.join(30)
    n = len(lats)
    return (
        f"putters={putters} hog={hog!s:5} combine={combine!s:5}: {n / wall:8,.0f} puts/s, "
        f"p50 {lats[n // 2] * 1e3:.3f} ms, p99 {lats[int(n * 0.99)] * 1e3:.2f} ms, "
        f"max {lats[-1] * 1e3:.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--putters", type=int, default=1, help="processes putting (default 1)")
    args = parser.parse_args()
    for hog in (False, True):
        for combine in (False, True):
            print(cell(args.putters, combine, hog), flush=True)


if __name__ == "__main__":
    main()
