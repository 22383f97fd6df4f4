"""The queue's SQL on PostgreSQL: the twin of ``_sqlite.py``.

Same functions, same arguments, same results, so the queue's logic
(``_core.py``) drives either store unchanged. What differs is the database's
own way of doing each thing:

- Claims take rows with ``FOR UPDATE SKIP LOCKED``: concurrent claimers on
  other connections (other processes, other hosts) never wait for each other
  and never get the same job.
- Every time a job is stamped with (run_at, lease_until, done_at, created_at)
  comes from the server's clock (``now()``, the transaction's start), never a
  host's: workers on several machines agree on when a lease ends. The
  logic's host times are turned into offsets (a delay, a lease length).
- Inserts and state changes that make work claimable send
  ``NOTIFY litegate_jobs, '<queue name>'`` in the same transaction, so idle
  claimers wake when it commits (``_pgdb.PgWaker``) instead of polling.
- Payloads are ``jsonb`` (queryable by the application); times are
  ``timestamptz``; reads turn them into epoch seconds, as SQLite stores them.
- Finished jobs leave the hot table (schema 3): ``litegate_jobs`` holds the
  jobs that can still run and the dead ones, and an ack moves its job to
  ``litegate_done_jobs`` in the same statement, where ``get`` still finds it
  and ``purge`` deletes it.

Functions run on a connection ``PgDatabase.transact`` gives them: in
autocommit for the one-statement writes (``ONE_STATEMENT``), else inside a
transaction it opened and will commit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import lru_cache, partial
from typing import Any

from .._errors import ConfigError, OpenError
from ._errors import PayloadError
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

SCHEMA_VERSION = 3

TABLE = "litegate_jobs"
DONE_TABLE = "litegate_done_jobs"
COUNTS_TABLE = "litegate_queue_counts"
CHANNEL = "litegate_jobs"

# Every job read converts its times with this: epoch seconds, as floats.
_EPOCH = "extract(epoch FROM {})::float8"


def _epoch(column: str) -> str:
    return _EPOCH.format(column)


# Version n's statements, applied in order to a database at version n - 1.
# - fillfactor 80: a claim, an ack and a sweep each rewrite the row; free
#   room in the page lets PostgreSQL keep the new version on the same page.
# - autovacuum at 2 % of the table instead of 20 %: a hot queue turns dead
#   row versions over fast, and a bloated ready index slows every claim.
# - The partial indexes are SQLite's: finished jobs leave the claim and
#   lease indexes, so a table full of done jobs does not slow claims down.
MIGRATIONS: dict[int, list[str]] = {
    1: [
        f"""
        CREATE TABLE {TABLE} (
            id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            queue        text        NOT NULL,
            state        smallint    NOT NULL,
            priority     bigint      NOT NULL,
            run_at       timestamptz NOT NULL,
            payload      jsonb       NOT NULL,
            attempts     integer     NOT NULL DEFAULT 0,
            max_attempts bigint      NOT NULL,
            lease_until  timestamptz,
            token        bigint,
            key          text,
            last_error   text,
            created_at   timestamptz NOT NULL,
            done_at      timestamptz
        ) WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.02,
                autovacuum_analyze_scale_factor = 0.02)
        """,
        f"CREATE INDEX {TABLE}_ready ON {TABLE} (queue, priority DESC, run_at, id) WHERE state = 0",
        f"CREATE INDEX {TABLE}_leased ON {TABLE} (queue, lease_until) WHERE state = 1",
        f"CREATE UNIQUE INDEX {TABLE}_key ON {TABLE} (queue, key) "
        "WHERE key IS NOT NULL AND state <> 2",
        f"CREATE INDEX {TABLE}_done ON {TABLE} (queue, done_at) WHERE state = 2",
        f"CREATE INDEX {TABLE}_dead ON {TABLE} (queue, done_at) WHERE state = 3",
    ],
    # 2: below, with the counts' trigger
}


# The hour a waiting job's run_at falls in (as SQLite's store does): counts
# keep waiting jobs per hour, so "ready" and "scheduled" come from a few rows
# plus the jobs due later within the current hour. extract() gives numeric:
# exact, so a job due after now is never in an earlier hour than now's.
_HOUR = "floor(extract(epoch FROM {}) / 3600)::bigint"


def _hour(column: str) -> str:
    return _HOUR.format(column)


_BUCKET = f"CASE WHEN state = 0 THEN {_hour('run_at')} ELSE 0 END"

# Version 2: exact counts kept by statement triggers, in the transaction of
# every write (the queue's and anyone else's). Each statement adds its net
# change per (queue, state, hour for waiting jobs) to rows of
# litegate_queue_counts that only its transaction may touch: the rows of a
# slot (one of SLOTS) whose advisory lock it holds until it commits. So
# concurrent claimers and producers never wait on a counter's row lock (a
# transaction takes the first free slot from its backend's, keeps it for
# its later statements, and waits for one only when all are taken), and
# there is no deadlock between counters. The rows are updated in place
# (only n changes: HOT updates, pruned without vacuum); counts() sums them.
# The "due" index gives next_due() the earliest waiting job and counts()
# the jobs due later this hour; it is on run_at as a UTC timestamp and read
# only so, so that claims keep walking the ready index in claim order.
# Lease expiry changes no row until a claim sweeps it, and counts() reports
# an expired lease as "leased" until then, as before.
SLOTS = 32
_SLOT_LOCK = 0x6C67  # with the slot number: "this transaction counts in this slot"
_COUNT_FN = f"""
CREATE FUNCTION litegate_jobs_count() RETURNS trigger LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT AS $fn$
DECLARE
    mine integer;
    k integer;
