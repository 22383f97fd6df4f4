"""Django's tasks API, wherever this Django has it: ``django.tasks`` from
Django 6.0 on, the ``django-tasks`` backport (``django_tasks``) before."""

from __future__ import annotations

from typing import Any

try:
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    API = "django.tasks"
except ImportError:  # Django < 6: the backport
    try:
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
        from django_tasks.exceptions import InvalidTaskError as InvalidTask
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued, task_finished, task_started
        from django_tasks.utils import normalize_json
    except ImportError as exc:  # pragma: no cover - depends on what is installed
        from ..._errors import ConfigError

        raise ConfigError(
            "litegate's tasks backend needs Django's tasks API: Django >= 6.0 has it; on "
            "Django 4.2 / 5.2 install the backport: pip install django-tasks"
        ) from exc
    API = "django_tasks"

Base: Any = BaseTaskBackend

__all__ = [
    "API",
    "Base",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "normalize_json",
    "task_enqueued",
    "task_finished",
    "task_started",
]
