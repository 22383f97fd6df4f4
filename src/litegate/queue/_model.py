"""What every store shares with the queue's logic: the state numbers, the
token marks, and the one internal signal a store raises."""

from __future__ import annotations

# States as stored. A job waiting for its run_at is READY whether it is due
# ("ready") or not ("scheduled"): the difference is the clock, not a write.
READY, LEASED, DONE, DEAD = 0, 1, 2, 3


Owned = tuple[int, int, float]
"""A claimed job as the stores take it back: (id, token, lease_until). The
lease's end is the Job's own copy (SQLite's store finds the lease by it)."""


Batch = tuple[str, int, float, int, float, str, int]
"""Payloads put together (``put_many``), as the stores take them: (queue,
priority, run_at, max_attempts, created_at, bodies, count), where ``bodies``
is the ``count`` payloads encoded as one JSON array, each payload a JSON
object or array. One encoder call for the lot: encoding each payload alone
cost as much as SQLite's insert of it. (A plain tuple, so that the combiner
can ship it.)"""


class KeyTaken(Exception):
    """Internal: a dedupe key is held by ``existing_id`` (the logic turns it
    into :class:`litegate.queue.DuplicateJob`)."""

    def __init__(self, key: str, existing_id: int) -> None:
        super().__init__(key, existing_id)
        self.key = key
        self.existing_id = existing_id


# Ownership tokens are random 62-bit numbers (0 <= token < 2**62), so that a
# token column can also say, with a negative number, which token *finished*
# a job by failing or releasing it (an acked job keeps its token and state
# DONE). A call whose answer was lost (the COMMIT happened, the caller did
# not learn it) and is tried again then finds its own finished work instead
# of reporting LeaseLost; a live token is never negative, so a mark never
# matches a claim's token. The two ranges do not overlap:
# failed: [-2**62, -1], released: [-2**63, -2**62 - 1].
TOKEN_BITS = 62
_LOW = (1 << TOKEN_BITS) - 1


def failed_mark(token: int) -> int:
    """What ``fail`` leaves in the token column of the job it failed."""
    return -1 - (token & _LOW)


def released_mark(token: int) -> int:
    """What ``release`` leaves in the token column of the job it gave back."""
    return -(1 << TOKEN_BITS) - 1 - (token & _LOW)
