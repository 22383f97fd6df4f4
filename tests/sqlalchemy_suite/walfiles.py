"""For the runs of SQLAlchemy's own tests (``-p walfiles``, every driver).

SQLAlchemy's SQLite provisioning deletes the test database file whenever its
engine is disposed (after every test class), even while connections that
tests left to the garbage collector are still open on it. With a rollback
journal (the stock drivers' default) that is harmless. In WAL mode
(litegate's) it is not: the next connections would open the deleted
database's ``-wal`` and ``-shm``, and when a left-over connection is finally
collected, SQLite, believing it is the file's last connection, checkpoints
and unlinks the ``-wal`` by name, which by then is the new database's (its
committed pages are lost: "no such table", "database disk image is
malformed"). So, before the provisioning deletes a database: collect the
garbage (the left-over connections close while their file is still there),
then delete the ``-wal`` and ``-shm`` with it, as SQLite's rule for deleting
a WAL database says."""

from __future__ import annotations

import contextlib
import gc
import os
from typing import Any

_remove = os.remove


def _remove_with_wal(path: Any, *args: Any, **kwargs: Any) -> None:
    name = os.fspath(path)
    is_db = isinstance(name, str) and name.endswith(".db")
    if is_db:
        gc.collect()
    _remove(path, *args, **kwargs)
    if is_db:
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                _remove(name + suffix)


os.remove = _remove_with_wal
