"""A side on either backend: open it, create its schema, count what is left.

The SQLite sides are in ``_sides.py``; the PostgreSQL ones in
``_pgsides.py``, which builds on ``_sides`` and is imported only when a
PostgreSQL side is used (its driver is an optional extra)."""

from __future__ import annotations

from ._sides import DONE_STATES, Side, create_sqlite, open_sqlite_side, remaining_sqlite


def open_side(
    name: str, path: str, profile: str, *, backend: str = "sqlite", threads: int = 1
) -> Side:
    """The side ``name`` on ``path`` (a file; on PostgreSQL the cell's
    database URL), for a process of ``threads`` threads."""
    if backend == "postgres":
        from ._pgsides import open_pg_side

        return open_pg_side(name, path, profile, threads)
    return open_sqlite_side(name, path, profile)


def create(name: str, path: str, profile: str, *, backend: str = "sqlite") -> None:
    """Create the side's schema on a fresh file or database (in the parent,
    before the children start, so they do not race on DDL)."""
    if backend == "postgres":
        from ._pgsides import create_pg

        create_pg(name, path)
        return
    create_sqlite(name, path, profile)


def remaining(name: str, path: str, profile: str, *, backend: str = "sqlite") -> int:
    """Jobs still in the queue (not acknowledged) after a cell."""
    if backend == "postgres":
        from ._pgsides import remaining_pg

        return remaining_pg(name, path, DONE_STATES)
    return remaining_sqlite(name, path, profile)
