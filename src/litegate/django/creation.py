"""Test databases: clones made with SQLite's backup API, so that what the
WAL holds is copied too (a plain file copy would miss it)."""

from __future__ import annotations

import os
import sqlite3
from typing import Any

from django.db.backends.sqlite3 import creation as sqlite_creation


class DatabaseCreation(sqlite_creation.DatabaseCreation):
    def _clone_test_db(self, suffix: Any, verbosity: int, keepdb: bool = False) -> None:
        source = self.connection.settings_dict["NAME"]
        target = self.get_test_db_clone_settings(suffix)["NAME"]
        if self.is_in_memory_db(source) or os.environ.get("LITEGATE_DJANGO_FILE_CLONE"):
            super()._clone_test_db(suffix, verbosity, keepdb)
            return
        if keepdb and os.access(target, os.F_OK):
            return
        for path in (target, target + "-wal", target + "-shm"):
            if os.access(path, os.F_OK):
                os.remove(path)
        src = sqlite3.connect(source)
        dst = sqlite3.connect(target)
        try:
            src.backup(dst)
        finally:
            dst.close()
            src.close()
