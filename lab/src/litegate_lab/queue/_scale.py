"""``litegate bench queue --scale``: the queue's costs against its backlog.

One queue grows from ``--scale-min`` (10 thousand) jobs to ``--scale-max``
(10 million) in steps of 1-3-10 (10k, 30k, 100k, ... 10M). The backlog is a
mix: 60 % ready (due now), 20 % scheduled far ahead (1 to 30 days), 20 %
done; it grows through ``put_many`` (the growth rate is reported too). At
each size, on the same queue, one client measures:

- ``put`` (one job per call): jobs/s and p50; ``put_many`` (1,000 a call):
  jobs/s;
- ``claim`` (one job per call): p50, p95 and claims/s; ``ack`` of each: p50;
- ``counts()`` and ``next_due()`` (what waiting claimers read): p50 in ms,
  and the same two reads as schema version 1 ran them (a count over every
  waiting job; the earliest run_at through the ready index), on the same
  data: the cost the counts table and the due index took away;
- ``purge``: the queue's purge transaction (``q.purge(limit=PURGE_SLICE)``: that many done jobs
  per transaction), jobs deleted/s; the jobs purged are then made again so
  the mix stays;
- bytes on disk per job (SQLite: database and WAL files; PostgreSQL: the
  queue's tables with their indexes and TOAST) and the WAL's high-water
  mark during the step (SQLite: the ``-wal`` file; PostgreSQL: ``pg_wal``).

After each step ``counts()`` is checked against the jobs the bench made:
an exact count or the run fails. ``--scale-budget S`` stops growing when
the next step would not finish within S seconds of the backend's start
(estimated from the growth rate so far). SQLite, then PostgreSQL (a
throwaway server, as for the other queue cells, or ``--pg-url``).
"""

from __future__ import annotations

import contextlib
import os
import random
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

from .. import _stats
from .._progress import Progress

MIX = {"ready": 0.6, "scheduled": 0.2, "done": 0.2}
GROW_BATCH = 10_000
# jobs per timed purge: the queue's own chunk (one transaction of its purge)
PURGE_SLICE = 5_000
DAY = 86_400.0

TARGETS = {
    "claim_p95_ratio": 2.0,  # claim p95 at the largest size <= 2 x at the smallest
    "read_ms": 5.0,  # counts() and next_due() at the largest size
    "rate_ratio": 0.8,  # put and claim rates >= 0.8 x at the smallest size
}


@dataclass(frozen=True)
class ScaleConfig:
    backends: tuple[str, ...] = ("sqlite",)
    scale_min: int = 10_000
    scale_max: int = 10_000_000
    budget_s: float | None = None  # per backend; None: every size
    samples: int = 300  # single put / claim / ack calls per size
    put_many_batches: int = 5  # of `batch` jobs
    batch: int = 1_000
    reads: int = 30  # counts() / next_due() calls per size
    v1_reads: int = 3  # the schema-1 reads (slow at size: a few)
    purge_chunks: int = 3
    pg_url: str | None = None
    pg_fsync: bool = True
    seed: int = 4

    def __post_init__(self) -> None:
        if self.scale_min < 1 or self.scale_max < self.scale_min:
            raise ValueError(
                f"--scale-max ({self.scale_max}) must be at least the smallest size "
                f"({self.scale_min})"
            )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if self.pg_url is not None:
            from ._pg import redact

            data["pg_url"] = redact(self.pg_url)
        return data


def sizes(low: int, high: int) -> list[int]:
    """1-3-10 steps from ``low`` to ``high``, ``high`` included."""
    out: list[int] = []
    decade = low
    while decade <= high:
        for k in (1, 3):
            n = decade * k
            if n <= high and (not out or n > out[-1]):
                out.append(n)
        decade *= 10
    if out[-1] != high:
        out.append(high)
    return out


# -- the reads of schema version 1 (count every job), on the same data: the
# "before" figures. On SQLite, written for today's tables (a full count of
# each, and the earliest run_at of every ready job).

