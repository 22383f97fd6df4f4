"""Django's tasks API on litegate.queue: enqueue (also inside atomic()),
results, priorities, run_after, queue names, and ``litegate worker
--django`` as a real process, SIGKILL included."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone
from litegate_lab.tasks.work import slow  # slow on its first run only

from litegate.django.tasks import TaskBackend
from litegate.django.tasks._api import TaskResultDoesNotExist, TaskResultStatus
from litegate.django.tasks._worker import make_worker
from litegate.queue import Queue
from tests.conftest import wait_until
from tests.litegate.django.testapp import tasks
from tests.litegate.django.testapp.models import Entry

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def empty_queue() -> Iterator[None]:
    yield
    drop_tables()


def drop_tables() -> None:
    """No queue and no results in the file, and the backend knows it."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' "
            "AND (name LIKE 'litegate\\_queue\\_%' ESCAPE '\\' OR name = 'litegate_task_results')"
        )
        for (table,) in cur.fetchall():
            cur.execute(f"DROP TABLE IF EXISTS {table}")
    backend = tasks.add.get_backend()
    assert isinstance(backend, TaskBackend)
    backend._ready.clear()


def run_burst(queue: str = "default", **options: Any) -> dict[str, Any]:
    """Run the queue's tasks in this process until none is left."""
    worker = make_worker("default", name=queue, burst=True, **options)
    try:
        return worker.run()
    finally:
        worker.queue.close()


def db_path() -> str:
    return str(connection.settings_dict["NAME"])


def test_enqueue_then_a_worker_runs_it_and_the_result_comes_back() -> None:
    result = tasks.add.enqueue(2, 3)
    assert result.status == TaskResultStatus.READY
    assert result.enqueued_at is not None
    fetched = tasks.add.get_result(result.id)
    assert (fetched.status, fetched.args, fetched.worker_ids) == (
        TaskResultStatus.READY,
        [2, 3],
        [],
    )
    stats = run_burst()
    assert stats["acked"] == 1
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert result.errors == []
    assert len(result.worker_ids) == 1
    assert result.started_at is not None
    assert result.finished_at is not None
    assert result.started_at <= result.finished_at


def test_a_task_that_raises_fails_once_with_its_error() -> None:
    result = tasks.boom.enqueue()
    stats = run_burst()
    # a FAILED task is not counted as acked
    assert (stats["processed"], stats["acked"], stats["failed"]) == (1, 0, 1)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in result.errors] == ["builtins.ValueError"]
    assert result.errors[0].exception_class is ValueError
    assert "boom" in result.errors[0].traceback
    assert result.attempts == 1  # not retried: Django's API has no retries
    with pytest.raises(ValueError, match="failed"):
        _ = result.return_value


def test_a_task_raising_systemexit_or_keyboardinterrupt_fails_once_in_a_real_worker() -> None:
    """A task's sys.exit() or KeyboardInterrupt is the task's failure, as any
    exception is: FAILED at once with that exception recorded, in a real
    ``litegate worker --django`` process that keeps running the other tasks.
    It was re-raised into the queue's worker, which retried the task up to
    max_attempts and reported it as WorkerLost ("the worker ... stopped")."""
    exited = tasks.exits.enqueue(3)
    interrupted = tasks.interrupts.enqueue()
    async_exited = tasks.aexits.enqueue()
    fine = tasks.add.enqueue(20, 22)
    worker = _worker("--burst", "--concurrency", "1")
    _, err = worker.communicate(timeout=120)
    assert worker.returncode == 0, err
    for result, path, text in (
        (exited, "builtins.SystemExit", "SystemExit: 3"),
        (interrupted, "builtins.KeyboardInterrupt", "KeyboardInterrupt: from the task"),
        (async_exited, "builtins.SystemExit", "SystemExit: async exit"),
    ):
        result.refresh()
        assert result.status == TaskResultStatus.FAILED
        assert [e.exception_class_path for e in result.errors] == [path]
        assert text in result.errors[0].traceback
        assert len(result.worker_ids) == 1  # one attempt, not max_attempts
    fine.refresh()
    assert (fine.status, fine.return_value) == (TaskResultStatus.SUCCESSFUL, 42)
    with Queue(db_path(), "default") as q:
        counts = q.counts()
        attempts = [q.get(int(r.id)).attempts for r in (exited, interrupted, async_exited)]
    assert (counts["done"], counts["dead"], attempts) == (4, 0, [1, 1, 1])


