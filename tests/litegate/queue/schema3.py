"""The SQLite store of queue schema version 3, kept verbatim from the litegate
before schema 4 (only its imports made absolute and this docstring new): the
migration tests write databases with it, as a litegate of that version did,
then open them with today's queue."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from litegate._errors import ConfigError
from litegate.queue._model import DEAD, DONE, LEASED, READY, KeyTaken, failed_mark, released_mark

__all__ = ["DEAD", "DONE", "LEASED", "READY", "KeyTaken"]  # re-exported for the logic

SCHEMA_VERSION = 3

TABLE = "litegate_jobs"
COUNTS_TABLE = "litegate_queue_counts"

# Partial indexes keep the hot ones small: finished jobs leave the claim and
# lease indexes, so a table full of done jobs does not slow claims down.
# - ready: claim order (highest priority, then oldest run_at, then id);
# - leased: expiry sweep, by lease_until;
# - key: dedupe while a job is not done (dead jobs keep their key, so
#   retry_dead can never collide);
# - done, dead: purge, dead letters and their counts (one each: SQLite uses a
#   partial index only for a WHERE that names its state exactly).
# Ids: SQLite gives a new row max(id) + 1, and purge never deletes the row
# with the largest id, so an id is never given to a second job and ids an
# application stored stay unambiguous. (AUTOINCREMENT does the same but
# costs a sqlite_sequence update per row: 40 % more for put_many.)
_V1 = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    id           INTEGER PRIMARY KEY,
    queue        TEXT    NOT NULL,
    state        INTEGER NOT NULL,
    priority     INTEGER NOT NULL,
    run_at       REAL    NOT NULL,
    payload      TEXT    NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    lease_until  REAL,
    token        INTEGER,
    key          TEXT,
    last_error   TEXT,
    created_at   REAL    NOT NULL,
    done_at      REAL
);
CREATE INDEX IF NOT EXISTS {TABLE}_ready
    ON {TABLE} (queue, priority DESC, run_at, id) WHERE state = 0;
CREATE INDEX IF NOT EXISTS {TABLE}_leased
    ON {TABLE} (queue, lease_until) WHERE state = 1;
CREATE UNIQUE INDEX IF NOT EXISTS {TABLE}_key
    ON {TABLE} (queue, key) WHERE key IS NOT NULL AND state <> 2;
CREATE INDEX IF NOT EXISTS {TABLE}_done
    ON {TABLE} (queue, done_at) WHERE state = 2;
CREATE INDEX IF NOT EXISTS {TABLE}_dead
    ON {TABLE} (queue, done_at) WHERE state = 3;
CREATE TABLE IF NOT EXISTS litegate_queue_schema (version INTEGER NOT NULL);
"""

# The hour a waiting job's run_at falls in. Counts keep waiting jobs per hour
# so that "ready" (due now) and "scheduled" (due later) come from a few rows:
# every hour but the current one is wholly on one side of now, and only the
# jobs due later within the current hour are counted from the table.
# Division is monotonic, so a job with run_at > now is never in an earlier
# hour than now's.
HOUR = 3600


def _bucket(row: str) -> str:
    return f"CASE WHEN {row}.state = 0 THEN CAST({row}.run_at / {HOUR} AS INTEGER) ELSE 0 END"


def _add(row: str, delta: int) -> str:
    return (
        f"INSERT INTO {COUNTS_TABLE} (queue, state, bucket, n) "
        f"VALUES ({row}.queue, {row}.state, {_bucket(row)}, {delta}) "
        f"ON CONFLICT (queue, state, bucket) DO UPDATE SET n = n + {delta};"
    )


def _sub(row: str, prune: bool = False) -> str:
    where = f"queue = {row}.queue AND state = {row}.state AND bucket = {_bucket(row)}"
    sql = f"UPDATE {COUNTS_TABLE} SET n = n - 1 WHERE {where};"
    # (version 2 only: see _V3)
    return sql + (f"DELETE FROM {COUNTS_TABLE} WHERE {where} AND n = 0;" if prune else "")


