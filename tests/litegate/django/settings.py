"""Settings for the backend's tests: the database file and the engine come
from the environment, so that spawned processes use the same ones."""

from __future__ import annotations

import os

SECRET_KEY = "litegate-tests"
USE_TZ = True
INSTALLED_APPS = ["tests.litegate.django.testapp"]
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
_NAME = os.environ.get("LITEGATE_DJANGO_DB", "/tmp/litegate-django-tests.db")
_ENGINE = os.environ.get("LITEGATE_DJANGO_ENGINE", "litegate.django")
_OPTIONS = {"timeout": float(os.environ.get("LITEGATE_DJANGO_TIMEOUT", "30"))}
DATABASES = {
    "default": {"ENGINE": _ENGINE, "NAME": _NAME, "OPTIONS": dict(_OPTIONS)},
    # a second alias on the same file (two aliases, one gate)
    "other": {"ENGINE": _ENGINE, "NAME": _NAME, "OPTIONS": dict(_OPTIONS)},
}
TASKS = {
    "default": {
        "BACKEND": "litegate.django.tasks.TaskBackend",
        "QUEUES": ["default", "emails"],
    },
}
