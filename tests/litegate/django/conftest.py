"""Django configured once for this process, on a fresh file (Django's
settings are process-wide). Skipped, with how to get it, without Django."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest

pytest.importorskip(
    "django", reason="the Django backend's tests need Django: pip install -e '.[dev]'"
)

_DIR = tempfile.mkdtemp(prefix="litegate-django-")
os.environ["LITEGATE_DJANGO_DB"] = os.path.join(_DIR, "app.db")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.litegate.django.settings")

import django  # noqa: E402

django.setup()

from django.db import connection, connections  # noqa: E402

from tests.litegate.django.testapp.models import Counter, Entry  # noqa: E402


@pytest.fixture(autouse=True)
def tables() -> Iterator[None]:
    """Fresh tables for every test; every thread's connection closed after."""
    with connection.schema_editor() as editor:
        editor.create_model(Counter)
        editor.create_model(Entry)
    yield
    connections.close_all()
    with connection.schema_editor() as editor:
        editor.delete_model(Entry)
        editor.delete_model(Counter)
    connections.close_all()
