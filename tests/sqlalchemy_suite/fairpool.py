"""For the runs of SQLAlchemy's own tests on sqlite+litegate (``-p
fairpool``): ``sqlalchemy.pool.QueuePool`` and ``AsyncAdaptedQueuePool`` are
litegate's fair pools, so that SQLAlchemy's pool tests
(test/engine/test_pool.py), and every other test that builds a QueuePool,
test them. Loaded before any test module imports ``sqlalchemy.pool``'s
names."""

from __future__ import annotations

import sqlalchemy.pool

from litegate.sqlalchemy import AsyncFairQueuePool, FairQueuePool

sqlalchemy.pool.QueuePool = FairQueuePool  # type: ignore[misc]
sqlalchemy.pool.AsyncAdaptedQueuePool = AsyncFairQueuePool  # type: ignore[misc]
