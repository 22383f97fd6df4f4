"""Django's generic cache tests (``cache.tests.BaseCacheTests``, from the
installed Django's source distribution) against ``LitegateCache``, set up
as Django's ``DBCacheTests`` sets them up for ``DatabaseCache``: on its own
file, and in the app's database (``OPTIONS["database"]``). Run by
``tests/django_suite/cache_run.py`` inside Django's ``runtests.py``, which
puts Django's ``tests/`` folder (the ``cache`` app) on the path."""

from __future__ import annotations

import os
from typing import Any

from cache.tests import BaseCacheTests, caches_setting_for_tests  # type: ignore[import-not-found]
from django.test import TransactionTestCase, override_settings

BACKEND = "litegate.django.cache.LitegateCache"
_DIR = os.environ["DJANGO_SUITE_DIR"]


def _in_app_database() -> dict[str, Any]:
    """Django's test caches, each with its table in the "default" database
    (Django's own OPTIONS, MAX_ENTRIES and CULL_FREQUENCY, kept)."""
    caches = caches_setting_for_tests(BACKEND=BACKEND)
    for params in caches.values():
        params["OPTIONS"] = {**params.get("OPTIONS", {}), "database": "default"}
    out: dict[str, Any] = caches
    return out


@override_settings(
    CACHES=caches_setting_for_tests(
        BACKEND=BACKEND,
        # a space in the path, as DBCacheTests has one in its table's name
        LOCATION=os.path.join(_DIR, "litegate cache.sqlite3"),
    )
)
class LitegateCacheTests(BaseCacheTests, TransactionTestCase):  # type: ignore[misc]
    available_apps = ["cache"]  # noqa: RUF012 - Django's attribute, as DBCacheTests sets it


@override_settings(CACHES=_in_app_database())
class LitegateCacheAppDatabaseTests(BaseCacheTests, TransactionTestCase):  # type: ignore[misc]
    available_apps = ["cache"]  # noqa: RUF012 - Django's attribute, as DBCacheTests sets it
