"""Django's own cache tests against ``LitegateCache`` and, in the same
invocation of Django's ``runtests.py``, against ``DatabaseCache``: fail if
``LitegateCache`` fails a test that ``DatabaseCache`` passes.

    python tests/django_suite/cache_run.py
    python tests/django_suite/cache_run.py --parallel 1

The tests are ``cache.tests.BaseCacheTests`` of the installed Django's
source distribution (downloaded once into .cache/, as run.py does): Django's
``DBCacheTests`` runs them on ``DatabaseCache``, and
``tests/django_suite/litegate_cache_tests.py`` runs them on ``LitegateCache``,
on its own file and in the app's database. The database engine is
``litegate.django``; each test is compared by name with ``DBCacheTests``'s
(which overrides a few with DatabaseCache's own expectations).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run as a script: the repository's tests package
from tests.django_suite.run import django_source  # noqa: E402

DATABASE_CACHE = "cache.tests.DBCacheTests"
OURS = (
    "litegate_cache_tests.LitegateCacheTests",
    "litegate_cache_tests.LitegateCacheAppDatabaseTests",
)

# "test_x (module.Class.test_x) ... ok", with Django's --verbosity 2; a
# subtest's failure is reported as "test_x (module.Class.test_x) (key='int')".
_LINE = re.compile(
    r"^(test\w*) \(([\w.]+)\.(\w+)\.\w+\)(?: \([^)]*\))?(?: \.\.\.)? ?"
    r"(ok|FAIL|ERROR|skipped|expected failure|unexpected success)?",
    re.M,
)
_RESULT = re.compile(r"^(ERROR|FAIL): (test\w*) \(([\w.]+)\.(\w+)\.\w+\)", re.M)


def run(parallel: int) -> tuple[dict[str, dict[str, str]], str, float]:
    """{class: {test: outcome}} of one runtests.py invocation, its summary
    line and how long it took."""
    src = django_source()
    with tempfile.TemporaryDirectory(prefix="django-cache-suite-") as tmp:
        env = {
            **os.environ,
            "DJANGO_SUITE_ENGINE": "litegate.django",
            "DJANGO_SUITE_DIR": tmp,
            "PYTHONPATH": os.pathsep.join(
                [str(ROOT / "src"), str(ROOT / "tests" / "django_suite")]
            ),
        }
        t0 = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "runtests.py", "--settings=settings", f"--parallel={parallel}",
             "--noinput", "--verbosity=2", DATABASE_CACHE, *OURS],
            cwd=src / "tests", env=env, capture_output=True, text=True,
        )  # fmt: skip
        elapsed = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    summary = "; ".join(
        line for line in out.splitlines() if line.startswith(("Ran ", "OK", "FAILED"))
    )
    if "Ran " not in summary:
        print(out[-3000:], file=sys.stderr)
        raise SystemExit(f"Django's runner did not run: exit {proc.returncode}")
    outcomes: dict[str, dict[str, str]] = {}
    for test, _module, cls, outcome in _LINE.findall(out):
        if outcome:
            outcomes.setdefault(cls, {})[test] = outcome.split()[0]
    for kind, test, _module, cls in _RESULT.findall(out):
        outcomes.setdefault(cls, {})[test] = kind  # a failing subtest fails its test
    return outcomes, summary, elapsed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--parallel", type=int, default=2, help="Django's --parallel (default 2)")
    args = p.parse_args(argv)
    outcomes, summary, elapsed = run(args.parallel)
    print(f"runtests.py: {summary} ({elapsed:.0f} s)")
    db = outcomes.get("DBCacheTests", {})
    bad = {"FAIL", "ERROR"}
    db_failing = {t for t, o in db.items() if o in bad}
    for t in sorted(db_failing):
        print(f"  DatabaseCache fails: {t}")
    extra_total = passed_total = 0
    for label in OURS:
        cls = label.rsplit(".", 1)[1]
        mine = outcomes.get(cls, {})
        if not mine:
            raise SystemExit(f"{cls}: no test ran")
        failing = {t for t, o in mine.items() if o in bad}
        passed = sum(1 for o in mine.values() if o == "ok")
        skipped = sum(1 for o in mine.values() if o == "skipped")
        extra = sorted(failing - db_failing)
        for t in sorted(failing & db_failing):
            print(f"  {cls}: fails with DatabaseCache too: {t}")
        for t in extra:
            print(f"  {cls}: FAILS WITH LitegateCache ONLY: {t}")
        print(
            f"{cls}: {len(mine)} tests, {passed} passed, {len(failing)} failed "
            f"({len(extra)} that DatabaseCache does not fail), {skipped} skipped"
        )
        extra_total += len(extra)
        passed_total += passed
    db_passed = sum(1 for o in db.values() if o == "ok")
    print(f"DBCacheTests: {len(db)} tests, {db_passed} passed, {len(db_failing)} failed")
    print(f"django-cache-suite: {passed_total} passed, {extra_total} failed")
    return 1 if extra_total else 0


if __name__ == "__main__":
    sys.exit(main())
