"""``litegate bench queue``: seed 004, the SQLite task-queue benchmark.

The seed's five scenarios under its three PRAGMA profiles (conservative,
balanced, aggressive), plus end-to-end rows and the WAL frames per
operation, for seven queues on the same machine in the same run:

- ``bare``: a bare batched ``sqlite3`` queue (no leases, attempts or
  priorities): ``executemany`` inserts in one transaction, claim by
  ``UPDATE … WHERE id IN (SELECT … LIMIT n) RETURNING``, ack by DELETE;
- ``seed``: the seed's own approach: plain ``sqlite3`` with the profile's
  PRAGMAs, every statement through its ``execute_with_retry`` (3 tries,
  0.1 s exponential back-off), one connection per worker, autocommit insert,
  one job claimed per ``BEGIN IMMEDIATE … UPDATE … RETURNING``, ack by UPDATE;
- ``litegate``: ``litegate.queue.Queue`` (leases, attempts, priorities),
  its database opened with the write gate's policy a Queue opened from a
  path uses (``Queue.FAIR``, strict);
- ``litegate-worker``: the same queue, in the end-to-end rows only: its
  producers are ``litegate``'s, its consumers litegate's own ``Worker``
  (``concurrency`` = the row's threads, ``prefetch`` = the claim size minus
  that), which settles finished jobs with its next claim in one transaction
  (the batch completer): the queue as users run it;
- ``litegate-bounded``: the same queue on a database opened with
  ``fair=True``, the bounded policy that is ``connect()``'s default: the two
  policies side by side in one run (the targets are judged on ``litegate``);
- ``huey``: huey's ``SqliteHuey`` storage, enqueue / dequeue (huey has no
  lease and no ack: dequeue deletes the task);
- ``litequeue``: ``LiteQueue`` put / pop / done.

Scenarios:

1. ``single``: one process, 1,000 puts: throughput, median, P95, P99 latency;
2. ``concurrent``: 2, 4 and 8 worker processes sharing the puts: throughput,
   median latency, error rate, SQLITE_BUSY errors;
3. ``mixed``: 2 writer + 2 claimer processes for 10 s: write and claim
   throughput, claim p50/p95/p99, total errors;
4. ``stress``: 1, 2, 4, 8, 16 worker processes, each put -> claim -> ack,
   to the breaking point: throughput, p99, errors;
5. ``long``: the mixed workload for 60 s with the WAL size sampled: its peak
   and its course (PNG);
6. ``e2e``: 4 producer + 4 worker processes; ``batched`` (put_many of 100,
   claim 100, ack_many) against the bare batched queue, and ``one-job``
   (put, claim(1), ack; 8 threads per process) against the seed's approach,
   with each worker's share of the jobs;
7. ``frames``: one process, one thread, each side's own client: after a
   backlog of 3,000 jobs, 400 single-job puts, then 400 claims of one job,
   then 400 acks, the WAL frames (pages written) each appended, read from
   the WAL-index header in the ``-shm`` file before and after it
   (``_frames``); under the end-to-end rows' profiles.

Every cell runs on a fresh database in a temporary directory, its worker
processes (``spawn``) start together on a barrier, and every run is bounded
in time. Each side applies the profile's PRAGMAs itself. Every job put is
accounted for: processed exactly once, or still in the queue. The cells of
both litegate sides also get its write gate's figures, from the sidecar's
counters: grants across processes and the share of them forced by a
hand-off to the head of the line; ``--grant-log`` logs every grant of them
and checks the fairness bounds on the log (``litegate.diagnostics``).

``--backend postgres`` runs the same scenarios and end-to-end rows on a
PostgreSQL server (a throwaway one started for the run, fsync on, or
``--pg-url``), a fresh database per cell, for three queues:

- ``litegate``: ``litegate.queue.Queue(url)``, as on SQLite;
- ``procrastinate``: ``defer_async`` / ``batch_defer_async``; claims through
  ``App.job_manager.fetch_job`` + ``finish_job`` (what its worker calls, one
  job per query);
- ``pgqueuer`` (asyncpg driver): ``Queries.enqueue`` (lists for a batch);
  claims through ``Queries.dequeue`` + ``log_jobs`` (what its QueueManager
  calls).

In the end-to-end rows the two peers consume with their own worker loops
(``App.run_worker_async``, ``PgQueuer.run``), litegate with claim/ack. The
PRAGMA profiles do not apply (one configuration: the server's); the database
size stands in for the WAL's, lock conflicts for SQLITE_BUSY; the targets
are issue 11's (end to end >= 15,000 jobs/s batched, >= 3,000 one-job, and
>= 1x each peer).

``--scale`` measures something else: the queue's costs against its backlog,
from 10 thousand to 10 million jobs (see ``_scale``).

``--backend sqlite,postgres`` (or ``both``) runs SQLite's cells, then
PostgreSQL's, in one invocation: one report (a summary line per backend with
its end-to-end jobs/s, then a section per backend), one JSON (``results``,
one per backend) and the charts of each backend, its name in theirs. Options
that only one backend has go to its part (``--sides``: each takes the listed
sides it has; ``--profiles``: SQLite's).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._progress import Progress
from . import _scale
from ._config import Combined, Config, add_arguments, config_from_args
from ._render import render as _render_seed
from ._run import NAME, plan
from ._run import run as _run_seed
from ._scale import ScaleConfig

HELP = (
    "seed 004: task queue (put/claim/ack) under three profiles vs sqlite3, huey, litequeue; "
    "--backend postgres: vs procrastinate, pgqueuer; --backend both: one after the other"
)

__all__ = [
    "HELP",
    "NAME",
    "Combined",
    "Config",
    "ScaleConfig",
    "add_arguments",
    "charts",
    "config_from_args",
    "plan",
    "render",
    "run",
]


def run(cfg: Config | Combined | ScaleConfig, progress: Progress | None = None) -> dict[str, Any]:
    if isinstance(cfg, ScaleConfig):
        return _scale.run(cfg, progress)
    return _run_seed(cfg, progress)


def render(result: dict[str, Any]) -> str:
    if result.get("mode") == "scale":
        return _scale.render(result)
    return _render_seed(result)


def charts(result: dict[str, Any], out: Path) -> list[Path]:
    if result.get("mode") == "scale":
        return _scale.charts(result, out)
    from ._plots import charts as draw

    return draw(result, out)
