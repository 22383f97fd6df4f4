"""Run SQLAlchemy's own test suites against ``sqlite+litegate``.

    python tests/sqlalchemy_suite/run.py          # make sqlalchemy-suite
    python tests/sqlalchemy_suite/run.py --full   # make test-sqlalchemy-full

Without ``--full``: SQLAlchemy's third-party dialect compliance suite
(``sqlalchemy.testing.suite``, with this folder's ``requirements.py``)
against ``sqlite+litegate`` and ``sqlite+litegate_async``, both at once (one
process each); fails on any failure (~1 minute on 2 cores).

With ``--full``: the SQLite-relevant parts of SQLAlchemy's own ``test/``
tree, from the source distribution of the installed version (downloaded once
into .cache/), run against the stock drivers and litegate's in the same run,
``sqlite+pysqlite`` beside ``sqlite+litegate`` and ``sqlite+aiosqlite``
beside ``sqlite+litegate_async``; fails if litegate fails a test the stock
driver passes, other than the expected failures listed below with their
reasons. In the litegate runs, ``test/engine/test_pool.py`` runs with
``sqlalchemy.pool.QueuePool`` (and ``AsyncAdaptedQueuePool``) replaced by
litegate's fair pools (``fairpool.py``), so SQLAlchemy's pool tests test them.
Every run deletes a test database's ``-wal`` and ``-shm`` with it
(``walfiles.py`` says why).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CACHE = ROOT / ".cache"
sys.path.insert(0, str(ROOT))  # run as a script: the repository's tests package
from tests import sdist  # noqa: E402

LOGS = CACHE / "sqlalchemy-suite-logs"  # pytest's output of the last run, per driver

# SQLAlchemy's own tests that concern SQLite, its transactions, its pool,
# the ORM session and asyncio (the first existing path of each entry: the
# SQLite dialect's tests moved into a folder in 2.1).
TREE = [
    ("test/dialect/sqlite", "test/dialect/test_sqlite.py"),
    ("test/dialect/test_suite.py",),
    ("test/engine/test_transaction.py",),
    ("test/engine/test_execute.py",),
    ("test/engine/test_reconnect.py",),
    ("test/orm/test_transaction.py",),
    ("test/orm/test_session.py",),
    ("test/ext/asyncio",),
]
POOL_TESTS = "test/engine/test_pool.py"

# The stock driver beside litegate's, sync and asyncio.
PAIRS = [("pysqlite", "litegate"), ("aiosqlite", "litegate_async")]

# Tests litegate fails on purpose, by "Class::test" (any parameters), with
# the reason. Each follows from one design decision: a transaction holds the
# write gate and SQLite's write lock (BEGIN IMMEDIATE) from its first
# statement, reads included, so that a read-then-write transaction can
# neither lose an update nor fail half-way with "database is locked".
EXPECTED = {
    "KeywordInDatabaseNameTest::test_reflect": (
        "ATTACHes the database file to itself and writes through the second name "
        "inside a transaction; under BEGIN IMMEDIATE SQLite already holds the file's "
        "write lock through the first name ('database is locked'); the stock driver "
        "runs that CREATE TABLE outside any transaction"
    ),
    "AsyncSessionTransactionTest::test_trans": (
        "an outer connection reads (its transaction now holds the write gate), then "
        "the same task writes through a session on another connection: litegate "
        "refuses with NestedWriteError instead of waiting for itself; with the stock "
        "driver the read ran outside any transaction and held no lock"
    ),
    "AsyncSessionTransactionTest::test_trans_noctx": "as test_trans",
    "AsyncSessionTransactionTest::test_commit_as_you_go": "as test_trans",
    "ServerSideCursorsTest::test_ss_cursor_status": (
        "tells a server-side cursor by the driver's name, from a list of SQLAlchemy's "
        "own drivers (its TODO says third-party dialects cannot pass it); "
        "litegate_async's stream() cursors are server-side (server_side = True, as "
        "aiosqlite's), and the compliance suite in make test checks them that way"
    ),
    "ServerSideCursorsTest::test_conn_option": "as test_ss_cursor_status",
}

_RESULT = re.compile(r"^(FAILED|ERROR) (\S+)", re.M)
_COUNTS = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)")
# Test classes carry the driver: "...Test_sqlite+litegate_async_async_3_40_1".
_DRIVER = re.compile(r"_sqlite\+[A-Za-z_]+?(_async)?_(\d+_\d+_\d+)")


@dataclass
class Run:
    label: str
    counts: dict[str, int] = field(default_factory=dict)
    failed: set[str] = field(default_factory=set)  # node ids as pytest printed them
    seconds: float = 0.0
    returncode: int = 0
    tail: str = ""

    def add(self, other: Run) -> None:
        for k, v in other.counts.items():
            self.counts[k] = self.counts.get(k, 0) + v
        self.failed |= other.failed
        self.seconds += other.seconds
        self.returncode = self.returncode or other.returncode
        self.tail = self.tail or other.tail

    def summary(self) -> str:
        order = ("passed", "failed", "errors", "skipped", "xfailed", "xpassed")
        text = ", ".join(f"{self.counts[k]} {k}" for k in order if self.counts.get(k))
        return f"{text or 'nothing ran'} ({self.seconds:.0f} s)"


def pytest(label: str, args: list[str], cwd: Path, extra_path: list[Path]) -> Run:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(str(p) for p in [ROOT / "src", HERE, *extra_path]),
    }
    t0 = time.monotonic()
    # -s: no user site, so that SQLAlchemy's test/conftest.py imports the
    # installed (compiled) SQLAlchemy rather than its source tree's lib/.
    proc = subprocess.run(
        [sys.executable, "-s", "-m", "pytest", "-p", "no:cacheprovider", "-rfE", "-q",
         "-p", "register", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    LOGS.mkdir(parents=True, exist_ok=True)
    log = LOGS / f"{label.replace('+', '-')}.log"
    with log.open("a") as f:  # every invocation of this run, for a look at failures
        f.write(f"$ pytest {' '.join(args)}\n{out}\n")
    run = Run(label, seconds=time.monotonic() - t0, returncode=proc.returncode)
    last = [line for line in out.splitlines() if " in " in line and _COUNTS.search(line)]
    if not last:
        run.tail = out[-3000:]
        return run
    for n, what in _COUNTS.findall(last[-1]):
        key = "errors" if what.startswith("error") else what
        run.counts[key] = run.counts.get(key, 0) + int(n)
    # pytest prints node ids relative to its working directory: made absolute
    run.failed = {_absolute(m[1], cwd) for m in _RESULT.findall(out)}
    return run


def _absolute(node_id: str, cwd: Path) -> str:
    path, sep, rest = node_id.partition("::")
    return os.path.normpath(os.path.join(cwd, path)) + sep + rest


# -- the compliance suite --------------------------------------------------------


def fresh_logs() -> None:
    if LOGS.exists():
        for old in LOGS.glob("*.log"):
            old.unlink()


def compliance() -> int:
    def one(driver: str) -> Run:
        with tempfile.TemporaryDirectory(prefix="sqla-suite-") as tmp:
            return pytest(
                f"sqlite+{driver}",
                ["-c", str(HERE / "pytest.ini"), "--rootdir", str(HERE), "-p", "plugin",
                 str(HERE / "compliance.py"), "--dburi", f"sqlite+{driver}:///suite.db"],
                Path(tmp), [],
            )  # fmt: skip

    import sqlalchemy

    fresh_logs()
    print(f"SQLAlchemy {sqlalchemy.__version__}'s dialect compliance suite on sqlite+litegate "
          "(sync and asyncio, at once)...", flush=True)  # fmt: skip
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(one, ["litegate", "litegate_async"]))
    bad = 0
    for run in runs:
        print(f"  {run.label}: {run.summary()}")
        for t in sorted(run.failed):
            print(f"    FAILED {t}")
        if run.tail:
            print(run.tail, file=sys.stderr)
        if run.failed or run.tail or run.returncode not in (0, 5) or not run.counts.get("passed"):
            bad += 1
    where = f"; pytest's output: {LOGS}/" if bad else ""
    print(f"sqlalchemy-suite: {'FAILED' if bad else 'ok'}{where}")
    return 1 if bad else 0


# -- SQLAlchemy's own tests --------------------------------------------------------


def sqlalchemy_source(version: str) -> Path:
    return sdist.unpacked("sqlalchemy", version, CACHE, "test/conftest.py")


def normalize(node_id: str) -> str:
    """The same test under either driver: driver and pool names taken out."""
    test = node_id.split("::", 1)[-1]
    test = _DRIVER.sub(r"_sqlite+DRIVER\1_\2", test)
    return test.replace("AsyncFairQueuePool", "AsyncAdaptedQueuePool").replace(
        "FairQueuePool", "QueuePool"
    )


def _base(test: str) -> str:
    """ "Class::test" of a normalized id: no driver, no parameters."""
    return re.sub(r"_sqlite\+DRIVER(_async)?_\d+_\d+_\d+", "", test.split("[", 1)[0])


def expected_reason(test: str) -> str | None:
    return EXPECTED.get(_base(test))


def tree_run(driver: str, src: Path, paths: list[str], fair_pool: bool) -> Run:
    """SQLAlchemy's tests on one driver: the tree, then its pool tests."""
    run = Run(f"sqlite+{driver}")
    common = ["--rootdir", str(src), "-c", str(src / "pyproject.toml"), "-p", "walfiles",
              "--requirements", "tree_requirements:Requirements"]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="sqla-tree-") as tmp:
        dburi = ["--dburi", f"sqlite+{driver}:///querytest.db"]
        run.add(pytest(run.label, [*common, *paths, *dburi], Path(tmp), []))
        swap = ["-p", "fairpool"] if fair_pool else []
        run.add(pytest(run.label, [*common, *swap, str(src / POOL_TESTS), *dburi], Path(tmp), []))
    return run