_V1_SQLITE = {
    "counts": """
SELECT (SELECT count(*) FROM litegate_queue_ready WHERE queue = :queue)
       + (SELECT count(*) FROM litegate_queue_scheduled WHERE queue = :queue AND run_at <= :now),
       (SELECT count(*) FROM litegate_queue_scheduled WHERE queue = :queue AND run_at > :now),
       (SELECT count(*) FROM litegate_queue_leased WHERE queue = :queue),
       (SELECT count(*) FROM litegate_queue_jobs WHERE queue = :queue AND state = 2),
       (SELECT count(*) FROM litegate_queue_jobs WHERE queue = :queue AND state = 3)
""",
    "next_due": """
SELECT min(t) FROM (
    SELECT min(run_at) AS t FROM litegate_queue_ready WHERE queue = :queue
    UNION ALL
    SELECT min(run_at) FROM litegate_queue_scheduled WHERE queue = :queue
    UNION ALL
    SELECT min(lease_until) FROM litegate_queue_leased WHERE queue = :queue)
""",
}
_V1_PG_COUNTS = """
SELECT (SELECT count(*) FROM litegate_jobs WHERE queue = :queue AND state = 0 AND run_at <= :now),
       (SELECT count(*) FROM litegate_jobs WHERE queue = :queue AND state = 0 AND run_at > :now),
       (SELECT count(*) FROM litegate_jobs WHERE queue = :queue AND state = 1),
       (SELECT count(*) FROM litegate_done_jobs WHERE queue = :queue),
       (SELECT count(*) FROM litegate_jobs WHERE queue = :queue AND state = 3)
"""
# (Counting the jobs themselves, as version 1 did; done jobs are in their own
# table since schema 3.)
_V1_PG = {
    "counts": _V1_PG_COUNTS.replace(":queue", "%(queue)s").replace(":now", "now()"),
    # The plain run_at: the due index is on run_at AT TIME ZONE 'UTC', so this
    # goes through the ready index, as version 1 did.
    "next_due": """
SELECT min(t) FROM (
    SELECT min(run_at) AS t FROM litegate_jobs WHERE queue = %(queue)s AND state = 0
    UNION ALL
    SELECT min(lease_until) FROM litegate_jobs WHERE queue = %(queue)s AND state = 1) AS due
""",
}


# -- what each backend measures differently ------------------------------------


class _Store:
    """Where the queue lives and what its disk costs, per backend."""

    backend = "sqlite"
    where = ""

    def bytes_on_disk(self) -> int:
        raise NotImplementedError

    def wal_bytes(self) -> int:
        raise NotImplementedError

    def v1(self, name: str) -> str:
        raise NotImplementedError

    def info(self) -> dict[str, Any]:
        return {}

    def settle(self) -> None:
        """After a growth step, what the database would do by itself soon."""

    def close(self) -> None:
        """Let go of connections (the queue's storage goes with the context)."""


class _SqliteStore(_Store):
    def __init__(self, path: str) -> None:
        self.where = path

    def bytes_on_disk(self) -> int:
        total = 0
        for suffix in ("", "-wal"):
            with contextlib.suppress(OSError):
                total += os.path.getsize(self.where + suffix)
        return total

    def wal_bytes(self) -> int:
        try:
            return os.path.getsize(self.where + "-wal")
        except OSError:
            return 0

    def v1(self, name: str) -> str:
        return _V1_SQLITE[name]


