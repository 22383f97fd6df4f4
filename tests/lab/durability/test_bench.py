"""``litegate bench durability`` for real, in a short configuration: every
profile, every writer, real cuts. The assertions are the guarantees
(nothing lost under synchronous=FULL, no corruption or anomaly anywhere)
and the accounting, never speed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from litegate_lab import durability
from litegate_lab.durability import fuse_problem

from litegate.__main__ import main

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _needs_fuse() -> None:
    problem = fuse_problem()
    if problem:
        pytest.skip(f"no power-cut filesystem here: {problem}")


def test_short_run_every_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = main(["bench", "durability", "--cuts", "1", "--run-max", "0.8", "--seed", "11",
                 "--work-dir", str(tmp_path), "--out", str(out)])  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert "What the cuts interrupted" in printed
    result = json.loads((out / "durability.json").read_text())
    assert (out / "durability-lost-per-cut.png").stat().st_size > 0
    profiles = result["profiles"]
    assert list(profiles) == ["default", "conservative", "balanced", "aggressive"]
    apis = set()
    for name, p in profiles.items():
        s = p["summary"]
        assert s["cuts"] == 1, name
        assert s["acked"] > 0, name
        assert (s["corruptions"], s["anomalies"], s["lost_before_sync"]) == (0, {}, 0), name
        assert (s["crashed"], s["never_ready"], s["errors_before_cut"]) == (0, 0, {}), name
        for cut in p["cuts"]:
            assert cut["killed"] >= 5  # every writer used the mount and was killed by the cut
            assert cut["exit_codes"] == [-9] * 5
        apis |= {a for a, v in s["by_api"].items() if v["acked"]}
    assert profiles["conservative"]["synchronous"] == "FULL"
    assert profiles["conservative"]["summary"]["lost"] == 0
    assert apis == {"execute", "executemany", "write", "transact", "queue put", "queue ack",
                    "atomic", "autocommit"}  # fmt: skip
    assert not list(tmp_path.glob("litegate-powercut-*"))  # work directories removed


def test_normal_loses_acknowledged_writes_when_nothing_was_synced(tmp_path: Path) -> None:
    """The harness can see a loss: under NORMAL, with every unsynced write
    dropped and the cut before litegate's first checkpoint (it waits up to
    a second), the round's writes are gone, and the report says so."""
    cfg = durability.Config(profiles=("default",), cuts=1, run_max=0.3, keep="none",
                            by_hand=0.0, seed=5, work_dir=str(tmp_path))  # fmt: skip
    result = durability.run(cfg)
    s = result["profiles"]["default"]["summary"]
    assert s["acked"] > 0
    assert s["lost"] > 0
    assert (s["corruptions"], s["anomalies"], s["lost_before_sync"]) == (0, {}, 0)
    assert "[MISSED]" not in durability.render(result).split("Targets:")[1]


def test_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "durability", "--runs", "2", "--out", str(tmp_path)]) == 2
    assert "every cut is a run; use --cuts" in capsys.readouterr().err
    assert main(["bench", "durability", "--profiles", "fast", "--out", str(tmp_path)]) == 2
    assert "pick from default, conservative, balanced, aggressive" in capsys.readouterr().err


def test_says_why_when_fuse_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(durability, "fuse_problem", lambda: "/dev/fuse does not exist: test")
    assert main(["bench", "durability", "--quick", "--out", str(tmp_path)]) == 2
    assert "cannot cut the power here: /dev/fuse does not exist" in capsys.readouterr().err


def test_the_cache_writer_across_cuts(tmp_path: Path) -> None:
    """--writers ...,cache: LitegateCache on its own file beside the
    database; its sets are acknowledged and checked, its file never corrupt."""
    cfg = durability.Config(profiles=("default",), cuts=2, run_max=0.5, seed=7,
                            work_dir=str(tmp_path), actors=("core2", "cache"))  # fmt: skip
    result = durability.run(cfg)
    s = result["profiles"]["default"]["summary"]
    assert s["by_api"]["cache_set"]["acked"] > 0
    assert s["by_api"]["cache_set_many"]["acked"] > 0
    assert (s["corruptions"], s["cache_corruptions"], s["anomalies"]) == (0, 0, {})
    assert s["lost_before_sync"] == 0
    cache_targets = [t for t in result["targets"] if "cache file" in t["target"]]
    assert [t["met"] for t in cache_targets] == [True]
