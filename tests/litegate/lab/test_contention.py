"""``bench contention`` end to end in tiny cells (short slow queries, two
processes x two threads). The assertions are about accounting and ordering,
never about speed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from litegate.lab import contention
from litegate.lab.contention import Cell, Config


def test_cell_parse_and_label() -> None:
    c = Cell.parse("8/4/1")
    assert (c.processes, c.threads, c.slow) == (8, 4, 1)
    assert c.label == "13 (8/4/1)"  # n = P + T + S, as in the seed
    assert c.writers == 32
    with pytest.raises(ValueError, match="P/T/S"):
        Cell.parse("8/4")
    with pytest.raises(ValueError, match="T >= 1"):
        Cell.parse("8/0/1")


def test_full_matrix_is_the_seeds() -> None:
    assert len(contention.FULL_CELLS) == 12
    assert [c.key for c in contention.FULL_CELLS[:4]] == ["4/2/0", "4/4/0", "8/2/0", "8/4/0"]
    assert contention.MODES == (
        "sqlite-default", "constant", "backoff", "jitter", "ceiling", "reversed", "litegate",
    )  # fmt: skip


def test_after_latest_release() -> None:
    records = [{"end_ms": 1003.0}, {"end_ms": 1001.5}, {"end_ms": 2004.5}]
    # releases at 1000 ms and 2002 ms: the worst wait after a release is 3 ms
    assert contention._after_latest_release(records, [1.0, 2.002]) == pytest.approx(3.0)
    assert contention._after_latest_release([{"end_ms": 7.0}], []) == pytest.approx(7.0)
    assert contention._after_latest_release([], [1.0]) is None


@pytest.fixture(scope="module")
def result() -> dict[str, Any]:
    cfg = Config(
        modes=("sqlite-default", "constant", "litegate"),
        cells=(Cell(slow=0, processes=2, threads=2), Cell(slow=2, processes=2, threads=2)),
        parents=("same", "foreign"),
        slow_seconds=0.05,
        child_timeout=10.0,
    )
    return contention.run(cfg)


def test_every_writer_is_accounted_for(result: dict[str, Any]) -> None:
    raw = result["raw"]
    assert len(raw) == 2 * 3 * 2  # parents x modes x cells
    for cell in raw:
        writers = [w for child in cell["children"] for w in child["writers"]]
        assert len(writers) == 4, cell
        assert len(cell["children"]) == 2
        assert len({c["pid"] for c in cell["children"]}) == 2  # two real processes
        assert cell["setup_errors"] == []
        assert cell["parent_error"] is None
        # every successful write and every parent insert is in the table
        assert cell["rows_found"] == cell["rows_expected"]
        ok = sum(1 for w in writers if not w["error"])
        assert cell["figures"]["errors"] == 4 - ok


def test_litegate_mode_has_no_errors(result: dict[str, Any]) -> None:
    lg = [c for c in result["raw"] if c["mode"] == "litegate"]
    assert len(lg) == 4
    for cell in lg:
        assert cell["figures"]["errors"] == 0
        assert cell["rows_found"] == 4 + (2 if cell["cell"] == "2/2/2" else 0)


def test_children_wait_for_the_parent(result: dict[str, Any]) -> None:
    for cell in result["raw"]:
        if cell["cell"] != "2/2/2":
            continue
        assert len(cell["releases"]) == 2
        first_release_ms = cell["releases"][0] * 1e3
        for child in cell["children"]:
            for w in child["writers"]:
                assert w["start_ms"] >= 0  # started only once the parent held the lock
                # and could not commit before it let go. The parent stamps its
                # release after the call returns, so a child woken by it may
                # finish a little before the stamp; one that broke the lock
                # would finish tens of ms early (the slow query holds 50 ms).
                assert w["end_ms"] >= first_release_ms - 5
        f = cell["figures"]
        assert f["parent_ms"] >= 2 * 0.05 * 1e3  # two slow queries of 50 ms
        assert f["delta_ms"] == pytest.approx(f["parent_ms"] - f["slowest_ms"])
        assert f["after_release_ms"] is not None
        assert f["fastest_ms"] <= f["slowest_ms"]


def test_fast_only_cells(result: dict[str, Any]) -> None:
    for cell in result["raw"]:
        if cell["cell"] == "2/2/0":
            assert cell["figures"]["parent_ms"] == 0
            assert cell["releases"] == []


def test_summary_comparisons_and_targets(result: dict[str, Any]) -> None:
    summary = result["summary"]
    assert len(summary) == 12
    for e in summary:
        assert e["runs"] == 1
        for name in contention.FIGURES:
            s = e["figures"][name]
            assert s["n"] == 1
            assert s["cv"] is None  # one run: no noise estimate
    cmps = result["comparisons"]
    assert {c["baseline_name"] for c in cmps} == {"sqlite-default", "constant"}
    assert all(c["within_noise"] is None for c in cmps)
    names = {(t["parent"], t["target"]) for t in result["targets"]}
    assert len(names) == 6  # 3 targets x 2 parents
    assert all(isinstance(t["met"], bool) for t in result["targets"])


def test_render_uses_the_seed_columns(result: dict[str, Any]) -> None:
    text = contention.render(result)
    headers = [line for line in text.splitlines() if "CONTENTION" in line]
    assert len(headers) == 2  # one table per parent kind
    titles = [cell.strip() for cell in headers[0].split("|")]
    assert titles == [
        "MODE", "CONTENTION", "PARENT", "FASTEST", "SLOWEST", "SCRIPT", "DELTA", "ERRORS",
        "AFTER_RELEASE",
    ]  # fmt: skip
    assert "6 (2/2/2)" in text
    assert "foreign writer" in text
    assert "targets (litegate mode" in text


def test_chart(result: dict[str, Any], tmp_path: Path) -> None:
    (png,) = contention.charts(result, tmp_path)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_runs_give_medians_and_cv() -> None:
    cfg = Config(
        modes=("litegate",),
        cells=(Cell(slow=1, processes=1, threads=2),),
        parents=("same",),
        runs=2,
        slow_seconds=0.02,
    )
    res = contention.run(cfg)
    assert [r["run"] for r in res["raw"]] == [1, 2]
    (entry,) = res["summary"]
    parent = entry["figures"]["parent_ms"]
    assert parent["n"] == 2
    assert parent["cv"] is not None
    assert min(parent["values"]) <= parent["median"] <= max(parent["values"])
    assert "coefficient of variation across 2 runs" in contention.render(res)


def test_cte_slow_query() -> None:
    n = contention.calibrate_cte(0.01)
    assert n >= 1
    cfg = Config(
        modes=("litegate",),
        cells=(Cell(slow=1, processes=1, threads=1),),
        parents=("foreign",),
        slow="cte",
        slow_seconds=0.02,
    )
    res = contention.run(cfg)
    assert res["slow_query"]["kind"] == "cte"
    assert res["slow_query"]["cte_count_to"] >= 1
    (cell,) = res["raw"]
    assert cell["figures"]["errors"] == 0
    assert cell["rows_found"] == cell["rows_expected"] == 2
