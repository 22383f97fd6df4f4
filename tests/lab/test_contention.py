"""``bench contention`` end to end in tiny cells (short slow queries, two
processes x two threads). The assertions are about accounting and ordering,
never about speed."""

from __future__ import annotations

import contextlib
import io
import json
import multiprocessing as mp
import os
import signal
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest
from litegate_lab import contention
from litegate_lab._cli import build_parser
from litegate_lab.contention import Cell, Config, Variant

from litegate.__main__ import main


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
        "litegate-strict", "litegate-combined",
    )  # fmt: skip


def test_after_latest_release() -> None:
    records = [{"end_ms": 1003.0}, {"end_ms": 1001.5}, {"end_ms": 2004.5}]
    # releases at 1000 ms and 2002 ms: the worst wait after a release is 3 ms
    assert contention._after_latest_release(records, [1.0, 2.002]) == pytest.approx(3.0)
    assert contention._after_latest_release([{"end_ms": 7.0}], []) == pytest.approx(7.0)
    assert contention._after_latest_release([], [1.0]) is None


def _say_finished_then_linger(finished: Connection, seconds: float) -> None:
    finished.send(os.getpid())
    time.sleep(seconds)


def test_the_parent_waits_for_every_child_to_finish_or_die() -> None:
    """Children say they are done on a pipe; one that dies without saying so
    (SIGKILL, a crash) counts as done at once, not at the deadline."""
    ctx = mp.get_context("spawn")
    reader, writer = ctx.Pipe(duplex=False)
    saying = ctx.Process(target=_say_finished_then_linger, args=(writer, 30.0), daemon=True)
    silent = ctx.Process(target=time.sleep, args=(30.0,), daemon=True)
    for p in (saying, silent):
        p.start()
    try:
        started = time.monotonic()
        threading.Timer(0.5, silent.kill).start()
        contention._await_finished(reader, [saying, silent], time.monotonic() + 60)
        waited = time.monotonic() - started
        assert reader.poll() is False  # the message was read
        assert silent.exitcode == -signal.SIGKILL
        assert saying.is_alive()  # it said so, and is still there: no wait for its exit
        assert waited < 10  # neither the deadline (60 s) nor the lingering child (30 s)
    finally:
        for p in (saying, silent):
            p.kill()
            p.join()
        reader.close()
        writer.close()


def test_the_parent_stops_waiting_at_the_deadline() -> None:
    ctx = mp.get_context("spawn")
    reader, writer = ctx.Pipe(duplex=False)
    silent = ctx.Process(target=time.sleep, args=(30.0,), daemon=True)
    silent.start()
    try:
        started = time.monotonic()
        contention._await_finished(reader, [silent], time.monotonic() + 0.3)
        assert 0.3 <= time.monotonic() - started < 10
        assert silent.is_alive()
    finally:
        silent.kill()
        silent.join()
        reader.close()
        writer.close()


@pytest.fixture(scope="module")
def result() -> dict[str, Any]:
    cfg = Config(
        modes=("sqlite-default", "constant", "litegate", "litegate-strict"),
        cells=(Cell(slow=0, processes=2, threads=2), Cell(slow=2, processes=2, threads=2)),
        parents=("same", "foreign"),
        slow_seconds=0.05,
        child_timeout=10.0,
    )
    return contention.run(cfg)


def test_every_writer_is_accounted_for(result: dict[str, Any]) -> None:
    raw = result["raw"]
    assert len(raw) == 2 * 4 * 2  # parents x modes x cells
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
        # order: 4 writers, each overtaken by at most the 3 others
        assert 0 <= cell["figures"]["worst_overtakes"] <= 3
        assert 0.0 <= cell["figures"]["overtaken_share"] <= 1.0
        if cell["mode"] in ("litegate", "litegate-strict"):
            assert 0.0 <= cell["figures"]["handoff_share"] <= 1.0
            # across processes: each child's cohort at least once
            assert cell["figures"]["gate_grants"] >= 2
            if (cell["mode"], cell["parent"], cell["cell"]) == ("litegate-strict", "same", "2/2/2"):
                # the children queued during the parent's 50 ms query, and a
                # strict release hands the gate to the head (counted in the parent)
                assert cell["figures"]["handoff_share"] > 0
        else:
            assert cell["figures"]["handoff_share"] is None
            assert cell["figures"]["gate_grants"] is None


