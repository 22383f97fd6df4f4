"""``litegate worker`` and :class:`litegate.queue.Worker`.

The command runs as a real subprocess (``python -m litegate worker ...``)
that imports ``tests.litegate.queue.handlers``; the handlers append one JSON
line per event to a file, so the tests count exactly what ran, and in which
attempt. No assertion is about speed: timeouts only turn a hang into a failure.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import litegate
from litegate.__main__ import main as litegate_main
from litegate.queue import HandlerError, Job, Queue, Worker, pass_job
from litegate.queue._cli import _Console, _worker_options, build_parser, progress_line
from tests.conftest import wait_until
from tests.litegate.queue import handlers

REPO = Path(__file__).resolve().parents[3]
HANDLERS = "tests.litegate.queue.handlers"


# -- helpers ---------------------------------------------------------------------


def command(db_path: str, handler: str, *options: str) -> list[str]:
    """``handler``: a function of the handlers module, or module:function."""
    return [
        sys.executable,
        "-m",
        "litegate",
        "worker",
        handler if ":" in handler else f"{HANDLERS}:{handler}",
        "--db",
        db_path,
        *options,
    ]


def run_worker(db_path: str, handler: str, *options: str) -> subprocess.CompletedProcess[str]:
    """Run the command to its end (use --burst)."""
    return subprocess.run(
        command(db_path, handler, *options),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


class Running:
    """A ``litegate worker`` in the background; stderr goes to a file the
    test can watch while it runs."""

    def __init__(self, tmp_path: Path, db_path: str, handler: str, *options: str) -> None:
        self.stderr_path = tmp_path / "worker.stderr"
        self._err = open(self.stderr_path, "w")  # noqa: SIM115 - closed in finish()
        self.proc = subprocess.Popen(
            command(db_path, handler, *options),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
        )

    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def finish(self, timeout: float = 60) -> tuple[int, str, str]:
        """Wait for the exit; return (exit status, stdout, stderr)."""
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.communicate()
            self._err.close()
        return self.proc.returncode, out, self.stderr()


@pytest.fixture
def running() -> Iterator[list[Running]]:
    """Background workers started by a test; killed if the test fails early."""
    started: list[Running] = []
    yield started
    for r in started:
        if r.proc.poll() is None:
            r.proc.kill()
            r.proc.communicate()
        r._err.close()


def events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def stats_of(stdout: str) -> dict[str, Any]:
    lines = stdout.strip().splitlines()
    assert len(lines) == 1, stdout  # --json: one object, nothing else on stdout
    stats: dict[str, Any] = json.loads(lines[0])
    return stats


FAILURE = re.compile(r"job (\d+) failed on attempt (\d+) of (\d+), (will retry|dead)")


# -- the command ------------------------------------------------------------------


def test_every_job_runs_once_and_is_acked(db_path: str, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    with Queue(db_path) as q:
        q.put_many([{"out": str(out), "n": n} for n in range(300)])
    r = run_worker(db_path, "record", "--concurrency", "4", "--burst", "--json")
    assert r.returncode == 0, r.stderr
    seen = Counter(e["n"] for e in events(out))
    assert seen == Counter(range(300))  # each payload exactly once
    stats = stats_of(r.stdout)
    assert stats["processed"] == stats["acked"] == 300
    assert stats["failed"] == stats["dead"] == stats["released"] == stats["lease_lost"] == 0
    assert stats["errors"] == stats["abandoned"] == 0
    assert stats["processes"] == 1
    assert set(stats) >= {"runtime", "jobs_per_s", "queue"}
    with Queue(db_path) as q:
        assert q.counts() == {"ready": 0, "scheduled": 0, "leased": 0, "done": 300, "dead": 0}
    assert "\r" not in r.stderr  # no progress line when stderr is not a terminal


def test_a_raising_handler_retries_then_dead_with_the_last_error(
    db_path: str, tmp_path: Path
) -> None:
    out = tmp_path / "out.jsonl"
    with Queue(db_path) as q:
        ids = q.put_many([{"out": str(out), "n": n} for n in range(3)], max_attempts=3)
    r = run_worker(
        db_path,
        "always_fails",
        "--concurrency",
        "2",
        "--retry-base",
        "0.02",
        "--retry-max",
        "0.05",
        "--burst",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    assert Counter(e["n"] for e in events(out)) == {0: 3, 1: 3, 2: 3}
    stats = stats_of(r.stdout)
    assert (stats["processed"], stats["failed"], stats["dead"], stats["acked"]) == (9, 9, 3, 0)
    # One log line per failure, with the job, the attempt and the exception.
    logged = [
        (int(m[1]), int(m[2]), m[4])
        for line in r.stderr.splitlines()
        if (m := FAILURE.search(line))
    ]
    expected = {(jid, a, "dead" if a == 3 else "will retry") for jid in ids for a in (1, 2, 3)}
    assert sorted(logged) == sorted(expected)
    for line in r.stderr.splitlines():
        if FAILURE.search(line):
            assert re.search(r": ValueError: boom \d$", line), line
    with Queue(db_path) as q:
        assert q.counts()["dead"] == 3
        for n, jid in enumerate(ids):
            info = q.get(jid)
            assert (info.state, info.attempts) == ("dead", 3)
            assert info.last_error is not None
            first, _, rest = info.last_error.partition("\n")
            assert first == f"ValueError: boom {n}"
            assert "Traceback (most recent call last)" in rest
            assert 'handlers.py", line' in rest
            assert "_worker.py" not in rest  # the worker's own frame is left out


def test_sigterm_finishes_running_jobs_and_releases_unstarted_ones(
    db_path: str, tmp_path: Path, running: list[Running]
) -> None:
    """2 threads, 3 prefetched: jobs 0 and 1 run, 2-4 wait claimed, 5-7 stay
    in the queue. SIGTERM: 0 and 1 finish and are acked, 2-4 go back
    unstarted with their attempt not counted. A second worker runs the rest:
    every job ran exactly once."""
    out = tmp_path / "out.jsonl"
    with Queue(db_path) as q:
        ids = q.put_many([{"out": str(out), "n": n, "sleep": 0.8} for n in range(8)])
    w = Running(tmp_path, db_path, "slow", "--concurrency", "2", "--prefetch", "3", "--json")
    running.append(w)
    wait_until(lambda: len(events(out)) == 2, what="two jobs started")
    w.signal(signal.SIGTERM)
    code, stdout, stderr = w.finish()
    assert code == 0, stderr
    ran = events(out)
    assert sorted((e["event"], e["n"]) for e in ran) == [
        ("end", 0),
        ("end", 1),
        ("start", 0),
        ("start", 1),
    ]
    stats = stats_of(stdout)
    assert (stats["acked"], stats["released"], stats["abandoned"]) == (2, 3, 0)
    with Queue(db_path) as q:
        infos = [q.get(jid) for jid in ids]
        assert [(i.state, i.attempts) for i in infos] == [("done", 1)] * 2 + [("ready", 0)] * 6

    r = run_worker(db_path, "slow", "--concurrency", "6", "--burst")
    assert r.returncode == 0, r.stderr
    starts = Counter(e["n"] for e in events(out) if e["event"] == "start")
    ends = Counter(e["n"] for e in events(out) if e["event"] == "end")
    assert starts == ends == Counter(range(8))  # nothing lost, nothing run twice
    with Queue(db_path) as q:
        assert q.counts()["done"] == 8
        assert [q.get(jid).attempts for jid in ids] == [1] * 8


def test_a_second_signal_stops_at_once_and_the_job_comes_back(
    db_path: str, tmp_path: Path, running: list[Running]
) -> None:
    out = tmp_path / "out.jsonl"
    with Queue(db_path) as q:
        (jid,) = q.put_many([{"out": str(out), "sleep": 60}])
    w = Running(tmp_path, db_path, "slow_first_attempt", "--lease", "1", "--json")
    running.append(w)
    wait_until(lambda: len(events(out)) == 1, what="the job started")
    w.signal(signal.SIGTERM)
    wait_until(lambda: "stopping:" in w.stderr(), what="the worker is stopping")
    w.signal(signal.SIGTERM)
    code, stdout, stderr = w.finish(timeout=20)  # not the 60 s the job would take
    assert code == 1, stderr
    assert "1 job(s) still running: they are abandoned" in stderr
    stats = stats_of(stdout)
    assert (stats["processed"], stats["acked"], stats["abandoned"]) == (0, 0, 1)
    with Queue(db_path) as q:
        info = q.get(jid)
        assert (info.state, info.attempts) == ("leased", 1)  # until the lease expires

    # After the lease, the job runs again, as attempt 2.
    r = run_worker(db_path, "slow_first_attempt", "--burst")
    assert r.returncode == 0, r.stderr
    assert [(e["event"], e["attempt"]) for e in events(out)] == [
        ("start", 1),
        ("start", 2),
        ("end", 2),
    ]
    with Queue(db_path) as q:
        info = q.get(jid)
        assert (info.state, info.attempts) == ("done", 2)


def test_sigkill_of_a_worker_process_restarts_it_and_the_job_runs_again(
    db_path: str, tmp_path: Path, running: list[Running]
) -> None:
    out = tmp_path / "out.jsonl"
    with Queue(db_path) as q:
        (jid,) = q.put_many([{"out": str(out), "sleep": 60}])
    w = Running(
        tmp_path,
        db_path,
        "slow_first_attempt",
        "--processes",
        "2",
        "--lease",
        "1",
        "--json",
    )
    running.append(w)
    wait_until(lambda: len(events(out)) == 1, what="the job started")
    victim = events(out)[0]["pid"]
    assert victim != w.proc.pid  # it runs in a child, not in the supervisor
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: len(events(out)) == 3, timeout=30, what="the job ran again")
    w.signal(signal.SIGTERM)
    code, stdout, stderr = w.finish()
    assert code == 0, stderr
    assert f"worker process {victim} was killed by SIGKILL; starting a new one" in stderr
    ran = events(out)
    assert [(e["event"], e["attempt"]) for e in ran] == [("start", 1), ("start", 2), ("end", 2)]
    assert ran[1]["pid"] not in (victim, w.proc.pid)
    stats = stats_of(stdout)
    assert (stats["processes"], stats["restarts"], stats["acked"]) == (2, 1, 1)
    with Queue(db_path) as q:
        info = q.get(jid)
        assert (info.state, info.attempts) == ("done", 2)


def test_the_heartbeat_keeps_a_job_that_outlives_its_lease(
    db_path: str, tmp_path: Path, running: list[Running]
) -> None:
    """Lease 0.5 s, job 1.5 s: while it runs another claimer keeps trying
    (each claim first sweeps expired leases); it never gets the job."""
    out = tmp_path / "out.jsonl"
    with Queue(db_path) as q:
        (jid,) = q.put_many([{"out": str(out), "n": 0, "sleep": 1.5}])
        w = Running(tmp_path, db_path, "slow", "--lease", "0.5", "--burst", "--json")
        running.append(w)
        wait_until(lambda: len(events(out)) == 1, what="the job started")
        stolen = []
        while w.proc.poll() is None and q.get(jid).state != "done":
            stolen += q.claim(n=1, lease=30, wait=0.1)
        code, stdout, stderr = w.finish()
        assert stolen == []
        assert code == 0, stderr
        assert [e["event"] for e in events(out)] == ["start", "end"]
        stats = stats_of(stdout)
        assert (stats["acked"], stats["lease_lost"]) == (1, 0)
        info = q.get(jid)
        assert (info.state, info.attempts) == ("done", 1)


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_two_processes_run_every_job_once(db_path: str, tmp_path: Path, method: str) -> None:
    out = tmp_path / "out.jsonl"
    with Queue(db_path) as q:
        q.put_many([{"out": str(out), "n": n} for n in range(200)])
    options = ["--processes", "2", "--concurrency", "2", "--start-method", method]
    r = run_worker(db_path, "record", *options, "--burst", "--json")
    assert r.returncode == 0, r.stderr
    assert Counter(e["n"] for e in events(out)) == Counter(range(200))
    stats = stats_of(r.stdout)
    assert (stats["processed"], stats["acked"], stats["processes"]) == (200, 200, 2)
    assert stats["restarts"] == 0
    assert len(re.findall(r"worker started", r.stderr)) == 2
    with Queue(db_path) as q:
        assert q.counts()["done"] == 200


def test_a_signal_while_worker_processes_start_stops_them_cleanly(
    db_path: str, tmp_path: Path, running: list[Running]
) -> None:
    """The worker processes take 1 s to import the handler, and SIGTERM
    reaches the supervisor meanwhile. Each still gets the forwarded signal
    once its own handler is installed, and stops cleanly (not by SIGTERM's
    default action)."""
    Queue(db_path).close()
    w = Running(tmp_path, db_path, f"{HANDLERS}_slow_import:record", "--processes", "2")
    running.append(w)
    wait_until(lambda: "supervisor started" in w.stderr(), what="the supervisor started")
    w.signal(signal.SIGTERM)
    code, _, stderr = w.finish()
    assert code == 0, stderr
    assert stderr.count("worker stopped") == 2, stderr
    assert "exited with" not in stderr


def test_a_bad_handler_path_exits_2_with_what_to_do(db_path: str) -> None:
    r = run_worker(db_path, "no_such_function")
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.startswith(
        f"litegate worker: error: module {HANDLERS!r} has no attribute 'no_such_function'"
    )
    assert "Its functions: " in r.stderr
    assert "record" in r.stderr


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_colon", "is not of the form module:function; write the module's import path"),
        ("no_such_module_xyz:f", "cannot import module 'no_such_module_xyz'"),
        (f"{HANDLERS}:nope", f"module {HANDLERS!r} has no attribute 'nope'"),
        (f"{HANDLERS}:NOT_CALLABLE", "is a int, not a function: name a function"),
    ],
)
def test_handler_errors(
    db_path: str, spec: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    Queue(db_path).close()
    assert litegate_main(["worker", spec, "--db", db_path]) == 2
    err = capsys.readouterr().err
    assert err.startswith("litegate worker: error: ")
    assert message in err
    with pytest.raises(HandlerError, match=re.escape(message)):
        Worker(db_path, spec)
    assert issubclass(HandlerError, litegate.Error)


def test_a_missing_database_directory_exits_2_with_the_open_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = str(tmp_path / "missing" / "app.db")
    with pytest.raises(litegate.OpenError) as expected:
        litegate.connect(bad)
    assert litegate_main(["worker", f"{HANDLERS}:record", "--db", bad, "--create"]) == 2
    assert capsys.readouterr().err == f"litegate worker: error: {expected.value}\n"
    assert litegate_main(["worker", f"{HANDLERS}:record", "--db", bad]) == 2
    assert "no such file" in capsys.readouterr().err


def test_a_database_that_does_not_exist_exits_2_unless_create(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--db typo.db`` used to make an empty database and
    idle on it (``--burst`` exited 0). A missing file is an error that says
    so; ``--create`` makes one. Nothing is created without it, also with
    --processes (the check runs before any worker process starts)."""
    typo = tmp_path / "typo.db"
    for extra in (["--burst"], ["--processes", "2", "--burst"], []):
        assert litegate_main(["worker", f"{HANDLERS}:record", "--db", str(typo), *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"litegate worker: error: --db {typo}: no such file")
        assert "pass --create to make a new database" in err
        assert list(tmp_path.iterdir()) == []  # no file, no -wal, no sidecar
    args = ["worker", f"{HANDLERS}:record", "--db", str(typo), "--burst", "--create"]
    assert litegate_main(args) == 0
    assert typo.exists()
    with Queue(str(typo)) as q:
        assert q.counts()["ready"] == 0
    capsys.readouterr()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    assert litegate_main(args[:-1]) == 0  # now it exists: no flag needed
    # run in a process that goes on, the CLI leaves its logging as it was
    # (a handler left behind writes to a stream that may be closed by then)
    assert (root.handlers, root.level) == (handlers, level)


def test_the_supervisor_says_how_a_worker_process_ended_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """ "worker process 7 exited with exited with status 1"."""
    from litegate.queue._cli import _Child, _Supervisor

    class Ended:
        pid, exitcode = 7, 1

        def join(self) -> None:
            pass

    args = build_parser().parse_args([f"{HANDLERS}:record", "--db", "x.db", "--processes", "2"])
    sup = _Supervisor(args, _Console(io.StringIO()))
    for slot, stopping in ((0, True), (1, False)):
        sup.children[slot] = _Child(slot, Ended(), None, time.monotonic())
        with caplog.at_level("WARNING", logger="litegate.worker"):
            sup._reap(slot, sup.children[slot], stopping=stopping)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "worker process 7 exited with status 1"
    assert lines[1].startswith("worker process 7 exited with status 1; starting a new one")
    assert not any("exited with exited" in line for line in lines)


def test_bad_options_exit_2(db_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    Queue(db_path).close()
    assert litegate_main(["worker", f"{HANDLERS}:record", "--db", db_path, "--lease", "0"]) == 2
    assert "lease must be a finite number of seconds, greater than zero" in capsys.readouterr().err
    # a lease its heartbeat could not time (it once killed the heartbeat thread: OverflowError)
    assert litegate_main(["worker", f"{HANDLERS}:record", "--db", db_path, "--lease", "1e12"]) == 2
    assert "lease must be at most 31622400 s (a year)" in capsys.readouterr().err
    assert litegate_main(["worker", f"{HANDLERS}:record"]) == 2  # --db is required
    assert "give MODULE:FUNCTION and --db PATH|URL" in capsys.readouterr().err


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert litegate_main(["worker", "--help"]) == 0
    text = capsys.readouterr().out
    for option in ("--db", "--queue", "--concurrency", "--processes", "--lease", "--grace"):
        assert option in text
    assert "--pass-job" in text
    assert "exit status:" in text
    assert litegate_main(["--help"]) == 0
    assert "worker" in capsys.readouterr().out


def test_options_reach_the_worker() -> None:
    args = build_parser().parse_args(
        [f"{HANDLERS}:takes_job", "--db", "x.db", "--pass-job", "--queue", "q", "--lease", "9"]
    )
    options = _worker_options(args)
    assert (options["pass_job"], options["name"], options["lease"]) == (True, "q", 9.0)
    default = _worker_options(build_parser().parse_args([f"{HANDLERS}:flaky", "--db", "x.db"]))
    assert default["pass_job"] is None  # then the handler's @pass_job decides
    assert (default["concurrency"], default["grace"], default["burst"]) == (1, 30.0, False)


# -- the Python API ---------------------------------------------------------------


def test_one_thread_runs_jobs_in_claim_order(db_path: str) -> None:
    seen: list[int] = []
    with Queue(db_path) as q:
        q.put_many(list(range(10)))
        q.put_many([100, 101], priority=5)
        stats = Worker(q, seen.append, burst=True).run()
        assert seen == [100, 101, *range(10)]  # priority first, then oldest
        assert (stats["processed"], stats["acked"]) == (12, 12)
        assert q.counts()["done"] == 12


def test_failed_counts_the_failures_a_handler_returns(db_path: str) -> None:
    """``failed=``: a handler that reports failure by its value (recorded by
    its on_ack) has those jobs counted as failed, still acked and done."""
    with Queue(db_path) as q:
        q.put_many(["ok", "bad", "ok"])
        worker = Worker(q, lambda p: p.upper(), failed=lambda v: v == "BAD", burst=True)
        stats = worker.run()
        assert (stats["processed"], stats["acked"], stats["failed"]) == (3, 2, 1)
        assert q.counts()["done"] == 3


def test_pass_job_flag_and_decorator(db_path: str, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    with Queue(db_path) as q:
        jid = q.put({"out": str(out)})
        Worker(q, handlers.takes_job, pass_job=True, burst=True).run()
        assert events(out) == [{"id": jid, "attempt": 1}]

        got: list[Job] = []

        @pass_job
        def keep(job: Job) -> None:
            got.append(job)

        jid = q.put({"x": 1})
        Worker(q, keep, burst=True).run()
        assert [(j.id, j.payload, j.attempt) for j in got] == [(jid, {"x": 1}, 1)]


def test_a_failed_attempt_is_retried_and_can_succeed(db_path: str, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    with Queue(db_path, retry_base=0.01, retry_max=0.02) as q:
        jid = q.put({"out": str(out)})
        stats = Worker(q, handlers.flaky, burst=True).run()
        assert events(out) == [{"id": jid, "attempt": 1}, {"id": jid, "attempt": 2}]
        assert (stats["failed"], stats["dead"], stats["acked"]) == (1, 0, 1)
        info = q.get(jid)
        assert (info.state, info.attempts) == ("done", 2)


def test_async_handlers_run_on_one_event_loop(db_path: str, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    with Queue(db_path) as q:
        q.put_many([{"out": str(out), "n": n} for n in range(20)])
        stats = Worker(q, handlers.async_record, concurrency=4, burst=True).run()
    ran = events(out)
    assert sorted(e["n"] for e in ran) == list(range(20))
    assert len({e["loop"] for e in ran}) == 1
    assert len({e["thread"] for e in ran}) == 1
    assert stats["acked"] == 20


def test_an_async_failure_keeps_the_handlers_traceback(db_path: str) -> None:
    with Queue(db_path) as q:
        jid = q.put({"n": 7}, max_attempts=1)
        stats = Worker(q, handlers.async_fails, burst=True).run()
        assert (stats["failed"], stats["dead"]) == (1, 1)
        error = q.get(jid).last_error
    assert error is not None
    head, _, tb = error.partition("\n\n")
    assert head == "KeyError: 7"
    frames = tb.splitlines()
    assert frames[0] == "Traceback (most recent call last):"
    assert 'handlers.py", line' in frames[1]  # starts in the handler, not in the worker
    assert "in async_fails" in frames[1]


def test_ctrl_c_in_run_stops_gracefully(db_path: str) -> None:
    """KeyboardInterrupt in the thread running run() (Ctrl-C in a script)
    asks for a stop: the running job finishes and is acked."""
    started, release = threading.Event(), threading.Event()

    def handler(payload: Any) -> None:
        started.set()
        release.wait(30)

    def interrupt() -> None:
        assert started.wait(10)
        os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C: the main thread gets it
        time.sleep(0.2)  # the worker is stopping; let the job finish
        release.set()

    # Python's own Ctrl-C handler, whatever this process inherited: a shell
    # starts a background job (make test &) with SIGINT ignored, and Python
    # then leaves it ignored.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with Queue(db_path) as q:
            jid, other = q.put_many([1, 2])
            t = threading.Thread(target=interrupt)
            t.start()
            stats = Worker(q, handler).run()  # in the main thread, like a script
            t.join()
            assert (stats["acked"], stats["abandoned"]) == (1, 0)
            assert [q.get(i).state for i in (jid, other)] == ["done", "ready"]
    finally:
        signal.signal(signal.SIGINT, previous)


def test_stop_lets_the_running_job_finish(db_path: str) -> None:
    started, release = threading.Event(), threading.Event()

    def handler(payload: Any) -> None:
        started.set()
        release.wait(30)

    with Queue(db_path) as q:
        jid, *rest = q.put_many([1, 2, 3])
        worker = Worker(q, handler, concurrency=1, prefetch=1)
        result: list[dict[str, Any]] = []
        t = threading.Thread(target=lambda: result.append(worker.run()))
        t.start()
        assert started.wait(10)
        wait_until(lambda: worker.stats()["pending"] == 1, what="one job prefetched")
        worker.stop(grace=30)
        wait_until(lambda: q.get(rest[0]).state == "ready", what="the prefetched job released")
        assert t.is_alive()  # still waiting for the running job
        release.set()
        t.join(30)
        (stats,) = result
        assert (stats["acked"], stats["released"], stats["abandoned"]) == (1, 1, 0)
        assert [q.get(i).state for i in (jid, *rest)] == ["done", "ready", "ready"]
        assert q.get(rest[0]).attempts == 0


def test_stop_with_no_grace_abandons_the_running_job(db_path: str) -> None:
    started, release = threading.Event(), threading.Event()

    def handler(payload: Any) -> None:
        started.set()
        release.wait(30)

    try:
        with Queue(db_path) as q:
            jid = q.put(1)
            worker = Worker(q, handler, lease=5)
            result: list[dict[str, Any]] = []
            t = threading.Thread(target=lambda: result.append(worker.run()))
            t.start()
            assert started.wait(10)
            worker.stop(grace=0)
            t.join(10)
            assert not t.is_alive()
            assert result[0]["abandoned"] == 1
            info = q.get(jid)
            assert (info.state, info.attempts) == ("leased", 1)  # back after its lease
    finally:
        release.set()


def test_a_job_acked_elsewhere_counts_as_lease_lost(db_path: str) -> None:
    """The handler acks its own job, so the worker's ack finds it gone."""
    with Queue(db_path) as q:

        @pass_job
        def ack_it_myself(job: Job) -> None:
            q.ack(job)

        q.put(1)
        stats = Worker(q, ack_it_myself, burst=True).run()
        assert (stats["processed"], stats["acked"], stats["lease_lost"]) == (1, 0, 1)
        assert q.counts()["done"] == 1


def test_bad_worker_arguments(db_path: str) -> None:
    with Queue(db_path) as q:
        with pytest.raises(HandlerError, match="must be callable"):
            Worker(q, 42)  # type: ignore[arg-type]
        with pytest.raises(litegate.ConfigError, match="heartbeat"):
            Worker(q, print, lease=1, heartbeat=1)
        with pytest.raises(litegate.ConfigError, match="concurrency must be at least 1"):
            Worker(q, print, concurrency=0)
        # made up front, so a mistyped count once took the machine's memory
        with pytest.raises(litegate.ConfigError, match="concurrency must be at most 4096"):
            Worker(q, print, concurrency=99_999_999)
        with pytest.raises(litegate.ConfigError, match="prefetch must be at most 100000"):
            Worker(q, print, prefetch=100_001)
        for lease in (3e10, 1e12):  # its heartbeat thread once died of OverflowError
            with pytest.raises(litegate.ConfigError, match="lease must be at most"):
                Worker(q, print, lease=lease)
        with pytest.raises(litegate.ConfigError, match="pass them to Queue"):
            Worker(q, print, retry_base=0.1)
        w = Worker(q, print, burst=True)
        w.run()
        with pytest.raises(litegate.queue.QueueError, match="already run"):
            w.run()


def test_progress_line_on_a_terminal() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    console = _Console(Tty())
    assert console.tty
    stats = {"acked": 10, "failed": 2, "dead": 1, "running": 3, "processed": 12}
    console.set_status(progress_line(stats, 41.7))
    console.write_record("a log line")
    text = console.stream.getvalue()
    line = "litegate worker: 10 done, 2 failed (1 dead), 3 running, 42 jobs/s"
    # the log line is written over the progress line, which is drawn again below it
    assert text == f"\r\x1b[K{line}\r\x1b[Ka log line\n{line}"
    assert not _Console(io.StringIO()).tty


def test_a_worker_step_is_one_transaction(db_path: str) -> None:
    """The batch completer: the claimer carries the finished jobs' acks (and
    failures) into its next claim, so a worker running one job at a time
    commits once per job, not twice (a claim, then an ack)."""
    db = litegate.connect(db_path)
    q = Queue(db, retry_base=0.001, retry_max=0.001)  # the failed job is due again at once
    ids = q.put_many(range(40))
    fail_once = {ids[7]}

    def handler(payload: int) -> None:
        if ids[payload] in fail_once:
            fail_once.clear()
            raise ValueError("once")

    before = db.stats()["writes"]["committed"]
    # a long ack_delay: only claims settle, and the last one at the end
    stats = Worker(q, handler, concurrency=1, burst=True, ack_delay=30).run()
    commits = db.stats()["writes"]["committed"] - before
    assert (stats["acked"], stats["failed"], stats["errors"]) == (40, 1, 0)
    assert q.counts()["done"] == 40
    # 41 runs: 41 steps, and the last step's settling (an empty claim); the
    # settle-then-claim design of before took 82 and more
    assert commits <= 41 + 3, commits
    q.close()
    db.close()