class _PgStore(_Store):
    backend = "postgres"

    def __init__(self, url: str, server_info: dict[str, Any]) -> None:
        import psycopg

        self.where = url
        self._info = server_info
        self._conn: Any = psycopg.connect(url, autocommit=True, connect_timeout=30)
        self._waldir = True

    def bytes_on_disk(self) -> int:
        row = self._conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "WHERE c.relname IN ('litegate_jobs', 'litegate_done_jobs', 'litegate_queue_counts') "
            "AND c.relkind = 'r'"
        ).fetchone()
        return int(row[0])

    def wal_bytes(self) -> int:
        if not self._waldir:
            return 0
        try:
            row = self._conn.execute("SELECT coalesce(sum(size), 0) FROM pg_ls_waldir()").fetchone()
        except Exception:  # not a superuser (--pg-url): no WAL figure
            self._waldir = False
            return 0
        return int(row[0])

    def v1(self, name: str) -> str:
        return _V1_PG[name]

    def settle(self) -> None:
        # The growth claims and acks a fifth of the jobs in bulk, faster than
        # autovacuum (which the jobs table asks for after 2 % of it changed)
        # clears the dead row versions they leave at the head of the ready
        # index; a real backlog takes hours to build, and autovacuum keeps
        # up. Without this, every claim would walk those dead entries (3.5 x
        # the claim p95 at 3 million jobs). ANALYZE: the plans fresh
        # statistics give (autovacuum's too).
        self._conn.execute("VACUUM (ANALYZE) litegate_jobs, litegate_done_jobs")

    def info(self) -> dict[str, Any]:
        return self._info

    def close(self) -> None:
        self._conn.close()


class _WalPeak:
    """The WAL's size sampled on a thread (the queue lab's Sampler); the
    peak since the last :meth:`take`."""

    def __init__(self, store: _Store, interval: float = 0.1) -> None:
        from ._sampler import Sampler

        outer = self

        class _S(Sampler):
            NAME = "scale-wal-sampler"

            def size(self) -> int:
                return outer._size()

        self._store = store
        self._lock = threading.Lock()
        self._peak = 0
        self._sampler = _S(interval)

    def _size(self) -> int:
        with self._lock:
            n = self._store.wal_bytes()
            self._peak = max(self._peak, n)
            return n

    def __enter__(self) -> _WalPeak:
        self._sampler.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._sampler.stop()

    def take(self) -> int:
        with self._lock:
            peak = max(self._peak, self._store.wal_bytes())
            self._peak = 0
            return peak


@contextlib.contextmanager
def _stores(cfg: ScaleConfig, backend: str) -> Iterator[_Store]:
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix="litegate-bench-scale-") as tmp:
            yield _SqliteStore(os.path.join(tmp, "queue.db"))
        return
    from ._pg import PgCells

    with PgCells(cfg.pg_url, fsync=cfg.pg_fsync) as cells:
        name, url = cells.fresh()
        store = _PgStore(url, cells.info())
        try:
            yield store
        finally:
            store.close()
            cells.drop(name)


# -- one backend -------------------------------------------------------------------


def _ms(seconds: Sequence[float]) -> dict[str, float]:
    p = _stats.percentiles([s * 1000 for s in seconds], (50.0, 95.0))
    return {"p50": p[50.0], "p95": p[95.0]}


def _timed(fn: Callable[[], Any], n: int) -> tuple[list[float], float, list[Any]]:
    """``fn`` n times: each call's seconds, the whole's, and the results."""
    lat: list[float] = []
    out: list[Any] = []
    t0 = time.perf_counter()
    for _ in range(n):
        a = time.perf_counter()
        out.append(fn())
        lat.append(time.perf_counter() - a)
    return lat, time.perf_counter() - t0, out


class _Backlog:
    """The queue and what the bench put in it (the counts it must report)."""

    def __init__(self, q: Any, rnd: random.Random, batch: int) -> None:
        self.q = q
        self.rnd = rnd
        self.batch = batch
        self.expected = {"ready": 0, "scheduled": 0, "leased": 0, "done": 0, "dead": 0}
        self.serial = 0

    @property
    def size(self) -> int:
        return sum(self.expected.values())

    def payloads(self, n: int) -> list[dict[str, Any]]:
        self.serial += n
        return [{"task": "scale", "n": self.serial - n + i} for i in range(n)]

    def put_ready(self, n: int) -> None:
        for k in range(0, n, GROW_BATCH):
            self.q.put_many(self.payloads(min(GROW_BATCH, n - k)))
        self.expected["ready"] += n

    def put_scheduled(self, n: int) -> None:
        for k in range(0, n, GROW_BATCH):
            delay = self.rnd.uniform(1 * DAY, 30 * DAY)
            self.q.put_many(self.payloads(min(GROW_BATCH, n - k)), delay=delay)
        self.expected["scheduled"] += n

    def make_done(self, n: int) -> None:
        """Claim and ack ``n`` ready jobs (the oldest: what workers do)."""
        left = n
        while left > 0:
            jobs = self.q.claim(n=min(1_000, left))
            if not jobs:
                raise RuntimeError("the backlog ran out of ready jobs to finish")
            self.q.ack_many(jobs)
            left -= len(jobs)
        self.expected["ready"] -= n
        self.expected["done"] += n

    def grow(self, to: int) -> None:
        """Up to ``to`` jobs, in the mix."""
        need = to - self.size
        if need <= 0:
            return
        done = int(need * MIX["done"])
        scheduled = int(need * MIX["scheduled"])
        ready = need - scheduled  # the done ones are put ready, then finished
        self.put_ready(ready)
        self.put_scheduled(scheduled)
        self.make_done(done)