def _count_triggers(prune: bool) -> str:
    return f"""
CREATE TRIGGER IF NOT EXISTS {TABLE}_count_insert AFTER INSERT ON {TABLE} BEGIN
    {_add("new", 1)}
END;
CREATE TRIGGER IF NOT EXISTS {TABLE}_count_delete AFTER DELETE ON {TABLE} BEGIN
    {_sub("old", prune)}
END;
CREATE TRIGGER IF NOT EXISTS {TABLE}_count_update AFTER UPDATE OF queue, state, run_at ON {TABLE}
WHEN old.queue <> new.queue OR old.state <> new.state OR {_bucket("old")} <> {_bucket("new")}
BEGIN
    {_sub("old", prune)}
    {_add("new", 1)}
END;
"""


# Version 2: exact counts per (queue, state[, hour]) kept by triggers, in the
# transaction of every write that changes a job's state, run_at or queue:
# the queue's own statements and anyone else's (put_on, an older litegate, a
# hand-written UPDATE) alike, so counts() reads a few rows instead of every
# job. Lease expiry changes no row until a claim sweeps it, and counts()
# reports a lease that ran out as "leased" until then, as before. The "due"
# index gives next_due() the earliest waiting job as a seek, and counts()
# the jobs due later within the current hour. It is on run_at + 0, not
# run_at, and read only as run_at + 0: a claim's "run_at <= now" must keep
# walking the ready index in claim order, never sort every due job (the
# planner would pick a plain run_at index for that range).
_V2 = f"""
CREATE TABLE IF NOT EXISTS {COUNTS_TABLE} (
    queue  TEXT    NOT NULL,
    state  INTEGER NOT NULL,
    bucket INTEGER NOT NULL,
    n      INTEGER NOT NULL,
    PRIMARY KEY (queue, state, bucket)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS {TABLE}_due ON {TABLE} (queue, (run_at + 0)) WHERE state = 0;
{_count_triggers(prune=True)}
DELETE FROM {COUNTS_TABLE};
INSERT INTO {COUNTS_TABLE} (queue, state, bucket, n)
    SELECT queue, state, {_bucket(TABLE)}, count(*) FROM {TABLE} GROUP BY 1, 2, 3;
"""

# Version 3: the triggers no longer delete a count that falls to zero. That
# DELETE ran after every claim and ack (a statement per job of a batch) and
# was half of what the counts cost a batched job (put_many + claim + ack_many
# of 100: 25.8 us a job with it, 20.7 without, 13.9 without any count; median
# of 7 interleaved rounds). Empty rows are cleared instead by purge() and,
# at most once an hour per process, by a claim (prune()): a few dozen rows a
# day at most in between, which counts() sums as zeros.
_V3 = f"""
DROP TRIGGER IF EXISTS {TABLE}_count_delete;
DROP TRIGGER IF EXISTS {TABLE}_count_update;
{_count_triggers(prune=False)}
DELETE FROM {COUNTS_TABLE} WHERE n = 0;
"""

# Version n's script, applied to a database at version n - 1 (0: none).
MIGRATIONS = {1: _V1, 2: _V2, 3: _V3}


def _statements(script: str) -> list[str]:
    # Split on ";" but keep each CREATE TRIGGER ... END whole.
    out: list[str] = []
    buf = ""
    for part in script.split(";"):
        buf += part + ";"
        if sqlite3.complete_statement(buf):
            if buf.strip(" \n;"):
                out.append(buf.strip())
            buf = ""
    return out


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
    # 1 -> 2 reads every job once to fill the counts: seconds per million.
    for version in range(found + 1, SCHEMA_VERSION + 1):
        for statement in _statements(MIGRATIONS[version]):
            conn.execute(statement)
        conn.execute("INSERT INTO litegate_queue_schema (version) VALUES (?)", (version,))
    return SCHEMA_VERSION


# -- writes (run inside db.transact) -----------------------------------------

_INSERT = (
    f"INSERT INTO {TABLE} (queue, state, priority, run_at, payload, max_attempts, key, "
    "created_at) VALUES (?, 0, ?, ?, ?, ?, ?, ?)"
)

# A row for _INSERT: (queue, priority, run_at, payload, max_attempts, key, created_at)
Row = tuple[str, int, float, str, int, "str | None", float]