BEGIN
    -- The first slot free (or already ours: the lock is reentrant) from
    -- this backend's; only a transaction holding none waits for one.
    FOR k IN 0..{SLOTS - 1} LOOP
        IF pg_try_advisory_xact_lock({_SLOT_LOCK}, (pg_backend_pid() + k) % {SLOTS}) THEN
            mine := (pg_backend_pid() + k) % {SLOTS};
            EXIT;
        END IF;
    END LOOP;
    IF mine IS NULL THEN
        mine := pg_backend_pid() % {SLOTS};
        PERFORM pg_advisory_xact_lock({_SLOT_LOCK}, mine);
    END IF;
    IF TG_OP = 'INSERT' THEN
        INSERT INTO {COUNTS_TABLE} AS c (queue, state, bucket, slot, n)
        SELECT queue, state, {_BUCKET}, mine, count(*) FROM new_rows
         GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
        ON CONFLICT (queue, state, bucket, slot) DO UPDATE SET n = c.n + excluded.n;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO {COUNTS_TABLE} AS c (queue, state, bucket, slot, n)
        SELECT queue, state, {_BUCKET}, mine, -count(*) FROM old_rows
         GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
        ON CONFLICT (queue, state, bucket, slot) DO UPDATE SET n = c.n + excluded.n;
    ELSE
        INSERT INTO {COUNTS_TABLE} AS c (queue, state, bucket, slot, n)
        SELECT queue, state, bucket, mine, sum(d) FROM (
            SELECT queue, state, {_BUCKET} AS bucket, 1 AS d FROM new_rows
            UNION ALL
            SELECT queue, state, {_BUCKET}, -1 FROM old_rows) AS change
         GROUP BY 1, 2, 3 HAVING sum(d) <> 0 ORDER BY 1, 2, 3
        ON CONFLICT (queue, state, bucket, slot) DO UPDATE SET n = c.n + excluded.n;
    END IF;
    -- Now and then, this slot's emptied rows (past hours) go: rows stay few.
    IF random() < 1.0 / 64 THEN
        DELETE FROM {COUNTS_TABLE} c WHERE c.slot = mine AND c.n = 0;
    END IF;
    RETURN NULL;
END
$fn$
"""


def _grant_like_jobs(table: str) -> str:
    """Roles that could read the jobs may read ``table`` (an owner who
    granted SELECT on the jobs before this table existed)."""
    return f"""
DO $grant$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT DISTINCT grantee FROM information_schema.role_table_grants
              WHERE table_name = '{TABLE}' AND privilege_type = 'SELECT'
                AND grantee <> current_user LOOP
        IF r.grantee = 'PUBLIC' THEN
            EXECUTE 'GRANT SELECT ON {table} TO PUBLIC';
        ELSE
            EXECUTE format('GRANT SELECT ON {table} TO %I', r.grantee);
        END IF;
    END LOOP;
