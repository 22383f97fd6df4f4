"""P single-threaded processes writing one-row transactions as fast as they
can: the gate's policy against what users run instead (issue 18).

Every side runs the same statements (``BEGIN IMMEDIATE``, one ``INSERT``,
``COMMIT``) in P spawned processes for the same few seconds, on a fresh
database in WAL mode with ``synchronous=NORMAL``:

- ``sqlite3``: plain ``sqlite3`` with SQLite's busy handler
  (``busy_timeout``), the unfair default;
- ``ofd-lock``: one plain OFD ``fcntl`` lock around each transaction (the
  kernel's wake-up order, and the releaser may take it straight back);
- ``strict``: litegate ``fair="strict"``, a FIFO hand-off per transaction;
- ``bounded``: litegate ``fair=True``, the default;
- ``unfair``: litegate ``fair=False``, unbounded barging;
- ``execute``: litegate's default, each write one ``db.execute()`` (group
  commit within a process, turns at the gate across processes);
- ``combined``: the same ``db.execute()`` with ``connect(combine=True)``,
  as a user gets it: one process commits the other processes' batches in
  its own transactions, where shipping pays (a one-row write ships only
  from a process on FULL; under NORMAL it takes its turn at the gate);
- ``shipped``: ``combine=True`` with one-row writes shipped at every
  ``synchronous`` (``LITEGATE_COMBINE_SHIP_ONE=always``): the protocol
  itself, where ``combined`` takes turns at the gate.

``synchronous`` is NORMAL unless the caller asks for another (FULL: every
commit an fsync, where combining pays most).

Per side: committed writes per second, Jain's fairness index over the
processes' counts (1.0: equal shares) and their relative standard deviation,
p50/p99/max per write (from asking to COMMIT done), and for litegate the
gate's own counters (grants across processes, forced hand-offs, barges).
"""

from __future__ import annotations

import fcntl
import multiprocessing as mp
import os
import sqlite3
import struct
import time
from contextlib import closing, nullcontext
from typing import Any

from ._procs import reap
from ._stats import describe, jain, rsd

SIDES = ("sqlite3", "ofd-lock", "strict", "bounded", "unfair", "execute", "combined", "shipped")
_FAIR: dict[str, bool | str] = {
    "strict": "strict",
    "bounded": True,
    "unfair": False,
    "execute": True,
    "combined": True,
    "shipped": True,
}
_COMBINING = ("combined", "shipped")


class _OfdLock:
    """The "one plain OFD lock" side: one fcntl lock around each transaction
    (the kernel's wake-up order; the releaser may take it straight back)."""

    _SETLKW: int = fcntl.F_OFD_SETLKW  # type: ignore[attr-defined,unused-ignore]
    _SETLK: int = fcntl.F_OFD_SETLK  # type: ignore[attr-defined,unused-ignore]
    _LOCK = struct.pack("hhqqixxxx", fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0)
    _UNLOCK = struct.pack("hhqqixxxx", fcntl.F_UNLCK, os.SEEK_SET, 0, 1, 0)

    def __init__(self, path: str) -> None:
        self.fd = os.open(path + "-ofd", os.O_RDWR | os.O_CREAT, 0o644)

    def acquire(self) -> None:
        fcntl.fcntl(self.fd, self._SETLKW, self._LOCK)

    def release(self) -> None:
        fcntl.fcntl(self.fd, self._SETLK, self._UNLOCK)

    def close(self) -> None:
        os.close(self.fd)


def _budget_of(side: str) -> tuple[float, float]:
    """``bounded:K:T`` -> (K, T), or ValueError showing the form."""
    parts = side.split(":")
    try:
        if len(parts) == 3 and (k := float(parts[1])) >= 0 and (t := float(parts[2])) >= 0:
            return k, t
    except ValueError:
        pass
    raise ValueError(f"{side!r}: a budget is bounded:K:T, e.g. bounded:64:0.002")


def _fair_of(side: str) -> Any:
    """A side's ``fair=``; ``bounded:K:T`` tries a budget (the lab's A/B)."""
    if side.startswith("bounded:"):
        import litegate

        return litegate.Bounded(*_budget_of(side))
    return _FAIR[side]


def check_side(side: str) -> None:
    """ValueError naming the sides, unless ``side`` is one (or bounded:K:T)."""
    if side.startswith("bounded:"):
        _budget_of(side)
    elif side not in SIDES:
        raise ValueError(f"unknown side {side!r}; pick from {', '.join(SIDES)} or bounded:K:T")


