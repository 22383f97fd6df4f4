"""The queue's errors. All derive from :class:`litegate.Error`."""

from __future__ import annotations

from collections.abc import Sequence

from .._errors import Error, OpenError


class QueueError(Error):
    """Base class of the errors only the queue raises."""


class LeaseLost(QueueError):
    """This worker no longer holds the job: its lease expired and another
    worker claimed it, or the job was already acked, failed or released.
    Nothing was changed. Stop working on the job; whoever holds it now will
    finish it. Raise ``lease=`` (or call ``q.extend()`` as a heartbeat) if
    your jobs outlive their lease."""

    def __init__(self, message: str, job_ids: Sequence[int]) -> None:
        super().__init__(message)
        self.job_ids = list(job_ids)


class JobNotFound(QueueError, KeyError):
    """No job with that id in this queue (never existed, purged, or it
    belongs to another queue name). Also raised, before anything changes,
    for a Job claimed from another queue handed to this queue's ``ack``,
    ``fail``, ``extend`` or ``release`` (the message names its queue), and by
    ``retry_dead`` for ids that are not dead jobs of this queue."""

    def __init__(self, message: str, job_ids: Sequence[int]) -> None:
        super().__init__(message)
        self.job_ids = list(job_ids)

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0])


class DuplicateJob(QueueError):
    """``put(key=...)`` while a job with that key is not done yet. Nothing was
    stored; ``existing_id`` is the job that holds the key."""

    def __init__(self, message: str, key: str, existing_id: int) -> None:
        super().__init__(message)
        self.key = key
        self.existing_id = existing_id


class PayloadError(QueueError, TypeError):
    """A payload that JSON cannot encode (a set, bytes, an object, NaN).
    Nothing was stored."""


class ServerUnavailable(QueueError, OpenError):
    """PostgreSQL cannot be reached: at open, or for longer than the queue's
    ``reconnect`` seconds later (a shorter outage is ridden out: calls retry
    on new connections). Nothing was changed by the call that raised it."""


class CommitUnknown(QueueError):
    """The connection to PostgreSQL broke while a transaction was being
    committed: it may or may not have been. Look (``q.get``, ``q.counts``,
    a dedupe ``key=`` on ``put``) before doing a ``put`` again. An ``ack``,
    ``fail``, ``extend`` or ``release`` may be called again with the same
    Job: if the first try committed, the retry finds that by the job's
    token and reports success (the queue guide's "A lost answer")."""