END
$grant$
"""


_GRANT_COUNTS = _grant_like_jobs(COUNTS_TABLE)


def _count_triggers(table: str) -> list[str]:
    """The statement triggers that count ``table``'s rows (its ``state``
    column) into the counts table, in the writing transaction."""
    return [
        f"CREATE TRIGGER {table}_count_{op.lower()} AFTER {op} ON {table} "
        f"REFERENCING {tables} FOR EACH STATEMENT EXECUTE FUNCTION litegate_jobs_count()"
        for op, tables in (
            ("INSERT", "NEW TABLE AS new_rows"),
            ("UPDATE", "OLD TABLE AS old_rows NEW TABLE AS new_rows"),
            ("DELETE", "OLD TABLE AS old_rows"),
        )
    ]


MIGRATIONS[2] = [
    f"""
    CREATE TABLE {COUNTS_TABLE} (
        queue  text     NOT NULL,
        state  smallint NOT NULL,
        bucket bigint   NOT NULL,
        slot   smallint NOT NULL,
        n      bigint   NOT NULL,
        PRIMARY KEY (queue, state, bucket, slot)
    ) WITH (fillfactor = 50)
    """,
    f"CREATE INDEX {TABLE}_due ON {TABLE} (queue, (run_at AT TIME ZONE 'UTC')) WHERE state = 0",
    _COUNT_FN,
    # The first trigger locks out every other writer until this transaction
    # commits: the count below sees every job, and no job changes uncounted.
    *_count_triggers(TABLE),
    f"""
    INSERT INTO {COUNTS_TABLE} (queue, state, bucket, slot, n)
    SELECT queue, state, {_BUCKET}, 0, count(*) FROM {TABLE} GROUP BY 1, 2, 3
    """,
    _GRANT_COUNTS,
]

# The columns a job row has in both tables, in this order.
_ROW = (
    "id, queue, state, priority, run_at, payload, attempts, max_attempts, lease_until, token, "
    "key, last_error, created_at, done_at"
)

# Version 3: finished jobs leave the hot table. An ack moves the job's row to
# litegate_done_jobs (one statement: DELETE ... RETURNING feeding an INSERT),
# as solid_queue's and pgqueuer's finished jobs leave the tables that claims
# and sweeps work on: litegate_jobs holds only jobs that can still run (ready,
# scheduled, leased) and the dead ones (few; retry_dead revives them in
# place), so its heap, its indexes and what autovacuum scans stay the size of
# the work in flight however many jobs are done. Done jobs stay readable by
# id (get) until purge deletes them from their own table, oldest first
# through (queue, done_at). The done table has a state column (always 2) so
# that the counting trigger of version 2 counts its rows unchanged: a move
# is -1 leased in one table and +1 done in the other, in one transaction.
# No fillfactor: its rows are written once and never updated.
MIGRATIONS[3] = [
    f"""
    CREATE TABLE {DONE_TABLE} (
        id           bigint      PRIMARY KEY,
        queue        text        NOT NULL,
        state        smallint    NOT NULL DEFAULT 2 CHECK (state = 2),
        priority     bigint      NOT NULL,
        run_at       timestamptz NOT NULL,
        payload      jsonb       NOT NULL,
        attempts     integer     NOT NULL,
        max_attempts bigint      NOT NULL,
        lease_until  timestamptz,
        token        bigint,
        key          text,
        last_error   text,
        created_at   timestamptz NOT NULL,
        done_at      timestamptz NOT NULL
    )
    """,
    f"CREATE INDEX {DONE_TABLE}_done ON {DONE_TABLE} (queue, done_at)",
    *_count_triggers(DONE_TABLE),
    # The jobs already done move too (counted out of one table, into the other).
    f"""
    WITH moved AS (DELETE FROM {TABLE} WHERE state = 2 RETURNING {_ROW})
    INSERT INTO {DONE_TABLE} ({_ROW}) SELECT {_ROW} FROM moved
    """,
    f"DROP INDEX {TABLE}_done",
    _grant_like_jobs(DONE_TABLE),
]

# One lock number for "creating or migrating the queue's schema" (any
# constant; it only has to be the same in every litegate process).
_SCHEMA_LOCK = 0x6C6974656761  # "litega"
_NO_RIGHTS = "42501"  # insufficient_privilege


def create_schema(conn: Any) -> int:
    """Create or migrate the tables (inside the caller's transaction, under
    an advisory lock so that two processes starting at once do not both
    create them); return the schema version found or written."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,)).fetchall()
    exists = conn.execute("SELECT to_regclass('litegate_queue_schema')").fetchone()[0]
    found = 0
    if exists is not None:
        row = conn.execute("SELECT max(version) FROM litegate_queue_schema").fetchone()
        found = int(row[0] or 0)
    if found > SCHEMA_VERSION:
        raise ConfigError(
            f"the queue's tables are at schema version {found}, newer than this litegate "
            f"knows ({SCHEMA_VERSION}); upgrade litegate on this host"
        )
    if found == SCHEMA_VERSION:
        return found
    try:
        if exists is None:
            conn.execute("CREATE TABLE litegate_queue_schema (version integer NOT NULL)")
        for version in range(found + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[version]:
                conn.execute(statement)
            conn.execute("INSERT INTO litegate_queue_schema (version) VALUES (%s)", (version,))
        conn.execute("SELECT 1").fetchall()  # sync: DDL errors surface here, not at COMMIT
    except Exception as exc:
        if getattr(exc, "sqlstate", None) != _NO_RIGHTS:
            raise
        raise OpenError(
            f"this database has no queue tables yet and the user cannot create the queue's "
            f"tables ({str(exc).strip().splitlines()[0]}); run the queue once as a user who "
            "may (the database's owner), or GRANT CREATE ON SCHEMA public to this one"
        ) from None
    return SCHEMA_VERSION


def recount(conn: Any) -> None:
    """Count every job again (all queues), after SQL that changed the jobs
    by hand with the triggers disabled: writers wait meanwhile (the lock),
    so no change is counted twice or missed."""
    conn.execute(f"LOCK TABLE {TABLE}, {DONE_TABLE} IN SHARE ROW EXCLUSIVE MODE")
    conn.execute(f"DELETE FROM {COUNTS_TABLE}")
    conn.execute(
        f"INSERT INTO {COUNTS_TABLE} (queue, state, bucket, slot, n) "
        f"SELECT queue, state, {_BUCKET}, 0, count(*) FROM ("
        f"SELECT queue, state, run_at FROM {TABLE} "
        f"UNION ALL SELECT queue, state, run_at FROM {DONE_TABLE}) AS jobs GROUP BY 1, 2, 3"
    )


def _notify(conn: Any, queue: str) -> None:
    # Delivered when the transaction commits (never if it rolls back); two
    # identical notifications in one transaction are sent once.
    conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, queue))


