"""Where a task's result lives: one row per job in ``litegate_task_results``,
beside the queue's own job table in the same file. It is written in
the queue's transactions (the claim that starts an attempt, the ack that
ends it), so a result never disagrees with its job."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from ...queue._sqlite import JOB_STATE, JOBS

TABLE = "litegate_task_results"

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    job_id            INTEGER PRIMARY KEY,
    status            TEXT NOT NULL,
    return_value      TEXT,
    errors            TEXT NOT NULL DEFAULT '[]',
    worker_ids        TEXT NOT NULL DEFAULT '[]',
    started_at        REAL,
    last_attempted_at REAL,
    finished_at       REAL
)
"""

# The exception path recorded for an attempt whose worker went away.
WORKER_LOST = "litegate.django.tasks.WorkerLost"

# An attempt starts (in the claim's transaction). A row still RUNNING from
# an earlier attempt means that attempt's worker stopped or died before it
# finished: that is recorded as the attempt's error.
_STARTED = f"""
INSERT INTO {TABLE} (job_id, status, worker_ids, started_at, last_attempted_at)
VALUES (?1, 'RUNNING', json_array(?2), ?3, ?3)
ON CONFLICT (job_id) DO UPDATE SET
    errors = CASE WHEN status = 'RUNNING'
                  THEN json_insert(errors, '$[#]', json_array(?4,
                       'the worker running this task (' || json_extract(worker_ids, '$[#-1]') ||
                       ') stopped before the task finished; it was run again'))
                  ELSE errors END,
    status = 'RUNNING',
    worker_ids = json_insert(worker_ids, '$[#]', ?2),
    last_attempted_at = ?3
"""

_FINISHED = f"""
UPDATE {TABLE}
   SET status = ?1, return_value = ?2, finished_at = ?3,
       errors = CASE WHEN ?4 IS NULL THEN errors
                     ELSE json_insert(errors, '$[#]', json_array(?4, ?5)) END
 WHERE job_id = ?6
"""

# A job and its result, for get_result(): the job's state says where it is,
# the result row what happened in its attempts.
SELECT = f"""
SELECT {JOB_STATE}, j.payload, j.created_at, j.last_error, j.queue,
       r.status, r.return_value, r.errors, r.worker_ids, r.started_at,
       r.last_attempted_at, r.finished_at
  FROM {JOBS} AS j LEFT JOIN {TABLE} AS r ON r.job_id = j.id
 WHERE j.id = ?
"""

# How many jobs of some queues (a JSON array) are in each status, the way
# get_result() tells a job's status from its state and its result row.
# (GROUP BY 1: a name there would be r.status, the column, not the alias.)
COUNTS = f"""
SELECT CASE {JOB_STATE} WHEN 0 THEN 'READY' WHEN 1 THEN 'RUNNING'
                        WHEN 2 THEN coalesce(r.status, 'FAILED') ELSE 'FAILED' END,
       count(*)
  FROM {JOBS} AS j LEFT JOIN {TABLE} AS r ON r.job_id = j.id
 WHERE j.queue IN (SELECT value FROM json_each(?))
 GROUP BY 1
"""


def create(conn: sqlite3.Connection) -> None:
    conn.execute(SCHEMA)


def started(conn: sqlite3.Connection, job_ids: Sequence[int], worker_id: str) -> None:
    now = time.time()
    conn.executemany(_STARTED, [(jid, worker_id, now, WORKER_LOST) for jid in job_ids])


# A job released unstarted (claimed ahead, given back at the worker's stop):
# its claim recorded a start that did not happen. The row goes back to how
# it was: gone if that claim made it, else READY (not RUNNING, which the next
# start would take for a worker that died mid-task: a false WorkerLost)
# without the releasing worker's id. (Its last_attempted_at keeps the
# released claim's time: the earlier attempt's is not kept anywhere.)
_RELEASED_FIRST = f"""
DELETE FROM {TABLE}
 WHERE job_id = ? AND status = 'RUNNING' AND errors = '[]'
   AND json_array_length(worker_ids) <= 1
"""
_RELEASED = f"""
UPDATE {TABLE}
   SET status = 'READY', worker_ids = json_remove(worker_ids, '$[#-1]')
 WHERE job_id = ? AND status = 'RUNNING'
"""


def released(conn: sqlite3.Connection, job_ids: Sequence[int]) -> None:
    """In the release's transaction: undo what :func:`started` recorded."""
    rows = [(jid,) for jid in job_ids]
    conn.executemany(_RELEASED_FIRST, rows)
    conn.executemany(_RELEASED, rows)


Outcome = tuple[str, Any, "str | None", "str | None"]
"""What a worker's handler returns: (status, return value as JSON text,
exception class path, traceback)."""


def finished(conn: sqlite3.Connection, done: Sequence[tuple[int, Outcome]]) -> None:
    now = time.time()
    conn.executemany(
        _FINISHED,
        [(o[0], o[1], now, o[2], o[3], jid) for jid, o in done],
    )


def errors_of(text: str | None) -> list[tuple[str, str]]:
    return [(str(e[0]), str(e[1])) for e in json.loads(text or "[]")]
