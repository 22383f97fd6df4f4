"""``litegate.queue``: a durable job queue on a litegate database.

```python
from litegate.queue import Queue

q = Queue("app.db", name="emails")
q.put({"to": "ada@example.org"})
for job in q.claim(n=10, lease=30.0, wait=1.0):
    send(job.payload)
    q.ack(job)
```

Leases with ownership tokens, retries with back-off, dead letters, dedupe
keys, priorities and delays; every mutation goes through litegate's write
gate (no "database is locked"), and calls from many threads share commits.
``litegate.queue.aio`` has the same methods, awaitable; ``litegate worker``
runs a function over a queue. Guide: ``docs/guides/queue.md``.
"""

from ._core import STATES, Also, Finished, Job, JobInfo, UndecodablePayload
from ._errors import (
    CommitUnknown,
    DuplicateJob,
    JobNotFound,
    LeaseLost,
    PayloadError,
    QueueError,
    ServerUnavailable,
)
from ._queue import Queue, put_on
from ._worker import HandlerError, Worker, pass_job

__all__ = [
    "STATES",
    "Also",
    "CommitUnknown",
    "DuplicateJob",
    "Finished",
    "HandlerError",
    "Job",
    "JobInfo",
    "JobNotFound",
    "LeaseLost",
    "PayloadError",
    "Queue",
    "QueueError",
    "ServerUnavailable",
    "UndecodablePayload",
    "Worker",
    "pass_job",
    "put_on",
]
