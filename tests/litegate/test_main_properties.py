"""The misuse suite, part 3: the command line. ``litegate
doctor`` and ``litegate top`` run for real on every kind of path
(a database, a missing file, a directory, a text file, an empty file, a
pipe) with any mix of options; ``litegate bench`` and ``litegate web`` are
only parsed (running them would run benchmarks or a server): options from
their own parsers, given odd values.

The contract, per case: an exit status, never a traceback; status 2 comes
with a message on stderr; a configuration accepted by the bench parser has
no non-finite number in it (inf seconds would never end)."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import fields, is_dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import litegate
from litegate.__main__ import main
from tests.litegate.misuse import examples, ran

pytest.importorskip("rich", reason="litegate top needs rich: pip install -e '.[ops]'")


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("cli")
    db = str(d / "app.db")
    with litegate.connect(db) as conn:
        conn.execute("CREATE TABLE t (x)")
        conn.execute("INSERT INTO t VALUES (1)")
    (d / "notes.txt").write_text("not a database")
    (d / "empty.db").touch()
    (d / "folder").mkdir()
    os.mkfifo(d / "pipe")
    return {
        "db": db,
        "missing": str(d / "missing.db"),
        "folder": str(d / "folder"),
        "notes": str(d / "notes.txt"),
        "empty": str(d / "empty.db"),
        "pipe": str(d / "pipe"),
        "blank": "",
    }


@contextmanager
def captured() -> Iterator[tuple[io.StringIO, io.StringIO]]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        yield out, err


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    with captured() as (out, err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def no_traceback(code: int, err: str, argv: list[str]) -> None:
    assert "Traceback" not in err, (argv, err)
    if code == 2:
        assert err.strip(), f"exit 2 with no message: {argv}"


words = st.text(st.characters(blacklist_characters="\0", blacklist_categories=["Cs"]), max_size=8)


def rows(db: str) -> int:
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        return int(conn.execute("SELECT count(*) FROM t").fetchone()[0])


@pytest.mark.slow
def test_doctor_with_any_arguments(paths: dict[str, str]) -> None:
    tokens = st.one_of(
        st.sampled_from(["--json", "--no-check", "--help", "--bogus", "-x", "--", "--json=1"]),
        st.sampled_from(sorted(paths)).map(lambda k: paths[k]),
        words,
    )

    @examples(80)
    @given(st.lists(tokens, max_size=4))
    def case(argv: list[str]) -> None:
        ran("doctor CLI")
        code, out, err = run_cli(["doctor", *argv])
        assert code in (0, 1, 2), (argv, code, err)
        no_traceback(code, err, argv)
        if code in (0, 1) and "--json" in argv and not {"--help", "-h"} & set(argv):
            assert "needs_action" in json.loads(out)
        assert rows(paths["db"]) == 1  # doctor reads only

    case()


@pytest.mark.slow
def test_top_with_any_arguments(paths: dict[str, str]) -> None:
    # Every case ends with a bounded --interval and --iterations (the last of
    # each wins), valid or not, so that no case draws for long.
    intervals = st.one_of(
        st.floats(min_value=1e-6, max_value=0.02).map(repr),
        st.sampled_from(["0", "-1", "nan", "inf", "-inf", "1e309", "3601", "soon", ""]),
    )
    iterations = st.one_of(st.integers(-2, 2).map(str), st.sampled_from(["x", "1.5", ""]))
    tokens = st.one_of(
        st.sampled_from(["--interval", "--iterations", "--bogus", "--help"]),
        st.sampled_from(sorted(paths)).map(lambda k: paths[k]),
        words,
    )

    @examples(60)
    @given(st.lists(tokens, max_size=3), intervals, iterations)
    def case(argv: list[str], interval: str, n: str) -> None:
        ran("top CLI")
        full = ["top", *argv, "--interval", interval, "--iterations", n]
        code, _out, err = run_cli(full)
        assert code in (0, 2), (full, code, err)
        no_traceback(code, err, full)

    case()


# -- bench and web: parsed only ----------------------------------------------------


def bench_parse(argv: list[str]) -> Any:
    """What ``litegate bench`` does before it runs anything: its parser,
    then the experiment's own checks (a ValueError is a usage error)."""
    from litegate_lab import _cli as lab

    parser = lab.build_parser()
    args = parser.parse_args(argv)
    try:
        return lab.EXPERIMENTS[args.experiment].config_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))


