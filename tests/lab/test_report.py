"""Table formatting, JSON output and the progress display."""

from __future__ import annotations

import io
import json
import math
import time
from pathlib import Path

import pytest
from litegate_lab._progress import Progress
from litegate_lab._report import (
    Column,
    cpu_times,
    fmt_ms,
    fmt_pct,
    gate_timing,
    idle_share,
    out_dir,
    seed_table,
    to_json,
    write_json,
)

from litegate._grantlog import Grant


def test_seed_table_layout() -> None:
    cols = [Column("MODE", "center"), Column("CONTENTION", "left"), Column("PARENT")]
    text = seed_table(cols, [[["constant", "6 (4/2/0)", "0"]], [["constant", "7 (4/2/1)", "1071"]]])
    lines = text.splitlines()
    assert lines[0] == "    MODE    |  CONTENTION  |  PARENT"
    assert lines[1] == "  constant  |  6 (4/2/0)   |       0"
    assert lines[2] == ""  # a blank line between groups, as in the seed
    assert lines[3] == "  constant  |  7 (4/2/1)   |    1071"


def test_seed_table_rejects_ragged_rows() -> None:
    with pytest.raises(ValueError, match="2 cells for 1 columns"):
        seed_table([Column("A")], [[["x", "y"]]])


def test_fmt_ms() -> None:
    assert fmt_ms(None) == "-"
    assert fmt_ms(math.nan) == "-"
    assert fmt_ms(12.6) == "13"
    assert fmt_ms(-3.25, 1) == "-3.2"
    assert fmt_pct(None) == "-"
    assert fmt_pct(0.0012) == "0.1%"
    assert fmt_pct(0.25) == "25%"


def test_json_has_no_nan(tmp_path: Path) -> None:
    data = {"a": math.nan, "b": [math.inf, 1.5], "c": {1: tmp_path}}
    parsed = json.loads(to_json(data))
    assert parsed == {"a": None, "b": [None, 1.5], "c": {"1": str(tmp_path)}}
    path = write_json(tmp_path / "x.json", data)
    assert json.loads(path.read_text()) == parsed


def test_out_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    given = out_dir(str(tmp_path / "a" / "b"), "fairness", "stamp")
    assert given == tmp_path / "a" / "b"
    assert given.is_dir()
    monkeypatch.chdir(tmp_path)
    default = out_dir(None, "fairness", "20260101-000000")
    assert default == Path("results") / "fairness-20260101-000000"
    assert (tmp_path / default).is_dir()


def test_progress_only_on_a_terminal() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert Progress.wanted(Tty(), json_mode=False, disabled=False)
    assert not Progress.wanted(Tty(), json_mode=True, disabled=False)
    assert not Progress.wanted(Tty(), json_mode=False, disabled=True)
    assert not Progress.wanted(io.StringIO(), json_mode=False, disabled=False)


@pytest.mark.parametrize("enabled", [False, True])
def test_progress_counts(enabled: bool) -> None:
    with Progress(4, "x", enabled=enabled) as p:
        assert p.enabled is enabled
        p.total = 10
        p.describe("step")
        p.advance()
        p.advance(2)
        p.set_done(5)
    assert (p.total, p.done, p.description) == (10, 5, "step")


def test_gate_timing_splits_a_log_into_held_free_while_waited_and_idle() -> None:
    """Four grants over 1,000 ns: held 100 + 200 + 100 + 50; two takers were
    waiting when the grant before theirs ended (gaps 50 and 150, one of them
    to another process); the third arrived after a release (an idle gap).
    Percentiles are the lab's (linear between ranks)."""
    g = [
        Grant(0, 0, 100, 1, 1, False, -1, 0, 16, 2000),
        Grant(50, 150, 350, 2, 1, True, 4, 120, 16, 2000),  # waited: 50 ns free
        Grant(300, 500, 600, 2, 2, True, -1, 0, 16, 2000),  # waited: 150 ns free
        Grant(700, 950, 1000, 1, 1, False, -1, 0, 16, 2000),  # came after: idle
    ]
    t = gate_timing(list(reversed(g)))  # (any order)
    assert t["grants"] == 4
    assert t["span_ns"] == 1000
    assert t["held_share"] == pytest.approx(0.45)
    assert t["hold_p50_ns"] == 100
    assert t["hold_p90_ns"] == pytest.approx(170)
    assert t["handovers"] == 2
    assert t["free_waiting_share"] == pytest.approx(0.2)
    assert t["handover_p50_ns"] == 100
    assert t["cross_process"] == pytest.approx(0.5)
    assert gate_timing([])["grants"] == 0


def test_idle_share_is_the_idle_part_of_the_machines_ticks() -> None:
    a = cpu_times()
    end = time.monotonic() + 0.05
    while time.monotonic() < end:
        pass
    share = idle_share(a, cpu_times())
    assert share is not None
    assert 0.0 <= share <= 1.0
    assert idle_share((1000, 100), (1100, 130)) == pytest.approx(0.3)
    assert idle_share(None, (1100, 130)) is None  # no reading (not Linux)
    assert idle_share((1000, 100), (1000, 100)) is None  # no tick between the two
