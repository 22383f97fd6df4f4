"""litegate's dialects registered with SQLAlchemy by name, for a Python where
litegate is on the path but not installed (its entry points then are not).
Loaded as a pytest plugin (``-p register``) or imported."""

from __future__ import annotations

from sqlalchemy.dialects import registry

registry.register("sqlite.litegate", "litegate.sqlalchemy", "LitegateDialect")
registry.register("sqlite.litegate_async", "litegate.sqlalchemy", "AsyncLitegateDialect")