def insert_one(conn: sqlite3.Connection, row: Row) -> int:
    try:
        cur = conn.execute(_INSERT, row)
    except sqlite3.IntegrityError:
        key = row[5]
        if key is None:
            raise
        found = conn.execute(
            f"SELECT id FROM {TABLE} WHERE queue = ? AND key = ? AND state <> 2", (row[0], key)
        ).fetchone()
        if found is None:
            raise
        raise KeyTaken(key, int(found[0])) from None
    rowid = cur.lastrowid
    assert rowid is not None
    return rowid


def insert_many(conn: sqlite3.Connection, rows: Sequence[Row]) -> list[int]:
    """Insert ``rows`` (no keys) and return their ids, in order.

    ``executemany`` keeps the per-row cost in C but reports no ids. Inside
    one write transaction, with nobody else writing, SQLite gives each new
    row max(id) + 1 until that would pass the 64-bit limit (then it picks
    free ids at random), so the ids are the run after the largest one.
    """
    if len(rows) == 1:
        return [insert_one(conn, rows[0])]
    before = conn.execute(f"SELECT coalesce(max(id), 0) FROM {TABLE}").fetchone()[0]
    if before + len(rows) >= _MAX_ROWID:
        return [insert_one(conn, row) for row in rows]
    conn.executemany(_INSERT, rows)
    return list(range(before + 1, before + 1 + len(rows)))


_MAX_ROWID = 2**63 - 1


_SWEEP = f"""
UPDATE {TABLE}
   SET state = CASE WHEN attempts >= max_attempts THEN 3 ELSE 0 END,
       done_at = CASE WHEN attempts >= max_attempts THEN ?1 END,
       token = CASE WHEN attempts >= max_attempts THEN NULL ELSE token END,
       last_error = 'lease expired before the job was acked (attempt ' ||
                    attempts || ' of ' || max_attempts || ')',
       lease_until = NULL
 WHERE queue = ?2 AND state = 1 AND lease_until <= ?1
"""

_CLAIM = f"""
UPDATE {TABLE}
   SET state = 1, token = ?1, lease_until = ?2, attempts = attempts + 1
 WHERE id IN (SELECT id FROM {TABLE}
               WHERE queue = ?3 AND state = 0 AND run_at <= ?4
               ORDER BY priority DESC, run_at, id
               LIMIT ?5)
RETURNING id, payload, attempts, priority, run_at, max_attempts
"""

# Two seeks: the first entry of the "due" and of the "leased" index.
NEXT_DUE = f"""
SELECT min(t) FROM (
    SELECT min(run_at + 0) AS t FROM {TABLE} WHERE queue = :queue AND state = 0
    UNION ALL
    SELECT min(lease_until) FROM {TABLE} WHERE queue = :queue AND state = 1
)
"""


def claim(
    conn: sqlite3.Connection, queue: str, n: int, lease: float, token: int
) -> tuple[list[Any], float]:
    """Sweep expired leases back (or to the dead letters), then claim up to
    ``n`` due jobs in one statement. Returns the rows in claim order and the
    lease's end.

    The clock is read here, with the gate held, so that time spent waiting
    for the gate does not come out of the lease. A swept job keeps its token
    (unless it went dead): the worker whose lease ran out may still ack it,
    until somebody else claims it (which replaces the token)."""
    now = time.time()
    until = now + lease
    conn.execute(_SWEEP, (now, queue))
    if now - _pruned[0] >= HOUR:
        prune(conn)
        _pruned[0] = now
    rows = conn.execute(_CLAIM, (token, until, queue, now, n)).fetchall()
    # RETURNING does not follow the subquery's order.
    rows.sort(key=lambda r: (-r[3], r[4], r[0]))
    return rows, until


_ACK = (
    f"UPDATE {TABLE} SET state = 2, done_at = ?, lease_until = NULL "
    "WHERE id = ? AND token = ? AND state <> 2"
)


_ACK_BATCH = (
    f"UPDATE {TABLE} SET state = 2, done_at = ?, lease_until = NULL "
    "WHERE id IN (SELECT value FROM json_each(?)) AND token = ? AND state <> 2"
)