def rerun_alone(driver: str, src: Path, node_ids: list[str], fair_pool: bool) -> set[str]:
    """The ids that still fail when their tests run by themselves (selected
    by file and -k: SQLAlchemy names its test classes per driver at
    collection, which node ids cannot select)."""
    if not node_ids:
        return set()
    common = ["--rootdir", str(src), "-c", str(src / "pyproject.toml"), "-p", "walfiles",
              "--requirements", "tree_requirements:Requirements"]  # fmt: skip
    swap = ["-p", "fairpool"] if fair_pool else []
    files = sorted({t.split("::", 1)[0] for t in node_ids})
    picks = []
    for t in node_ids:
        parts = t.split("::")[1:]
        cls = _DRIVER.sub("", parts[0]) if len(parts) > 1 else None
        test = parts[-1].split("[", 1)[0]
        picks.append(f"({cls} and {test})" if cls else test)
    with tempfile.TemporaryDirectory(prefix="sqla-again-") as tmp:
        run = pytest(f"sqlite+{driver}",
                     [*common, *swap, *files, "-k", " or ".join(picks),
                      "--dburi", f"sqlite+{driver}:///querytest.db"],
                     Path(tmp), [])  # fmt: skip
    if not run.counts.get("passed") and not run.failed:
        run.failed = set(node_ids)  # nothing ran: count them as failing, never as passing
    return run.failed


