"""Seed 003's app on FastAPI: its mapping against the schema Django made,
every route on every engine under a real uvicorn (2 workers) and then a
real hey, the ledger of acknowledged writes, and the database checks
against planted violations. Nothing here asserts a speed."""

from __future__ import annotations

import http.client
import os
import re
import shutil
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="pip install -e lab")
pytest.importorskip("uvicorn", reason="pip install -e lab")

from litegate_lab.web import _acks, _actions, _hey
from litegate_lab.web._server import Server
from litegate_lab.web.fastapi_app import ENGINES
from litegate_lab.web.fastapi_app.main import ACTIONS
from litegate_lab.web.fastapi_app.models import Base
from sqlalchemy import create_engine, inspect

from tests.lab.web.conftest import copy_of

Counts = tuple[int, int, int]


def _counts(db: str) -> Counts:
    with closing(sqlite3.connect(db)) as conn:
        users, posts, comments = (
            conn.execute(f"SELECT count(*) FROM hn_{t}").fetchone()[0]
            for t in ("user", "post", "comment")
        )
    return users, posts, comments


def _call(port: int, method: str, path: str) -> tuple[int, str]:
    """One request on its own connection, redirects not followed: (status,
    Location)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path)
        r = conn.getresponse()
        r.read()
        return r.status, r.getheader("Location") or ""
    finally:
        conn.close()


@dataclass
class Served:
    """What one engine's server did: the routes one by one, then hey."""

    engine: str
    db: str
    acks: Path
    routes: dict[str, Any]
    ledger: list[tuple[str, tuple[int, ...]]]  # after the single actions
    journal: str
    hey: _hey.Summary
    raw: str
    exit: int
    log: str


@pytest.fixture(scope="module", params=ENGINES)
def served(
    request: pytest.FixtureRequest, seeded: Path, tmp_path_factory: pytest.TempPathFactory
) -> Served:
    engine: str = request.param
    tmp = tmp_path_factory.mktemp(f"fastapi-{engine}")
    db = copy_of(seeded, tmp / "hn.db")
    acks, log = tmp / "acks", tmp / "server.log"
    routes: dict[str, Any] = {}
    with Server(db, engine, log, acks=acks, framework="fastapi", workers=2) as srv:
        for action in _actions.ACTIONS:
            before = _counts(db)
            status, location = _call(srv.port, "POST", f"/benchmarking/{action}")
            routes[action] = (status, location, before, _counts(db))
        ledger = sorted(e for e in _acks.entries(acks) if e is not None)
        for mix in _actions.MIXES:
            routes[mix] = sorted({_call(srv.port, "POST", f"/benchmarking/{mix}")[0]
                                  for _ in range(10)})  # fmt: skip
        routes["unknown"] = _call(srv.port, "POST", "/benchmarking/nope")[0]
        routes["get_on_benchmarking"] = _call(srv.port, "GET", "/benchmarking/balanced")[0]
        with closing(sqlite3.connect(db)) as conn:  # a post the random deletes left
            (post,) = conn.execute("SELECT min(id) FROM hn_post").fetchone()
        pages = ("/", f"/posts/{post}/", "/users/3/")
        routes["pages"] = [_call(srv.port, "GET", p)[0] for p in pages]
        routes["missing_page"] = _call(srv.port, "GET", "/posts/999999/")[0]
        with closing(sqlite3.connect(db)) as conn:
            journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
        summary, raw = _hey.run(_hey.find(), f"{srv.url}/benchmarking/balanced", 8, 1.5)
        code = srv.stop()
    return Served(engine, db, acks, routes, ledger, journal, summary, raw, code, log.read_text())


def test_both_apps_share_the_actions_and_mixes() -> None:
    assert set(ACTIONS) == set(_actions.ACTIONS)
    for weights in _actions.MIXES.values():
        assert set(weights) == set(_actions.ACTIONS)
        assert sum(weights.values()) == pytest.approx(1.0)


def test_the_mapping_matches_the_schema_django_made(seeded: Path, tmp_path: Path) -> None:
    db = copy_of(seeded, tmp_path / "hn.db")
    engine = create_engine(f"sqlite:///{db}")
    try:
        seen = inspect(engine)
        assert sorted(Base.metadata.tables) == sorted(
            t for t in seen.get_table_names() if t.startswith("hn_")
        )
        for name, table in Base.metadata.tables.items():
            columns = {c["name"]: c for c in seen.get_columns(name)}
            assert set(columns) == set(table.columns.keys()), name
            for col in table.columns:
                assert columns[col.name]["nullable"] == col.nullable, (name, col.name)
                found = columns[col.name]["type"]  # INTEGER, VARCHAR(n), TEXT, DATETIME
                assert isinstance(found, type(col.type)), (name, col.name, found)
                assert getattr(found, "length", None) == getattr(col.type, "length", None)
            fks = {(f["constrained_columns"][0], f["referred_table"])
                   for f in seen.get_foreign_keys(name)}  # fmt: skip
            assert fks == {(fk.parent.name, fk.column.table.name) for fk in table.foreign_keys}
    finally:
        engine.dispose()
    with closing(sqlite3.connect(db)) as conn:  # ids never reused, as the ledger's check assumes
        sql = [r[0] for r in conn.execute("SELECT sql FROM sqlite_master WHERE name LIKE 'hn_%'")]
    assert sum("AUTOINCREMENT" in s for s in sql if s) == 3


