"""``bench queue --scale`` (issue 21) at tiny sizes: the steps, the mix, the
bench's own exact-count check, the report, the chart and the options, on
SQLite and on the test run's PostgreSQL server. Never about speed."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from litegate_lab import queue as bench
from litegate_lab.queue import _scale
from litegate_lab.queue._scale import ScaleConfig

from litegate.__main__ import main

PNG = b"\x89PNG\r\n\x1a\n"

TINY = ScaleConfig(
    scale_min=1_000,
    scale_max=3_000,
    samples=20,
    put_many_batches=2,
    batch=50,
    reads=3,
    v1_reads=1,
    purge_chunks=1,
)


def _parsed(argv: list[str]) -> Any:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--noise-k", type=float, default=2.0)
    bench.add_arguments(p)
    return bench.config_from_args(p.parse_args(argv))


def test_sizes_go_one_three_ten_up_to_the_maximum() -> None:
    assert _scale.sizes(10_000, 10_000_000) == [
        10_000,
        30_000,
        100_000,
        300_000,
        1_000_000,
        3_000_000,
        10_000_000,
    ]
    assert _scale.sizes(10_000, 50_000) == [10_000, 30_000, 50_000]
    assert _scale.sizes(300, 300) == [300]


def test_options() -> None:
    cfg = _parsed(["--scale", "--scale-max", "1000000", "--backend", "sqlite"])
    assert isinstance(cfg, ScaleConfig)
    assert (cfg.backends, cfg.scale_min, cfg.scale_max) == (("sqlite",), 10_000, 1_000_000)
    assert _parsed(["--scale"]).scale_max == 10_000_000
    assert _parsed(["--scale", "--quick"]).scale_max == 100_000
    assert _parsed(["--scale", "--scale-budget", "600"]).budget_s == 600.0
    with pytest.raises(ValueError, match="--scale-max goes with --scale"):
        _parsed(["--scale-max", "1000"])
    with pytest.raises(ValueError, match="--scenarios is for the seed's scenarios"):
        _parsed(["--scale", "--scenarios", "single"])
    with pytest.raises(ValueError, match="drop --runs"):
        _parsed(["--scale", "--runs", "3"])
    with pytest.raises(ValueError, match="at least the smallest size"):
        _parsed(["--scale", "--scale-min", "5000", "--scale-max", "1000"])


def _check_part(part: dict[str, Any], backend: str) -> None:
    assert part["backend"] == backend
    steps = part["steps"]
    assert steps[0]["size"] == 1_000
    assert len(steps) == len(part["planned"]) == 2  # 1,000, then 3,000 or more
    for s in steps:
        # The bench checked counts() against what it made (or it would
        # have raised); the mix is there: ready, scheduled and done.
        c = s["counts"]
        assert c["ready"] > 0
        assert c["scheduled"] > 0
        assert c["done"] > 0
        assert c["leased"] == c["dead"] == 0
        assert sum(c.values()) == s["size_after"]
        for figure in ("claim_ms", "put_ms", "ack_ms", "counts_ms", "next_due_ms"):
            assert s[figure]["p95"] >= s[figure]["p50"] > 0
        assert s["counts_v1_ms"]["p50"] > 0
        assert s["purge_per_s"] > 0
        assert s["bytes_per_job"] > 0
    assert steps[1]["size"] >= 3_000
    assert steps[1]["grow_per_s"] is None or steps[1]["grow_per_s"] > 0
    assert {t["unit"] for t in part["targets"]} == {"x", "ms"}
    assert len(part["targets"]) == 5


def test_a_tiny_scale_run_on_sqlite(tmp_path: Path) -> None:
    result = bench.run(TINY)
    assert result["mode"] == "scale"
    (part,) = result["parts"]
    _check_part(part, "sqlite")
    assert part["steps"][-1]["wal_peak_bytes"] > 0
    text = bench.render(result)
    assert "## SQLite" in text
    assert "| claim p95 |" in text
    assert "counts() at" in text
    (png,) = bench.charts(result, tmp_path)
    assert png.name == "queue-scale-sqlite.png"
    assert png.read_bytes().startswith(PNG)


def test_the_budget_stops_before_a_step_that_would_not_fit() -> None:
    cfg = dataclasses.replace(TINY, scale_max=100_000_000, budget_s=0.001)
    (part,) = bench.run(cfg)["parts"]
    assert len(part["steps"]) == 1  # the first size always runs
    assert part["stopped"].startswith("stopped before 3,000 jobs")


def test_the_cli_writes_the_table_and_the_json(tmp_path: Path, capsys: Any) -> None:
    out = tmp_path / "out"
    argv = ["bench", "queue", "--scale", "--scale-min", "200", "--scale-max", "200"]
    assert main([*argv, "--out", str(out), "--no-charts", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "litegate bench queue --scale" in printed
    data = json.loads((out / "queue.json").read_text())
    assert data["mode"] == "scale"
    assert [s["size"] for s in data["parts"][0]["steps"]] == [200]


@pytest.mark.skipif(importlib.util.find_spec("psycopg") is None, reason="needs psycopg")
def test_a_tiny_scale_run_on_postgres(pg_server: Any) -> None:
    cfg = dataclasses.replace(TINY, backends=("postgres",), pg_url=pg_server.url)
    result = bench.run(cfg)
    (part,) = result["parts"]
    _check_part(part, "postgres")
    assert part["server"]["version"].startswith("PostgreSQL")
    assert "## PostgreSQL" in bench.render(result)
