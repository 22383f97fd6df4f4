"""The tasks backend: ``TASKS = {"default": {"BACKEND":
"litegate.django.tasks.TaskBackend"}}``."""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Iterable
from datetime import datetime, timezone
from functools import partial
from typing import Any

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import connections, transaction
from django.utils.module_loading import import_string

from ...queue import PayloadError, put_on
from .. import base as litegate_base
from ..base import SettingsError
from . import _store
from ._api import (
    Base,
    Task,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    normalize_json,
    task_enqueued,
)

_QUEUE_STATES = {0: TaskResultStatus.READY, 1: TaskResultStatus.RUNNING}


class WorkerLost(Exception):
    """Recorded (as a result's error) for an attempt whose worker stopped or
    was killed before the task finished; the task was run again, or, with
    no attempts left, failed."""


class TaskBackend(Base):
    """Django tasks on ``litegate.queue``, in the SQLite file of a
    ``litegate.django`` database.

    ``OPTIONS``:

    - ``database``: the alias whose file holds the queue (``"default"``).
    - ``max_attempts``: runs of a task whose worker dies mid-task (killed,
      out of memory) before it is marked failed (3). A task that *raises*
      is failed at once, as Django's API expects, never retried.

    ``enqueue()`` inside ``transaction.atomic()`` stores the task in that
    transaction (it runs only if the transaction commits), on the gate the
    transaction already holds. Workers: ``litegate worker --django``.
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        where = f"TASKS[{alias!r}]"
        queues = params.get("QUEUES", ["default"])
        if isinstance(queues, (str, bytes)) or not isinstance(queues, (list, tuple, set)):
            raise SettingsError(
                f"{where}['QUEUES'] must be a list of queue names, e.g. ['default', 'emails'], "
                f"got {queues!r}"
            )
        if not all(isinstance(q, str) and q for q in queues):
            raise SettingsError(
                f"{where}['QUEUES'] must hold queue names (non-empty strings), got {queues!r}"
            )
        if not isinstance(params.get("OPTIONS", {}), dict):
            raise SettingsError(
                f"{where}['OPTIONS'] must be a dict, e.g. {{'database': 'default'}}, got "
                f"{params['OPTIONS']!r}"
            )
        super().__init__(alias, params)
        options = dict(self.options)
        self.database: str = options.pop("database", "default")
        self.max_attempts = options.pop("max_attempts", 3)
        if options:
            raise SettingsError(
                f"{where}['OPTIONS']: unknown option(s) {', '.join(sorted(map(repr, options)))}; "
                "litegate's tasks backend takes 'database' and 'max_attempts': remove the others"
            )
        if not isinstance(self.database, str):
            raise SettingsError(
                f"{where}['OPTIONS']['database'] must be the alias of a litegate.django "
                f"database in DATABASES (a str), got {self.database!r}"
            )
        if (
            isinstance(self.max_attempts, bool)
            or not isinstance(self.max_attempts, int)
            or self.max_attempts < 1
        ):
            raise SettingsError(
                f"{where}['OPTIONS']['max_attempts'] must be a whole number >= 1, "
                f"got {self.max_attempts!r}"
            )
        self._ready: set[tuple[str, str]] = set()  # (alias, file) with the tables made
        self._ready_lock = threading.Lock()

    # -- checks -----------------------------------------------------------------
    def check(self, **kwargs: Any) -> Iterable[checks.CheckMessage]:
        yield from super().check(**kwargs)
        if self.database not in settings.DATABASES:
            yield checks.Error(
                f"TASKS[{self.alias!r}]: OPTIONS['database'] is {self.database!r}, which is not "
                "in DATABASES",
                id="litegate.E001",
            )
            return
        engine = settings.DATABASES[self.database].get("ENGINE", "")
        if engine != "litegate.django":
            yield checks.Error(
                f"TASKS[{self.alias!r}] keeps its queue in database {self.database!r}, whose "
                f"ENGINE is {engine!r}: it needs 'litegate.django' (its write gate is what "
                "lets workers and requests share the file without 'database is locked')",
                id="litegate.E002",
            )

    # -- enqueue ----------------------------------------------------------------
    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        self.validate_task(task)
        now = time.time()
        try:
            args = normalize_json(list(args))
            kwargs = normalize_json(dict(kwargs))
        except (TypeError, ValueError, RecursionError) as exc:
            raise PayloadError(
                f"a task's arguments must be JSON-serialisable ({type(exc).__name__}: {exc}); "
                "nothing was stored. Pass dicts, lists, strings, numbers, booleans or None "
                "(encode other values yourself, e.g. as strings)"
            ) from None
        run_after = task.run_after
        delay = 0.0 if run_after is None else max(0.0, run_after.timestamp() - now)
        payload = {
            "task": task.module_path,
            "args": args,
            "kwargs": kwargs,
            "backend": self.alias,
            "priority": task.priority,
            "run_after": None if run_after is None else run_after.timestamp(),
        }
        wrapper = self._wrapper()
        if wrapper.litegate_read_only:
            raise litegate_base.ReadOnlyScopeError(
                f"enqueue() inside litegate.django.read_only() on {wrapper.alias!r} was refused; "
                "nothing was stored. Enqueue outside the read_only() block"
            )
        # The caller's transaction if there is one (a savepoint in it, on
        # the gate it holds); else one of our own.
        with transaction.atomic(using=self.database):
            raw = wrapper.connection
            self._tables(raw)
            jid = put_on(
                raw,
                payload,
                queue=task.queue_name,
                priority=task.priority,
                delay=delay,
                max_attempts=self.max_attempts,
            )
        result = TaskResult(
            task=task,
            id=str(jid),
            status=TaskResultStatus.READY,
            enqueued_at=_when(now),
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=args,
            kwargs=kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        task_enqueued.send(type(self), task_result=result)
        return result

    # -- results ----------------------------------------------------------------
    def get_result(self, result_id: str) -> Any:
        """The result of the task whose id ``enqueue()`` returned; anything
        else (another spelling of that id, a plain queue job's id) is
        ``TaskResultDoesNotExist``. ``aget_result()`` runs this."""
        jid = _job_id(result_id)
        if jid is None:
            raise TaskResultDoesNotExist(result_id)
        rows = self._fetch(_store.SELECT, (jid,))
        if rows is None:
            raise TaskResultDoesNotExist(result_id)
        row = rows[0] if rows else None
        payload = None if row is None else _decoded(row[1])
        if payload is None or not is_task_payload(payload):
            raise TaskResultDoesNotExist(result_id)
        return result_from_row(row, payload, result_id, self.alias)

    def counts(self) -> dict[str, int]:
        """How many tasks of this backend's queues are in each status
        (``"READY"``, ``"RUNNING"``, ``"SUCCESSFUL"``, ``"FAILED"``), as
        :meth:`get_result` would tell them one by one; a status with none is
        left out. One query over the queue's job table (plain
        ``litegate.queue`` jobs put in these queues count too)."""
        rows = self._fetch(_store.COUNTS, (json.dumps(sorted(self.queues)),))
        return {str(status): int(n) for status, n in rows or ()}

    # -- plumbing -----------------------------------------------------------------
    def _fetch(self, sql: str, params: tuple[Any, ...]) -> list[Any] | None:
        """The rows of a read of the queue's and the results' tables; None
        if they do not exist yet (nothing was ever enqueued in this file)."""
        try:
            with self._wrapper().cursor() as cur:
                cur.execute(sql, params)
                rows: list[Any] = cur.fetchall()
        except Exception as exc:
            if "no such table" in str(exc):
                return None
            raise
        return rows

    def _wrapper(self) -> Any:
        if self.database not in settings.DATABASES:
            raise SettingsError(
                f"TASKS[{self.alias!r}]['OPTIONS']['database'] is {self.database!r}, which is "
                f"not in DATABASES ({sorted(settings.DATABASES)}); set it to a litegate.django "
                "database's alias"
            )
        wrapper = connections[self.database]
        if not isinstance(wrapper, litegate_base.DatabaseWrapper):
            raise SettingsError(
                f"TASKS[{self.alias!r}] needs database {self.database!r} to use ENGINE "
                f"'litegate.django', not {wrapper.settings_dict['ENGINE']!r}"
            )
        return wrapper

    def _tables(self, raw: Any) -> None:
        key = (self.database, os.path.abspath(str(settings.DATABASES[self.database]["NAME"])))
        if key in self._ready:
            return
        # IF NOT EXISTS, in the caller's transaction: made here, not in a
        # transaction of our own, because the caller's may hold the file's
        # one write lock (a second connection would wait for it forever).
        # So the table exists only once that transaction commits, and is
        # remembered only then: a rollback takes it away again.
        _store.create(raw)
        transaction.on_commit(partial(self._made, key), using=self.database)

    def _made(self, key: tuple[str, str]) -> None:
        with self._ready_lock:
            self._ready.add(key)


_MAX_ID = 2**63 - 1  # SQLite's largest rowid


def _job_id(result_id: object) -> int | None:
    """The job id that ``result_id`` is, spelled exactly as ``enqueue()``
    spells ids (``str(id)``: ASCII digits, no sign, space or leading zero),
    or None. ``int()`` alone would take " 1 ", "+1", "01" and other scripts'
    digits for job 1."""
    if not isinstance(result_id, str) or not (result_id.isascii() and result_id.isdigit()):
        return None
    jid = int(result_id)
    if not 1 <= jid <= _MAX_ID or str(jid) != result_id:
        return None
    return jid


def _decoded(body: str) -> Any:
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return None  # not a task's: enqueue() stores plain JSON


def is_task_payload(payload: Any) -> bool:
    """Whether a job's payload is a task's, as ``enqueue()`` stores it (a
    plain ``litegate.queue`` job can share the file and the queue name)."""
    return (
        isinstance(payload, dict)
        and isinstance(payload.get("task"), str)
        and isinstance(payload.get("args"), list)
        and isinstance(payload.get("kwargs"), dict)
        and isinstance(payload.get("backend"), str)
    )


def _when(ts: float | None) -> datetime | None:
    """Epoch seconds as Django wants them: aware UTC with USE_TZ, else naive
    local time."""
    if ts is None:
        return None
    try:
        if settings.USE_TZ:
            return datetime.fromtimestamp(ts, tz=timezone.utc)
        return datetime.fromtimestamp(ts)
    except (OverflowError, ValueError, OSError):
        # Past what datetime holds: run_after=datetime.max, stored as epoch
        # seconds, comes back a hair beyond it.
        edge = datetime.max if ts > 0 else datetime.min
        return edge.replace(tzinfo=timezone.utc) if settings.USE_TZ else edge


def result_from_row(row: Any, payload: dict[str, Any], result_id: str, alias: str) -> Any:
    """A TaskResult from a row of ``_store.SELECT`` and its decoded payload."""
    state, _body, created_at, last_error, queue = row[:5]
    r_status, r_value, r_errors, r_workers, started, attempted, finished = row[5:]
    errors = _store.errors_of(r_errors)
    if state in _QUEUE_STATES:
        status = _QUEUE_STATES[state]
    elif state == 2:  # acked: the worker recorded how it ended
        status = TaskResultStatus(r_status or "FAILED")
    else:  # dead: the last worker went away with no attempts left
        status = TaskResultStatus.FAILED
        if r_status in (None, "RUNNING"):
            errors.append((_store.WORKER_LOST, last_error or "no attempts left"))
    result = build_result(
        payload,
        result_id,
        queue,
        alias,
        status,
        errors=errors,
        worker_ids=json.loads(r_workers or "[]"),
        enqueued_at=created_at,
        started_at=started,
        last_attempted_at=attempted,
        finished_at=finished if status in _FINAL else None,
    )
    if status == TaskResultStatus.SUCCESSFUL and r_value is not None:
        object.__setattr__(result, "_return_value", json.loads(r_value))
    return result


def build_result(
    payload: dict[str, Any],
    result_id: str,
    queue: str,
    alias: str,
    status: Any,
    *,
    errors: list[tuple[str, str]] | None = None,
    worker_ids: list[str] | None = None,
    enqueued_at: float | None = None,
    started_at: float | None = None,
    last_attempted_at: float | None = None,
    finished_at: float | None = None,
) -> Any:
    """A TaskResult from a job's payload (as enqueued) and what is known of
    its attempts; times are epoch seconds."""
    return TaskResult(
        task=_task(payload, queue, alias),
        id=result_id,
        status=status,
        enqueued_at=_when(enqueued_at),
        started_at=_when(started_at),
        last_attempted_at=_when(last_attempted_at),
        finished_at=_when(finished_at),
        args=payload["args"],
        kwargs=payload["kwargs"],
        backend=payload.get("backend", alias),
        errors=[TaskError(exception_class_path=p, traceback=t) for p, t in errors or []],
        worker_ids=list(worker_ids or []),
    )


_FINAL = (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED)


def _task(payload: dict[str, Any], queue: str, alias: str) -> Any:
    task = import_string(payload["task"])
    if not isinstance(task, Task):
        raise ImproperlyConfigured(
            f"{payload['task']!r} is not a task (decorate the function with @task)"
        )
    run_after = payload.get("run_after")
    changes: dict[str, Any] = {
        "queue_name": queue,
        "backend": payload.get("backend", alias),
        "priority": payload.get("priority", task.priority),
    }
    if run_after is not None and math.isfinite(run_after):
        changes["run_after"] = _when(run_after)
    try:
        return task.using(**changes)
    except ImproperlyConfigured:
        if changes["backend"] == alias:
            raise
        # The backend that enqueued it is no longer in TASKS: the result is
        # read (and the task run) through this one, which shares its file.
        return task.using(**{**changes, "backend": alias})