def _is_litegate(side: str) -> bool:
    return side in _FAIR or side.startswith("bounded:")


def _child(
    side: str, path: str, barrier: Any, seconds: float, out: Any, sync: str = "NORMAL"
) -> None:
    clock = time.monotonic  # CLOCK_MONOTONIC: shared by the processes
    lat: list[int] = []
    n = 0
    if _is_litegate(side):
        import litegate

        db = litegate.connect(
            path,
            readers=1,
            timeout=60,
            fair=_fair_of(side),
            pragmas={"synchronous": sync},
            combine=side in _COMBINING,
        )

        if side == "execute" or side in _COMBINING:

            def one() -> None:
                db.execute("INSERT INTO w(v) VALUES ('x')")

        else:

            def one() -> None:
                with db.write() as conn:
                    conn.execute("INSERT INTO w(v) VALUES ('x')")

        close: Any = db.close
    else:
        conn = sqlite3.connect(path, timeout=60, isolation_level=None)
        conn.execute(f"PRAGMA synchronous = {sync}")
        lock = _OfdLock(path)

        def tx() -> None:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO w(v) VALUES ('x')")
            conn.execute("COMMIT")

        if side == "ofd-lock":

            def one() -> None:
                lock.acquire()
                try:
                    tx()
                finally:
                    lock.release()

        else:
            one = tx

        def close() -> None:
            conn.close()
            lock.close()

    barrier.wait(120)  # every process is up, connected and ready
    end = clock() + seconds
    while True:
        t0 = clock()
        if t0 >= end:
            break
        one()
        lat.append(int((clock() - t0) * 1e6))
        n += 1
    close()
    out.put((os.getpid(), n, lat))


def run_side(
    side: str, procs: int, seconds: float, grant_log: bool = False, sync: str = "NORMAL"
) -> dict[str, Any]:
    """One side, P processes, ``seconds`` of writes on a fresh database.
    ``grant_log``: a litegate side logs every grant, and the result gets the
    bounds checked on that log (``litegate.diagnostics.check_grants``) under ``"grant_log"``;
    logging slows the gate, so its writes/s are not comparable with a run
    without it."""
    import tempfile

    from litegate import diagnostics

    logged = grant_log and _is_litegate(side)

    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="litegate-writers-") as d:
        path = os.path.join(d, "w.db")
        with closing(sqlite3.connect(path, isolation_level=None)) as conn:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("CREATE TABLE w(id INTEGER PRIMARY KEY, v TEXT)")
        out = ctx.Queue()
        barrier = ctx.Barrier(procs)
        ps = [
            ctx.Process(target=_child, args=(side, path, barrier, seconds, out, sync))
            for _ in range(procs)
        ]
        folder = os.path.join(d, "grants")
        # (the children inherit the log, and the shipped side's setting,
        # through the environment)
        env = dict(os.environ)
        if side == "shipped":
            os.environ["LITEGATE_COMBINE_SHIP_ONE"] = "always"
        try:
            with diagnostics.grant_log(folder) if logged else nullcontext():
                for p in ps:
                    p.start()
        finally:
            os.environ.clear()
            os.environ.update(env)
        got = [out.get(timeout=seconds + 120) for _ in ps]
        reap(ps, out, timeout=60)
        with closing(sqlite3.connect(path)) as conn:
            committed = int(conn.execute("SELECT count(*) FROM w").fetchone()[0])
        counters = gate_counters(path) if _is_litegate(side) else None
        checked = diagnostics.check_grants(diagnostics.read_grants(folder)) if logged else None
    counts = [n for _pid, n, _lat in got]
    lat = [float(x) for _pid, _n, lats in got for x in lats]
    figures = describe(lat) if lat else {"p50": 0.0, "p99": 0.0, "max": 0.0}
    result: dict[str, Any] = {
        "side": side,
        "synchronous": sync,
        "processes": procs,
        "seconds": seconds,
        "writes": sum(counts),
        "committed": committed,  # must equal writes
        "per_s": sum(counts) / seconds,
        "jain": jain(counts),
        "rsd": rsd(counts),
        "counts": counts,
        "p50_us": figures["p50"],
        "p99_us": figures["p99"],
        "max_us": figures["max"],
    }
    if checked is not None:
        result["grant_log"] = checked
    if counters is not None:
        grants = max(1, counters["grants"])
        result["grants"] = counters["grants"]
        result["handoff_share"] = counters["handoffs"] / grants
        result["barge_share"] = counters["barges"] / max(1, sum(counts))
    return result


