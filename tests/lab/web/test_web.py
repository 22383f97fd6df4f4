"""Seed 003's app and ``litegate bench web``: the routes on every engine
(Django's test client), a real gunicorn under a real hey, the CLI's
refusals, and the parsing of hey's output (a recorded sample). Nothing
here asserts a speed."""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("gunicorn", reason="pip install -e lab")

from litegate_lab import web as bench
from litegate_lab.web import _acks, _hey
from litegate_lab.web._actions import ACTIONS
from litegate_lab.web._server import Server

from litegate.__main__ import main
from tests.lab.web import procs
from tests.lab.web.conftest import copy_of

HERE = Path(__file__).parent


def _copy(seeded: Path, tmp_path: Path) -> str:
    return copy_of(seeded, tmp_path / "hn.db")


# (the variant: litegate with a PRAGMA over its profile's, a candidate default)
@pytest.mark.parametrize("engine", [*bench.ENGINES, "litegate+cache_size=-4321"])
def test_every_route_on_every_engine(engine: str, seeded: Path, tmp_path: Path) -> None:
    db = _copy(seeded, tmp_path)
    acks = tmp_path / "acks"
    acks.mkdir()
    with mp.get_context("spawn").Pool(1) as pool:
        out: dict[str, Any] = pool.apply(procs.exercise, (engine, db, str(acks)))
    assert out["vendor"] == "sqlite"
    stock = "django.db.backends.sqlite3"
    assert out["engine"] == ("litegate.django" if engine.startswith("litegate") else stock)
    # the default profile's cache (20 MB), the tuned recipe's 2000 pages, or the variant's
    cache = {"tuned": 2000, "litegate": -20000, "litegate+cache_size=-4321": -4321}
    assert out["cache_size"] == cache.get(engine, -2000), out["cache_size"]
    status, location, before, after = out["post_create"]
    assert status == 302
    assert re.fullmatch(r"/posts/\d+/", location), location
    assert after[1] == before[1] + 1
    status, location, before, after = out["comment_create"]
    assert (status, location.startswith("/posts/"), after[2]) == (302, True, before[2] + 1)
    status, location, before, after = out["post_destroy"]
    assert (status, location, after[1]) == (302, "/", before[1] - 1)
    assert after[2] <= before[2]  # its comments (if it had any) went with it
    assert out["orphans"] == 0  # CASCADE: no comment outlives its post
    status, location, before, after = out["comment_destroy"]
    assert (status, after[2]) == (302, before[2] - 1)
    for action in ("post_show", "posts_index", "user_show"):
        status, _, before, after = out[action]
        assert (status, after) == (200, before)
    for mix in ("read_heavy", "balanced", "write_heavy"):
        assert set(out[mix]) <= {200, 302}
    assert out["unknown"] == 404
    assert out["get_on_benchmarking"] == 405
    assert out["pages"] == [200, 200, 200]
    assert out["missing_page"] == 404
    assert out["seen"] >= 1  # every benchmarking request marks a user as seen
    # Each write, once committed, is in the ledger: exactly the four.
    created = int(out["post_create"][1].split("/")[2])
    kinds = [kind for kind, _ in out["ledger"]]
    assert sorted(kinds) == ["comment_create", "comment_destroy", "post_create", "post_destroy"]
    assert ("post_create", (created,)) in out["ledger"]
    # The rest of the file (the mixes' writes too) checks out against it.
    assert _acks.check(db, acks).violations == 0


@pytest.mark.slow
def test_serve_answers_hey_without_500s_and_stops_on_sigterm(seeded: Path, tmp_path: Path) -> None:
    hey = _hey.find()
    db = _copy(seeded, tmp_path)
    log = tmp_path / "server.log"
    with Server(db, "litegate", log, acks=tmp_path / "acks", workers=2, threads=3) as srv:
        summary, raw = _hey.run(hey, f"{srv.url}/benchmarking/balanced", 8, 2.0)
        roles = {t.role for t in srv.thread_sample().tasks.values()}
        code = srv.stop()
    # The workers named their threads to the kernel (the bench's CPU by
    # thread): gthread's request threads and litegate's checkpointer.
    assert {"master", "main", "ThreadPoolExecu", "litegate-checkp"} <= roles, roles
    assert summary.responses > 50, raw
    assert 500 not in summary.statuses, raw  # no 500 on litegate
    # A 404 is the app's own answer, not an error: a write's redirect to a
    # post that another request deleted meanwhile (the seed saw it too).
    assert set(summary.statuses) <= {200, 404}, raw
    assert summary.errors == {}
    assert code == 0  # SIGTERM: gunicorn's graceful stop
    assert "database is locked" not in log.read_text()