# -- writes (run by PgDatabase.transact) -----------------------------------------
#
# The hot ones (put, put_many, claim, ack, extend, fail, release) are each ONE
# statement, data-modifying CTEs and the NOTIFY included: PgDatabase runs
# them in autocommit, one round trip, instead of BEGIN, the statement and
# COMMIT (three). They are listed in ONE_STATEMENT. The others, and any call
# with the caller's ``also=`` SQL, run in a transaction.

# A row of the logic: (queue, priority, run_at, payload, max_attempts, key,
# created_at), times from the host's clock. Only run_at - created_at (the
# delay) is used: the server stamps both.
Row = tuple[str, int, float, str, int, "str | None", float]

_INSERT = f"""
WITH ins AS (
    INSERT INTO {TABLE}
           (queue, state, priority, run_at, payload, max_attempts, key, created_at)
    VALUES (%(queue)s, 0, %(priority)s, now() + %(delay)s * interval '1 second',
            %(payload)s::jsonb, %(max_attempts)s, %(key)s, now())
    ON CONFLICT (queue, key) WHERE key IS NOT NULL AND state <> 2 DO NOTHING
    RETURNING id
)
SELECT id, pg_notify('{CHANNEL}', %(queue)s) FROM ins
"""


_UNTRANSLATABLE = "22P05"  # jsonb: "unsupported Unicode escape sequence" (\u0000)


def _refusing_nul(conn: Any, sql: str, params: Any) -> Any:
    try:
        return conn.execute(sql, params)
    except Exception as exc:
        if getattr(exc, "sqlstate", None) != _UNTRANSLATABLE:
            raise
        raise PayloadError(
            "PostgreSQL's jsonb cannot store the NUL character (\\u0000) in a string; "
            "nothing was stored. Remove it or encode the value (base64, say)"
        ) from None


def insert_one(conn: Any, row: Row) -> int:
    queue, priority, run_at, payload, max_attempts, key, created_at = row
    params = {
        "queue": queue,
        "priority": priority,
        "delay": max(run_at - created_at, 0.0),
        "payload": payload,
        "max_attempts": max_attempts,
        "key": key,
    }
    while True:
        got = _refusing_nul(conn, _INSERT, params).fetchone()
        if got is not None:
            return int(got[0])
        # The key is taken (ON CONFLICT keeps a transaction usable, where a
        # unique violation would abort it). Unless its holder finished in
        # between, in which case the insert is tried again.
        holder = conn.execute(
            f"SELECT id FROM {TABLE} WHERE queue = %s AND key = %s AND state <> 2", (queue, key)
        ).fetchone()
        if holder is not None:
            assert key is not None
            raise KeyTaken(key, int(holder[0]))


_INSERT_MANY = f"""
WITH ins AS (
    INSERT INTO {TABLE} (queue, state, priority, run_at, payload, max_attempts, created_at)
    SELECT %(queue)s, 0, u.priority, now() + u.delay * interval '1 second', u.payload::jsonb,
           u.max_attempts, now()
      FROM unnest(%(priority)s::bigint[], %(delay)s::float8[], %(payload)s::text[],
                  %(max_attempts)s::bigint[])
           WITH ORDINALITY AS u(priority, delay, payload, max_attempts, i)
     ORDER BY u.i
    RETURNING id
)
SELECT array_agg(id ORDER BY id), pg_notify('{CHANNEL}', %(queue)s) FROM ins
"""


def insert_many(conn: Any, rows: Sequence[Row]) -> list[int]:
    """Insert ``rows`` (no keys, one queue) in one statement; return their
    ids in order. The identity column numbers rows in the order the SELECT
    produces them (by ordinality), so the sorted ids are the rows' order."""
    if len(rows) == 1:
        return [insert_one(conn, rows[0])]
    queues = {r[0] for r in rows}
    if len(queues) != 1:
        raise ValueError(f"insert_many takes rows of one queue, got {sorted(queues)}")
    params = {
        "queue": rows[0][0],
        "priority": [r[1] for r in rows],
        "delay": [max(r[2] - r[6], 0.0) for r in rows],
        "payload": [r[3] for r in rows],
        "max_attempts": [r[4] for r in rows],
    }
    ids: list[int] = _refusing_nul(conn, _INSERT_MANY, params).fetchone()[0]
    return ids


_INSERT_BATCH = f"""
WITH ins AS (
    INSERT INTO {TABLE} (queue, state, priority, run_at, payload, max_attempts, created_at)
    SELECT %(queue)s, 0, %(priority)s, now() + %(delay)s * interval '1 second', u.payload,
           %(max_attempts)s, now()
      FROM jsonb_array_elements(%(bodies)s::jsonb) WITH ORDINALITY AS u(payload, i)
     ORDER BY u.i
    RETURNING id
)
SELECT array_agg(id ORDER BY id), pg_notify('{CHANNEL}', %(queue)s) FROM ins
"""