# -- one process asks while two others write back to back -----------------------------


def gate_counters(path: str) -> dict[str, int] | None:
    """The write gate's shared counters of the database at ``path``
    (``litegate.diagnostics.lock_counters``: grants across processes, forced hand-offs,
    barges); None without its sidecar."""
    from litegate.diagnostics import lock_counters

    try:
        got = lock_counters(path + "-litegate")
    except OSError:  # no sidecar: no litegate process opened the file
        return None
    return None if got is None else {k: int(got[k]) for k in ("grants", "handoffs", "barges")}


def gate_shares(before: dict[str, int] | None, after: dict[str, int] | None) -> dict[str, float]:
    """The gate's figures between two readings of :func:`gate_counters`
    (``before`` None: from the start): ``gate_grants`` (grants across
    processes), ``handoff_share`` (those a release handed to a head whose
    budget was spent; under strict, every release with a sleeper) and
    ``barge_share`` (grants taken past a waiting head, a holder's passes to
    its own threads included, per grant: it can pass 1). Empty without
    counters."""
    if after is None:
        return {}
    start = before or {"grants": 0, "handoffs": 0, "barges": 0}
    grants, handoffs, barges = (after[k] - start[k] for k in ("grants", "handoffs", "barges"))
    return {
        "gate_grants": float(grants),
        "handoff_share": handoffs / grants if grants else 0.0,
        "barge_share": barges / grants if grants else 0.0,
    }


def _hog(side: str, path: str, hold_s: float, barrier: Any, stop: Any) -> None:
    import litegate

    if side == "ofd-lock":
        conn = sqlite3.connect(path, timeout=60, isolation_level=None)
        lock = _OfdLock(path)
        barrier.wait(120)
        while not stop.is_set():
            lock.acquire()
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT INTO w(v) VALUES ('hog')")
                _spin(hold_s)
                conn.execute("COMMIT")
            finally:
                lock.release()
        conn.close()
        lock.close()
        return
    db = litegate.connect(path, readers=1, timeout=60, fair=_fair_of(side))
    barrier.wait(120)
    while not stop.is_set():
        with db.write() as c:
            c.execute("INSERT INTO w(v) VALUES ('hog')")
            _spin(hold_s)
    db.close()


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def run_asker(side: str, trials: int, hold_s: float = 0.0002) -> dict[str, Any]:
    """Two processes write back to back (``hold_s`` transactions); a third
    asks for the gate ``trials`` times, 20 ms apart: how long it waits each
    time (ms). The README's "one plain kernel lock" case."""
    import tempfile

    import litegate

    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="litegate-asker-") as d:
        path = os.path.join(d, "w.db")
        with closing(sqlite3.connect(path, isolation_level=None)) as conn:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("CREATE TABLE w(id INTEGER PRIMARY KEY, v TEXT)")
        barrier, stop = ctx.Barrier(3), ctx.Event()
        hogs = [
            ctx.Process(target=_hog, args=(side, path, hold_s, barrier, stop)) for _ in range(2)
        ]
        for p in hogs:
            p.start()
        waits: list[float] = []
        try:
            if side == "ofd-lock":
                conn2 = sqlite3.connect(path, timeout=60, isolation_level=None)
                lock = _OfdLock(path)
                barrier.wait(120)
                time.sleep(0.2)
                for _ in range(trials):
                    t0 = time.perf_counter()
                    lock.acquire()
                    waits.append((time.perf_counter() - t0) * 1e3)
                    conn2.execute("INSERT INTO w(v) VALUES ('asker')")
                    lock.release()
                    time.sleep(0.02)
                conn2.close()
                lock.close()
            else:
                db = litegate.connect(path, readers=1, timeout=60, fair=_fair_of(side))
                barrier.wait(120)
                time.sleep(0.2)
                for _ in range(trials):
                    t0 = time.perf_counter()
                    with db.write() as c:
                        waits.append((time.perf_counter() - t0) * 1e3)
                        c.execute("INSERT INTO w(v) VALUES ('asker')")
                    time.sleep(0.02)
                db.close()
        finally:
            stop.set()
            for p in hogs:
                p.join(60)
                if p.is_alive():
                    p.kill()
                    p.join()
    fig = describe(waits)
    return {"side": side, "trials": trials, "p50_ms": fig["p50"], "max_ms": fig["max"]}