@pytest.mark.slow
def test_bench_web_runs_a_cell_per_framework_and_engine(tmp_path: Path) -> None:
    # One worker each (uvicorn then runs without its supervisor): the
    # plumbing is the same, at half the start-up cost; test_fastapi.py and
    # the test above serve with two.
    cfg = bench.Config(frameworks=("django", "fastapi"), engines=("tuned", "litegate"),
                       seconds=1.0, headline=1, sweep=(2,), mixes=("write_heavy",),
                       mix_c=(64,), workers=1, hey=_hey.find())  # fmt: skip
    result = bench.run(cfg)
    cells = result["cells"]
    sides = [("django", "tuned"), ("django", "litegate"), ("fastapi", "tuned"),
             ("fastapi", "litegate")]  # fmt: skip
    assert [(c["framework"], c["engine"], c["mix"], c["c"]) for c in cells] == [
        (f, e, mix, n) for mix, n in (("balanced", 20), ("balanced", 2), ("write_heavy", 64))
        for f, e in sides
    ]  # fmt: skip
    for c in cells:
        assert c["hey"]["responses"] > 0
        assert c["server_exit"] == 0
        assert c["cpu_s"] > 0
        # CPU by thread adds up to the server's CPU (within rounding: its
        # processes' totals are in clock ticks, read a moment apart)
        slack = 1000 * 8 / os.sysconf("SC_CLK_TCK") / c["hey"]["responses"]
        by_thread = sum(r["cpu_ms"] for r in c["threads"].values())
        assert abs(by_thread - c["cpu_ms_per_request"]) <= slack, c["threads"]
        assert 0.0 <= c["idle_share"] <= 1.0
        assert c["locked"] == 0
        assert bench.fives(c) == 0, c["hey"]["statuses"]
        # The database after the cell: intact, and every acknowledged write there.
        assert c["check"]["violations"] == 0, c["check"]
        assert sum(c["check"]["acknowledged"].values()) > 0
    assert list(result["summary"]) == ["django", "fastapi"]
    assert list(result["summary"]["fastapi"]) == ["tuned", "litegate"]
    table = bench.render(result)
    assert "== Django under gunicorn (gthread, 1 worker(s) x 3 threads) ==" in table
    assert "== FastAPI + SQLAlchemy asyncio under uvicorn (1 worker(s)) ==" in table
    assert "litegate HTTP 500, every cell:" in table
    assert "write_heavy c=64: litegate HTTP 5xx 0 (target 0); rps / tuned " in table
    assert "write_heavy, c = 64: rps / p99" in table
    assert table.count("Headline server CPU by thread, ms per request") == 2
    assert table.count("3 cell(s)") == 4
    assert "VIOLATIONS" not in table
    assert [p.name for p in bench.charts(result, tmp_path)] == [
        "web-rps.png", "web-p99.png", "web-latency-c20.png",
    ]  # fmt: skip


