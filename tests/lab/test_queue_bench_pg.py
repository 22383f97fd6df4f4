"""``bench queue --backend postgres`` (issue 11): options, the plan, and one
tiny run of every side on a real server whose assertions are about
accounting (every job put processed exactly once or still queued) and the
report's shape, never about speed. The runs are skipped, with how to get
the server binaries, where PostgreSQL is not installed."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path
from typing import Any

import pytest
from litegate_lab import _pgserver
from litegate_lab import queue as bench
from litegate_lab.queue import _config, _pg, _run
from litegate_lab.queue._config import Config

from litegate.__main__ import main
from tests.lab.test_queue_bench import _parsed

PNG = b"\x89PNG\r\n\x1a\n"
URL = "postgresql://bench:s3cret@/bench?host=/tmp/sock&port=5432"

TINY = Config(
    backend="postgres",
    scenarios=("single", "stress", "e2e"),
    single_puts=30,
    stress_workers=(2,),
    stress_seconds=0.3,
    e2e_jobs=200,
    e2e_producers=2,
    e2e_workers=2,
    e2e_threads=2,
    batch=20,
    cell_timeout=30.0,
)

needs_psycopg = pytest.mark.skipif(
    importlib.util.find_spec("psycopg") is None, reason="needs psycopg (the postgres extra)"
)


# -- options and plan (no server) ---------------------------------------------------


@needs_psycopg
def test_postgres_defaults() -> None:
    cfg = _parsed(["--backend", "postgres", "--pg-url", URL])
    assert cfg.backend == "postgres"
    assert cfg.sides == ("litegate", "litegate-worker", "procrastinate", "pgqueuer")
    assert cfg.profiles == cfg.long_profiles == cfg.e2e_profiles == ("postgres",)
    assert cfg.cell_timeout == _config.PG_CELL_TIMEOUT  # procrastinate's 40,000 jobs take minutes
    quick = _parsed(["--backend", "postgres", "--pg-url", URL, "--quick"])
    assert quick.profiles == ("postgres",)
    assert quick.cell_timeout == 30.0
    some = _parsed(["--backend", "postgres", "--pg-url", URL, "--sides", "litegate,pgqueuer"])
    assert some.sides == ("litegate", "pgqueuer")
    assert _parsed([]).backend == "sqlite"  # unchanged default


@needs_psycopg
def test_the_results_never_hold_the_password() -> None:
    data = _parsed(["--backend", "postgres", "--pg-url", URL]).to_json()
    assert "s3cret" not in str(data)
    assert data["pg_url"] == "postgresql://bench:***@/bench?host=/tmp/sock&port=5432"
    assert Config.from_json(data).backend == "postgres"  # the report reads it back


def test_url_helpers() -> None:
    assert _pg.with_dbname(URL, "cell_1") == (
        "postgresql://bench:s3cret@/cell_1?host=/tmp/sock&port=5432"
    )
    assert _pg.with_dbname("postgresql://h:5432", "x") == "postgresql://h:5432/x"
    assert _pg.redact("postgresql://u@h/db") == "postgresql://u@h/db"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--pg-url", URL], "--backend postgres"),
        (["--backend", "postgres", "--pg-url", URL, "--profiles", "balanced"], "SQLite's"),
        (["--backend", "postgres", "--pg-url", URL, "--sides", "litegate,huey"], "huey"),
        (["--sides", "pgqueuer"], "pgqueuer"),
        (["--backend", "postgres", "--pg-url", "/tmp/x.db"], "postgresql://"),
        (["--backend", "postgres", "--pg-url", URL, "--pg-fsync", "off"], "throwaway"),
    ],
)
def test_usage_errors_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert_usage_error(argv, message, capsys)


def assert_usage_error(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``litegate bench queue *argv`` exits 2 with its usage and ``message``
    (shared with the both-backend bench tests)."""
    if importlib.util.find_spec("psycopg") is None:
        pytest.skip("needs psycopg (the postgres extra)")
    assert main(["bench", "queue", *argv]) == 2
    err = capsys.readouterr().err
    assert "usage:" in err
    assert message in err


@needs_psycopg
def test_no_server_binaries_says_how_to_get_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_pgserver, "find_bindir", lambda: None)
    with pytest.raises(ValueError, match="--pg-url") as info:
        _parsed(["--backend", "postgres"])
    assert _pgserver.MISSING_HELP in str(info.value)
    assert _parsed(["--backend", "postgres", "--pg-url", URL]).pg_url == URL  # no binaries needed


def test_plan_on_postgres() -> None:
    cfg = Config(backend="postgres")
    cells = _run.plan(cfg)
    assert {c.profile for c in cells} == {"postgres"}
    assert {c.side for c in cells} == {"litegate", "litegate-worker", "procrastinate", "pgqueuer"}
    assert not [c for c in cells if c.na]  # every side can do every cell
    # (litegate's own Worker in the end-to-end rows only)
    assert {c.side for c in cells if c.scenario != "e2e"} == {
        "litegate",
        "procrastinate",
        "pgqueuer",
    }
    e2e = [c for c in cells if c.scenario == "e2e"]
    assert [(c.variant, c.side) for c in e2e] == [
        (v, s)
        for v in ("batched", "one-job")
        for s in ("litegate", "litegate-worker", "procrastinate", "pgqueuer")
    ]
    for c in e2e:
        producers = [r for r in c.roles if r.kind == "produce"]
        workers = [r for r in c.roles if r.kind == "consume"]
        assert sum(r.count for r in producers) == 40_000
        assert len(producers) == len(workers) == 4
        batched = c.variant == "batched"
        assert {r.batch for r in c.roles} == ({100} if batched else {1})
        assert {r.threads for r in producers} == ({1} if batched else {8})
        # procrastinate's worker: 8 jobs at a time, whatever the row
        want = 8 if c.side == "procrastinate" or not batched else 1
        assert {r.threads for r in workers} == {want}