def ack(conn: sqlite3.Connection, now: float, owned: Sequence[tuple[int, int]]) -> list[int]:
    """Mark done the jobs still held under these (id, token) pairs (each pair
    once: the caller dedupes); return the ids that were not (the lost ones)."""
    if len(owned) == 1:
        jid, token = owned[0]
        return [] if conn.execute(_ACK, (now, jid, token)).rowcount == 1 else [jid]
    # Jobs claimed together share a token: one statement per token, the ids
    # as a JSON array, instead of one bound statement per job.
    by_token: dict[int, list[int]] = {}
    for jid, token in owned:
        by_token.setdefault(token, []).append(jid)
    n = 0
    for token, ids in by_token.items():
        n += conn.execute(_ACK_BATCH, (now, json.dumps(ids), token)).rowcount
    if n == len(owned):
        return []
    return _not_done_by(conn, now, owned)


def _not_done_by(
    conn: sqlite3.Connection, now: float, owned: Sequence[tuple[int, int]]
) -> list[int]:
    """Which of ``owned`` did the ack at ``now`` not mark done?"""
    lost = []
    for jid, token in owned:
        row = conn.execute(
            f"SELECT state, token, done_at FROM {TABLE} WHERE id = ?", (jid,)
        ).fetchone()
        if row is None or not (row[0] == DONE and row[1] == token and row[2] == now):
            lost.append(jid)
    return lost


_EXTEND = (
    f"UPDATE {TABLE} SET state = 1, lease_until = ? WHERE id = ? AND token = ? AND state IN (0, 1)"
)


def extend(
    conn: sqlite3.Connection, owned: Sequence[tuple[int, int]], lease: float
) -> tuple[list[int], float]:
    """Move the leases on to ``lease`` seconds from now (read with the gate
    held); also takes back a job whose lease ran out and that nobody has
    claimed since (the token is still ours). Returns the ids that were no
    longer ours, and the new end of the leases."""
    until = time.time() + lease
    lost = [jid for jid, token in owned if conn.execute(_EXTEND, (until, jid, token)).rowcount != 1]
    return lost, until


_FAIL = f"""
UPDATE {TABLE}
   SET state = CASE WHEN attempts >= max_attempts THEN 3 ELSE 0 END,
       done_at = CASE WHEN attempts >= max_attempts THEN ?1 END,
       run_at = CASE WHEN attempts >= max_attempts THEN run_at ELSE ?2 END,
       last_error = ?3, token = ?6, lease_until = NULL
 WHERE id = ?4 AND token = ?5 AND state IN (0, 1)
RETURNING state
"""


def fail(
    conn: sqlite3.Connection, jid: int, token: int, now: float, retry_at: float, error: str
) -> int | None:
    """Record a failed attempt: back to the queue at ``retry_at``, or dead if
    its attempts are used up. Returns the new state, None if not ours. The
    job keeps ``failed_mark(token)``: who failed it (see ``_model``)."""
    # fetchall, not fetchone: a RETURNING statement left unfinished is
    # stepped again later by the sqlite3 module, re-applying its changes.
    params = (now, retry_at, error, jid, token, failed_mark(token))
    rows = conn.execute(_FAIL, params).fetchall()
    return int(rows[0][0]) if rows else None


_BURY = (
    f"UPDATE {TABLE} SET state = 3, done_at = ?, last_error = ?, token = ?, lease_until = NULL "
    "WHERE id = ? AND token = ? AND state IN (0, 1)"
)


def bury(conn: sqlite3.Connection, owned: Sequence[tuple[int, int]], errors: dict[int, str]) -> int:
    """Send these claimed jobs straight to the dead letters with their
    errors (a payload the claimer cannot decode). They keep
    ``failed_mark(token)``, as a failed attempt does. Returns how many."""
    now = time.time()
    return sum(
        conn.execute(_BURY, (now, errors[jid], failed_mark(token), jid, token)).rowcount
        for jid, token in owned
    )


_RELEASE = f"""
UPDATE {TABLE} SET state = 0, attempts = max(attempts - 1, 0), token = ?3, lease_until = NULL
 WHERE id = ?1 AND token = ?2 AND state IN (0, 1)
"""


def release(conn: sqlite3.Connection, owned: Sequence[tuple[int, int]]) -> list[int]:
    """Give jobs back unstarted (the attempt is not counted); they keep their
    place in the queue, and ``released_mark(token)``. Returns the ids that
    were no longer ours."""
    return [
        jid
        for jid, token in owned
        if conn.execute(_RELEASE, (jid, token, released_mark(token))).rowcount != 1
    ]


