"""``bench cache`` in a tiny configuration: every backend runs for real
(Django in spawned processes, a real redis-server where installed), and the
assertions are about accounting, never about speed."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
from litegate_lab import cache as bench
from litegate_lab.cache import _redis
from litegate_lab.cache._worker import histogram, percentile_us, zipf

from litegate.__main__ import main

pytest.importorskip("django", reason="pip install -e '.[dev]'")


def _backends() -> tuple[str, ...]:
    have_redis = _redis.find() is not None
    return tuple(b for b in bench.BACKENDS if b != "redis" or have_redis)


@pytest.mark.slow
def test_every_backend_runs_and_litegate_loses_no_increment() -> None:
    cfg = bench.Config(backends=_backends(), workloads=("mix50", "incr"), sizes=(100,),
                       cells=((2, 2),), seconds=0.3, keys=200)  # fmt: skip
    result = bench.run(cfg)
    summ = result["summary"]
    for b in cfg.backends:
        mix = summ[f"mix50/100/2x2/{b}"]
        assert mix["ops"] > 0
        assert mix["errors"] == 0, mix["error"]
        assert mix["misses"] == 0  # every key was filled first
        incr = summ[f"incr/100/2x2/{b}"]
        assert incr["incrs"] > 0
    mine = summ["incr/100/2x2/litegate"]
    assert (mine["lost"], mine["errors"]) == (0, 0)
    assert [c["counted"] for c in result["cells"] if c["backend"] == "litegate"
            and c["workload"] == "incr"] == [mine["incrs"]]  # fmt: skip
    table = bench.render(result)
    assert "== mix50, 100 B values ==" in table
    assert "incr across threads and processes: exact count" in table


def test_targets_are_ratios_at_the_headline_cell() -> None:
    def s(rate: float, **kw: Any) -> dict[str, Any]:
        return {"ops_s": rate, "lost": 0, "errors": 0, "incrs": 10, **kw}

    summ = {
        "mix90/100/4x8/litegate": s(500.0), "mix90/100/4x8/database": s(100.0),
        "mix90/100/4x8/redis": s(600.0), "get/100/4x8/litegate": s(900.0),
        "get/100/4x8/redis": s(300.0), "incr/100/1x1/litegate": s(0, lost=1),
    }  # fmt: skip
    got = {t["target"].split(" >=")[0]: t for t in bench.targets(summ, bench.Config())}
    assert got["ops/s, 90/10 mix, 8 threads x 4 processes, / DatabaseCache"]["met"] is True
    assert got["90/10 mix / RedisCache"]["ratio"] == pytest.approx(500 / 600)
    assert got["90/10 mix / RedisCache"]["met"] is False
    assert got["get ops/s / RedisCache"]["met"] is True
    assert "set ops/s / RedisCache" not in got  # not measured: no target line
    incr = [t for t in got.values() if "exact count" in t["target"]]
    assert incr[0]["met"] is False


def test_latency_histogram_percentiles() -> None:
    from array import array

    hist = histogram(array("q", [1000] * 98 + [100_000, 1_000_000]))
    assert percentile_us(hist, 50) == pytest.approx(1.0, rel=0.03)
    assert percentile_us(hist, 99) == pytest.approx(100.0, rel=0.03)
    assert zipf(3, 1.0) == pytest.approx([1.0, 1.5, 1.5 + 1 / 3])


@pytest.mark.skipif(_redis.find() is None, reason=_redis.MISSING)
def test_the_redis_server_is_ours_and_stops_by_its_pid() -> None:
    with _redis.RedisServer() as server:
        assert server.url.startswith("redis://127.0.0.1:")
        assert server.proc is not None
        pid = server.proc.pid
        assert _redis._ping(server.port)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", server.port), timeout=1)
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()


def test_cli_rejects_a_bad_cell(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "cache", "--cells", "4by8", "--out", str(tmp_path)]) == 2
    assert "PxT" in capsys.readouterr().err
