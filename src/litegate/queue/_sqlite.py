"""The queue's SQL on SQLite: the one place that knows the schema.

Every function here runs on a connection it is given, inside a transaction
someone else opened and will commit (litegate's group commit, through
``db.transact``), or builds a read statement for the reader pool. Nothing
here validates arguments, encodes payloads or decides policy: that is the
queue's logic (``_core.py``), which the PostgreSQL store shares.

The schema is built for the fewest pages written per operation, because on
SQLite every page a transaction changes is a frame appended to the WAL (and
copied back by a checkpoint). A job's state is which small table holds its
key, as in solid_queue:

- ``litegate_queue_jobs``: one row per job (the payload and what a listing
  shows), appended by a put and rewritten when the job finishes. It has no
  index on the hot path: finished jobs stay readable by id without slowing
  anything down, and purge walks it in id order (ids grow with time).
- ``litegate_queue_ready``: the key of every job that can be claimed now, in
  claim order (queue, -priority, run_at, id), and nothing else: a claim
  takes the first n entries, a put adds one.
- ``litegate_queue_scheduled``: jobs due later (a delay, a retry's back-off),
  by run_at. A claim moves the ones that fell due to ready first.
- ``litegate_queue_leased``: the jobs being worked on, by (queue,
  lease_until, id), with the lease's token and the attempt number: the
  expiry sweep and next_due read its first entries; an ack finds its row by
  the key the Job carries.
- ``litegate_queue_counts``: exact counts per (queue, state, hour), changed
  once per statement by the functions below (never by triggers).

Pages written, the common case (no dedupe key, no delay):

======  ==================================================  =====
put     the job's row, its ready entry, the counts row      3
claim   its ready entry (taken), its leased row, counts     3
ack     its leased row, the job's row, counts               3
======  ==================================================  =====

Batches share pages: put_many, a claim of n and ack_many of n write a few
pages of each table for the whole batch. They also share statements:
put_many's payloads arrive as one JSON array that SQLite's ``json_each``
splits into rows, a claim of n reads, leases and deletes one range of
ready's key, and ack_many deletes each claim's leased rows in one statement.

Only the functions here change these tables; hand-written SQL that does
must be followed by ``Queue.recount()``. Times are ``time.time()`` of the
host (one machine shares the file).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Sequence
from typing import Any

from .._combine import shippable
from .._errors import ConfigError
from ._model import (
    DEAD,
    DONE,
    LEASED,
    READY,
    Batch,
    KeyTaken,
    Owned,
    failed_mark,
    released_mark,
)

# The state numbers, re-exported for the logic, and the store seam (_core.Store).
__all__ = [
    "COUNTS",
    "DEAD",
    "DONE",
    "LEASED",
    "NEXT_DUE",
    "READY",
    "SELECT_DEAD",
    "SELECT_FINISHED",
    "SELECT_JOB",
    "KeyTaken",
    "ack",
    "bury",
    "claim",
    "create_schema",
    "extend",
    "fail",
    "insert_batch",
    "insert_many",
    "insert_one",
    "purge",
    "recount",
    "release",
    "retry_dead",
]

SCHEMA_VERSION = 4

JOBS = "litegate_queue_jobs"
READY_T = "litegate_queue_ready"
SCHEDULED = "litegate_queue_scheduled"
LEASED_T = "litegate_queue_leased"
COUNTS_TABLE = "litegate_queue_counts"

# The counts' states: the job states, and SCHEDULED for waiting jobs not yet
# due (counted per hour of their run_at: see COUNTS).
SCHEDULED_STATE = 4

# A job row's state: LIVE while it is in one of the hot tables (ready,
# scheduled or leased: the tables say which), then DONE or DEAD.
LIVE = READY

# The hour a scheduled job's run_at falls in. Every hour but the current one
# is wholly before or after now, so counts() splits scheduled jobs into due
# and not yet due from a few count rows plus the current hour's jobs.
HOUR = 3600


def _hour(t: float) -> int:
    return int(t // HOUR)


# -- schema --------------------------------------------------------------------

_V4 = f"""
CREATE TABLE IF NOT EXISTS {JOBS} (
    id           INTEGER PRIMARY KEY,
    queue        TEXT    NOT NULL,
    state        INTEGER NOT NULL,
    priority     INTEGER NOT NULL,
    run_at       REAL    NOT NULL,
    payload      TEXT    NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    token        INTEGER,
    key          TEXT,
    last_error   TEXT,
    created_at   REAL    NOT NULL,
    done_at      REAL
);
CREATE UNIQUE INDEX IF NOT EXISTS {JOBS}_key
    ON {JOBS} (queue, key) WHERE key IS NOT NULL AND state <> 2;
