"""``bench tasks`` in a tiny configuration: both sides run for real (Django
in spawned processes, real worker commands), and the assertions are about
accounting and behaviour, never about speed."""

from __future__ import annotations

from pathlib import Path

import pytest
from litegate_lab import tasks as bench

from litegate.__main__ import main

pytest.importorskip("django_tasks_db", reason="pip install -e '.[dev]'")


@pytest.mark.slow
def test_both_sides_run_every_task_and_only_litegate_survives_sigkill() -> None:
    cfg = bench.Config(processes=1, threads=2, tasks=20, workers=1, kill=True, runs=1)
    result = bench.run(cfg)
    (run,) = result["runs"]
    for side in bench.SIDES:
        drain = run[side]["drain"]
        assert drain["successful"] == 20, drain
        assert drain["exit_codes"] == [0]
        enq = run[side]["enqueue"]
        assert enq["enqueued"] + enq["errors"] == 20  # every view committed or raised
    assert run["litegate"]["enqueue"]["errors"] == 0
    kill = {side: run[side]["kill"] for side in bench.SIDES}
    assert kill["litegate"]["started"]
    assert (kill["litegate"]["status_after"], kill["litegate"]["runs"]) == ("SUCCESSFUL", 2)
    # django-tasks-db has no lease: the killed task is never run again
    for side in ("django-tasks-db", "django-tasks-db+gate"):
        assert (kill[side]["status_after"], kill[side]["runs"]) == ("RUNNING", 1)
    assert run["django-tasks-db+gate"]["enqueue"]["errors"] == 0  # the engine's gate
    table = bench.render(result)
    assert "after SIGKILL" in table
    assert "litegate / django-tasks-db (same run)" in table


def test_cli_rejects_an_unknown_side(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "tasks", "--sides", "celery", "--out", str(tmp_path)]) == 2
    assert "unknown side(s) ['celery']" in capsys.readouterr().err
