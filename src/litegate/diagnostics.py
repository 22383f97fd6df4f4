"""For tools that measure litegate: the write gate's grant log, the lock
file's counters, and the retry loop litegate runs against writers outside it.

The lab (``litegate-lab``, its own distribution) measures litegate through
these names and nothing private, so a change inside the core that keeps
them keeps the lab working; your own benchmarks may use them too.

The grant log records every grant of a file's write gate (who, when it
asked, when it got it, when it let go, its place in the cross-process line,
which database), one file per process in a folder; :func:`check_grants`
measures the fairness bounds on it, for each database's gate apart (mutual
exclusion, ticket order, overtakes, time at the head), and
``read_grants(folder, file=path)`` keeps one database's grants. It costs a
clock read and a line per grant, so it is off unless switched on::

    from litegate import diagnostics

    with diagnostics.grant_log("/tmp/grants"):  # processes started in it log too
        run_the_workload()
    found = diagnostics.check_grants(diagnostics.read_grants("/tmp/grants"))
    assert found["overlaps"] == 0

Setting ``LITEGATE_GRANT_LOG=<folder>`` (:data:`GRANT_LOG_ENV`) in a
process's environment does the same for a process you do not start.
"""

from __future__ import annotations

from ._busy import BusyStrategy, retry_busy
from ._grantlog import ENV as GRANT_LOG_ENV
from ._grantlog import Grant
from ._grantlog import check as check_grants
from ._grantlog import logging_to as grant_log
from ._grantlog import read as read_grants
from ._lockformat import read_counters as lock_counters

__all__ = [
    "GRANT_LOG_ENV",
    "BusyStrategy",
    "Grant",
    "check_grants",
    "grant_log",
    "lock_counters",
    "read_grants",
    "retry_busy",
]