def test_a_task_released_unstarted_records_no_worker_lost(tmp_path: Path) -> None:
    """a task claimed ahead (prefetch) and given back
    unstarted when the worker stops was left RUNNING in its result, so the
    next worker recorded a WorkerLost for an attempt that never ran. Now the
    release undoes what the claim recorded, in the release's transaction."""
    go = tmp_path / "go"
    held = tasks.wait_for.enqueue(str(go))
    ahead = [tasks.add.enqueue(k, k) for k in range(2)]
    first = make_worker("default", concurrency=1, prefetch=2)
    runner = threading.Thread(target=first.run)
    runner.start()
    try:
        wait_until(
            lambda: first.stats()["pending"] == 2 and first.stats()["running"] == 1,
            what="one task running, two claimed ahead",
        )
        assert tasks.add.get_result(ahead[0].id).status == TaskResultStatus.RUNNING
        first.stop(grace=30)
        wait_until(lambda: first.stats()["released"] == 2, what="the two given back")
        for r in ahead:
            back = tasks.add.get_result(r.id)
            assert (back.status, back.worker_ids, back.started_at) == (
                TaskResultStatus.READY,
                [],
                None,
            )
    finally:
        go.touch()
        runner.join(60)
        first.queue.close()
    stats = run_burst()
    assert (stats["acked"], stats["failed"]) == (2, 0)
    for r in ahead:
        r.refresh()
        assert (r.status, r.return_value) == (TaskResultStatus.SUCCESSFUL, r.args[0] * 2)
        assert r.errors == []  # no WorkerLost: the attempt never started
        assert len(r.worker_ids) == 1
    held.refresh()
    assert (held.status, held.errors) == (TaskResultStatus.SUCCESSFUL, [])


def test_counts_tell_each_status_as_get_result_does() -> None:
    backend = tasks.add.get_backend()
    assert isinstance(backend, TaskBackend)
    assert backend.counts() == {}  # nothing ever enqueued: no tables yet
    done = [tasks.add.enqueue(1, 2) for _ in range(3)]
    failed = tasks.boom.enqueue()
    run_burst()
    ready = [tasks.add.enqueue(2, 2), tasks.add.using(queue_name="emails").enqueue(3, 3)]
    later = tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(4, 4)
    running = tasks.add.enqueue(5, 5)
    with Queue(db_path(), "default") as q:
        assert len(q.claim()) == 1  # as a worker does, not finished yet
    with Queue(db_path(), "elsewhere") as q:
        q.put("not this backend's queue")
    expected = {"SUCCESSFUL": 3, "FAILED": 1, "READY": 3, "RUNNING": 1}
    assert backend.counts() == expected
    told: dict[str, int] = {}
    for r in [*done, failed, *ready, later, running]:
        status = str(tasks.add.get_backend().get_result(r.id).status)
        told[status] = told.get(status, 0) + 1
    assert told == expected


def test_enqueue_inside_atomic_commits_or_rolls_back_with_it() -> None:
    with transaction.atomic():
        Entry.objects.create(who="order")
        kept = tasks.record.enqueue("kept")  # on the gate atomic() holds: no second gate
    lost: list[Any] = []

    def rolled_back() -> None:
        with transaction.atomic():
            Entry.objects.create(who="lost order")
            lost.append(tasks.record.enqueue("lost"))
            raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        rolled_back()
    with pytest.raises(TaskResultDoesNotExist):
        tasks.record.get_result(lost[0].id)
    assert tasks.record.get_result(kept.id).status == TaskResultStatus.READY
    run_burst()
    assert sorted(Entry.objects.values_list("who", flat=True)) == ["kept", "order"]


def test_priority_then_order_of_enqueue() -> None:
    for who, priority in [("low", -5), ("first", 0), ("high", 10), ("second", 0)]:
        tasks.record.using(priority=priority).enqueue(who)
    run_burst(concurrency=1)
    assert list(Entry.objects.order_by("id").values_list("who", flat=True)) == [
        "high",
        "first",
        "second",
        "low",
    ]


def test_run_after_waits_and_queue_names_are_separate() -> None:
    later = tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 1)
    mail = tasks.add.using(queue_name="emails").enqueue(2, 2)
    with Queue(db_path(), "default") as q:
        assert q.counts()["scheduled"] == 1
    run_burst("emails")
    mail.refresh()
    later.refresh()
    assert (mail.status, mail.return_value) == (TaskResultStatus.SUCCESSFUL, 4)
    assert later.status == TaskResultStatus.READY
    assert later.task.run_after is not None


def test_takes_context_sees_the_attempt() -> None:
    result = tasks.attempt.enqueue()
    run_burst()
    result.refresh()
    assert result.return_value == 1