@pytest.mark.slow
def test_bench_web_grant_log_checks_the_bounds_and_times_the_gate(tmp_path: Path) -> None:
    """--grant-log: litegate's servers log every grant (tuned has no gate);
    each litegate cell gets the bounds checked on its log and where the
    gate's time went, and the report shows both."""
    cfg = bench.Config(frameworks=("django",), engines=("tuned", "litegate"), seconds=1.0,
                       headline=1, sweep=(), mixes=(), workers=2, hey=_hey.find(),
                       grant_log=True)  # fmt: skip
    result = bench.run(cfg)
    tuned, lg = result["cells"]
    assert "grant_log" not in tuned
    assert "gate_timing" not in tuned
    checked, timed = lg["grant_log"], lg["gate_timing"]
    # every request of the app writes (it marks its user as seen)
    assert checked["grants"] >= lg["hey"]["responses"] > 0
    assert timed["grants"] == checked["grants"]
    for violation in ("overlaps", "out_of_order", "over_overtakes"):
        assert checked[violation] == 0, checked
    assert 0 < timed["held_share"] < 1
    assert 0 <= timed["free_waiting_share"] < 1
    table = bench.render(result)
    assert "Write gate, from its grant log (--grant-log;" in table
    assert "  litegate  balanced c = 20      held " in table
    assert "0 two holders at once, 0 out of ticket order, 0 overtaken past the bound" in table


@pytest.mark.slow
def test_bench_web_profile_counts_each_engine_per_action(tmp_path: Path) -> None:
    """``bench web --profile``: every action on both engines, opcodes by area;
    litegate's own code runs only under its engine, and every request that
    writes passes through the gate's code."""
    result = main_result(["bench", "web", "--profile", "2", "--out", str(tmp_path)], tmp_path)
    prof = result["profile"]
    assert list(prof) == ["tuned", "litegate"]
    for engine, actions in prof.items():
        assert list(actions) == list(ACTIONS)
        for p in actions.values():
            assert p["cpu_us"] > 0
            assert set(p["opcodes"]) == set(bench._profile.AREAS)
            assert (p["opcodes"]["litegate"] > 0) == (engine == "litegate")
            assert p["opcodes"]["django.db"] > 0
    assert any("_gate.py" in site for site, _us in prof["litegate"]["post_create"]["top"])
    assert "a Django request's cost per engine" in bench.render(result)


def main_result(argv: list[str], out: Path) -> dict[str, Any]:
    """Run ``litegate`` with ``argv``; the JSON result it wrote under ``out``."""
    import json

    assert main(argv) == 0
    (found,) = out.glob("**/web.json")
    data: dict[str, Any] = json.loads(found.read_text())
    return data


def test_hey_summary_is_parsed() -> None:
    s = _hey.parse((HERE / "hey-sample.txt").read_text())
    assert (s.total_s, s.slowest_s, s.fastest_s, s.average_s, s.rps) == (
        3.0921, 0.9188, 0.0039, 0.1046, 188.2223,
    )  # fmt: skip
    assert s.percentiles == {
        10: 0.0196, 25: 0.0403, 50: 0.0988, 75: 0.1457, 90: 0.1888, 95: 0.2435, 99: 0.3519,
    }  # fmt: skip
    assert s.statuses == {200: 229, 500: 353}
    assert s.responses == 582
    assert len(s.histogram) == 11
    assert s.histogram[1] == (0.095, 277)
    assert sum(n for _, n in s.histogram) == 582
    assert s.errors == {}


def test_hey_errors_are_counted() -> None:
    text = "\nSummary:\n  Requests/sec:\t1.0\n\nError distribution:\n  [3]\tGet x: EOF\n"
    assert _hey.parse(text).errors == {"Get x: EOF": 3}


