"""For the runs of SQLAlchemy's own tests (``-p walfiles``, every driver).

SQLAlchemy's SQLite provisioning deletes the test database file whenever its
engine is disposed (after every test class), even while connections of other
engines, which tests leave to the garbage collector, are still open. With a
rollback journal (the stock drivers' default) that is harmless; in WAL mode
(litegate's) the next connections would open the deleted database's ``-wal``
and ``-shm``, which the old connections still hold, and read pages that
belong to another file ("database disk image is malformed"). SQLite's rule
for deleting a WAL database is to delete its ``-wal`` and ``-shm`` with it:
this makes the provisioning do that."""

from __future__ import annotations

import contextlib
import os
from typing import Any

_remove = os.remove


def _remove_with_wal(path: Any, *args: Any, **kwargs: Any) -> None:
    _remove(path, *args, **kwargs)
    name = os.fspath(path)
    if isinstance(name, str) and name.endswith(".db"):
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                _remove(name + suffix)


os.remove = _remove_with_wal
