"""SQLAlchemy's pytest plugin, bootstrapped the way its README.dialects.rst
describes (loaded with ``-p plugin``, not as a conftest, so that the
project's own pytest run never sees it), with litegate's dialects
registered for a Python where litegate is on the path but not installed."""

from __future__ import annotations

import pytest
import register  # type: ignore[import-not-found]  # noqa: F401 - litegate's dialects

pytest.register_assert_rewrite("sqlalchemy.testing.assertions")

from sqlalchemy.testing.plugin.pytestplugin import *  # noqa: E402, F403