def test_serve_refuses_other_hosts_and_missing_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "none.db"
    assert main(["web", "serve", str(db), "--bind", "0.0.0.0:8000"]) == 2
    assert "127.0.0.1:PORT or unix:PATH" in capsys.readouterr().err
    assert main(["web", "serve", str(db)]) == 2
    assert "litegate web seed" in capsys.readouterr().err
    assert main(["web", "serve", str(db), "--framework", "fastapi", "--engine", "wal"]) == 2
    assert "--engine wal is not one of the fastapi app's: naive, tuned, litegate" in (
        capsys.readouterr().err
    )
    assert main(["web", "serve", str(db), "--framework", "fastapi", "--threads", "3"]) == 2
    assert "--threads is for django" in capsys.readouterr().err
    assert main(["web", "serve", str(db), "--engine", "litegate+fair=fifo"]) == 2
    assert "fair=fifo is not a policy" in capsys.readouterr().err
    assert main(["web", "serve", str(db), "--framework", "flask"]) == 2
    assert "invalid choice: 'flask'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--engines", "mysql"], "unknown engine(s) ['mysql']"),
        (["--framework", "flask"], "unknown framework(s) ['flask']"),
        (["--framework", "fastapi", "--engines", "wal"], "none of the engines wal runs on fastapi"),
        (["--mix-c", "20,0"], "concurrencies must be whole numbers >= 1"),
        (["--engines", "tuned+mmap_size=1"], "only litegate takes PRAGMA overrides"),
        (["--engines", "litegate+mmap_size"], "'mmap_size' is not NAME=VALUE"),
        (["--engines", "litegate+mmap_size=1;DROP"], "is not NAME=VALUE"),
        (["--engines", "litegate+fair=fifo"], "fair=fifo is not a policy; pick from bounded"),
    ],
)
def test_bench_web_refuses_bad_options(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "web", *args, "--out", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err


def test_engine_variants_name_their_pragmas() -> None:
    from litegate_lab.web import _variant

    assert _variant.split("tuned") == ("tuned", {})
    assert _variant.split("litegate+mmap_size=134217728+cache_size=-2000") == (
        "litegate",
        {"mmap_size": "134217728", "cache_size": "-2000"},
    )
    with pytest.raises(ValueError, match=r"'synchronous=' is not NAME=VALUE"):
        _variant.split("litegate+synchronous=")
    parser = argparse.ArgumentParser()
    parser.set_defaults(quick=False, runs=1)  # (the options every bench shares)
    bench.add_arguments(parser)
    cfg = bench.config_from_args(
        parser.parse_args(["--engines", "litegate+mmap_size=1,tuned,litegate"])
    )
    # the write gate's policy is a setting (OPTIONS["fair"], connect_args), not a PRAGMA
    assert _variant.settings("litegate+fair=strict+mmap_size=1") == (
        "litegate", {"mmap_size": "1"}, "strict"
    )  # fmt: skip
    assert _variant.settings("litegate+mmap_size=1") == ("litegate", {"mmap_size": "1"}, None)
    from litegate_lab.web.app.engines import database

    options = database("litegate+fair=strict", "x.db")["OPTIONS"]
    assert options == {"timeout": 5, "fair": "strict"}
    assert "fair" not in database("litegate", "x.db")["OPTIONS"]
    both = bench.config_from_args(
        parser.parse_args(["--engines", "tuned,litegate,litegate+fair=strict"])
    )
    assert ("fastapi", "litegate+fair=strict") in both.sides()  # both apps take it
    # each variant right after the configuration it varies, for both apps
    assert cfg.sides() == [
        ("django", "tuned"), ("django", "litegate"), ("django", "litegate+mmap_size=1"),
        ("fastapi", "tuned"), ("fastapi", "litegate"), ("fastapi", "litegate+mmap_size=1"),
    ]  # fmt: skip


@pytest.mark.slow
def test_bench_web_cache_serves_the_front_page_from_each_backend(tmp_path: Path) -> None:
    """--cache: the front page under cache_page, on each backend; a cached
    page is the same page (the cell answers 200s only)."""
    from litegate_lab.cache import _redis

    caches = ("none", "litegate", "database") + (("redis",) if _redis.find() else ())
    cfg = bench.Config(frameworks=("django",), engines=("litegate",), seconds=1.0, headline=1,
                       sweep=(), mixes=(), workers=1, hey=_hey.find(), caches=caches,
                       cache_c=(4,))  # fmt: skip
    result = bench.run(cfg)
    rows = result["cache_cells"]
    assert [r["cache"] for r in rows] == list(caches)
    for r in rows:
        assert r["hey"]["responses"] > 0
        assert r["hey"]["statuses"] == {"200": r["hey"]["responses"]}
        assert r["server_exit"] == 0
    table = bench.render(result)
    assert "GET /, the latest 100 posts" in table
    assert ("the same app on RedisCache" in table) == ("redis" in caches)
    assert [p.name for p in bench.charts(result, tmp_path)] == ["web-cache-rps.png"]