def test_every_route_on_every_engine(served: Served) -> None:
    r = served.routes
    status, location, before, after = r["post_create"]
    assert status == 302  # a GET after it, as the Django app's redirect
    assert re.fullmatch(r"/posts/\d+/", location), location
    assert after[1] == before[1] + 1
    status, location, before, after = r["comment_create"]
    assert (status, location.startswith("/posts/"), after[2]) == (302, True, before[2] + 1)
    status, location, before, after = r["post_destroy"]
    assert (status, location, after[1]) == (302, "/", before[1] - 1)
    assert after[2] <= before[2]  # its comments went with it
    status, location, before, after = r["comment_destroy"]
    assert (status, after[2]) == (302, before[2] - 1)
    for action in ("post_show", "posts_index", "user_show"):
        status, _, before, after = r[action]
        assert (status, after) == (200, before)
    for mix in _actions.MIXES:
        assert set(r[mix]) <= {200, 302}
    assert r["unknown"] == 404
    assert r["get_on_benchmarking"] == 405
    assert r["pages"] == [200, 200, 200]
    assert r["missing_page"] == 404


def test_each_engine_is_what_it_says(served: Served) -> None:
    # naive keeps SQLAlchemy's rollback journal; tuned and litegate run in WAL.
    assert served.journal == ("delete" if served.engine == "naive" else "wal")
    # Only litegate's dialect takes the file's gate (its sidecar next to the file).
    assert os.path.exists(served.db + "-litegate") == (served.engine == "litegate")


def test_the_ledger_holds_each_committed_write(served: Served) -> None:
    kinds = sorted(kind for kind, _ in served.ledger)
    assert kinds == ["comment_create", "comment_destroy", "post_create", "post_destroy"]
    created = int(served.routes["post_create"][1].split("/")[2])
    assert ("post_create", (created,)) in served.ledger
    assert _acks.workers(served.acks) == 2  # one file per uvicorn worker


def test_hey_loads_every_engine(served: Served) -> None:
    s = served.hey
    assert s.responses > 20, served.raw
    assert s.errors == {}, served.raw
    assert served.exit == 0  # SIGTERM: uvicorn's graceful stop
    # A 404 is the app's own answer: a write's redirect to a post that
    # another request deleted meanwhile.
    if served.engine != "naive":
        assert set(s.statuses) <= {200, 404}, served.raw
        assert "database is locked" not in served.log
        assert "Exception in ASGI application" not in served.log
    report = _acks.check(served.db, served.acks)
    assert report.integrity == []
    assert sum(report.acknowledged.values()) > 4  # hey's writes too
    if served.engine != "naive":
        assert report.violations == 0, report


# -- the checks, against violations planted in a served file ----------------


def _plant(served: Served, tmp_path: Path, sql: str = "", *params: Any) -> tuple[str, Path]:
    """A copy of the served file and its ledger, with ``sql`` run on the copy
    behind the app's back (foreign keys not enforced)."""
    tmp_path.mkdir()
    db = str(tmp_path / "hn.db")
    for suffix in ("", "-wal"):
        if os.path.exists(served.db + suffix):
            shutil.copyfile(served.db + suffix, db + suffix)
    acks = tmp_path / "acks"
    shutil.copytree(served.acks, acks)
    if sql:
        with closing(sqlite3.connect(db)) as conn:
            conn.execute(sql, params)
            conn.commit()
    return db, acks


def _ledger(served: Served, kind: str) -> set[int]:
    return {ids[0] for e in _acks.entries(served.acks) if e is not None for k, ids in [e]
            if k == kind}  # fmt: skip


def _present(db: str, table: str) -> set[int]:
    with closing(sqlite3.connect(db)) as conn:
        return {r[0] for r in conn.execute(f"SELECT id FROM hn_{table}")}