def full() -> int:
    import sqlalchemy

    version = sqlalchemy.__version__
    src = sqlalchemy_source(version)
    fresh_logs()
    paths = []
    for choices in TREE:
        found = next((c for c in choices if (src / c).exists()), None)
        if found is not None:
            paths.append(str(src / found))
    print(f"SQLAlchemy {version} on Python {sys.version.split()[0]}: its tests "
          f"({', '.join(os.path.relpath(p, src) for p in paths)}, {POOL_TESTS}) against the "
          "stock drivers and litegate's, two at a time...", flush=True)  # fmt: skip
    jobs = [(driver, driver.startswith("litegate")) for pair in PAIRS for driver in pair]
    with ThreadPoolExecutor(2) as pool:
        runs = dict(
            zip(
                (d for d, _ in jobs),
                pool.map(lambda job: tree_run(job[0], src, paths, job[1]), jobs),
                strict=True,
            )
        )
    extra_total = 0
    for stock, ours in PAIRS:
        a, b = runs[stock], runs[ours]
        for run in (a, b):
            print(f"  {run.label}: {run.summary()}")
            if run.tail:
                print(run.tail, file=sys.stderr)
                extra_total += 1
        by_name = {normalize(t): t for t in b.failed}
        stock_failed = {normalize(t) for t in a.failed}
        ours_failed = set(by_name)
        expected = sorted(t for t in ours_failed if expected_reason(t))
        extra = sorted(t for t in ours_failed - stock_failed if not expected_reason(t))
        if extra:
            ids = [by_name[t] for t in extra]
            pool_ids = [t for t in ids if t.split("::", 1)[0].endswith(POOL_TESTS)]
            again = rerun_alone(ours, src, [t for t in ids if t not in pool_ids], False)
            again |= rerun_alone(ours, src, pool_ids, True) if pool_ids else set()
            again_norm = {normalize(t) for t in again}
            for t in extra:
                if t not in again_norm:
                    print(f"    passes when run alone (order-dependent), {ours}: {t}")
            extra = [t for t in extra if t in again_norm]
        by_key: dict[str, int] = {}
        for t in expected:  # one line per expected test, however many parameter sets
            key = _base(t)
            by_key[key] = by_key.get(key, 0) + 1
        for key, n in by_key.items():
            many = f" ({n} parameter sets)" if n > 1 else ""
            print(f"    expected failure, {ours}: {key}{many}: {EXPECTED[key]}")
        for t in sorted(stock_failed - ours_failed):
            print(f"    fails with {stock} only: {t}")
        for t in sorted((ours_failed & stock_failed) - set(expected)):
            print(f"    fails with both: {t}")
        for t in extra:
            print(f"    FAILS WITH {ours} ONLY: {t}")
        print(f"  {ours}: {len(extra)} failure(s) that {stock} does not have")
        extra_total += len(extra)
    print(f"test-sqlalchemy-full (SQLAlchemy {version}): "
          f"{'FAILED' if extra_total else 'ok'}; pytest's output: {LOGS}/")  # fmt: skip
    return 1 if extra_total else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--full", action="store_true", help="SQLAlchemy's own tests, both drivers")
    args = p.parse_args(argv)
    return full() if args.full else compliance()


if __name__ == "__main__":
    sys.exit(main())
