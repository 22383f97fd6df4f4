"""The lab: ``litegate bench <experiment>`` reproduces the seeds'
experiments and measures litegate against the usual ways of doing the same
thing.

Needs the ``lab`` extra (``pip install 'litegate[lab]'``): matplotlib for
the charts, rich for the progress bar, SQLAlchemy for its pool.

This package stays light on import: the child processes of an experiment
import its module under ``spawn``, and must not pay for matplotlib.
"""

from __future__ import annotations

import importlib.util

LAB_REQUIREMENTS = ("matplotlib", "rich", "sqlalchemy")
"""Top-level modules the lab extra provides."""


def missing_requirements() -> list[str]:
    """The lab extra's modules that cannot be imported here."""
    return [name for name in LAB_REQUIREMENTS if importlib.util.find_spec(name) is None]