def _measure(cfg: ScaleConfig, store: _Store, b: _Backlog, wal: _WalPeak) -> dict[str, Any]:
    q = b.q
    out: dict[str, Any] = {"size": b.size}

    lat, total, _ = _timed(lambda: q.put({"task": "scale-put"}), cfg.samples)
    b.expected["ready"] += cfg.samples
    out["put_per_s"] = cfg.samples / total
    out["put_ms"] = _ms(lat)

    _, total, _ = _timed(lambda: q.put_many(b.payloads(cfg.batch)), cfg.put_many_batches)
    b.expected["ready"] += cfg.batch * cfg.put_many_batches
    out["put_many_per_s"] = cfg.batch * cfg.put_many_batches / total

    lat, total, claimed = _timed(lambda: q.claim(n=1), cfg.samples)
    jobs = [j for got in claimed for j in got]
    if len(jobs) != cfg.samples:
        raise RuntimeError(f"{cfg.samples} claims got {len(jobs)} jobs: the backlog ran dry")
    out["claim_per_s"] = cfg.samples / total
    out["claim_ms"] = _ms(lat)
    it = iter(jobs)
    lat, total, _ = _timed(lambda: q.ack(next(it)), len(jobs))
    b.expected["ready"] -= len(jobs)
    b.expected["done"] += len(jobs)
    out["ack_per_s"] = len(jobs) / total
    out["ack_ms"] = _ms(lat)

    lat, _, got = _timed(q.counts, cfg.reads)
    if got[-1] != b.expected:
        raise RuntimeError(f"counts() says {got[-1]}, the bench made {b.expected}")
    out["counts_ms"] = _ms(lat)
    lat, _, _ = _timed(q.next_due, cfg.reads)
    out["next_due_ms"] = _ms(lat)
    for name in ("counts", "next_due"):
        sql = store.v1(name)
        read = partial(q.db.query, sql, {"queue": q.name, "now": time.time()})
        lat, _, _ = _timed(read, cfg.v1_reads)
        out[f"{name}_v1_ms"] = _ms(lat)

    # A slice of the queue's purge (one of its transactions), a few times
    # over; then as many jobs done again.
    before = time.time() + 1
    _, total, deleted = _timed(
        lambda: q.purge(done_before=before, limit=PURGE_SLICE), cfg.purge_chunks
    )
    gone = sum(deleted)
    out["purge_per_s"] = gone / total if total > 0 else 0.0
    b.expected["done"] -= gone
    b.put_ready(gone)
    b.make_done(gone)

    out["bytes_per_job"] = store.bytes_on_disk() / max(b.size, 1)
    out["wal_peak_bytes"] = wal.take()
    out["size_after"] = b.size
    return out