def test_litegate_mode_has_no_errors(result: dict[str, Any]) -> None:
    lg = [c for c in result["raw"] if c["mode"] in ("litegate", "litegate-strict")]
    assert len(lg) == 8
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
    assert len(summary) == 16
    for e in summary:
        assert e["runs"] == 1
        for name in contention.FIGURES:
            s = e["figures"][name]
            if name in ("handoff_share", "gate_grants") and not e["mode"].startswith("litegate"):
                assert s is None  # no gate, no hand-offs
                continue
            assert s["n"] == 1
            assert s["cv"] is None  # one run: no noise estimate
    cmps = result["comparisons"]
    assert {c["baseline_name"] for c in cmps} == {"sqlite-default", "constant", "litegate-strict"}
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
        "AFTER_RELEASE", "WORST OVERTAKES", "HAND-OFFS",
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


# --------------------------------------------------------------------------
# --variants (issue 10): other ways of running the same experiment


def _config(*argv: str) -> Config:
    args = build_parser().parse_args(["contention", *argv])
    return contention.config_from_args(args)


def test_variant_options() -> None:
    plain = _config()
    assert plain.variants == ()
    assert plain.variant_list == (Variant("sleep", "before"),)  # today's scenario
    assert (plain.modes, plain.parents, plain.cells) == (
        contention.MODES,
        contention.PARENTS,
        contention.FULL_CELLS,
    )
    one = _config("--threads-start", "after", "--slow", "cte")
    assert one.variant_list == (Variant("cte", "after"),)

    every = _config("--variants", "--quick")
    assert [v.key for v in every.variants] == [
        "sleep/before", "sleep/after", "cte/before", "cte/after",
    ]  # fmt: skip
    assert every.variants == contention.ALL_VARIANTS
    assert every.cells == (Cell.parse("8/4/1"),)  # also with --quick
    assert every.modes == ("litegate", "sqlite-default")
    assert every.parents == ("same",)  # the public API
    assert every.to_json()["variants"] == [v.key for v in every.variants]

    # an axis given explicitly stays fixed; explicit cells, modes, parents win
    fixed = _config(
        "--variants", "--slow", "cte", "--cells", "2/2/1", "--modes", "litegate", "--parent", "both"
    )
    assert [v.key for v in fixed.variants] == ["cte/before", "cte/after"]
    assert (fixed.cells, fixed.modes, fixed.parents) == (
        (Cell.parse("2/2/1"),),
        ("litegate",),
        contention.PARENTS,
    )
    assert [v.key for v in _config("--variants", "--threads-start", "after").variants] == [
        "sleep/after", "cte/after",
    ]  # fmt: skip


def test_bad_threads_start_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        _config("--threads-start", "during")
    assert exc.value.code == 2
    assert "--threads-start" in capsys.readouterr().err


def test_plan_order_and_count() -> None:
    cells = (Cell.parse("2/2/1"), Cell.parse("4/2/1"))
    cfg = Config(
        modes=("litegate", "sqlite-default"),
        cells=cells,
        parents=("same",),
        runs=2,
        variants=contention.ALL_VARIANTS,
    )
    steps = contention.plan(cfg)
    assert len(steps) == 2 * 4 * 1 * 2 * 2  # runs x variants x parents x cells x modes
    assert len(set(steps)) == len(steps)
    # run-major, then variant, then cell; the compared modes side by side
    assert [(s.run, s.variant.key, s.cell.key, s.mode) for s in steps[:5]] == [
        (1, "sleep/before", "2/2/1", "litegate"),
        (1, "sleep/before", "2/2/1", "sqlite-default"),
        (1, "sleep/before", "4/2/1", "litegate"),
        (1, "sleep/before", "4/2/1", "sqlite-default"),
        (1, "sleep/after", "2/2/1", "litegate"),
    ]
    assert [s.run for s in steps] == [1] * 16 + [2] * 16
    assert [s.variant.key for s in steps[::4][:4]] == [v.key for v in contention.ALL_VARIANTS]
    # without --variants: the one variant of --slow / --threads-start
    single = contention.plan(Config(cells=cells, runs=1, threads_start="after"))
    assert {s.variant for s in single} == {Variant("sleep", "after")}
    assert len(single) == len(contention.MODES) * len(contention.PARENTS) * 2


@pytest.fixture(scope="module")
def variants_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("variants")
    argv = [
        "bench", "contention", "--variants", "--cells", "2/2/1", "--slow-seconds", "0.2",
        "--runs", "1", "--no-progress", "--out", str(out),
    ]  # fmt: skip
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert main(argv) == 0
    return out, stdout.getvalue()


