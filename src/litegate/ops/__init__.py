"""Operating a litegate database: ``litegate doctor`` (a read-only report
with recommendations) and ``litegate top`` (a live view across processes).
Both read shared state only; neither takes the gate. :func:`read_here`
reads a file of a database this process may have open without dropping
SQLite's locks on it (which closing any descriptor of the file would)."""

from ._doctor import Finding, NotADatabase, Report, diagnose
from ._inspect import GateSnapshot, SqliteLocks, gate_snapshot, read_here, sqlite_locks

__all__ = [
    "Finding",
    "GateSnapshot",
    "NotADatabase",
    "Report",
    "SqliteLocks",
    "diagnose",
    "gate_snapshot",
    "read_here",
    "sqlite_locks",
]
