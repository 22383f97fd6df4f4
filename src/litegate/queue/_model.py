"""What every store shares with the queue's logic: the state numbers and
the one internal signal a store raises."""

from __future__ import annotations

# States as stored. A job waiting for its run_at is READY whether it is due
# ("ready") or not ("scheduled"): the difference is the clock, not a write.
READY, LEASED, DONE, DEAD = 0, 1, 2, 3


class KeyTaken(Exception):
    """Internal: a dedupe key is held by ``existing_id`` (the logic turns it
    into :class:`litegate.queue.DuplicateJob`)."""

    def __init__(self, key: str, existing_id: int) -> None:
        super().__init__(key, existing_id)
        self.key = key
        self.existing_id = existing_id