def test_config_checks_sides_against_the_backend() -> None:
    with pytest.raises(ValueError, match="bare"):
        Config(backend="postgres", sides=("bare",))
    with pytest.raises(ValueError, match="procrastinate"):
        Config(sides=("procrastinate",))
    with pytest.raises(ValueError, match="--pg-url"):
        Config(pg_url=URL)


# -- on a server ------------------------------------------------------------------------


def _peers_installed() -> None:
    for module in ("procrastinate", "pgqueuer", "asyncpg"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"needs {module}: pip install litegate-lab")


@pytest.fixture(scope="module")
def result(pg_server: Any) -> dict[str, Any]:
    """One tiny run of every side on the test server (``--pg-url``: a database
    per cell on a server that is already up)."""
    _peers_installed()
    return bench.run(dataclasses.replace(TINY, pg_url=pg_server.url))


def test_every_cell_ran_cleanly_and_accounts_for_every_job(result: dict[str, Any]) -> None:
    real = result["raw"]
    # single, stress, e2e batched and one-job; litegate-worker: the e2e rows
    assert len(real) == 3 * (1 + 1 + 2) + 2
    for r in real:
        a = r["accounting"]
        assert r["setup_errors"] == [], r
        assert r["errors_seen"] == {}, r
        assert a["reports"] == a["processes"], r
        assert (a["lost"], a["extra"], a["duplicates"], a["unknown"]) == (0, 0, 0, 0), r
        assert a["left_in_queue"] == a["put"] - a["processed"], r
        assert r["figures"]["db_peak_bytes"] > 0


def test_fixed_amounts_of_work(result: dict[str, Any]) -> None:
    for r in result["raw"]:
        if r["scenario"] == "single":
            assert r["accounting"]["put"] == r["figures"]["ops"] == 30
        elif r["scenario"] == "stress":
            assert 0 < r["figures"]["ops"] <= r["accounting"]["put"]
        else:
            a, f = r["accounting"], r["figures"]
            assert a["put"] == a["processed"] == f["jobs"] == 200, r
            assert a["left_in_queue"] == 0
            assert sum(f["shares"]) == 200
            assert not f["timed_out"]


def test_the_peers_own_workers_run_the_end_to_end_rows(result: dict[str, Any]) -> None:
    for r in result["raw"]:
        if r["scenario"] != "e2e":
            continue
        # a worker loop of its own has no claim call to time; litegate's loop has
        timed = r["figures"]["p50"] is not None
        assert timed == (r["side"] == "litegate"), r


def test_server_and_targets(result: dict[str, Any]) -> None:
    assert result["backend"] == "postgres"
    assert result["server"]["version"].startswith("PostgreSQL")
    assert "fsync" in result["server"]
    names = [t["target"] for t in result["targets"]]
    assert any(n.startswith("e2e batched: litegate >= 15,000 jobs/s") for n in names)
    assert any(n.startswith("e2e one-job: litegate >= 3,000 jobs/s") for n in names)
    for variant in ("batched", "one-job"):
        for peer in ("pgqueuer", "procrastinate"):
            assert f"e2e {variant}: litegate >= 1 x {peer}" in names
    clean = [t for t in result["targets"] if t["target"].startswith("litegate: 0 errors")]
    assert clean
    assert clean[0]["met"], clean


def test_render_and_charts(result: dict[str, Any], tmp_path: Path) -> None:
    text = bench.render(result)
    for title in (
        "# queue (seed 004) on PostgreSQL",
        "Server: PostgreSQL",
        "### Scenario 1: Single Writer Baseline",
        "### Scenario 4: Stress Test",
        "### End to end",
        "| PostgreSQL",
        "Peak DB size",
        "vs litegate",
        "its worker, concurrency 2, 1 job per fetch",
        "its worker, batch_size 20",
        "Targets (litegate on PostgreSQL",
    ):
        assert title in text, title
    assert "WAL" not in text
    assert "SQLITE_BUSY" not in text
    paths = bench.charts(result, tmp_path)
    assert sorted(p.name for p in paths) == ["queue-stress-postgres.png", "queue-throughput.png"]
    for p in paths:
        assert p.read_bytes()[:8] == PNG


def test_a_throwaway_server_per_run() -> None:
    """Without --pg-url the run starts its own server (fsync as asked) and
    removes it; each cell's database is created and dropped."""
    if _pgserver.find_bindir() is None:
        pytest.skip(_pgserver.MISSING_HELP)
    psycopg = pytest.importorskip("psycopg")

    with _pg.PgCells(fsync=False) as cells:
        assert cells.info()["fsync"] == "off"
        name, url = cells.fresh()
        with psycopg.connect(url) as conn:
            conn.execute("CREATE TABLE t(x int)")
        cells.drop(name)
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(url, connect_timeout=5).close()
        server = cells.server
    assert server.pid is None  # stopped