def insert_batch(conn: Any, batch: Batch) -> list[int]:
    """Insert a batch (see ``Batch``) in one statement, the payloads taken
    out of the one array; ids in order, as in ``insert_many``."""
    queue, priority, run_at, max_attempts, created_at, bodies, _count = batch
    params = {
        "queue": queue,
        "priority": priority,
        "delay": max(run_at - created_at, 0.0),
        "max_attempts": max_attempts,
        "bodies": bodies,
    }
    ids: list[int] = _refusing_nul(conn, _INSERT_BATCH, params).fetchone()[0]
    return ids


_EXPIRED = (
    "'lease expired before the job was acked (attempt ' || {t}attempts || ' of ' || "
    "{t}max_attempts || ')'"
)

# One statement, the SQLite store's sweep and claim together: expired leases
# go to the dead letters (no attempts left) or back to the queue, keeping
# their token (the late worker may still ack until someone claims them);
# the n best of the due and the expired jobs are leased with the new token.
# Rows are locked with SKIP LOCKED, so concurrent claimers never wait for
# each other or share a job. (In one snapshot the claim cannot see the
# sweep's writes, so it picks among the expired rows itself.)
#
# Its times come from ``clock``: the server's clock read once, while the
# statement runs, after its snapshot. ``now()`` is when the transaction
# began, and a backend can stall between that and the snapshot while
# another claim sweeps an expired lease back to the line; a lease dated
# from ``now()`` could then start before the previous holder's ended.
_CLAIM = f"""
WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS t), dead AS (
    UPDATE {TABLE}
       SET state = 3, done_at = (SELECT t FROM clock), token = NULL, lease_until = NULL,
           last_error = {_EXPIRED.format(t="")}
     WHERE id IN (SELECT id FROM {TABLE}
                   WHERE queue = %(queue)s AND state = 1 AND lease_until <= (SELECT t FROM clock)
                     AND attempts >= max_attempts
                     FOR UPDATE SKIP LOCKED)
), due AS (
    SELECT id, priority, run_at FROM {TABLE}
     WHERE queue = %(queue)s AND state = 0 AND run_at <= (SELECT t FROM clock)
     ORDER BY priority DESC, run_at, id
     LIMIT {{n}}
       FOR UPDATE SKIP LOCKED
), expired AS (
    SELECT id, priority, run_at FROM {TABLE}
     WHERE queue = %(queue)s AND state = 1 AND lease_until <= (SELECT t FROM clock)
       AND attempts < max_attempts
       FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT id, row_number() OVER (ORDER BY priority DESC, run_at, id) AS slot
      FROM (SELECT * FROM due UNION ALL SELECT * FROM expired) AS candidates
     ORDER BY priority DESC, run_at, id
     LIMIT {{n}}
), swept AS (
    UPDATE {TABLE}
       SET state = 0, lease_until = NULL, last_error = {_EXPIRED.format(t="")}
     WHERE id IN (SELECT id FROM expired EXCEPT SELECT id FROM picked)
), claimed AS (
    UPDATE {TABLE} AS j
       SET state = 1, token = (%(tokens)s::bigint[])[picked.slot], attempts = j.attempts + 1,
           lease_until = (SELECT t FROM clock) + %(lease)s * interval '1 second',
           last_error = CASE WHEN j.state = 1 THEN {_EXPIRED.format(t="j.")}
                             ELSE j.last_error END
      FROM picked
     WHERE j.id = picked.id
    RETURNING j.id, j.payload, j.attempts, j.priority, j.run_at, j.max_attempts
)
SELECT id, payload::text, attempts, priority, {_epoch("run_at")}, max_attempts,
       {_epoch("(SELECT t FROM clock) + %(lease)s * interval '1 second'")}
  FROM claimed
 ORDER BY priority DESC, run_at, id
"""


def claim(conn: Any, queue: str, n: int, lease: float, token: int) -> tuple[list[Any], float]:
    """Claim up to ``n`` due jobs (and dead-letter expired ones) in one
    statement. Returns the rows in claim order and the lease's end, by the
    server's clock."""
    return _claim(conn, queue, lease, [token] * n)


@lru_cache(maxsize=64)
def _claim_sql(n: int) -> str:
    # The LIMIT is written into the statement, not passed as a parameter:
    # once the table has statistics, PostgreSQL costs the generic plan of an
    # unknown LIMIT so high that it plans every execution of the prepared
    # statement anew, and planning a claim costs more than running it. One
    # prepared statement per n instead.
    return _CLAIM.replace("{n}", str(int(n)))


def _claim(conn: Any, queue: str, lease: float, tokens: list[int]) -> tuple[list[Any], float]:
    """The k-th job claimed gets ``tokens[k]``: several claims, each with its
    own token, can share one statement (see :func:`claim_merged`)."""
    params = {"queue": queue, "tokens": tokens, "lease": lease}
    rows = conn.execute(_claim_sql(len(tokens)), params).fetchall()
    until = float(rows[0][6]) if rows else time.time() + lease  # (unused with no rows)
    return rows, until


# An ack moves the job to the done table (schema 3), one statement. Only the
# token decides: a job swept back to ready after its lease ran out, and not
# claimed since, still carries its holder's token and may be acked; a job
# claimed again, failed, released or buried carries another.
_MOVE_DONE = f"""
INSERT INTO {DONE_TABLE} ({_ROW})
SELECT id, queue, 2, priority, run_at, payload, attempts, max_attempts, NULL, token, key,
       last_error, created_at, now()
  FROM gone
RETURNING id
"""