def test_unknown_ids_and_a_read_only_scope() -> None:
    from litegate.django import ReadOnlyScopeError, read_only

    for bad in ("nope", "999999"):
        with pytest.raises(TaskResultDoesNotExist):
            tasks.add.get_result(bad)
    with pytest.raises(ReadOnlyScopeError), read_only():
        tasks.add.enqueue(1, 2)


def test_get_result_finds_only_the_ids_enqueue_handed_out() -> None:
    """get_result() of anything but a task's id as enqueue() gave it is
    TaskResultDoesNotExist, in get_result() and aget_result() alike. The id
    of a plain litegate.queue job in the same file raised KeyError: 'task';
    "9" * 30 and str(2**63) raised OverflowError; " 1 " and the Arabic-Indic
    digits of an id returned that task under an id that does not match."""
    backend = tasks.add.get_backend()
    real = tasks.add.enqueue(1, 2)
    with Queue(db_path(), "default") as q:
        plain = [q.put({"x": 1}), q.put("text"), q.put([1, 2]), q.put({"task": "a.b"})]
    arabic = "".join(chr(0x0660 + int(c)) for c in real.id)
    bad: list[Any] = [str(job) for job in plain]
    bad += ["9" * 30, str(2**63), str(2**64), f" {real.id} ", arabic, f"+{real.id}"]
    bad += [f"0{real.id}", f"{real.id}\n", f"{real.id}.0", "", "0", "-1", "nope", int(real.id)]
    bad += [None, 1.0, b"1", [real.id]]
    for result_id in bad:
        with pytest.raises(TaskResultDoesNotExist):
            backend.get_result(result_id)
        with pytest.raises(TaskResultDoesNotExist):
            asyncio.run(backend.aget_result(result_id))
    assert backend.get_result(real.id).id == real.id
    assert asyncio.run(backend.aget_result(real.id)).args == [1, 2]
    # A worker of the tasks' queue fails the plain jobs, saying what they are.
    stats = run_burst()
    assert (stats["processed"], stats["acked"], stats["failed"]) == (5, 1, 4)
    with connection.cursor() as cur:
        cur.execute("SELECT errors FROM litegate_task_results WHERE job_id = %s", [plain[0]])
        (errors,) = cur.fetchone()
    assert "ImproperlyConfigured" in errors
    assert f"job {plain[0]} in queue 'default' was not enqueued by a tasks backend" in errors


def test_a_rolled_back_first_enqueue_leaves_results_readable() -> None:
    """The first enqueue() of the process creates the results table inside
    the caller's transaction; when that rolls back, the table goes with it,
    so the backend must not remember it as made. It did: get_result() of
    every later task raised TaskResultDoesNotExist until a worker started."""
    backend = tasks.add.get_backend()

    def rolled_back() -> None:
        with transaction.atomic():
            tasks.add.enqueue(0, 0)
            raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        rolled_back()
    real = tasks.add.enqueue(2, 2)
    fetched = tasks.add.get_result(real.id)
    assert (fetched.status, fetched.args) == (TaskResultStatus.READY, [2, 2])
    assert len(backend._ready) == 1  # made, committed, remembered
    drop_tables()
    # inside an outer block that commits, an inner one (a savepoint) that rolls back
    with transaction.atomic():
        with pytest.raises(RuntimeError):
            rolled_back()
        kept = tasks.add.enqueue(3, 3)
        assert backend._ready == set()  # not before the commit
    assert tasks.add.get_result(kept.id).args == [3, 3]
    run_burst()
    kept.refresh()
    assert (kept.status, kept.return_value) == (TaskResultStatus.SUCCESSFUL, 6)


def _worker(*args: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "LITEGATE_DJANGO_DB": db_path(),
        # (the lab too: the tasks are its; a venv without it installed, as
        # make test-django-matrix's, finds it there)
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src"), str(ROOT / "lab" / "src")]),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "litegate", "worker", "--django",
         "--settings", "tests.litegate.django.settings", *args],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@pytest.mark.slow
def test_sigkill_of_the_worker_mid_task_runs_it_again(tmp_path: Path) -> None:
    """The worker process is SIGKILLed while the task runs: once its lease
    runs out, the next worker runs the task again, and the result keeps the
    lost attempt as a WorkerLost error."""
    flag = str(tmp_path / "started")
    result = slow.enqueue(flag, 30.0)
    first = _worker("--lease", "1")
    try:
        # the file appears at open(), its line a moment later: wait for the line
        wait_until(
            lambda: os.path.exists(flag) and Path(flag).read_text().endswith("\n"),
            60,
            "the task to start",
        )
        assert slow.get_result(result.id).status == TaskResultStatus.RUNNING
        os.kill(first.pid, signal.SIGKILL)
    finally:
        first.kill()
        first.communicate(timeout=30)
    # --burst waits while the killed worker's job is leased, then claims it
    # once that lease (1 s) has run out.
    second = _worker("--burst", "--lease", "5")
    _, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == "done"
    assert len(result.worker_ids) == 2
    assert [e.exception_class_path for e in result.errors] == ["litegate.django.tasks.WorkerLost"]
    assert "stopped before the task finished" in result.errors[0].traceback
    assert len(Path(flag).read_text().split()) == 2  # it ran twice