def retry_dead(
    conn: sqlite3.Connection, queue: str, ids: Sequence[int] | None, now: float
) -> tuple[int, list[tuple[int, int | None]]]:
    """Revive dead jobs (all of the queue's, or these ids) with fresh
    attempts. Returns (revived, refused): ``refused`` lists the ids that are
    not dead jobs of this queue with their state (None: no such job here);
    if there are any, nothing changes."""
    revive = (
        f"UPDATE {TABLE} SET state = 0, attempts = 0, run_at = ?, done_at = NULL, token = NULL "
        "WHERE queue = ? AND state = 3"
    )
    if ids is None:
        return conn.execute(revive, (now, queue)).rowcount, []
    refused: list[tuple[int, int | None]] = []
    for jid in ids:
        row = conn.execute(
            f"SELECT state FROM {TABLE} WHERE id = ? AND queue = ?", (jid, queue)
        ).fetchone()
        if row is None or row[0] != DEAD:
            refused.append((jid, None if row is None else int(row[0])))
    if refused:
        return 0, refused
    n = 0
    for jid in ids:
        n += conn.execute(revive + " AND id = ?", (now, queue, jid)).rowcount
    return n, []


# The newest row of the table is never purged: it keeps max(id), so that
# SQLite never hands out an id a second time.
_PURGE = {
    state: f"DELETE FROM {TABLE} WHERE id IN (SELECT id FROM {TABLE} "
    f"WHERE queue = ? AND state = {state} AND done_at < ? ORDER BY done_at LIMIT ?) "
    f"AND id < (SELECT max(id) FROM {TABLE})"
    for state in (DONE, DEAD)
}


def purge(conn: sqlite3.Connection, queue: str, state: int, before: float, limit: int) -> int:
    """Delete up to ``limit`` finished jobs of ``state`` that finished before
    ``before`` (oldest first, through that state's index; never the newest
    row of the table); the caller loops, so that no transaction is long."""
    n: int = conn.execute(_PURGE[state], (queue, before, limit)).rowcount
    if n < limit:  # the caller's last chunk: clear the counts the chunks emptied, once
        prune(conn)
    return n


def prune(conn: sqlite3.Connection) -> None:
    """Clear the counts that fell to zero (see _V3): one pass over a table
    of a few rows per queue."""
    conn.execute(f"DELETE FROM {COUNTS_TABLE} WHERE n = 0")


# When a claim of this process last pruned (see _V3): the first claim does.
_pruned = [0.0]


# -- reads (through the reader pool; parameters by name: queue, id, limit, now) -

COLUMNS = (
    "id, queue, state, priority, run_at, payload, attempts, max_attempts, lease_until, key, "
    "last_error, created_at, done_at"
)
SELECT_JOB = f"SELECT {COLUMNS} FROM {TABLE} WHERE id = :id"
# Where the jobs of a call now are, by whom: a call tried again after its
# answer was lost looks here for its own finished work.
SELECT_FINISHED = (
    f"SELECT id, state, token FROM {TABLE} WHERE id IN (SELECT value FROM json_each(:ids_json))"
)
SELECT_DEAD = (
    f"SELECT {COLUMNS} FROM {TABLE} WHERE queue = :queue AND state = 3 "
    "ORDER BY done_at DESC LIMIT :limit"
)
# From the counts table (a row per state, one per hour for waiting jobs),
# less or plus the jobs due later within the current hour (see _V2).
_NOW_HOUR = f"CAST(:now / {HOUR} AS INTEGER)"
COUNTS = f"""
WITH c AS (SELECT state, bucket, n FROM {COUNTS_TABLE} WHERE queue = :queue),
later AS (SELECT count(*) AS k FROM {TABLE}
           WHERE queue = :queue AND state = 0 AND run_at + 0 > :now
             AND run_at + 0 < :now + {HOUR} AND CAST(run_at / {HOUR} AS INTEGER) = {_NOW_HOUR})
SELECT (SELECT total(n) FROM c WHERE state = 0 AND bucket <= {_NOW_HOUR}) - (SELECT k FROM later),
       (SELECT total(n) FROM c WHERE state = 0 AND bucket > {_NOW_HOUR}) + (SELECT k FROM later),
       (SELECT total(n) FROM c WHERE state = 1),
       (SELECT total(n) FROM c WHERE state = 2),
       (SELECT total(n) FROM c WHERE state = 3)
"""
