"""The lab's readings of the write gate's shared counters (``_writers``)."""

from __future__ import annotations

from pathlib import Path

from litegate_lab import _writers


def test_gate_shares() -> None:
    before = {"grants": 5, "handoffs": 1, "barges": 0}
    after = {"grants": 25, "handoffs": 6, "barges": 2}
    # what happened before the first reading (a parent creating the schema) is left out
    assert _writers.gate_shares(before, after) == {
        "gate_grants": 20.0,
        "handoff_share": 0.25,
        "barge_share": 0.1,
    }
    assert _writers.gate_shares(None, after)["gate_grants"] == 25.0
    assert _writers.gate_shares(before, None) == {}  # no sidecar: no figures
    assert _writers.gate_shares(before, before)["handoff_share"] == 0.0


def test_gate_counters_without_a_sidecar(tmp_path: Path) -> None:
    assert _writers.gate_counters(str(tmp_path / "nothing.db")) is None
    (tmp_path / "other.db-litegate").write_bytes(b"not a lock file" * 20)
    assert _writers.gate_counters(str(tmp_path / "other.db")) is None


def test_gate_counters_of_a_litegate_file(tmp_path: Path) -> None:
    import litegate

    path = str(tmp_path / "x.db")
    db = litegate.connect(path)
    db.execute("CREATE TABLE t(v)")
    counters = _writers.gate_counters(path)
    db.close()
    assert counters is not None
    assert set(counters) == {"grants", "handoffs", "barges"}
    assert counters["grants"] >= 1  # the CREATE took the gate across processes
    assert counters["handoffs"] == counters["barges"] == 0  # nobody else was there