def run_backend(
    cfg: ScaleConfig, backend: str, progress: Progress, label: str = ""
) -> dict[str, Any]:
    from litegate.queue import Queue

    steps: list[dict[str, Any]] = []
    plan = sizes(cfg.scale_min, cfg.scale_max)
    started = time.monotonic()
    stopped = ""
    with _stores(cfg, backend) as store:
        q = Queue(store.where, "scale")
        b = _Backlog(q, random.Random(cfg.seed), cfg.batch)
        try:
            with _WalPeak(store) as wal:
                grown_s = 0.0
                grown_jobs = 0
                for i, size in enumerate(plan):
                    if cfg.budget_s is not None and steps and grown_jobs:
                        per_job = grown_s / grown_jobs
                        guess = (size - b.size) * per_job * 1.3 + steps[-1]["measure_s"]
                        if time.monotonic() - started + guess > cfg.budget_s:
                            stopped = (
                                f"stopped before {size:,} jobs: the step would end past the "
                                f"{cfg.budget_s:g} s budget (about {guess:.0f} s more)"
                            )
                            break
                    progress.describe(f"{label}{backend}: growing to {size:,} jobs")
                    t0 = time.perf_counter()
                    before = b.size
                    b.grow(size)
                    grow_s = time.perf_counter() - t0
                    store.settle()
                    grown_s += grow_s
                    grown_jobs += b.size - before
                    progress.describe(f"{label}{backend}: measuring at {size:,} jobs")
                    t1 = time.perf_counter()
                    step = _measure(cfg, store, b, wal)
                    grown = step["size"] - before
                    step["grow_per_s"] = grown / grow_s if grown > 0 else None
                    step["measure_s"] = time.perf_counter() - t1
                    step["counts"] = dict(b.expected)
                    steps.append(step)
                    progress.advance()
                    if i == len(plan) - 1:
                        break
        finally:
            q.close()
        info = store.info()
    progress.advance(len(plan) - len(steps))
    return {
        "backend": backend,
        "steps": steps,
        "planned": plan,
        "stopped": stopped,
        "elapsed_s": time.monotonic() - started,
        "server": info,
        "targets": targets(steps),
    }


def targets(steps: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 21's targets, at the largest size measured against the smallest."""
    if len(steps) < 2:
        return []
    first, last = steps[0], steps[-1]
    at = f"at {last['size']:,} vs {first['size']:,}"
    out = []

    def add(name: str, value: float, limit: float, ok: bool, unit: str) -> None:
        out.append({"target": name, "value": value, "limit": limit, "met": ok, "unit": unit})

    ratio = last["claim_ms"]["p95"] / first["claim_ms"]["p95"]
    add(f"claim p95 {at}", ratio, TARGETS["claim_p95_ratio"], ratio <= 2.0, "x")
    for name in ("counts", "next_due"):
        ms = last[f"{name}_ms"]["p50"]
        add(f"{name}() at {last['size']:,}", ms, TARGETS["read_ms"], ms <= 5.0, "ms")
    for name in ("put", "claim"):
        ratio = last[f"{name}_per_s"] / first[f"{name}_per_s"]
        add(f"{name} rate {at}", ratio, TARGETS["rate_ratio"], ratio >= 0.8, "x")
    return out


def run(cfg: ScaleConfig, progress: Progress | None = None) -> dict[str, Any]:
    progress = progress or Progress(0)
    progress.total = float(len(sizes(cfg.scale_min, cfg.scale_max)) * len(cfg.backends))
    started = time.time()
    parts = []
    for backend in cfg.backends:
        label = f"[{backend}] " if len(cfg.backends) > 1 else ""
        parts.append(run_backend(cfg, backend, progress, label))
    return {
        "experiment": "queue",
        "mode": "scale",
        "started_at": started,
        "config": cfg.to_json(),
        "parts": parts,
    }


# -- report --------------------------------------------------------------------------


def _n(v: float | None, unit: str = "") -> str:
    if v is None:
        return "-"
    if v >= 1_000_000:
        return f"{v / 1_000_000:.1f}M{unit}"
    if v >= 10_000:
        return f"{v / 1000:.0f}k{unit}"
    return f"{v:,.0f}{unit}"


def _t(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.3f}" if v < 1 else f"{v:.2f}" if v < 10 else f"{v:.0f}"


def _mib(v: float) -> str:
    return f"{v / 1048576:.1f}"


HEADERS = [
    "jobs",
    "grow/s",
    "put/s",
    "put p50",
    "put_many/s",
    "claim/s",
    "claim p50",
    "claim p95",
    "ack p50",
    "counts",
    "counts v1",
    "next_due",
    "next_due v1",
    "purge/s",
    "B/job",
    "WAL peak MiB",
]


def table(part: dict[str, Any]) -> str:
    rows = []
    for s in part["steps"]:
        rows.append(
            [
                _n(s["size"]),
                _n(s["grow_per_s"]),
                _n(s["put_per_s"]),
                _t(s["put_ms"]["p50"]),
                _n(s["put_many_per_s"]),
                _n(s["claim_per_s"]),
                _t(s["claim_ms"]["p50"]),
                _t(s["claim_ms"]["p95"]),
                _t(s["ack_ms"]["p50"]),
                _t(s["counts_ms"]["p50"]),
                _t(s["counts_v1_ms"]["p50"]),
                _t(s["next_due_ms"]["p50"]),
                _t(s["next_due_v1_ms"]["p50"]),
                _n(s["purge_per_s"]),
                f"{s['bytes_per_job']:.0f}",
                _mib(s["wal_peak_bytes"]),
            ]
        )
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HEADERS)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    sep = "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|"
    return "\n".join([line(HEADERS), sep, *(line(r) for r in rows)])


