"""litegate: one SQLite file, many threads and processes, no "database is locked".

Writes go through a fair write gate (in-process FIFO, then a cross-process
lock the kernel releases if its holder dies, then ``BEGIN IMMEDIATE``); reads
through a fair pool of read-only connections. The guarantees are in the
documentation (``docs/guarantees.md``).
"""

from ._busy import STRATEGIES as BUSY_STRATEGIES
from ._database import Database, WriteResult, connect
from ._errors import (
    Closed,
    ConfigError,
    Error,
    NestedWriteError,
    OpenError,
    PoolTimeout,
    ReadOnlyError,
    TransactionError,
    WriteTimeout,
)
from ._fair import Budget as Bounded
from ._maintenance import BackupResult, CheckpointResult, OptimizeResult, VacuumResult
from ._profiles import PROFILES
from ._version import __version__ as __version__

__all__ = [
    "BUSY_STRATEGIES",
    "PROFILES",
    "BackupResult",
    "Bounded",
    "CheckpointResult",
    "Closed",
    "ConfigError",
    "Database",
    "Error",
    "NestedWriteError",
    "OpenError",
    "OptimizeResult",
    "PoolTimeout",
    "ReadOnlyError",
    "TransactionError",
    "VacuumResult",
    "WriteResult",
    "WriteTimeout",
    "connect",
]
