"""SQLAlchemy's dialect compliance suite, whole (run by run.py)."""

from sqlalchemy.testing.suite import *  # noqa: F403