_ACK_ONE = f"""
WITH gone AS (DELETE FROM {TABLE} WHERE id = %s AND token = %s RETURNING *)
{_MOVE_DONE}
"""

_ACK = f"""
WITH gone AS (
    DELETE FROM {TABLE} AS j
     USING unnest(%s::bigint[], %s::bigint[]) AS o(id, token)
     WHERE j.id = o.id AND j.token = o.token
    RETURNING j.*
)
{_MOVE_DONE}
"""


def _owned_arrays(owned: Sequence[Owned]) -> tuple[list[int], list[int]]:
    return [o[0] for o in owned], [o[1] for o in owned]


def ack(conn: Any, now: float, owned: Sequence[Owned], queue: str = "") -> list[int]:
    """Mark done the jobs still held under these (id, token, lease_until)
    (the lease's end is not needed here: rows are found by id); return the
    ids that were not. (``now`` is the host's; the server stamps.)"""
    if len(owned) == 1:
        jid, token, _until = owned[0]
        return [] if conn.execute(_ACK_ONE, (jid, token)).fetchall() else [jid]
    done = {r[0] for r in conn.execute(_ACK, _owned_arrays(owned)).fetchall()}
    return [o[0] for o in owned if o[0] not in done]


# Dated like a claim (see _CLAIM): from when the statement runs.
_EXTEND = f"""
WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS t)
UPDATE {TABLE} AS j
   SET state = 1, lease_until = (SELECT t FROM clock) + %(lease)s * interval '1 second'
  FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS o(id, token)
 WHERE j.id = o.id AND j.token = o.token AND j.state IN (0, 1)
RETURNING j.id, {_epoch("(SELECT t FROM clock) + %(lease)s * interval '1 second'")}
"""


def extend(
    conn: Any, owned: Sequence[Owned], lease: float, queue: str = ""
) -> tuple[list[int], float]:
    """Move the leases on to ``lease`` seconds from the server's now; also
    takes back a job whose lease ran out and that nobody has claimed since.
    Returns the ids no longer ours and the new end of the leases."""
    ids, tokens = _owned_arrays(owned)
    rows = conn.execute(_EXTEND, {"lease": lease, "ids": ids, "tokens": tokens}).fetchall()
    kept = {r[0] for r in rows}
    until = float(rows[0][1]) if rows else time.time() + lease  # (unused: all were lost)
    return [jid for jid in ids if jid not in kept], until


_FAIL = f"""
WITH failed AS (
    UPDATE {TABLE}
       SET state = CASE WHEN attempts >= max_attempts THEN 3 ELSE 0 END,
           done_at = CASE WHEN attempts >= max_attempts THEN now() END,
           run_at = CASE WHEN attempts >= max_attempts THEN run_at
                         ELSE now() + %s * interval '1 second' END,
           last_error = %s, token = %s, lease_until = NULL
     WHERE id = %s AND token = %s AND state IN (0, 1)
    RETURNING state, queue
)
SELECT state, CASE WHEN state = 0 THEN pg_notify('{CHANNEL}', queue) END FROM failed
"""


def fail(
    conn: Any,
    jid: int,
    token: int,
    now: float,
    retry_at: float,
    error: str,
    until: float = 0.0,
    queue: str = "",
) -> int | None:
    """Record a failed attempt: back to the queue after the delay
    (``retry_at - now``, on the server's clock), or dead. Returns the new
    state, None if not ours."""
    params = (max(retry_at - now, 0.0), error, failed_mark(token), jid, token)
    rows = conn.execute(_FAIL, params).fetchall()
    return int(rows[0][0]) if rows else None


_BURY = f"""
UPDATE {TABLE} SET state = 3, done_at = now(), last_error = %s, token = %s, lease_until = NULL
 WHERE id = %s AND token = %s AND state IN (0, 1)
"""


def bury(conn: Any, owned: Sequence[Owned], errors: dict[int, str], queue: str = "") -> int:
    """Send these claimed jobs straight to the dead letters with their
    errors (a payload the claimer cannot decode); returns how many."""
    n = 0
    for jid, token, _until in owned:
        n += conn.execute(_BURY, (errors[jid], failed_mark(token), jid, token)).rowcount
    return n


_RELEASE = f"""
WITH back AS (
    UPDATE {TABLE} AS j
       SET state = 0, attempts = greatest(j.attempts - 1, 0), token = o.mark, lease_until = NULL
      FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[]) AS o(id, token, mark)
     WHERE j.id = o.id AND j.token = o.token AND j.state IN (0, 1)
    RETURNING j.id, j.queue
)
SELECT id, pg_notify('{CHANNEL}', queue) FROM back
"""


def release(conn: Any, owned: Sequence[Owned], queue: str = "") -> list[int]:
    """Give jobs back unstarted; returns the ids that were no longer ours."""
    ids, tokens = _owned_arrays(owned)
    marks = [released_mark(t) for t in tokens]
    back = {r[0] for r in conn.execute(_RELEASE, (ids, tokens, marks)).fetchall()}
    return [o[0] for o in owned if o[0] not in back]


