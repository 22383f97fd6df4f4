"""Ctrl-C (KeyboardInterrupt) never leaves litegate's state half-changed.

Each case runs tests/litegate/interrupts.py in a process of its own (a
SIGINT that litegate defers is sent again until it lands: in pytest's own
process it would land in pytest). The checks there: the interrupt reaches
the program exactly once; the Database's next write succeeds; another
process writes through the gate; SQLite's write lock is free; one row per
write that returned."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def harness(*args: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "src")])}
    env.pop("LITEGATE_DEFER_CTRL_C", None)
    done = subprocess.run(
        [sys.executable, "-m", "tests.litegate.interrupts", *args],
        capture_output=True, text=True, timeout=600, cwd=ROOT, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize(
    ("op", "how"),
    [("write", ""), ("execute", ""), ("transact", ""), ("query", ""),
     ("write", "--cold"), ("execute", "--cold"), ("write", "--fork")],
)  # fmt: skip
def test_ctrl_c_at_every_step_leaves_everything_usable(op: str, how: str) -> None:
    """SIGINT's handler called at every call, line and return of litegate's
    core code that one operation runs (warm, the Database's first write:
    ``--cold``, or in a child forked after its parent connected: ``--fork``);
    not one step leaves anything broken."""
    result = harness(op, *([how] if how else []))
    assert result["broken"] == []
    assert result["steps"] >= (20 if op == "query" else 120)  # (the tracer saw the code)


def test_with_pythons_own_handler_ctrl_c_breaks_a_write() -> None:
    """The same harness with Python's default handler (as before litegate
    deferred interrupts): it finds a step after which the Database's next
    write times out, its own gate's lock taken and never given back."""
    result = harness("write", "--python-default", "--first")
    assert len(result["broken"]) == 1
    assert any("next write: WriteTimeout" in w for w in result["broken"][0]["wrong"])


@pytest.mark.parametrize("op", ["write", "execute", "transact"])
def test_ctrl_c_while_waiting_for_the_gate_lands_at_once(op: str) -> None:
    """Waiting for the gate another process holds (3 s) is not deferred: the
    interrupt lands when it comes, the wait leaves the gate's queue, and
    then this process and the other write."""
    result = harness(op, "--queued")
    assert result["broken"] == []  # (it landed while the other process still held the gate)
    assert result["interrupted_after_s"] >= 0.25  # (not before it was sent)


def test_a_storm_of_real_sigints_breaks_nothing() -> None:
    """Real SIGINTs every 0.1-3 ms for 2 s while the main thread writes in
    a loop and catches each KeyboardInterrupt."""
    result = harness("storm", "--seconds", "2")
    assert result["broken"] == []
    assert result["interrupts"] >= 50
    assert result["deferred"] >= 1  # (some landed inside litegate: deferred, then delivered)
    assert result["writes"] >= 100
