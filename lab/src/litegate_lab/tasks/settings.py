"""Django settings for ``litegate bench tasks``: one side per process,
chosen by the environment (``LITEGATE_LAB_TASKS_SIDE``: ``django-tasks-db``
or ``litegate``; the database file: ``LITEGATE_LAB_TASKS_DB``).

- ``django-tasks-db``: the stock ``django.db.backends.sqlite3`` engine with
  Django's default settings, and ``django_tasks_db.DatabaseBackend``, as its
  documentation sets them up;
- ``django-tasks-db+gate``: the same backend on the ``litegate.django``
  engine;
- ``litegate``: ``litegate.django`` and ``litegate.django.tasks.TaskBackend``.
"""

from __future__ import annotations

import os

SIDE = os.environ.get("LITEGATE_LAB_TASKS_SIDE", "litegate")
_DB = os.environ.get("LITEGATE_LAB_TASKS_DB", "/tmp/litegate-lab-tasks.db")

SECRET_KEY = "litegate-lab"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
LOGGING_CONFIG = None  # the workers' per-task INFO lines would dominate the timing

if SIDE.startswith("django-tasks-db"):
    INSTALLED_APPS = ["django_tasks_db"]
    try:
        import django.tasks  # noqa: F401  (Django >= 6 has the API itself)
    except ImportError:
        INSTALLED_APPS.insert(0, "django_tasks")
    ENGINE = "litegate.django" if SIDE.endswith("+gate") else "django.db.backends.sqlite3"
    DATABASES = {"default": {"ENGINE": ENGINE, "NAME": _DB}}
    TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
else:
    INSTALLED_APPS = []
    DATABASES = {"default": {"ENGINE": "litegate.django", "NAME": _DB}}
    TASKS = {"default": {"BACKEND": "litegate.django.tasks.TaskBackend"}}