ONE_STATEMENT = frozenset(
    {insert_one, insert_many, insert_batch, claim, ack, extend, fail, release}
)


def runs_alone(fn: Callable[..., Any]) -> bool:
    """Is ``fn`` (maybe a ``functools.partial`` of the logic's) one of the
    one-statement writes, safe to run in autocommit?"""
    target = fn.func if isinstance(fn, partial) else fn
    return target in ONE_STATEMENT


# -- merged calls: group commit for PostgreSQL -----------------------------------
#
# Concurrent calls of one kind from the threads of a process (one-job puts,
# claims, acks: the hot path of a worker pool) are merged by PgDatabase into
# one statement per kind, as litegate's group commit merges SQLite writes.
# Each merged function takes the calls' keyword arguments (as the logic
# passed them) and returns one result per call, in order: what each call
# alone would have returned. A call's effect stays atomic: it is in exactly
# one statement.


def insert_merged(conn: Any, calls: Sequence[dict[str, Any]]) -> list[Any]:
    """One-job puts (no key) of any queues: one insert per queue."""
    by_queue: dict[str, list[int]] = {}
    for i, call in enumerate(calls):
        by_queue.setdefault(call["row"][0], []).append(i)
    out: list[Any] = [None] * len(calls)
    for indexes in by_queue.values():
        rows = [calls[i]["row"] for i in indexes]
        for i, jid in zip(indexes, insert_many(conn, rows), strict=True):
            out[i] = jid
    return out


def claim_merged(conn: Any, calls: Sequence[dict[str, Any]]) -> list[Any]:
    """Claims of the same queue and lease share one statement; claim i owns
    the next ``n_i`` slots of the claim order and stamps its own token on
    them, so each gets what it would have got alone, in turn."""
    groups: dict[tuple[str, float], list[int]] = {}
    for i, call in enumerate(calls):
        groups.setdefault((call["queue"], call["lease"]), []).append(i)
    out: list[Any] = [None] * len(calls)
    for (queue, lease), indexes in groups.items():
        tokens = [calls[i]["token"] for i in indexes for _ in range(calls[i]["n"])]
        rows, until = _claim(conn, queue, lease, tokens)
        start = 0
        for i in indexes:
            n = calls[i]["n"]
            out[i] = (rows[start : start + n], until)
            start += n
    return out


def ack_merged(conn: Any, calls: Sequence[dict[str, Any]]) -> list[Any]:
    """Acks (of one job or many) in one statement. A job in two calls of the
    batch is left to the later call, run alone after, so that exactly one of
    them succeeds, as when they come one after the other."""
    if len(calls) == 1:
        return [ack(conn, calls[0]["now"], calls[0]["owned"])]
    first: list[Owned] = []
    seen: set[int] = set()
    later: set[int] = set()
    for i, call in enumerate(calls):
        ids = {o[0] for o in call["owned"]}
        if ids & seen:
            later.add(i)
        else:
            seen |= ids
            first.extend(call["owned"])
    done = {r[0] for r in conn.execute(_ACK, _owned_arrays(first)).fetchall()}
    return [
        ack(conn, call["now"], call["owned"])
        if i in later
        else [o[0] for o in call["owned"] if o[0] not in done]
        for i, call in enumerate(calls)
    ]


def merged_form(
    fn: Callable[..., Any],
) -> tuple[Callable[..., list[Any]], str, dict[str, Any]] | None:
    """(merged function, kind, the call's arguments) for a call the logic handed over as
    ``partial(store_function, **kwargs)`` that may share a statement with
    others; None for anything else (a put with a dedupe key, a call with the
    caller's ``also=`` SQL, ...)."""
    if not isinstance(fn, partial) or fn.args:
        return None
    if fn.func is insert_one and fn.keywords["row"][5] is None:
        return insert_merged, "put", fn.keywords
    if fn.func is claim:
        return claim_merged, "claim", fn.keywords
    if fn.func is ack:
        return ack_merged, "ack", fn.keywords
    return None


_REVIVE = (
    f"UPDATE {TABLE} SET state = 0, attempts = 0, run_at = now(), done_at = NULL, token = NULL "
    "WHERE queue = %s AND state = 3"
)


def retry_dead(
    conn: Any, queue: str, ids: Sequence[int] | None, now: float
) -> tuple[int, list[tuple[int, int | None]]]:
    """Revive dead jobs (all of the queue's, or these ids) with fresh
    attempts. Returns (revived, refused): the ids that are not dead jobs of
    this queue, with their state (None: no such job here); if there are any,
    nothing changes."""
    if ids is None:
        n = len(conn.execute(_REVIVE + " RETURNING id", (queue,)).fetchall())
    else:
        # FOR UPDATE: the states checked are the states revived (no other
        # transaction changes these rows until this one commits).
        states = {
            r[0]: int(r[1])
            for r in conn.execute(
                f"SELECT id, state FROM {TABLE} WHERE id = ANY(%s) AND queue = %s FOR UPDATE",
                (list(ids), queue),
            ).fetchall()
        }
        wanted = [jid for jid in ids if jid not in states]
        if wanted:  # (done jobs are in their own table)
            states.update(
                (r[0], DONE)
                for r in conn.execute(
                    f"SELECT id FROM {DONE_TABLE} WHERE id = ANY(%s) AND queue = %s",
                    (wanted, queue),
                ).fetchall()
            )
        refused = [(jid, states.get(jid)) for jid in ids if states.get(jid) != DEAD]
        if refused:
            return 0, refused
        n = len(
            conn.execute(_REVIVE + " AND id = ANY(%s) RETURNING id", (queue, list(ids))).fetchall()
        )
    if n:
        _notify(conn, queue)
    return n, []