def render(result: dict[str, Any]) -> str:
    cfg = result["config"]
    out = [
        "# litegate bench queue --scale",
        "",
        "One queue grown by put_many to each size (60 % ready, 20 % scheduled 1-30 days "
        "ahead, 20 % done); at each size one client times single calls. Latencies in ms; "
        "rates per second. counts/next_due v1: the same reads as schema version 1 ran them "
        "(a count of every waiting job; the earliest run_at through the ready index), on "
        "the same data. WAL peak: the -wal file (PostgreSQL: pg_wal) during the step.",
    ]
    for part in result["parts"]:
        name = "PostgreSQL" if part["backend"] == "postgres" else "SQLite"
        out += ["", f"## {name}", ""]
        if part.get("server"):
            srv = part["server"]
            out.append(f"server: {srv.get('version', '?')}, fsync {srv.get('fsync', '?')}")
            out.append("")
        if not part["steps"]:
            out.append("(no size measured)")
            continue
        out.append(table(part))
        if part["stopped"]:
            out += ["", part["stopped"]]
        if part["targets"]:
            out.append("")
            for t in part["targets"]:
                mark = "met" if t["met"] else "MISSED"
                op = "<=" if t["unit"] == "ms" or "p95" in t["target"] else ">="
                out.append(
                    f"- {t['target']}: {t['value']:.2f} {t['unit']} "
                    f"(target {op} {t['limit']:g} {t['unit']}): {mark}"
                )
    out += ["", f"sizes {cfg['scale_min']:,} .. {cfg['scale_max']:,}"]
    return "\n".join(out)


def charts(result: dict[str, Any], out: Path) -> list[Path]:
    """Cost per operation against the backlog, one chart per backend."""
    from .._charts import lines

    paths = []
    for part in result["parts"]:
        steps = part["steps"]
        if len(steps) < 2:
            continue
        x = [float(s["size"]) for s in steps]
        # In microseconds: most calls take well under a millisecond, and
        # the chart's log scale is linear below 1.
        figures = {
            "put p50": ("put_ms", "p50"),
            "claim p50": ("claim_ms", "p50"),
            "claim p95": ("claim_ms", "p95"),
            "ack p50": ("ack_ms", "p50"),
            "counts()": ("counts_ms", "p50"),
            "next_due()": ("next_due_ms", "p50"),
            "counts() as schema 1 read it": ("counts_v1_ms", "p50"),
            "next_due() as schema 1 read it": ("next_due_v1_ms", "p50"),
        }
        series = {
            label: [s[key][pct] * 1000 for s in steps] for label, (key, pct) in figures.items()
        }
        name = "PostgreSQL" if part["backend"] == "postgres" else "SQLite"
        path = lines(
            out / f"queue-scale-{part['backend']}.png",
            title=f"litegate bench queue --scale on {name}: cost per call against the backlog",
            x=x,
            series=series,
            xlabel="jobs in the table",
            ylabel="µs per call (log)",
            logx=True,
        )
        paths.append(path)
    return paths
