"""Django's test runner for the suite run against ``litegate.django``
(settings.TEST_RUNNER; run.py): the tests that fail with litegate on
purpose (run.py's EXPECTED, passed in DJANGO_SUITE_EXPECTED as JSON,
``{"app.tests.Case.test_x": reason}``) run as unittest expected failures.

A failing test's traceback cannot be sent from a worker of Django's
parallel runner without tblib, and the whole parallel run dies; an
expected failure is sent without its traceback, so the run stays parallel.
Each expected failure is printed after the run (``EXPECTED FAILURE: <test>``,
then its reason and exception); one that passes is an unexpected success,
which unittest prints (``UNEXPECTED SUCCESS: <test>``) and counts as a
failed run, and run.py fails on it.

One test of Django's own is also given its precondition:
backends.sqlite.tests.ThreadSharing takes the thread's connection as the
main one, and closes it, when the worker's connection is not open yet (the
parallel runner's workers start with it closed); that worker's later tests
then fail, with either engine, and a parallel run dies on the first such
failure (its traceback). Opened first, the test runs as it means to.
"""

from __future__ import annotations

import json
import os
import unittest
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.test.runner import DiscoverRunner
from django.test.utils import iter_test_cases

EXPECTED: dict[str, str] = json.loads(os.environ.get("DJANGO_SUITE_EXPECTED") or "{}")
CONNECT_FIRST = {"backends.sqlite.tests.ThreadSharing.test_database_sharing_in_threads"}


def _connect() -> None:
    """The setUp of CONNECT_FIRST's tests (a module's function: picklable)."""
    connections[DEFAULT_DB_ALIAS].ensure_connection()


class _ExpectedResult(unittest.TextTestResult):
    """Mixed into the run's result class (in the parent process: the parallel
    runner replays its workers' events there)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.litegate_expected: list[tuple[unittest.TestCase, Any]] = []

    def addExpectedFailure(self, test: unittest.TestCase, err: Any) -> None:
        super().addExpectedFailure(test, err)
        if test.id() in EXPECTED:
            self.litegate_expected.append((test, err))

    def printErrors(self) -> None:
        super().printErrors()
        for test, (exc_type, exc, _tb) in self.litegate_expected:
            self.stream.writeln(f"EXPECTED FAILURE: {test}")
            self.stream.writeln(f"    reason: {EXPECTED[test.id()]}")
            first = str(exc).splitlines()[0] if str(exc) else ""
            self.stream.writeln(f"    {exc_type.__name__}: {first}")
        self.stream.flush()


class ExpectedFailureRunner(DiscoverRunner):  # type: ignore[misc]  # Django's classes are Any
    def load_tests_for_label(self, label: str, discover_kwargs: dict[str, Any]) -> Any:
        tests = super().load_tests_for_label(label, discover_kwargs)
        for test in iter_test_cases(tests):
            if test.id() in EXPECTED:
                # expectedFailure on this test case (not its class's method):
                # the mark is in the instance, which the parallel runner
                # pickles to its workers whatever their start method.
                unittest.expectedFailure(test)
            if test.id() in CONNECT_FIRST and type(test).setUp is unittest.TestCase.setUp:
                test.setUp = _connect  # in the instance, too
        return tests

    def get_resultclass(self) -> type[Any]:
        base = super().get_resultclass() or unittest.TextTestResult
        return type(f"Expected{base.__name__}", (_ExpectedResult, base), {})