# Done jobs from their own table, dead ones from the hot table, each through
# its (queue, done_at) index.
_PURGE = {
    table: f"""
DELETE FROM {table} WHERE id IN (
    SELECT id FROM {table}
     WHERE queue = %s AND state = %s AND done_at < to_timestamp(%s)
     ORDER BY done_at LIMIT %s)
RETURNING id
"""
    for table in (TABLE, DONE_TABLE)
}


def purge(
    conn: Any, queue: str, state: int, before: float, limit: int, after: int = 0
) -> tuple[int, int | None]:
    """Delete up to ``limit`` finished jobs of ``state`` that finished before
    ``before`` (a time the user gave: epoch seconds), oldest first, through
    the state's index. Returns (deleted, None when there is no more to do,
    else ``after`` unchanged: the next call starts again from the oldest).
    Identity ids are never handed out twice, so nothing has to be kept back."""
    sql = _PURGE[DONE_TABLE if state == DONE else TABLE]
    n = len(conn.execute(sql, (queue, state, before, limit)).fetchall())
    return n, (after if n == limit else None)


# -- reads (parameters by name; the host's "now" is there if a read needs it) ---

_COLUMNS = (
    f"id, queue, state, priority, {_epoch('run_at')}, payload::text, attempts, max_attempts, "
    f"{_epoch('lease_until')}, key, last_error, {_epoch('created_at')}, {_epoch('done_at')}, "
    # the 14th column: the server's clock, by which the logic tells "ready"
    # from "scheduled"
    f"{_epoch('now()')}"
)
# One statement over both tables: one snapshot, in which an ack's move has
# happened wholly or not at all.
SELECT_JOB = (
    f"SELECT {_COLUMNS} FROM {TABLE} WHERE id = %(id)s "
    f"UNION ALL SELECT {_COLUMNS} FROM {DONE_TABLE} WHERE id = %(id)s"
)
# Where the jobs of a call now are, by whom (see _sqlite.SELECT_FINISHED).
SELECT_FINISHED = (
    f"SELECT id, state, token FROM {TABLE} WHERE id = ANY(%(ids)s) "
    f"UNION ALL SELECT id, state, token FROM {DONE_TABLE} WHERE id = ANY(%(ids)s)"
)
SELECT_DEAD = (
    f"SELECT {_COLUMNS} FROM {TABLE} WHERE queue = %(queue)s AND state = 3 "
    "ORDER BY done_at DESC LIMIT %(limit)s"
)
# From the counts rows (see MIGRATIONS[2]), less or plus the jobs due later
# within the current hour, by the server's clock.
_NOW_HOUR = _hour("now()")
COUNTS = f"""
WITH c AS (SELECT state, bucket, sum(n) AS n FROM {COUNTS_TABLE}
            WHERE queue = %(queue)s GROUP BY 1, 2),
later AS (SELECT count(*) AS k FROM {TABLE}
           WHERE queue = %(queue)s AND state = 0
             AND run_at AT TIME ZONE 'UTC' > now() AT TIME ZONE 'UTC'
             AND run_at AT TIME ZONE 'UTC' < (now() + interval '1 hour') AT TIME ZONE 'UTC'
             AND {_hour("run_at")} = {_NOW_HOUR})
SELECT (SELECT coalesce(sum(n), 0) FROM c WHERE state = 0 AND bucket <= {_NOW_HOUR})
         - (SELECT k FROM later),
       (SELECT coalesce(sum(n), 0) FROM c WHERE state = 0 AND bucket > {_NOW_HOUR})
         + (SELECT k FROM later),
       (SELECT coalesce(sum(n), 0) FROM c WHERE state = 1),
       (SELECT coalesce(sum(n), 0) FROM c WHERE state = 2),
       (SELECT coalesce(sum(n), 0) FROM c WHERE state = 3)
"""
# When the next job is due, as a time on the *host's* clock (the host's now
# plus the server's "how long from now"): the waiting claimer compares it
# with time.time(), and clocks of different machines need not agree.
NEXT_DUE = f"""
SELECT %(now)s + extract(epoch FROM (min(t) - clock_timestamp()))::float8 FROM (
    (SELECT run_at AS t FROM {TABLE} WHERE queue = %(queue)s AND state = 0
      ORDER BY run_at AT TIME ZONE 'UTC' LIMIT 1)
    UNION ALL
    SELECT min(lease_until) FROM {TABLE} WHERE queue = %(queue)s AND state = 1
) AS due
"""
