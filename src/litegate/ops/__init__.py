"""Operating a litegate database: ``litegate doctor`` (a read-only report
with recommendations) and ``litegate top`` (a live view across processes).
Both read shared state only; neither takes the gate."""

from ._doctor import Finding, NotADatabase, Report, diagnose
from ._inspect import GateSnapshot, SqliteLocks, gate_snapshot, sqlite_locks

__all__ = [
    "Finding",
    "GateSnapshot",
    "NotADatabase",
    "Report",
    "SqliteLocks",
    "diagnose",
    "gate_snapshot",
    "sqlite_locks",
]