def test_variants_count_every_write_once(variants_run: tuple[Path, str]) -> None:
    out, _ = variants_run
    data = json.loads((out / "contention.json").read_text())
    raw = data["raw"]
    keys = [v.key for v in contention.ALL_VARIANTS]
    assert [(r["variant"], r["mode"]) for r in raw] == [
        (v, m) for v in keys for m in ("litegate", "sqlite-default")
    ]
    for cell in raw:
        assert cell["setup_errors"] == []
        assert cell["parent_error"] is None
        assert len(cell["children"]) == 2
        writers = [(w["pid"], w["thread"]) for c in cell["children"] for w in c["writers"]]
        # each of the 2 x 2 threads reported its one write, once
        assert sorted(writers) == sorted((c["pid"], t) for c in cell["children"] for t in (0, 1))
        ok = sum(1 for c in cell["children"] for w in c["writers"] if not w["error"])
        assert cell["figures"]["errors"] == 4 - ok
        # the parent's insert and every successful child write, each one row
        assert cell["rows_found"] == cell["rows_expected"] == 1 + ok
        after = cell["variant"].endswith("/after")
        for child in cell["children"]:
            # only the "after" children start their threads on the signal
            assert ("go_seen_ms" in child) is after
            if after:
                assert all(w["start_ms"] >= child["go_seen_ms"] for w in child["writers"])


def test_variants_report_and_json(variants_run: tuple[Path, str], tmp_path: Path) -> None:
    out, printed = variants_run
    data = json.loads((out / "contention.json").read_text())
    keys = [v.key for v in contention.ALL_VARIANTS]
    assert data["config"]["variants"] == keys
    assert data["slow_query"]["kind"] == "sleep,cte"
    assert data["slow_query"]["cte_count_to"] >= 1
    summary = data["summary"]
    assert [(e["variant"], e["mode"]) for e in summary] == [
        (v, m) for v in keys for m in ("litegate", "sqlite-default")
    ]
    for e in summary:
        for name in ("after_release_ms", "first_after_release_ms", "p50_after_release_ms"):
            assert e["figures"][name]["n"] == 1
        f = {k: v["median"] for k, v in e["figures"].items() if v is not None}
        assert f["first_after_release_ms"] <= f["p50_after_release_ms"] <= f["after_release_ms"]
    assert {c["variant"] for c in data["comparisons"]} == set(keys)
    (target, *_) = data["targets"]
    assert "in every variant" in target["target"]
    assert sorted(target["values_ms"]) == sorted(f"{v} 2/2/1" for v in keys)

    report = (out / "report.txt").read_text()
    assert printed.startswith(report.rstrip("\n"))
    assert "== litegate;" in report
    assert "== sqlite-default;" in report
    for line in [ln for ln in report.splitlines() if "VARIANT" in ln]:
        titles = [t.strip() for t in line.split("|")]
        assert titles == [
            "VARIANT", "CONTENTION", "AFTER_RELEASE", "CV", "FASTEST", "P50", "ERRORS", "TARGET",
        ]  # fmt: skip
    for key in keys:  # one row per mode
        rows = [ln for ln in report.splitlines() if ln.strip().startswith(key + " ")]
        assert len(rows) == 2, key
        assert rows[0].split("|")[-1].strip() in ("met", "MISS")
    assert (out / "contention-after-release.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # --runs 2 (the same figures twice: the summary and the report's
    # comparison table across variants, without running anything again)
    cfg = Config(
        modes=("litegate", "sqlite-default"),
        cells=(Cell.parse("2/2/1"),),
        parents=("same",),
        runs=2,
        variants=contention.ALL_VARIANTS,
    )
    twice = [contention.CellResult(**{**r, "run": n}) for n in (1, 2) for r in data["raw"]]
    summary2 = contention.summarise(cfg, twice)
    assert all(e["runs"] == 2 for e in summary2)
    res2 = {
        **data,
        "config": cfg.to_json(),
        "summary": summary2,
        "comparisons": contention.comparisons(cfg, summary2),
        "targets": contention.targets(cfg, summary2),
    }
    text = contention.render(res2)
    assert "median of 2 runs" in text
    header = next(ln for ln in text.splitlines() if ln.strip().startswith("MODE"))
    assert [t.strip() for t in header.split("|")][1:] == keys
    (png,) = contention.charts(res2, tmp_path)
    assert png.is_file()
