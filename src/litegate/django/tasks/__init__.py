"""A Django tasks backend on ``litegate.queue``.

```python
TASKS = {"default": {"BACKEND": "litegate.django.tasks.TaskBackend",
                     "QUEUES": ["default", "emails"]}}
```

Tasks live in the SQLite file of a ``litegate.django`` database (OPTIONS
``database``, default ``"default"``). ``enqueue()`` inside ``atomic()``
commits or rolls back with the transaction; run workers with
``litegate worker --django --queue default``. Uses ``django.tasks`` on
Django >= 6.0 and the ``django-tasks`` backport before.
"""

from ._backend import TaskBackend, WorkerLost

__all__ = ["TaskBackend", "WorkerLost"]