def options_of(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """Each subcommand's option strings."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {
        name: sorted(k for k in p._option_string_actions if k.startswith("--"))
        for name, p in sub.choices.items()
    }


ODD_VALUES = [
    "0", "-1", "1", "3", "0.5", "nan", "inf", "-inf", "1e309", "x", "", "1,2", ",", "a,b",
    "litegate", "sqlite-default", "8/4/1", "0/0/0", "1/x/2", "spawn", "fork", "127.0.0.1:0",
    "0.0.0.0:80", "unix:/tmp/x.sock",
]  # fmt: skip


def non_finite(value: Any, seen: int = 0) -> list[str]:
    """Fields of an accepted configuration holding inf or nan."""
    if seen > 4:
        return []
    if isinstance(value, float):
        return [] if math.isfinite(value) else [repr(value)]
    if is_dataclass(value) and not isinstance(value, type):
        return [
            f"{f.name}={bad}"
            for f in fields(value)
            for bad in non_finite(getattr(value, f.name), seen + 1)
        ]
    if isinstance(value, (list, tuple)):
        return [bad for v in value for bad in non_finite(v, seen + 1)]
    return []


def parses_or_exits(parse: Any, argv: list[str]) -> Any:
    """``parse(argv)``: a value, or SystemExit 0 (help) / 2 (with a message)."""
    with captured() as (_out, err):
        try:
            return parse(argv)
        except SystemExit as exc:
            code = exc.code
    assert code in (0, 2), (argv, code)
    if code == 2:
        assert "error:" in err.getvalue(), (argv, err.getvalue())
    return None


@pytest.mark.slow
def test_bench_arguments_parse_or_exit_2() -> None:
    from litegate_lab import _cli as lab

    options = options_of(lab.build_parser())
    experiments = sorted(options)

    @st.composite
    def argvs(draw: st.DrawFn) -> list[str]:
        exp = draw(st.sampled_from(experiments))
        pairs = draw(
            st.lists(
                st.tuples(st.sampled_from(options[exp]), st.sampled_from(ODD_VALUES) | words),
                max_size=4,
            )
        )
        argv = [exp]
        for opt, value in pairs:
            argv += [opt, value]
        return argv

    @examples(150)
    @given(argvs())
    def case(argv: list[str]) -> None:
        ran("bench args")
        cfg = parses_or_exits(bench_parse, argv)
        assert not non_finite(cfg), (argv, non_finite(cfg))

    case()


@pytest.mark.slow
def test_web_arguments_parse_or_exit_2(paths: dict[str, str]) -> None:
    web = pytest.importorskip("litegate_lab.web._cli")
    options = options_of(web.build_parser())

    @examples(80)
    @given(
        st.sampled_from(sorted(options)).flatmap(
            lambda cmd: st.tuples(
                st.just(cmd),
                st.lists(
                    st.tuples(st.sampled_from(options[cmd]), st.sampled_from(ODD_VALUES) | words),
                    max_size=4,
                ),
            )
        )
    )
    def case(drawn: tuple[str, list[tuple[str, str]]]) -> None:
        ran("web args")
        cmd, pairs = drawn
        argv = [cmd, paths["missing"]] + [x for pair in pairs for x in pair]
        parses_or_exits(web.build_parser().parse_args, argv)
        if cmd == "serve":  # runs its checks, and stops at the missing file
            code, _out, err = run_cli(["web", *argv])
            helped = {"-h", "--help"} & set(argv)  # exit 0, unless an error came first
            assert code in ((0, 2) if helped else (2,)), (argv, code)
            no_traceback(code, err, argv)

    case()


@pytest.mark.slow
def test_worker_arguments_run_or_exit_2(paths: dict[str, str]) -> None:
    """``litegate worker`` with odd option values, on an empty queue with
    --burst: it runs and exits 0, or exits 2 with a message; never a
    traceback, a dead heartbeat thread or a hang (a lease its heartbeat
    could not time once killed that thread with OverflowError)."""
    from litegate.queue import _cli as worker_cli

    skip = {"--processes", "--django", "--settings", "--backend", "--db", "--help", "--burst"}
    options = [o for o in options_of_parser(worker_cli.build_parser()) if o not in skip]
    lease_values = ["1e9", "1e10", "3e10", "1e12", "1e300", "31622400", "31622401", "99999999"]

    @examples(40)
    @given(
        st.lists(
            st.tuples(
                st.sampled_from(options),
                st.sampled_from(ODD_VALUES + lease_values) | words,
            ),
            max_size=3,
        )
    )
    def case(pairs: list[tuple[str, str]]) -> None:
        ran("worker args")
        argv = ["worker", "tests.litegate.queue.handlers:record", "--db", paths["db"], "--burst"]
        for opt, value in pairs:
            argv += [opt] if opt in FLAGS else [opt, value]
        code, _out, err = run_cli(argv)
        assert code in (0, 2), (argv, code, err)
        no_traceback(code, err, argv)
        assert "Exception in thread" not in err, (argv, err)

    case()


FLAGS = {"--pass-job", "--json", "--create"}


def options_of_parser(parser: argparse.ArgumentParser) -> list[str]:
    return sorted(k for k in parser._option_string_actions if k.startswith("--"))


@pytest.mark.slow
def test_litegate_with_any_first_word() -> None:
    @examples(40)
    @given(st.lists(st.sampled_from(["bench", "web", "--bogus", "-h", "help", "doctr"]) | words,
                    min_size=0, max_size=2))  # fmt: skip
    def case(argv: list[str]) -> None:
        ran("litegate args")
        if argv[:1] == ["bench"] and len(argv) > 1 and argv[1] not in ("-h", "--help"):
            argv = argv[:1]  # never a real experiment run
        code, _out, err = run_cli(argv)
        assert code in (0, 2), (argv, code, err)
        no_traceback(code, err, argv)

    case()
