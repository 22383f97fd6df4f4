"""``litegate bench ...`` through ``litegate.__main__.main`` and as a module."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import litegate_lab
import pytest

from litegate.__main__ import main

PNG = b"\x89PNG\r\n\x1a\n"
TINY_FAIRNESS = [
    "bench", "fairness", "--requests", "30", "--threads", "3", "--pool-size", "2",
    "--hold-ms", "1", "--pools", "queue,litegate",
]  # fmt: skip


def test_fairness_writes_json_report_and_charts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "res"
    assert main([*TINY_FAIRNESS, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "litegate" in printed
    assert "% OF LIMIT" in printed
    assert f"results in {out}/" in printed
    data = json.loads((out / "fairness.json").read_text())
    assert data["experiment"] == "fairness"
    assert data["config"]["requests"] == 30
    assert data["env"]["sqlite"]
    assert {r["pool"] for r in data["raw"]} == {"queue", "litegate"}
    for r in data["raw"]:
        assert len(r["waits_ms"]) + len(r["timeout_waits_ms"]) == 30
    assert (out / "report.txt").read_text().startswith("fairness (seed 001)")
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == ["fairness-litegate.png", "fairness-p99.png", "fairness-queue.png"]
    for name in pngs:
        assert (out / name).read_bytes()[:8] == PNG
    assert sorted(Path(f).name for f in data["files"]) == sorted(
        [*pngs, "report.txt", "fairness.json"]
    )


def test_json_goes_to_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "j"
    assert main([*TINY_FAIRNESS, "--json", "--no-charts", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)  # nothing but the JSON on stdout
    assert data["experiment"] == "fairness"
    assert "results in" in captured.err
    assert not list(out.glob("*.png"))
    assert json.loads((out / "fairness.json").read_text())["raw"] == data["raw"]


def test_default_out_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main([*TINY_FAIRNESS, "--no-charts", "--pools", "queue"]) == 0
    (made,) = (tmp_path / "results").iterdir()
    assert made.name.startswith("fairness-")
    assert (made / "fairness.json").is_file()


def test_contention_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "bench", "contention", "--cells", "2/1/1", "--modes", "litegate,constant",
        "--foreign-parent", "--slow-seconds", "0.02", "--out", str(tmp_path),
    ]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "AFTER_RELEASE" in printed
    assert "foreign writer" in printed
    data = json.loads((tmp_path / "contention.json").read_text())
    assert data["config"]["parents"] == ["foreign"]
    assert {r["mode"] for r in data["raw"]} == {"litegate", "constant"}
    assert all(r["figures"]["errors"] == 0 for r in data["raw"] if r["mode"] == "litegate")
    assert (tmp_path / "contention-after-release.png").read_bytes()[:8] == PNG


def test_unknown_experiment(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "nope"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'nope'" in err
    assert "contention" in err
    assert "fairness" in err


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["frobnicate"],
        ["bench"],
        ["bench", "fairness", "--runs", "0"],
        ["bench", "fairness", "--pools", "nope"],
        ["bench", "fairness", "--requests", "0"],
        ["bench", "contention", "--cells", "8/4"],
        ["bench", "contention", "--modes", "sometimes"],
    ],
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert "usage:" in capsys.readouterr().err


def test_help_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "bench" in capsys.readouterr().out
    assert main(["bench", "fairness", "--help"]) == 0
    text = capsys.readouterr().out
    assert "--requests" in text
    assert "100,000" in text  # how to reproduce the seed exactly
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("litegate ")


def test_missing_lab_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(
        litegate_lab, "LAB_REQUIREMENTS", (*litegate_lab.LAB_REQUIREMENTS, "no_such_module_zz")
    )
    assert main(["bench", "fairness", "--quick"]) == 2
    err = capsys.readouterr().err
    assert "no_such_module_zz" in err
    assert "pip install litegate-lab" in err


def test_python_dash_m(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "litegate", *TINY_FAIRNESS, "--json", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["experiment"] == "fairness"
    assert proc.stderr.count("\x1b[") == 0  # no progress bar when not a terminal


def test_busy_machine_warning() -> None:
    from litegate_lab._cli import busy_machine_warning, cpu_busy, load_average

    assert busy_machine_warning(None) == ""
    assert busy_machine_warning(0.1) == ""
    assert "60 % of the CPUs" in busy_machine_warning(0.6)
    load = load_average()
    assert load is None or len(load) == 3
    busy = cpu_busy(0.05)
    assert busy is None or 0.0 <= busy <= 1.0
