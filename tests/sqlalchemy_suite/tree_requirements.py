"""SQLAlchemy's own ``DefaultRequirements`` (its ``test/requirements.py``), for
the runs of its ``test/`` tree (``--requirements
tree_requirements:Requirements``, stock drivers included): the few rules
that name SQLite drivers one by one name litegate's too, beside the driver
each one wraps (``litegate`` beside ``pysqlite``, ``litegate_async`` beside
``aiosqlite``). Everything else is SQLAlchemy's, unchanged."""

from __future__ import annotations

from typing import Any

from sqlalchemy.testing import exclusions
from test.requirements import DefaultRequirements  # type: ignore[import-not-found]


class Requirements(DefaultRequirements):  # type: ignore[misc]
    @property
    def emulated_lastrowid(self) -> Any:
        return exclusions.fails_on_everything_except(
            "mysql", "mariadb", "sqlite+aiosqlite", "sqlite+pysqlite",
            "sqlite+pysqlite_numeric", "sqlite+pysqlite_dollar", "sqlite+pysqlcipher", "mssql",
            "sqlite+litegate", "sqlite+litegate_async",
        )  # fmt: skip

    @property
    def emulated_lastrowid_even_with_sequences(self) -> Any:
        return exclusions.fails_on_everything_except(
            "mysql", "mariadb", "sqlite+pysqlite", "sqlite+pysqlcipher", "sqlite+litegate"
        )

    @property
    def dbapi_lastrowid(self) -> Any:
        return exclusions.skip_if("mssql+pymssql", "crashes on pymssql") + exclusions.only_on(
            ["mysql", "mariadb", "sqlite+pysqlite", "sqlite+aiosqlite", "sqlite+pysqlcipher",
             "mssql", "sqlite+litegate", "sqlite+litegate_async"]
        )  # fmt: skip