@pytest.mark.parametrize("served", ["tuned"], indirect=True)
def test_checks_find_planted_violations(served: Served, tmp_path: Path) -> None:
    db, acks = _plant(served, tmp_path / "clean")
    assert _acks.check(db, acks).violations == 0

    kept = sorted(_ledger(served, "post_create") & _present(served.db, "post"))
    assert kept, "the load created posts that are still there"
    db, acks = _plant(served, tmp_path / "lost", "DELETE FROM hn_post WHERE id = ?", kept[0])
    report = _acks.check(db, acks)
    assert (report.lost, report.violations) == (1, 1 + report.foreign_keys)
    assert f"lost post {kept[0]}" in report.examples

    comments = sorted(_ledger(served, "comment_create") & _present(served.db, "comment"))
    assert comments
    sql = "DELETE FROM hn_comment WHERE id = ?"
    db, acks = _plant(served, tmp_path / "lost-comment", sql, comments[0])
    report = _acks.check(db, acks)
    assert (report.lost, report.violations) == (1, 1)

    gone = sorted(_ledger(served, "post_destroy"))
    assert gone
    sql = (
        "INSERT INTO hn_post (id, user_id, title, description, created_at) "
        "VALUES (?, 1, 'back', '', '2024-01-01 00:00:00')"
    )
    db, acks = _plant(served, tmp_path / "resurrected", sql, gone[0])
    report = _acks.check(db, acks)
    assert (report.resurrected, report.violations) == (1, 1)

    sql = (
        "INSERT INTO hn_comment (user_id, post_id, body, created_at) "
        "VALUES (1, ?, 'orphan', '2024-01-01 00:00:00')"
    )
    db, acks = _plant(served, tmp_path / "orphan", sql, gone[0])
    report = _acks.check(db, acks)
    assert (report.foreign_keys, report.orphaned, report.violations) == (1, 1, 2)

    db, acks = _plant(served, tmp_path / "fk", sql, 10**9)  # a post that never was
    report = _acks.check(db, acks)
    assert (report.foreign_keys, report.orphaned, report.violations) == (1, 0, 1)

    db, acks = _plant(served, tmp_path / "corrupt")
    with closing(sqlite3.connect(db)) as conn:  # an index that no longer matches its table
        conn.execute("PRAGMA writable_schema = ON")
        (index,) = conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'hn_comment' "
            "AND sql LIKE '%post_id%'"
        ).fetchone()
        conn.execute(
            "UPDATE sqlite_master SET sql = ? WHERE name = ?",
            (f'CREATE INDEX "{index}" ON "hn_comment" ("user_id")', index),
        )
        conn.commit()
    report = _acks.check(db, acks)
    assert report.integrity
    assert f"missing from index {index}" in report.integrity[0]

    db, acks = _plant(served, tmp_path / "torn")
    with open(next(acks.glob("acks-*")), "a") as f:
        f.write("post_create\n")
    assert _acks.check(db, acks).unreadable == 1


def test_serve_says_what_a_fastapi_server_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from litegate_lab.web import _cli

    from litegate.__main__ import main

    db = tmp_path / "hn.db"
    db.touch()
    monkeypatch.setitem(_cli._NEEDS, "fastapi", ("fastapi", "no_such_module_here"))
    assert main(["web", "serve", str(db), "--framework", "fastapi", "--engine", "tuned"]) == 2
    assert "no_such_module_here not installed: pip install litegate-lab" in (
        capsys.readouterr().err
    )


def test_a_litegate_variant_sets_its_pragma_on_both_engines(tmp_path: Path) -> None:
    """``litegate+NAME=VALUE`` (a candidate default, measured beside the
    default in one bench run) reaches the writer and the readers."""
    import asyncio

    from litegate_lab.web.fastapi_app.engines import make
    from sqlalchemy import text

    path = str(tmp_path / "v.db")
    sqlite3.connect(path).execute("PRAGMA journal_mode = wal").close()

    async def read_back() -> list[int]:
        engines = make("litegate+cache_size=-4321", path)
        try:
            got = []
            for engine in (engines.writer, engines.reader):
                async with engine.connect() as conn:
                    got.append((await conn.execute(text("PRAGMA cache_size"))).scalar_one())
            return got
        finally:
            await engines.writer.dispose()

    assert asyncio.run(read_back()) == [-4321, -4321]


def test_a_fair_variant_sets_the_gates_policy(tmp_path: Path) -> None:
    """``litegate+fair=strict`` reaches sqlite+litegate's ``fair``: the
    grant log records the strict budget of the app's writes."""
    import asyncio

    from litegate_lab.web.fastapi_app.engines import make
    from sqlalchemy import text

    from litegate import _grantlog

    path = str(tmp_path / "f.db")
    sqlite3.connect(path).execute("PRAGMA journal_mode = wal").close()

    async def write() -> None:
        engines = make("litegate+fair=strict", path)
        try:
            async with engines.writer.begin() as conn:
                await conn.execute(text("CREATE TABLE t (x)"))
        finally:
            await engines.writer.dispose()

    folder = str(tmp_path / "grants")
    with _grantlog.logging_to(folder):
        asyncio.run(write())
    grants = _grantlog.read(folder)
    assert grants
    assert {(g.overtakes, g.budget_us) for g in grants} == {(0, 0)}
