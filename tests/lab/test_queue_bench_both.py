"""``bench queue --backend sqlite,postgres`` (issue 11's "both backends' tables
from one run"): the backend list and its alias, how the other options split
over the two parts, the order of the cells (SQLite's first), and the
combined report, JSON and charts of one tiny run. The runs on a server are
skipped, with how to get the binaries, where PostgreSQL is not installed;
a part that fails is tested without one."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from litegate_lab import _pgserver
from litegate_lab import queue as bench
from litegate_lab._progress import Progress
from litegate_lab._report import to_json
from litegate_lab.queue import _config, _run
from litegate_lab.queue._config import Combined, Config

from litegate.__main__ import main
from tests.lab.test_queue_bench import parse_any
from tests.lab.test_queue_bench_pg import assert_usage_error

PNG = b"\x89PNG\r\n\x1a\n"
URL = "postgresql://bench:s3cret@/bench?host=/tmp/sock&port=5432"

needs_psycopg = pytest.mark.skipif(
    importlib.util.find_spec("psycopg") is None, reason="needs psycopg (the postgres extra)"
)

# The e2e rows only, 2 producer + 2 worker processes: the smallest run that
# fills the summary lines on both backends.
TINY = Config(
    scenarios=("e2e",),
    sides=("litegate", "bare"),
    e2e_profiles=("balanced",),
    e2e_jobs=100,
    e2e_producers=2,
    e2e_workers=2,
    e2e_threads=2,
    batch=20,
    cell_timeout=30.0,
)
TINY_PG = dataclasses.replace(TINY, backend="postgres", sides=("litegate", "pgqueuer"))


def _both(argv: list[str]) -> tuple[Config, Config]:
    cfg = parse_any(["--backend", "both", *argv])
    assert isinstance(cfg, Combined)
    sqlite, pg = cfg.parts
    return sqlite, pg


# -- options (no server) -----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "backends"),
    [
        ("sqlite", ("sqlite",)),
        ("postgres", ("postgres",)),
        ("sqlite,postgres", ("sqlite", "postgres")),
        ("postgres,sqlite", ("sqlite", "postgres")),  # SQLite's matrix first, always
        ("both", ("sqlite", "postgres")),
        (" both , sqlite ", ("sqlite", "postgres")),
        ("sqlite,sqlite", ("sqlite",)),
    ],
)
def test_backend_list_and_alias(text: str, backends: tuple[str, ...]) -> None:
    assert _config.parse_backends(text) == backends


@pytest.mark.parametrize("text", ["", ",", "mysql", "sqlite,mysql", "all"])
def test_unknown_backends_are_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="both"):
        _config.parse_backends(text)


def test_one_backend_is_a_plain_config() -> None:
    assert parse_any([]) == Config()
    assert parse_any(["--backend", "sqlite"]) == Config()


@needs_psycopg
@pytest.mark.parametrize("backend", ["both", "sqlite,postgres", "postgres,sqlite"])
def test_both_is_a_part_per_backend(backend: str) -> None:
    cfg = parse_any(["--backend", backend, "--pg-url", URL])
    assert isinstance(cfg, Combined)
    assert cfg.backends == ("sqlite", "postgres")
    sqlite, pg = cfg.parts
    assert sqlite == Config()  # exactly what --backend sqlite runs
    assert pg == parse_any(["--backend", "postgres", "--pg-url", URL])
    assert pg.cell_timeout == _config.PG_CELL_TIMEOUT
    assert "s3cret" not in str(cfg.to_json())


@needs_psycopg
def test_sides_split_over_the_backends() -> None:
    sqlite, pg = _both(["--pg-url", URL, "--sides", "bare,pgqueuer,litegate,huey"])
    assert sqlite.sides == ("bare", "litegate", "huey")
    assert pg.sides == ("pgqueuer", "litegate")
    with pytest.raises(ValueError, match="no side that runs on postgres"):
        _both(["--pg-url", URL, "--sides", "bare,huey"])
    with pytest.raises(ValueError, match="no side that runs on sqlite"):
        _both(["--pg-url", URL, "--sides", "procrastinate"])


@needs_psycopg
def test_sqlite_only_options_go_to_its_part() -> None:
    argv = ["--pg-url", URL, "--profiles", "aggressive", "--e2e-profiles", "conservative"]
    sqlite, pg = _both([*argv, "--cell-timeout", "12", "--seed-threads", "2"])
    assert (sqlite.profiles, sqlite.e2e_profiles) == (("aggressive",), ("conservative",))
    assert pg.profiles == pg.long_profiles == pg.e2e_profiles == ("postgres",)
    assert sqlite.cell_timeout == pg.cell_timeout == 12.0
    assert sqlite.seed_threads == 2  # the seed's side is SQLite's; harmless on postgres


@needs_psycopg
def test_grant_log_goes_to_the_sqlite_part() -> None:
    # (PostgreSQL has no write gate whose grants could be logged)
    sqlite, pg = _both(["--pg-url", URL, "--grant-log"])
    assert (sqlite.grant_log, pg.grant_log) == (True, False)


@needs_psycopg
def test_quick_with_both() -> None:
    sqlite, pg = _both(["--pg-url", URL, "--quick", "--scenarios", "e2e"])
    assert sqlite == dataclasses.replace(_config.quick(Config()), scenarios=("e2e",))
    assert pg.profiles == pg.e2e_profiles == ("postgres",)
    assert (pg.e2e_jobs, pg.cell_timeout, pg.pg_url) == (8_000, 30.0, URL)


@needs_psycopg
def test_both_without_a_url_needs_the_server_binaries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_pgserver, "find_bindir", lambda: None)
    with pytest.raises(ValueError, match="--pg-url") as info:
        parse_any(["--backend", "both"])
    assert _pgserver.MISSING_HELP in str(info.value)
    monkeypatch.setattr(_pgserver, "find_bindir", lambda: Path("/usr/bin"))
    _, pg = _both(["--pg-fsync", "off"])
    assert (pg.pg_url, pg.pg_fsync) == (None, False)  # a throwaway server, fsync off


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--backend", "mysql"], "pick from sqlite, postgres"),
        (["--backend", "both", "--pg-url", URL, "--sides", "seed"], "no side that runs on"),
        (["--backend", "sqlite", "--pg-url", URL], "--backend postgres"),
    ],
)
def test_usage_errors_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert_usage_error(argv, message, capsys)


# -- plan ----------------------------------------------------------------------------


def test_plan_runs_sqlite_first_then_postgres() -> None:
    sqlite, pg = Config(), Config(backend="postgres")
    cells = _run.plan(Combined((sqlite, pg)))
    n, m = len(_run.plan(sqlite)), len(_run.plan(pg))
    assert [c.backend for c in cells] == ["sqlite"] * n + ["postgres"] * m
    assert cells[:n] == _run.plan(sqlite)  # each part's cells as a one-backend run has them
    assert cells[n:] == _run.plan(pg)


def test_combined_takes_the_backends_in_order() -> None:
    with pytest.raises(ValueError, match="order sqlite,postgres"):
        Combined((Config(backend="postgres"), Config()))
    with pytest.raises(ValueError, match="two or more"):
        Combined((Config(),))


# -- a part that fails (no server) ---------------------------------------------------


class _NoServer:
    def __init__(self, url: str | None, *, fsync: bool) -> None:
        self.url = url

    def __enter__(self) -> _NoServer:
        raise RuntimeError(f"could not connect to {self.url}")

    def __exit__(self, *exc: object) -> None:
        pass


def test_a_failed_part_keeps_the_other(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """PostgreSQL failing after a quarter of an hour of SQLite cells: the
    SQLite results are still reported and saved, the failure said plainly."""
    monkeypatch.setattr(_run, "PgCells", _NoServer)
    sqlite = Config(
        scenarios=("single",), sides=("litegate",), profiles=("balanced",), single_puts=10
    )
    cfg = Combined((sqlite, Config(backend="postgres", scenarios=("single",), pg_url=URL)))
    progress = Progress(0)
    result = bench.run(cfg, progress)
    assert progress.done == progress.total == 1 + 3  # the failed part's cells count as done
    ok, failed = result["results"]["sqlite"], result["results"]["postgres"]
    assert ok["summary"][0]["figures"]["ops"]["median"] == 10
    assert failed["error"].startswith("RuntimeError: could not connect")
    assert "s3cret" not in to_json(result)
    text = bench.render(result)
    assert "## queue (seed 004) on SQLite: one run" in text
    assert "## queue (seed 004) on PostgreSQL: FAILED" in text
    assert "  PostgreSQL: FAILED: RuntimeError: could not connect" in text
    assert [p.name for p in bench.charts(result, tmp_path)] == ["queue-sqlite-throughput.png"]


# -- one tiny run on both backends ----------------------------------------------------


def _peers_installed() -> None:
    for module in ("pgqueuer", "asyncpg"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"needs {module}: pip install litegate-lab")


@pytest.fixture(scope="module")
def result(pg_server: Any) -> dict[str, Any]:
    """The end-to-end rows on SQLite, then on the test server (a database
    per cell), as ``--backend both`` runs them."""
    _peers_installed()
    return bench.run(Combined((TINY, dataclasses.replace(TINY_PG, pg_url=pg_server.url))))


def test_one_result_holds_both(result: dict[str, Any]) -> None:
    assert result["backend"] == "sqlite,postgres"
    assert list(result["results"]) == result["backends"] == ["sqlite", "postgres"]
    for backend, part in result["results"].items():
        assert part["backend"] == backend
        assert {r["side"] for r in part["raw"] if not r["na"]} == set(part["config"]["sides"])
        for r in part["raw"]:
            if not r["na"]:
                assert r["accounting"]["processed"] == r["accounting"]["put"] == 100, r
    assert "server" in result["results"]["postgres"]
    glance = {(g["backend"], g["variant"], g["side"]) for g in result["at_a_glance"]}
    assert glance == {
        ("sqlite", "batched", "litegate"),
        ("sqlite", "batched", "bare"),
        ("sqlite", "one-job", "litegate"),  # bare is the batched baseline only
        ("postgres", "batched", "litegate"),
        ("postgres", "batched", "pgqueuer"),
        ("postgres", "one-job", "litegate"),
        ("postgres", "one-job", "pgqueuer"),
    }
    assert all(g["clean"] and g["jobs_per_s"] > 0 for g in result["at_a_glance"])


def test_the_report_has_a_section_per_backend(result: dict[str, Any]) -> None:
    text = bench.render(json.loads(to_json(result)))  # as read back from queue.json
    lines = text.splitlines()
    assert lines[0].startswith("# queue (seed 004) on SQLite and PostgreSQL")
    sqlite = text.index("## queue (seed 004) on SQLite: one run")
    pg = text.index("## queue (seed 004) on PostgreSQL: one run")
    assert sqlite < pg
    assert text.count("### End to end") == 2
    assert "Peak WAL" in text[sqlite:pg]
    assert "Peak DB size" in text[pg:]
    assert "Targets (litegate;" in text[sqlite:pg]
    assert "Targets (litegate on PostgreSQL" in text[pg:]
    # a summary line per backend, before the sections: every side's e2e jobs/s
    head = text[:sqlite]
    (sq_line,) = [x for x in lines if x.startswith("  SQLite (Balanced):")]
    (pg_line,) = [x for x in lines if x.startswith("  PostgreSQL:")]
    assert sq_line in head
    assert pg_line in head
    for part in ("batched: litegate ", ", bare ", " | one-job: litegate "):
        assert part in sq_line
    assert ", pgqueuer " in pg_line
    assert sq_line.index("batched:") == pg_line.index("batched:")  # lined up
    assert "  litegate on PostgreSQL / on SQLite (Balanced): batched " in head


def test_cli_writes_one_report_json_and_charts_per_backend(
    pg_server: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [
        "bench", "queue", "--backend", "both", "--pg-url", pg_server.url,
        "--scenarios", "single", "--sides", "litegate", "--single-puts", "20",
        "--profiles", "balanced",  # SQLite's; the server has its one configuration
        "--no-progress", "--out", str(tmp_path),
    ]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    report = (tmp_path / "report.txt").read_text()
    assert report.startswith("# queue (seed 004) on SQLite and PostgreSQL")
    assert report in printed
    assert "  SQLite:     no end-to-end rows in this run (--scenarios single)" in report
    data = json.loads((tmp_path / "queue.json").read_text())
    assert data["backends"] == ["sqlite", "postgres"]
    for backend in ("sqlite", "postgres"):
        part = data["results"][backend]
        assert [r["accounting"]["put"] for r in part["raw"]] == [20]
    assert sorted(Path(f).name for f in data["files"]) == [
        "queue-postgres-throughput.png",
        "queue-sqlite-throughput.png",
        "queue.json",
        "report.txt",
    ]
    for name in ("queue-sqlite-throughput.png", "queue-postgres-throughput.png"):
        assert (tmp_path / name).read_bytes()[:8] == PNG