def test_worker_command_line_errors() -> None:
    bad = _worker("tests.litegate.queue.handlers:noop")
    _, err = bad.communicate(timeout=60)
    assert bad.returncode == 2
    assert "drop MODULE:FUNCTION" in err
    wrong_queue = _worker("--queue", "nope", "--burst")
    _, err = wrong_queue.communicate(timeout=60)
    assert wrong_queue.returncode == 2
    assert "not in TASKS['default']['QUEUES']" in err


def test_bad_options_say_what_to_do() -> None:
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match="takes 'database' and 'max_attempts'"):
        TaskBackend("x", {"OPTIONS": {"retries": 3}})
    with pytest.raises(ImproperlyConfigured, match="whole number >= 1"):
        TaskBackend("x", {"OPTIONS": {"max_attempts": 0}})
    messages = list(TaskBackend("x", {"OPTIONS": {"database": "nope"}}).check())
    assert [m.id for m in messages] == ["litegate.E001"]


def test_odd_backend_settings_and_arguments_are_typed_errors() -> None:
    """Found by the misuse suite: QUEUES=5 raised TypeError in Django's
    base class, QUEUES="default" became the queues d, e, f, a, u, l, t;
    OPTIONS=None AttributeError; OPTIONS["database"]=[] TypeError from
    check(); a database alias not in DATABASES ConnectionDoesNotExist at
    enqueue(); arguments JSON cannot hold TypeError / ValueError /
    RecursionError from Django's normalize_json. Now SettingsError
    (Django's ImproperlyConfigured and litegate.ConfigError) and
    PayloadError (a TypeError and litegate.Error), nothing stored."""
    from litegate.django import SettingsError
    from litegate.queue import PayloadError

    cases: list[tuple[dict[str, Any], str]] = [
        ({"QUEUES": 5}, "['QUEUES'] must be a list of queue names"),
        ({"QUEUES": "default"}, "['QUEUES'] must be a list of queue names"),
        ({"QUEUES": ["default", ""]}, "must hold queue names (non-empty strings)"),
        ({"OPTIONS": None}, "['OPTIONS'] must be a dict"),
        ({"OPTIONS": {"database": []}}, "['database'] must be the alias of a litegate.django"),
        ({"OPTIONS": {5: 1, "retries": 3}}, "unknown option(s) 'retries', 5;"),
    ]
    for params, message in cases:
        with pytest.raises(SettingsError) as info:
            TaskBackend("x", params)
        assert message in str(info.value), str(info.value)
    elsewhere = TaskBackend("x", {"OPTIONS": {"database": "nope"}})
    with pytest.raises(SettingsError, match=r"'nope', which is not in DATABASES \(\['default',"):
        elsewhere.enqueue(tasks.add, [1, 2], {})
    deep: list[Any] = []
    for _ in range(5000):
        deep = [deep]
    for odd in (object(), {1, 2}, b"\xff", deep, float("nan")):
        with pytest.raises(PayloadError, match="JSON-serialisable"):
            tasks.add.enqueue(odd, 1)
    with Queue(db_path(), "default") as q:
        assert q.counts()["ready"] == 0  # nothing stored


def test_results_of_edge_run_afters_and_of_a_backend_gone_from_tasks() -> None:
    """run_after=datetime.max is stored as epoch seconds a hair past what a
    datetime holds: get_result() raised ValueError ("year 10000 is out of
    range"). A task enqueued by a TASKS alias since removed from the
    settings could not be read back through the alias that shares its
    file (InvalidTaskBackendError); it is now read through that one."""
    from datetime import datetime, timezone

    far = tasks.add.using(run_after=datetime.max.replace(tzinfo=timezone.utc)).enqueue(1, 1)
    back = tasks.add.get_result(far.id)
    assert back.task.run_after == datetime.max.replace(tzinfo=timezone.utc)
    with Queue(db_path(), "default") as q:  # as the removed alias "gone" stored it
        put = q.put(
            {"task": tasks.add.module_path, "args": [2, 2], "kwargs": {}, "backend": "gone"}
        )
    found = tasks.add.get_result(str(put))
    assert (found.args, found.backend, found.task.backend) == ([2, 2], "gone", "default")
