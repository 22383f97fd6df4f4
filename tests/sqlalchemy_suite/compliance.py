"""SQLAlchemy's dialect compliance suite, whole (run by run.py)."""

from typing import Any

from sqlalchemy.testing.suite import *  # noqa: F403
from sqlalchemy.testing.suite import ServerSideCursorsTest as _ServerSideCursorsTest


class ServerSideCursorsTest(_ServerSideCursorsTest):  # type: ignore[no-redef]
    # SQLAlchemy's own version tells a server-side cursor by the driver's
    # name, from a list of its own drivers (its TODO: "this prevents these
    # tests from being usable by third party dialects"). litegate's asyncio
    # cursors say so themselves, as aiosqlite's do.
    def _is_server_side(self, cursor: Any) -> bool:
        return bool(getattr(cursor, "server_side", False))
