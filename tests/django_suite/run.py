"""Run Django's own test suite against ``litegate.django`` and against the
stock ``django.db.backends.sqlite3`` in the same run, and fail if litegate
fails a test that the stock engine passes.

    python tests/django_suite/run.py                 # LABELS: the parts a backend changes
    python tests/django_suite/run.py --all           # Django's whole suite
    python tests/django_suite/run.py --labels basic,queries --parallel 2

Django's tests are not in its wheel: the source distribution of the
installed version is downloaded once (pip download, into .cache/) and its
``tests/runtests.py`` is run with ``tests/django_suite/settings.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache"
sys.path.insert(0, str(ROOT))  # run as a script: the repository's tests package
from tests import sdist  # noqa: E402

LABELS = [
    "backends",
    "transactions",
    "transaction_hooks",
    "get_or_create",
    "bulk_create",
    "update",
    "update_only_fields",
    "force_insert_update",
    "delete",
    "delete_regress",
    "basic",
    "model_inheritance",
    "select_for_update",
    "test_utils",
    "handlers",
    "sessions_tests",
    "db_utils",
    "multiple_database",
    "queries",
    "model_fields",
    "fixtures",
    "migrations",
    "schema",
    "introspection",
]

# Tests that assert the literal SQL Django's stock backend sends, which
# litegate changes on purpose (its outermost atomic() runs BEGIN IMMEDIATE).
# The litegate.django run marks them as expected failures (runner.py, its
# settings.TEST_RUNNER), which keeps Django's parallel runner from dying on
# their tracebacks. One that passes (an unexpected success) fails this run:
# litegate no longer does what the entry says, and the entry must go.
EXPECTED = {
    "test_commit_debug_log (backends.base.test_base.DatabaseWrapperLoggingTests"
    ".test_commit_debug_log)": "asserts the literal 'BEGIN'; litegate sends 'BEGIN IMMEDIATE'",
    "test_default_transaction_mode (backends.sqlite.tests.TestTransactionMode"
    ".test_default_transaction_mode)": "asserts the literal 'BEGIN'; litegate sends "
    "'BEGIN IMMEDIATE'",
}

_RESULT = re.compile(r"^(ERROR|FAIL|EXPECTED FAILURE|UNEXPECTED SUCCESS): (.+)$", re.M)


class Outcome(NamedTuple):
    failed: set[str]  # ERROR and FAIL
    expected: set[str]  # EXPECTED's tests that failed as expected (runner.py)
    unexpected: set[str]  # unexpected successes (EXPECTED's, and Django's own)
    summary: str
    elapsed: float


def django_source() -> Path:
    import django

    return sdist.unpacked("django", django.get_version(), CACHE, "tests/runtests.py")


def run(engine: str, labels: list[str], parallel: int, src: Path) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="django-suite-") as tmp:
        env = {
            **os.environ,
            "DJANGO_SUITE_ENGINE": engine,
            "DJANGO_SUITE_DIR": tmp,
            # for runner.py (settings.TEST_RUNNER with litegate.django only)
            "DJANGO_SUITE_EXPECTED": json.dumps({_label(t): r for t, r in EXPECTED.items()}),
            "PYTHONPATH": os.pathsep.join(
                [str(ROOT / "src"), str(ROOT / "tests" / "django_suite")]
            ),
        }
        t0 = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "runtests.py", "--settings=settings", f"--parallel={parallel}",
             "--noinput", *labels],
            cwd=src / "tests", env=env, capture_output=True, text=True,
        )  # fmt: skip
        elapsed = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    summary = "\n".join(
        line for line in out.splitlines() if line.startswith(("Ran ", "OK", "FAILED"))
    )
    if "Ran " not in summary:
        if parallel > 1 and "pickle" in out:
            # Django's parallel runner sends each failure's traceback to the
            # parent; without tblib it cannot, and the whole run dies instead
            # of reporting the failure (with tblib, some expected failures of
            # Django's own suite cannot be sent either). EXPECTED's failures
            # are sent (as expected failures, without traceback); any other
            # failure lands here. Run serially: every failure is then reported.
            print(f"{engine}: the parallel runner could not report a failure; running serially")
            return run(engine, labels, 1, src)
        print(out[-3000:], file=sys.stderr)
        raise SystemExit(f"Django's runner did not run ({engine}): exit {proc.returncode}")
    found: dict[str, set[str]] = {}
    for kind, test in _RESULT.findall(out):
        found.setdefault(kind, set()).add(test)
    return Outcome(
        found.get("ERROR", set()) | found.get("FAIL", set()),
        found.get("EXPECTED FAILURE", set()),
        found.get("UNEXPECTED SUCCESS", set()),
        summary,
        elapsed,
    )


def _label(test_id: str) -> str:
    """``"test_x (app.tests.Case.test_x)"`` → ``"app.tests.Case.test_x"``."""
    m = re.search(r"\(([\w.]+)\)", test_id)  # the first group; a subtest's params follow
    return m.group(1) if m else test_id


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--labels", help="comma-separated test labels (default: LABELS)")
    p.add_argument("--all", action="store_true", help="Django's whole suite")
    p.add_argument("--parallel", type=int, default=2, help="Django's --parallel (default 2)")
    args = p.parse_args(argv)
    labels = [] if args.all else (args.labels.split(",") if args.labels else LABELS)
    src = django_source()
    results = {}
    for engine in ("django.db.backends.sqlite3", "litegate.django"):
        r = results[engine] = run(engine, labels, args.parallel, src)
        print(
            f"{engine}: {r.summary.replace(chr(10), '; ')} ({r.elapsed:.0f} s, "
            f"{len(r.failed)} failing, {len(r.expected)} failing as expected)"
        )
    mine = results["litegate.django"]
    stock, ours = results["django.db.backends.sqlite3"].failed, mine.failed
    # EXPECTED's tests that failed: as expected failures (runner.py), or as
    # plain failures should the runner not have marked them.
    expected = sorted(set(EXPECTED) & (mine.expected | ours))
    stale = sorted(set(EXPECTED) & mine.unexpected)
    extra = sorted(ours - stock - set(EXPECTED))
    if extra and args.parallel > 1:
        # Which worker runs which test class is a race in Django's parallel
        # runner, and some of Django's tests depend on what ran before them
        # in the same worker (backends.sqlite.tests.ThreadSharing closes the
        # worker's connection when it is the first test there, and the
        # tests after it fail, with either engine). So a failure seen with
        # litegate only is run again, alone and serially, on both engines.
        again = [_label(t) for t in extra]
        print(f"running {len(extra)} litegate-only failure(s) again, serially, on both engines")
        stock_again = run("django.db.backends.sqlite3", again, 1, src).failed
        ours_again = run("litegate.django", again, 1, src).failed
        order = [t for t in extra if t not in ours_again or t in stock_again]
        for t in order:
            print(f"  order-dependent (passes when run alone, or fails with both): {t}")
        extra = [t for t in extra if t in ours_again and t not in stock_again]
    fixed = sorted(stock - ours)
    for t in expected:
        print(f"  expected failure: {t}: {EXPECTED[t]}")
    for t in sorted(set(EXPECTED) - mine.expected - ours - mine.unexpected):
        print(f"  expected failure not run (not in these labels?): {t}")
    for t in stale:
        print(f"  PASSES, BUT EXPECTED TO FAIL (remove it from EXPECTED): {t}")
    for t in sorted(mine.unexpected - set(EXPECTED)):
        print(f"  unexpected success (a test Django expects to fail): {t}")
    for t in fixed:
        print(f"  fails with the stock engine only: {t}")
    for t in sorted((ours & stock) - set(EXPECTED)):
        print(f"  fails with both engines: {t}")
    for t in extra:
        print(f"  FAILS WITH litegate.django ONLY: {t}")
    print(f"litegate.django: {len(extra)} failure(s) the stock engine does not have")
    if stale:
        print(f"litegate.django: {len(stale)} test(s) in EXPECTED pass")
    ran = int(re.search(r"Ran (\d+) tests", mine.summary).group(1))  # type: ignore[union-attr]
    skipped = int(m.group(1)) if (m := re.search(r"skipped=(\d+)", mine.summary)) else 0
    # The plain closing line: litegate.django's passes, and its failures
    # that the stock engine does not share (skips and expected ones aside),
    # with EXPECTED's tests that pass.
    passed = ran - skipped - len(ours | set(expected)) - len(stale)
    print(f"django-suite: {passed} passed, {len(extra) + len(stale)} failed")
    return 1 if extra or stale else 0


if __name__ == "__main__":
    sys.exit(main())