CREATE INDEX IF NOT EXISTS {JOBS}_dead ON {JOBS} (queue, done_at) WHERE state = 3;
CREATE TABLE IF NOT EXISTS {READY_T} (
    queue  TEXT    NOT NULL,
    prio   INTEGER NOT NULL,
    run_at REAL    NOT NULL,
    id     INTEGER NOT NULL,
    PRIMARY KEY (queue, prio, run_at, id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS {SCHEDULED} (
    queue  TEXT    NOT NULL,
    run_at REAL    NOT NULL,
    id     INTEGER NOT NULL,
    prio   INTEGER NOT NULL,
    PRIMARY KEY (queue, run_at, id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS {LEASED_T} (
    queue       TEXT    NOT NULL,
    lease_until REAL    NOT NULL,
    id          INTEGER NOT NULL,
    token       INTEGER NOT NULL,
    attempts    INTEGER NOT NULL,
    PRIMARY KEY (queue, lease_until, id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS {COUNTS_TABLE} (
    queue  TEXT    NOT NULL,
    state  INTEGER NOT NULL,
    bucket INTEGER NOT NULL,
    n      INTEGER NOT NULL,
    PRIMARY KEY (queue, state, bucket)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS litegate_queue_schema (version INTEGER NOT NULL);
"""

# Schema 3 (one table, litegate_jobs, with partial indexes and counts kept by
# triggers) moved into schema 4 in the migrating transaction: all of it, or
# (if that process dies) none of it. A leased job keeps its token and lease.
_FROM_V3 = f"""
INSERT INTO {JOBS} (id, queue, state, priority, run_at, payload, attempts, max_attempts,
                    token, key, last_error, created_at, done_at)
    SELECT id, queue, CASE WHEN state = 1 THEN 0 ELSE state END, priority, run_at, payload,
           CASE WHEN state = 1 THEN max(attempts - 1, 0) ELSE attempts END, max_attempts,
           token, key, last_error, created_at, done_at
      FROM litegate_jobs;
INSERT INTO {READY_T} (queue, prio, run_at, id)
    SELECT queue, -priority, run_at, id FROM litegate_jobs WHERE state = 0 AND run_at <= :now;
INSERT INTO {SCHEDULED} (queue, run_at, id, prio)
    SELECT queue, run_at, id, -priority FROM litegate_jobs WHERE state = 0 AND run_at > :now;
INSERT INTO {LEASED_T} (queue, lease_until, id, token, attempts)
    SELECT queue, coalesce(lease_until, 0), id, coalesce(token, 0), attempts
      FROM litegate_jobs WHERE state = 1;
DROP TABLE litegate_jobs;
DELETE FROM {COUNTS_TABLE};
"""


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]


@shippable
def create_schema(conn: sqlite3.Connection) -> int:
    """Create or migrate the tables (inside the caller's write transaction,
    so no other writer sees them half done); return the schema version
    found or written."""
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'litegate_queue_schema'"
    ).fetchone()
    found = 0
    if row is not None:
        (version,) = conn.execute("SELECT max(version) FROM litegate_queue_schema").fetchone()
        found = int(version or 0)
    if found > SCHEMA_VERSION:
        raise ConfigError(
            f"the queue's tables in this file are at schema version {found}, newer than this "
            f"litegate knows ({SCHEMA_VERSION}); upgrade litegate in this environment"
        )
    if found == SCHEMA_VERSION:
        return found
    if 0 < found < 3:
        # Versions 1 and 2 differ from 3 only in the counts' triggers, which
        # the move below drops with their table.
        found = 3
    for statement in _statements(_V4):
        conn.execute(statement)
    old = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'litegate_jobs'"
    ).fetchone()
    if old is not None:
        now = time.time()
        for statement in _statements(_FROM_V3):
            conn.execute(statement, {"now": now} if ":now" in statement else {})
        recount(conn)
    conn.execute("INSERT INTO litegate_queue_schema (version) VALUES (?)", (SCHEMA_VERSION,))
    return SCHEMA_VERSION


@shippable
def recount(conn: sqlite3.Connection) -> None:
    """Count every job again (all queues): after SQL that changed the
    queue's tables by hand. Reads each table once."""
    conn.execute(f"DELETE FROM {COUNTS_TABLE}")
    conn.execute(
        f"INSERT INTO {COUNTS_TABLE} (queue, state, bucket, n) "
        f"SELECT queue, {READY}, 0, count(*) FROM {READY_T} GROUP BY queue"
    )
    conn.execute(
        f"INSERT INTO {COUNTS_TABLE} (queue, state, bucket, n) "
        f"SELECT queue, {SCHEDULED_STATE}, CAST(run_at / {HOUR} AS INTEGER), count(*) "
        f"FROM {SCHEDULED} GROUP BY 1, 3"
    )
    conn.execute(
        f"INSERT INTO {COUNTS_TABLE} (queue, state, bucket, n) "
        f"SELECT queue, {LEASED}, 0, count(*) FROM {LEASED_T} GROUP BY queue"
    )
    conn.execute(
        f"INSERT INTO {COUNTS_TABLE} (queue, state, bucket, n) "
        f"SELECT queue, state, 0, count(*) FROM {JOBS} WHERE state IN (2, 3) GROUP BY 1, 2"
    )


# -- counting ------------------------------------------------------------------

_COUNT = (
    f"INSERT INTO {COUNTS_TABLE} (queue, state, bucket, n) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (queue, state, bucket) DO UPDATE SET n = n + excluded.n"
)

Deltas = dict[tuple[int, int], int]


def _count(conn: sqlite3.Connection, queue: str, deltas: Deltas) -> None:
    """Apply ``{(state, bucket): change}`` to the queue's counts, one
    statement for the lot. A count that falls to zero keeps its row (a
    DELETE per change cost as much as the change; purge clears them)."""
    rows = [(queue, state, bucket, n) for (state, bucket), n in deltas.items() if n]
    if len(rows) == 1:
        conn.execute(_COUNT, rows[0])
    elif rows:
        conn.executemany(_COUNT, rows)


def _add(deltas: Deltas, state: int, bucket: int, n: int) -> None:
    deltas[(state, bucket)] = deltas.get((state, bucket), 0) + n


def _waiting(deltas: Deltas, run_at: float, now: float, n: int) -> None:
    """Count ``n`` jobs coming into (n > 0) or leaving the table their
    ``run_at`` puts them in: ready if due at ``now``, else scheduled."""
    if run_at <= now:
        _add(deltas, READY, 0, n)
    else:
        _add(deltas, SCHEDULED_STATE, _hour(run_at), n)


def _enqueue(conn: sqlite3.Connection, queue: str, jobs: Iterable[tuple[int, int, float]],
             now: float, deltas: Deltas) -> None:  # fmt: skip
    """Put jobs ``(id, priority, run_at)`` where they wait: ready or
    scheduled. Their job rows are the caller's."""
    ready, later = [], []
    for jid, priority, run_at in jobs:
        if run_at <= now:
            ready.append((queue, -priority, run_at, jid))
        else:
            later.append((queue, run_at, jid, -priority))
        _waiting(deltas, run_at, now, 1)
    if len(ready) == 1:
        conn.execute(_INSERT_READY, ready[0])
    elif ready:
        conn.executemany(_INSERT_READY, ready)
    if later:
        conn.executemany(_INSERT_SCHEDULED, later)


_INSERT_READY = f"INSERT INTO {READY_T} (queue, prio, run_at, id) VALUES (?, ?, ?, ?)"
_INSERT_SCHEDULED = f"INSERT INTO {SCHEDULED} (queue, run_at, id, prio) VALUES (?, ?, ?, ?)"


# -- putting ---------------------------------------------------------------------

_INSERT = (
    f"INSERT INTO {JOBS} (queue, state, priority, run_at, payload, max_attempts, key, "
    "created_at) VALUES (?, 0, ?, ?, ?, ?, ?, ?)"
)

# A row for _INSERT: (queue, priority, run_at, payload, max_attempts, key, created_at)
Row = tuple[str, int, float, str, int, "str | None", float]


@shippable
def insert_one(conn: sqlite3.Connection, row: Row) -> int:
    try:
        cur = conn.execute(_INSERT, row)
    except sqlite3.IntegrityError:
        key = row[5]
        if key is None:
            raise
        found = conn.execute(
            f"SELECT id FROM {JOBS} WHERE queue = ? AND key = ? AND state <> 2", (row[0], key)
        ).fetchone()
        if found is None:
            raise
        raise KeyTaken(key, int(found[0])) from None
    jid = cur.lastrowid
    assert jid is not None
    deltas: Deltas = {}
    _enqueue(conn, row[0], [(jid, row[1], row[2])], time.time(), deltas)
    _count(conn, row[0], deltas)
    return jid


@shippable
def insert_many(conn: sqlite3.Connection, rows: Sequence[Row]) -> list[int]:
    """Insert ``rows`` (no keys, one queue) and return their ids, in order.

    ``executemany`` keeps the per-row cost in C but reports no ids. Inside
    one write transaction, with nobody else writing, SQLite gives each new
    row max(id) + 1 until that would pass the 64-bit limit (then it picks
    free ids at random), so the ids are the run after the largest one.
    """
    if len(rows) == 1:
        return [insert_one(conn, rows[0])]
    before = _max_id(conn)
    if before + len(rows) >= _MAX_ROWID:
        return [insert_one(conn, row) for row in rows]
    conn.executemany(_INSERT, rows)
    return _wait(conn, rows[0][0], before, [(r[1], r[2]) for r in rows])


@shippable
def insert_batch(conn: sqlite3.Connection, batch: Batch) -> list[int]:
    """Insert a batch (see ``Batch``) and return its ids, in order: one
    INSERT from SQLite's ``json_each`` over the encoded array, whose rows
    are each payload's own text (an object's or array's value is its JSON
    text as written). Ids as in ``insert_many``."""
    queue, priority, run_at, max_attempts, created_at, bodies, count = batch
    before = _max_id(conn)
    if before + count >= _MAX_ROWID:
        return [
            insert_one(conn, (queue, priority, run_at, body, max_attempts, None, created_at))
            for (body,) in conn.execute("SELECT value FROM json_each(?)", (bodies,)).fetchall()
        ]
    conn.execute(_INSERT_EACH, (queue, priority, run_at, max_attempts, created_at, bodies))
    return _wait(conn, queue, before, [(priority, run_at)] * count)


_INSERT_EACH = f"""
INSERT INTO {JOBS} (queue, state, priority, run_at, payload, max_attempts, key, created_at)
SELECT ?1, 0, ?2, ?3, value, ?4, NULL, ?5 FROM json_each(?6)
"""


def _max_id(conn: sqlite3.Connection) -> int:
    return int(conn.execute(f"SELECT coalesce(max(id), 0) FROM {JOBS}").fetchone()[0])


def _wait(
    conn: sqlite3.Connection, queue: str, before: int, waits: Sequence[tuple[int, float]]
) -> list[int]:
    """The rows just inserted after id ``before``, one per ``(priority,
    run_at)`` of ``waits``, go where they wait (ready or scheduled) and are
    counted; returns their ids."""
    first, last = before + 1, before + len(waits)
    now = time.time()
    deltas: Deltas = {}
    if all(run_at <= now for _prio, run_at in waits):
        # All due now (the common case): their ready entries in one statement,
        # from the rows just written, with no tuples built here.
        conn.execute(_READY_FROM_JOBS, (first, last))
        _add(deltas, READY, 0, len(waits))
    else:
        jobs = (
            (jid, prio, run_at)
            for jid, (prio, run_at) in zip(range(first, last + 1), waits, strict=True)
        )
        _enqueue(conn, queue, jobs, now, deltas)
    _count(conn, queue, deltas)
    return list(range(first, last + 1))


_READY_FROM_JOBS = (
    f"INSERT INTO {READY_T} (queue, prio, run_at, id) "
    f"SELECT queue, -priority, run_at, id FROM {JOBS} WHERE id BETWEEN ? AND ?"
)


_MAX_ROWID = 2**63 - 1


# -- claiming --------------------------------------------------------------------

# A claim of n takes a run of ready's primary key: from the queue's first key
# to the n-th (or its last, if it has fewer). The run's end is found by one
# seek; the leases are written, the rows read (in claim order) and the run
# deleted by range, with no list of ids built or parsed and no RETURNING.
# (Against a delete of the first n seeking each key and RETURNING the ids,
# then two statements keyed by a JSON list of them: these statements 2.2
# against 4.3 µs a job at n = 100; a whole one-job claim 68 against 85 µs of
# CPU.)
_NTH_READY = (
    f"SELECT prio, run_at, id FROM {READY_T} WHERE queue = ? "
    "ORDER BY prio, run_at, id LIMIT 1 OFFSET ?"
)
_LAST_READY = (
    f"SELECT prio, run_at, id FROM {READY_T} WHERE queue = ? "
    "ORDER BY prio DESC, run_at DESC, id DESC LIMIT 1"
)
# ?1 the queue, ?2-?4 the run's last key.
_RUN = "r.queue = ?1 AND (r.prio, r.run_at, r.id) <= (?2, ?3, ?4)"
_LEASE_RUN = f"""
INSERT INTO {LEASED_T} (queue, lease_until, id, token, attempts)
SELECT ?1, ?5, j.id, ?6, j.attempts + 1 FROM {READY_T} r JOIN {JOBS} j ON j.id = r.id
 WHERE {_RUN}
"""
_CLAIMED = f"""
SELECT j.id, j.payload, j.attempts + 1, j.priority, j.run_at, j.max_attempts
  FROM {READY_T} r JOIN {JOBS} j ON j.id = r.id
 WHERE {_RUN} ORDER BY r.prio, r.run_at, r.id
"""
_TAKE_RUN = f"DELETE FROM {READY_T} WHERE queue = ?1 AND (prio, run_at, id) <= (?2, ?3, ?4)"


def _take(conn: sqlite3.Connection, queue: str, n: int, until: float, token: int) -> list[Any]:
    """Lease the first ``n`` ready jobs (fewer if there are not so many) to
    ``token`` until ``until``, out of ready; returns their rows in claim
    order (see claim)."""
    last = conn.execute(_NTH_READY, (queue, n - 1)).fetchone()
    if last is None:
        last = conn.execute(_LAST_READY, (queue,)).fetchone()
        if last is None:
            return []
    run = (queue, *last)
    conn.execute(_LEASE_RUN, (*run, until, token))
    rows = conn.execute(_CLAIMED, run).fetchall()
    conn.execute(_TAKE_RUN, run)
    return rows


_DUE = f"""
DELETE FROM {SCHEDULED} WHERE queue = ?1 AND run_at <= ?2 RETURNING run_at, id, prio
"""
_EXPIRED = f"""
DELETE FROM {LEASED_T} WHERE queue = ?1 AND lease_until <= ?2 RETURNING id, token, attempts
"""
_INSERT_LEASED = (
    f"INSERT INTO {LEASED_T} (queue, lease_until, id, token, attempts) VALUES (?, ?, ?, ?, ?)"
)


@shippable
def claim(
    conn: sqlite3.Connection, queue: str, n: int, lease: float, token: int
) -> tuple[list[Any], float]:
    """Move due scheduled jobs to ready, sweep expired leases back (or to the
    dead letters), then claim the first ``n`` ready jobs. Returns their rows
    ``(id, payload, attempt, priority, run_at, max_attempts)`` in claim order
    and the lease's end.

    The clock is read here, with the gate held, so that time spent waiting
    for the gate does not come out of the lease. A swept job keeps its token
    in its row: the worker whose lease ran out may still ack it until
    somebody else claims it."""
    now = time.time()
    until = now + lease
    deltas: Deltas = {}
    due, expired = conn.execute(_FIRSTS, (queue,)).fetchone()
    if due is not None and due <= now:
        _promote(conn, queue, now, deltas)
    if expired is not None and expired <= now:
        _sweep(conn, queue, now, deltas)
    rows = _take(conn, queue, n, until, token)
    if rows:
        _add(deltas, READY, 0, -len(rows))
        _add(deltas, LEASED, 0, len(rows))
    _count(conn, queue, deltas)
    return rows, until


# When the first scheduled job falls due and the first lease runs out: two
# seeks, one statement (most claims then need neither a move nor a sweep).
_FIRSTS = f"""
SELECT (SELECT run_at FROM {SCHEDULED} WHERE queue = ?1 ORDER BY run_at LIMIT 1),
       (SELECT lease_until FROM {LEASED_T} WHERE queue = ?1 ORDER BY lease_until LIMIT 1)
"""


def _promote(conn: sqlite3.Connection, queue: str, now: float, deltas: Deltas) -> None:
    """Scheduled jobs that fell due move to ready."""
    due = conn.execute(_DUE, (queue, now)).fetchall()
    conn.executemany(_INSERT_READY, [(queue, prio, run_at, jid) for run_at, jid, prio in due])
    for run_at, _jid, _prio in due:
        _add(deltas, SCHEDULED_STATE, _hour(run_at), -1)
    _add(deltas, READY, 0, len(due))


_EXPIRED_ERROR = "lease expired before the job was acked (attempt {} of {})"


def _sweep(conn: sqlite3.Connection, queue: str, now: float, deltas: Deltas) -> None:
    """Leases that ran out: the job goes back to its place (it keeps the
    token in its row, see claim), or to the dead letters if that was its
    last attempt."""
    expired = conn.execute(_EXPIRED, (queue, now)).fetchall()
    back = []
    for jid, token, attempts in expired:
        row = conn.execute(
            f"SELECT max_attempts, priority, run_at FROM {JOBS} WHERE id = ?", (jid,)
        ).fetchone()
        if row is None:  # (a row deleted by hand: nothing to put back)
            continue
        max_attempts, priority, run_at = row
        error = _EXPIRED_ERROR.format(attempts, max_attempts)
        if attempts >= max_attempts:
            conn.execute(
                f"UPDATE {JOBS} SET state = 3, done_at = ?, token = NULL, attempts = ?, "
                "last_error = ? WHERE id = ?",
                (now, attempts, error, jid),
            )
            _add(deltas, DEAD, 0, 1)
        else:
            conn.execute(
                f"UPDATE {JOBS} SET token = ?, attempts = ?, last_error = ? WHERE id = ?",
                (token, attempts, error, jid),
            )
            back.append((jid, priority, run_at))
        _add(deltas, LEASED, 0, -1)
    _enqueue(conn, queue, back, now, deltas)


# Two seeks, or a look at ready: when the next job can be claimed.
NEXT_DUE = f"""
SELECT min(t) FROM (
    SELECT (SELECT :now FROM {READY_T} WHERE queue = :queue LIMIT 1) AS t
    UNION ALL
    SELECT min(run_at) FROM {SCHEDULED} WHERE queue = :queue
    UNION ALL
    SELECT min(lease_until) FROM {LEASED_T} WHERE queue = :queue
)
"""


# -- finishing ---------------------------------------------------------------------


def _lease_groups(owned: Sequence[Owned]) -> dict[tuple[int, float], list[int]]:
    """Jobs claimed together share their token and lease_until (an extend
    moves them on together too): ``{(token, until): [id, ...]}``, one
    statement each."""
    groups: dict[tuple[int, float], list[int]] = {}
    for jid, token, until in owned:
        groups.setdefault((token, until), []).append(jid)
    return groups


def _unlease(conn: sqlite3.Connection, queue: str, owned: Sequence[Owned]) -> dict[int, int]:
    """Take the leased rows of these (id, token, lease_until) out; returns
    {id: attempt} of those found. Each is found by its key (the Job carries
    its lease's end), jobs claimed together in one statement (see
    _lease_groups); one whose key is stale (an extend whose answer was lost)
    by its id and token, a look at the queue's leased rows."""
    found: dict[int, int] = {}
    for (token, until), ids in _lease_groups(owned).items():
        if len(ids) == 1:
            row = conn.execute(_UNLEASE_ONE + " RETURNING attempts", (queue, until, ids[0], token))
            found.update((ids[0], int(r[0])) for r in row)
        else:
            rows = conn.execute(_UNLEASE_MANY + " RETURNING id, attempts",
                                (queue, until, json.dumps(ids), token))  # fmt: skip
            found.update(rows.fetchall())
    for jid, token, _until in owned:
        if jid not in found:
            row = conn.execute(_UNLEASE_BY_ID + " RETURNING attempts", (queue, jid, token))
            found.update((jid, int(r[0])) for r in row)
    return found


def _unlease_ids(conn: sqlite3.Connection, queue: str, owned: Sequence[Owned]) -> set[int]:
    """As _unlease, but only the ids of those found (all an ack needs): a
    delete that returns its rows cost 2.4 x one that only counts them. A
    group whose count falls short (a job no longer ours: rare) is undone to
    a savepoint and deleted again, returning which ones were there."""
    found: set[int] = set()
    for (token, until), ids in _lease_groups(owned).items():
        if len(ids) == 1:
            if conn.execute(_UNLEASE_ONE, (queue, until, ids[0], token)).rowcount:
                found.add(ids[0])
            continue
        params = (queue, until, json.dumps(ids), token)
        conn.execute("SAVEPOINT litegate_unlease")
        whole = conn.execute(_UNLEASE_MANY, params).rowcount == len(ids)
        if not whole:
            conn.execute("ROLLBACK TO litegate_unlease")
        conn.execute("RELEASE litegate_unlease")
        if whole:
            found.update(ids)
        else:
            found.update(r[0] for r in conn.execute(_UNLEASE_MANY + " RETURNING id", params))
    for jid, token, _until in owned:
        if jid not in found and conn.execute(_UNLEASE_BY_ID, (queue, jid, token)).rowcount:
            found.add(jid)
    return found


_UNLEASE_ONE = (
    f"DELETE FROM {LEASED_T} WHERE queue = ? AND lease_until = ? AND id = ? AND token = ?"
)
# A primary-key seek per job. (Keyed by (lease_until, id) pairs pulled out of
# one JSON list, the same delete cost 1.4 x as much a job.)
_UNLEASE_MANY = f"""
DELETE FROM {LEASED_T}
 WHERE queue = ?1 AND lease_until = ?2 AND id IN (SELECT value FROM json_each(?3)) AND token = ?4
"""
_UNLEASE_BY_ID = f"DELETE FROM {LEASED_T} WHERE queue = ? AND id = ? AND token = ?"


def _reclaim_swept(
    conn: sqlite3.Connection, queue: str, owned: Sequence[Owned], deltas: Deltas
) -> dict[int, int]:
    """Jobs of ``owned`` whose lease ran out and were swept back to wait,
    claimed by nobody since (their row still has the token): taken out of
    the waiting tables, as if still leased. Returns {id: attempt}."""
    found: dict[int, int] = {}
    for jid, token, _until in owned:
        row = conn.execute(
            f"SELECT priority, run_at, attempts FROM {JOBS} "
            "WHERE id = ? AND queue = ? AND state = 0 AND token = ?",
            (jid, queue, token),
        ).fetchone()
        if row is None:
            continue
        priority, run_at, attempts = row
        if conn.execute(
            f"DELETE FROM {READY_T} WHERE queue = ? AND prio = ? AND run_at = ? AND id = ?",
            (queue, -priority, run_at, jid),
        ).rowcount:
            _add(deltas, READY, 0, -1)
        elif conn.execute(
            f"DELETE FROM {SCHEDULED} WHERE queue = ? AND run_at = ? AND id = ?",
            (queue, run_at, jid),
        ).rowcount:
            _add(deltas, SCHEDULED_STATE, _hour(run_at), -1)
        else:
            continue  # claimed again since (a claim leaves the row's token as it was)
        _add(deltas, LEASED, 0, 1)  # (the caller counts it out of leased with the others)
        found[jid] = int(attempts)
    return found


def _held(
    conn: sqlite3.Connection, queue: str, owned: Sequence[Owned], deltas: Deltas
) -> dict[int, int]:
    """The jobs of ``owned`` still ours, taken out of the lease table (or out
    of ready/scheduled for a swept lease nobody claimed since): {id: the
    attempt they are in}."""
    found = _unlease(conn, queue, owned)
    if len(found) < len(owned):
        rest = [o for o in owned if o[0] not in found]
        found.update(_reclaim_swept(conn, queue, rest, deltas))
    return found


@shippable
def ack(conn: sqlite3.Connection, now: float, owned: Sequence[Owned], queue: str) -> list[int]:
    """Mark done the jobs still held under these (id, token, lease_until)
    (each once: the caller dedupes); return the ids that were not (the lost
    ones)."""
    deltas: Deltas = {}
    leased = _unlease_ids(conn, queue, owned)
    swept: dict[int, int] = {}
    if len(leased) < len(owned):
        rest = [o for o in owned if o[0] not in leased]
        swept = _reclaim_swept(conn, queue, rest, deltas)
    by_token: dict[int, list[int]] = {}
    for jid, token, _until in owned:
        if jid in leased:
            by_token.setdefault(token, []).append(jid)
        elif jid in swept:  # (rare: its row's attempts are already this one's)
            conn.execute(_DONE_ONE, (now, swept[jid], token, jid))
    for token, ids in by_token.items():
        # A leased job's row has the attempts before its lease: one more now.
        # Jobs a claim took together, one statement.
        if len(ids) == 1:
            conn.execute(_DONE_NEXT, (now, token, ids[0]))
        else:
            conn.execute(_DONE_MANY, (now, token, json.dumps(ids)))
    done = len(leased) + len(swept)
    if done:
        _add(deltas, LEASED, 0, -done)
        _add(deltas, DONE, 0, done)
        _count(conn, queue, deltas)
    return [o[0] for o in owned if o[0] not in leased and o[0] not in swept]


_DONE_MANY = (
    f"UPDATE {JOBS} SET state = 2, done_at = ?1, attempts = attempts + 1, token = ?2 "
    "WHERE id IN (SELECT value FROM json_each(?3)) AND state = 0"
)
_DONE_NEXT = (
    f"UPDATE {JOBS} SET state = 2, done_at = ?1, attempts = attempts + 1, token = ?2 "
    "WHERE id = ?3 AND state = 0"
)
_DONE_ONE = (
    f"UPDATE {JOBS} SET state = 2, done_at = ?, attempts = ?, token = ? WHERE id = ? AND state = 0"
)


@shippable
def extend(
    conn: sqlite3.Connection, owned: Sequence[Owned], lease: float, queue: str
) -> tuple[list[int], float]:
    """Move the leases on to ``lease`` seconds from now (read with the gate
    held); also takes back a job whose lease ran out and that nobody has
    claimed since (the token is still ours). Returns the ids that were no
    longer ours, and the new end of the leases."""
    until = time.time() + lease
    deltas: Deltas = {}
    held = _held(conn, queue, owned, deltas)
    rows = [(queue, until, jid, token, held[jid]) for jid, token, _ in owned if jid in held]
    if rows:
        conn.executemany(_INSERT_LEASED, rows)
    _count(conn, queue, deltas)
    return [o[0] for o in owned if o[0] not in held], until


@shippable
def fail(
    conn: sqlite3.Connection,
    jid: int,
    token: int,
    until: float,
    now: float,
    retry_at: float,
    error: str,
    queue: str,
) -> int | None:
    """Record a failed attempt: back to wait until ``retry_at``, or dead if
    its attempts are used up. Returns the new state, None if not ours. The
    job keeps ``failed_mark(token)``: who failed it (see ``_model``)."""
    deltas: Deltas = {}
    held = _held(conn, queue, [(jid, token, until)], deltas)
    if jid not in held:
        _count(conn, queue, deltas)
        return None
    attempts = held[jid]
    row = conn.execute(f"SELECT max_attempts, priority FROM {JOBS} WHERE id = ?", (jid,)).fetchone()
    max_attempts, priority = row
    _add(deltas, LEASED, 0, -1)
    mark = failed_mark(token)
    if attempts >= max_attempts:
        conn.execute(
            f"UPDATE {JOBS} SET state = 3, done_at = ?, attempts = ?, last_error = ?, token = ? "
            "WHERE id = ?",
            (now, attempts, error, mark, jid),
        )
        _add(deltas, DEAD, 0, 1)
        state = DEAD
    else:
        conn.execute(
            f"UPDATE {JOBS} SET run_at = ?, attempts = ?, last_error = ?, token = ? WHERE id = ?",
            (retry_at, attempts, error, mark, jid),
        )
        _enqueue(conn, queue, [(jid, priority, retry_at)], now, deltas)
        state = READY
    _count(conn, queue, deltas)
    return state


@shippable
def release(conn: sqlite3.Connection, owned: Sequence[Owned], queue: str) -> list[int]:
    """Give jobs back unstarted (the attempt is not counted); they keep their
    place in the queue, and ``released_mark(token)``. Returns the ids that
    were no longer ours."""
    deltas: Deltas = {}
    held = _held(conn, queue, owned, deltas)
    back = []
    for jid, token, _until in owned:
        if jid not in held:
            continue
        row = conn.execute(
            f"UPDATE {JOBS} SET attempts = ?, token = ? WHERE id = ? RETURNING priority, run_at",
            (max(held[jid] - 1, 0), released_mark(token), jid),
        ).fetchall()
        back.append((jid, row[0][0], row[0][1]))
    _add(deltas, LEASED, 0, -len(held))
    _enqueue(conn, queue, back, time.time(), deltas)
    _count(conn, queue, deltas)
    return [o[0] for o in owned if o[0] not in held]


@shippable
def bury(
    conn: sqlite3.Connection, owned: Sequence[Owned], errors: dict[int, str], queue: str
) -> int:
    """Send these claimed jobs straight to the dead letters with their
    errors (a payload the claimer cannot decode). They keep
    ``failed_mark(token)``, as a failed attempt does. Returns how many."""
    now = time.time()
    deltas: Deltas = {}
    held = _held(conn, queue, owned, deltas)
    for jid, token, _until in owned:
        if jid in held:
            conn.execute(
                f"UPDATE {JOBS} SET state = 3, done_at = ?, attempts = ?, last_error = ?, "
                "token = ? WHERE id = ?",
                (now, held[jid], errors[jid], failed_mark(token), jid),
            )
    _add(deltas, LEASED, 0, -len(held))
    _add(deltas, DEAD, 0, len(held))
    _count(conn, queue, deltas)
    return len(held)


@shippable
def retry_dead(
    conn: sqlite3.Connection, queue: str, ids: Sequence[int] | None, now: float
) -> tuple[int, list[tuple[int, int | None]]]:
    """Revive dead jobs (all of the queue's, or these ids) with fresh
    attempts. Returns (revived, refused): ``refused`` lists the ids that are
    not dead jobs of this queue with their state (None: no such job here);
    if there are any, nothing changes."""
    if ids is None:
        revive = [
            (r[0], r[1])
            for r in conn.execute(
                f"SELECT id, priority FROM {JOBS} WHERE queue = ? AND state = 3", (queue,)
            )
        ]
    else:
        revive, refused = [], []
        for jid in ids:
            row = conn.execute(
                f"SELECT state, priority FROM {JOBS} WHERE id = ? AND queue = ?", (jid, queue)
            ).fetchone()
            if row is None or row[0] != DEAD:
                refused.append((jid, None if row is None else _state_of(conn, queue, jid)))
            else:
                revive.append((jid, row[1]))
        if refused:
            return 0, refused
    conn.executemany(
        f"UPDATE {JOBS} SET state = 0, attempts = 0, run_at = ?, done_at = NULL, token = NULL "
        "WHERE id = ?",
        [(now, jid) for jid, _ in revive],
    )
    deltas: Deltas = {}
    _add(deltas, DEAD, 0, -len(revive))
    _enqueue(conn, queue, [(jid, priority, now) for jid, priority in revive], now, deltas)
    _count(conn, queue, deltas)
    return len(revive), []


def _state_of(conn: sqlite3.Connection, queue: str, jid: int) -> int:
    row = conn.execute(SELECT_JOB, {"id": jid}).fetchone()
    return int(row[2])


# -- purging ----------------------------------------------------------------------
#
# Done jobs are in no index (so that an ack writes no index page): purge walks
# the job table in id order, a slice of rows per transaction. A job finished
# before `before` was put before it, and ids grow with the time of the put,
# so the walk stops at the first id put after `before` (with an hour's slack
# for jobs put while another process held the write gate).

PURGE_SCAN = 20_000


@shippable
def purge(
    conn: sqlite3.Connection, queue: str, state: int, before: float, limit: int, after: int
) -> tuple[int, int | None]:
    """Delete up to ``limit`` finished jobs of ``state`` that finished before
    ``before``, oldest first, looking at job ids above ``after``; never the
    newest row of the table (it keeps max(id), so that SQLite never hands out
    an id a second time). Returns (deleted, where to go on from: None when
    done); the caller loops, so that no transaction is long."""
    deltas: Deltas = {}
    if state == DEAD:
        n = conn.execute(
            f"DELETE FROM {JOBS} WHERE id IN (SELECT id FROM {JOBS} "
            "WHERE queue = ? AND state = 3 AND done_at < ? ORDER BY done_at LIMIT ?) "
            f"AND id < (SELECT max(id) FROM {JOBS})",
            (queue, before, limit),
        ).rowcount
        _add(deltas, DEAD, 0, -n)
        _count(conn, queue, deltas)
        if n < limit:
            prune(conn)
            return n, None
        return n, after
    top = conn.execute(f"SELECT max(id) FROM {JOBS}").fetchone()[0]
    rows = conn.execute(
        f"SELECT id, queue, state, done_at, created_at FROM {JOBS} WHERE id > ? "
        "ORDER BY id LIMIT ?",
        (after, PURGE_SCAN),
    ).fetchall()
    doomed: list[int] = []
    resume: int | None = rows[-1][0] if len(rows) == PURGE_SCAN else None
    for jid, q, st, done_at, created_at in rows:
        if created_at >= before + HOUR:
            resume = None  # put after the cut-off: nothing from here on finished before it
            break
        if q == queue and st == DONE and done_at < before and jid < top:
            doomed.append(jid)
            if len(doomed) == limit:
                resume = jid
                break
    if doomed:
        conn.execute(
            f"DELETE FROM {JOBS} WHERE id IN (SELECT value FROM json_each(?))",
            (json.dumps(doomed),),
        )
        _add(deltas, DONE, 0, -len(doomed))
        _count(conn, queue, deltas)
    if resume is None:
        prune(conn)
    return len(doomed), resume


def prune(conn: sqlite3.Connection) -> None:
    """Clear the counts that fell to zero: one pass over a table of a few
    rows per queue."""
    conn.execute(f"DELETE FROM {COUNTS_TABLE} WHERE n = 0")


# -- reads (through the reader pool; parameters by name: queue, id, limit, now) -

# The state of the job row ``j`` (LEASED for a live job the lease table
# holds, else its row's): for SQL elsewhere in litegate that reads job states
# (the Django tasks backend's results).
JOB_STATE = (
    f"CASE WHEN j.state <> 0 THEN j.state WHEN EXISTS (SELECT 1 FROM {LEASED_T} AS l "
    "WHERE l.queue = j.queue AND l.id = j.id) THEN 1 ELSE 0 END"
)

# A job as the logic's JobInfo reads it: (id, queue, state, priority, run_at,
# payload, attempts, max_attempts, lease_until, key, last_error, created_at,
# done_at). A live job is leased if the lease table holds it, else waiting.
_SELECT = f"""
SELECT j.id, j.queue,
       CASE WHEN j.state <> 0 THEN j.state WHEN l.id IS NOT NULL THEN 1 ELSE 0 END,
       j.priority, j.run_at, j.payload, coalesce(l.attempts, j.attempts), j.max_attempts,
       l.lease_until, j.key, j.last_error, j.created_at, j.done_at
  FROM {JOBS} AS j
  LEFT JOIN {LEASED_T} AS l ON j.state = 0 AND l.queue = j.queue AND l.id = j.id
"""
SELECT_JOB = _SELECT + " WHERE j.id = :id"
# Where the jobs of a call now are, by whom: a call tried again after its
# answer was lost looks here for its own finished work.
SELECT_FINISHED = (
    f"SELECT id, state, token FROM {JOBS} WHERE id IN (SELECT value FROM json_each(:ids_json))"
)
SELECT_DEAD = (
    _SELECT + " WHERE j.queue = :queue AND j.state = 3 ORDER BY j.done_at DESC LIMIT :limit"
)
# From the counts table, plus the scheduled jobs of the current hour that are
# due and not yet moved to ready (see HOUR).
_NOW_HOUR = f"CAST(:now / {HOUR} AS INTEGER)"
COUNTS = f"""
WITH c AS (SELECT state, bucket, n FROM {COUNTS_TABLE} WHERE queue = :queue),
due AS (SELECT count(*) AS k FROM {SCHEDULED}
         WHERE queue = :queue AND run_at >= {_NOW_HOUR} * {HOUR} AND run_at <= :now)
SELECT (SELECT total(n) FROM c WHERE state = {READY})
       + (SELECT total(n) FROM c WHERE state = {SCHEDULED_STATE} AND bucket < {_NOW_HOUR})
       + (SELECT k FROM due),
       (SELECT total(n) FROM c WHERE state = {SCHEDULED_STATE} AND bucket >= {_NOW_HOUR})
       - (SELECT k FROM due),
       (SELECT total(n) FROM c WHERE state = {LEASED}),
       (SELECT total(n) FROM c WHERE state = {DONE}),
       (SELECT total(n) FROM c WHERE state = {DEAD})
"""

# Counts that disagree with the jobs (SQL written by hand changed the tables;
# Queue.recount() rebuilds them): (queue, state, kept, counted) per mismatch,
# scheduled jobs per hour, as the counts keep them. Reads every job once.
COUNTS_OFF = f"""
WITH actual AS (
    SELECT queue, {READY} AS state, 0 AS bucket, count(*) AS n FROM {READY_T} GROUP BY queue
    UNION ALL
    SELECT queue, {SCHEDULED_STATE}, CAST(run_at / {HOUR} AS INTEGER), count(*)
      FROM {SCHEDULED} GROUP BY 1, 3
    UNION ALL
    SELECT queue, {LEASED}, 0, count(*) FROM {LEASED_T} GROUP BY queue
    UNION ALL
    SELECT queue, state, 0, count(*) FROM {JOBS} WHERE state IN (2, 3) GROUP BY 1, 2),
kept AS (SELECT queue, state, bucket, n FROM {COUNTS_TABLE} WHERE n <> 0),
joined AS (
    SELECT k.queue, k.state, k.n AS kept, coalesce(a.n, 0) AS counted FROM kept AS k
      LEFT JOIN actual AS a USING (queue, state, bucket)
    UNION ALL
    SELECT a.queue, a.state, 0, a.n FROM actual AS a
     WHERE NOT EXISTS (SELECT 1 FROM kept AS k WHERE k.queue = a.queue AND k.state = a.state
                         AND k.bucket = a.bucket))
SELECT queue, state, sum(kept), sum(counted) FROM joined WHERE kept <> counted
 GROUP BY queue, state ORDER BY queue, state
"""
