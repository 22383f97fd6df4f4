"""``litegate bench replication`` against the real Litestream (v0.5.18,
built by ``make litestream`` from the Go module proxy): a short run of
every phase on both sides. What it asserts is what replication promises:
every acknowledged write in the copies Litestream restores (the final one,
on both sides; for litegate also the one taken while the writers ran), and
integrity_check ok. The copy taken while plain ``sqlite3`` writes is
checked for writes acknowledged more than 2 s before it, which assumes
Litestream keeps up within 2 s: behind plain ``sqlite3``'s unbounded WAL
(1.4 GB in 2 s on a quiet machine) it may not, and that is Litestream's lag,
not a lost write, so that figure is reported, not asserted. The rates are
reported, never asserted."""

from __future__ import annotations

import argparse

import pytest
from litegate_lab import replication

BINARY = replication.find_litestream()


@pytest.mark.slow
@pytest.mark.skipif(
    BINARY is None,
    reason="litestream is not installed: `make litestream` builds it (needs Go), or put it on PATH",
)
def test_a_short_replication_run_restores_every_acknowledged_write() -> None:
    assert BINARY is not None
    cfg = replication.Config(writers=3, seconds=2.0, litestream=BINARY)
    result = replication.run(cfg)
    text = replication.render(result)
    assert "v0.5" in result["litestream_version"], text
    for side in replication.SIDES:
        s = result["summary"][side]
        assert s["integrity"] == ["ok"], text
        assert s["pit_integrity"] == ["ok"], text
        assert s["missing"] == 0, text
        if side == "litegate":
            assert s["pit_missing"] == 0, text
        assert s["expected"] > 1000, text  # the writers wrote, and the restore was checked
        assert s["snapshots"]["median"] >= 1, text
        run = result["runs"][0][side]
        assert run["litestream"]["litestream_exit"] == 0, text  # stopped by its PID, cleanly
        assert all(code == 0 for code in run["litestream"]["exit_codes"]), text
    kinds = {k for k in replication._kinds("litegate", 3)}
    assert kinds == {"core", "queue", "django"}
    assert result["targets"][0]["target"].startswith("litegate: 0 acknowledged"), text
    assert result["targets"][0]["met"], text


def test_a_missing_litestream_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    args = argparse.Namespace(
        sides="litegate", writers=1, seconds=1.0, litestream="/nonexistent/litestream",
        quick=True, runs=1, checkpoints="auto", src="", no_reader=False, kinds="core",
    )  # fmt: skip
    with pytest.raises(ValueError, match="make litestream"):
        replication.config_from_args(args)
