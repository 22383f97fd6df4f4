"""The worker side: ``litegate worker --django`` runs tasks of one queue
with :class:`litegate.queue.Worker` (leases, heartbeats, graceful stop), and
records each attempt in the queue's own transactions."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import traceback
from functools import partial
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import close_old_connections, connections

from ...queue import Job, Queue, Worker
from . import _store
from ._api import TaskContext, TaskResultStatus, normalize_json, task_finished, task_started
from ._backend import TaskBackend, build_result, is_task_payload


def backend_for(alias: str) -> TaskBackend:
    """The configured tasks backend ``alias``; it must be litegate's."""
    from ._api import API

    if API == "django.tasks":
        from django.tasks import task_backends
    else:
        from django_tasks import task_backends
    backend = task_backends[alias]
    if not isinstance(backend, TaskBackend):
        from ..._errors import ConfigError

        raise ConfigError(
            f"TASKS[{alias!r}] uses {type(backend).__module__}.{type(backend).__qualname__}; "
            "litegate worker --django runs tasks of 'litegate.django.tasks.TaskBackend'"
        )
    return backend


def make_worker(backend_alias: str = "default", **options: Any) -> Worker:
    """A :class:`Worker` for one queue of the tasks backend ``backend_alias``
    (``options`` as for Worker: ``name`` is the task queue)."""
    backend = backend_for(backend_alias)
    wrapper = connections[backend.database]
    path = os.path.abspath(str(wrapper.settings_dict["NAME"]))
    worker_id = f"{socket.gethostname()[:30]}-{os.getpid()}-{secrets.token_hex(3)}"
    name = options.pop("name", "default")
    if backend.queues and name not in backend.queues:
        from ..._errors import ConfigError

        raise ConfigError(
            f"queue {name!r} is not in TASKS[{backend_alias!r}]['QUEUES'] "
            f"({sorted(backend.queues)}); pick one of those with --queue"
        )
    retry = {k: options.pop(k) for k in ("retry_base", "retry_max") if options.get(k) is not None}
    queue = Queue(path, name, **retry)  # (tasks that raise are not retried; see TaskBackend)
    queue.db.transact(_store.create)
    options.pop("pass_job", None)
    runner = _Runner(backend, worker_id)
    return Worker(
        queue,
        runner,
        pass_job=True,
        on_claim=partial(_started, worker_id),
        on_ack=_finished,
        on_release=_store.released,
        # A task that raised is acked (Django's API does not retry it) with a
        # FAILED outcome: the worker counts it as failed, not as acked.
        failed=_is_failure,
        **options,
    )


def _is_failure(outcome: _store.Outcome) -> bool:
    return outcome[0] == "FAILED"


def _started(worker_id: str, conn: Any, job_ids: list[int]) -> None:
    _store.started(conn, job_ids, worker_id)


def _finished(conn: Any, done: list[tuple[Job, Any]]) -> None:
    _store.finished(conn, [(job.id, outcome) for job, outcome in done])


class _Runner:
    """Runs one task: never raises for the task's own errors (a task that
    raises is FAILED, as Django's API says, not retried), returns the
    outcome that the ack records."""

    def __init__(self, backend: TaskBackend, worker_id: str) -> None:
        self.backend = backend
        self.worker_id = worker_id

    def __call__(self, job: Job) -> _store.Outcome:
        close_old_connections()
        result: Any = None
        try:
            result = self._result(job)
            task_started.send(type(self.backend), task_result=result)
            task = result.task
            if task.takes_context:
                value = task.call(TaskContext(task_result=result), *result.args, **result.kwargs)
            else:
                value = task.call(*result.args, **result.kwargs)
            text = json.dumps(normalize_json(value))
        except BaseException as exc:
            # SystemExit and KeyboardInterrupt too: a task runs in one of the
            # worker's threads, so they are the task's own (sys.exit() in its
            # code), never a stop of the worker (signals reach the main
            # thread). Re-raised, the queue would retry the task and the
            # result would say its worker was lost.
            outcome: _store.Outcome = (
                "FAILED",
                None,
                f"{type(exc).__module__}.{type(exc).__qualname__}",
                "".join(traceback.format_exception(exc)),
            )
            self._signal(result, TaskResultStatus.FAILED)
        else:
            outcome = ("SUCCESSFUL", text, None, None)
            self._signal(result, TaskResultStatus.SUCCESSFUL, value)
        finally:
            close_old_connections()
        return outcome

    def _result(self, job: Job) -> Any:
        """The TaskResult as the task sees it (RUNNING), without a read."""
        if not is_task_payload(job.payload):
            raise ImproperlyConfigured(
                f"job {job.id} in queue {job.queue!r} was not enqueued by a tasks backend (its "
                "payload is not a task's); put jobs for plain litegate.queue handlers in a queue "
                "no TASKS backend uses"
            )
        return build_result(
            job.payload,
            str(job.id),
            job.queue,
            self.backend.alias,
            TaskResultStatus.RUNNING,
            worker_ids=[self.worker_id],
        )

    def _signal(self, result: Any, status: Any, value: Any = None) -> None:
        if result is None:
            return  # the task did not even load: nothing to tell receivers about
        object.__setattr__(result, "status", status)
        if status == TaskResultStatus.SUCCESSFUL:
            object.__setattr__(result, "_return_value", value)
        with contextlib.suppress(Exception):  # a receiver's bug must not change the outcome
            task_finished.send(type(self.backend), task_result=result)
