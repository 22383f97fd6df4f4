"""The misuse suite's case count at the end of the run."""

from __future__ import annotations

import sys

import pytest


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    misuse = sys.modules.get("tests.litegate.misuse")  # loaded only if its suites ran
    cases: dict[str, int] = getattr(misuse, "CASES", {})
    if cases:
        per = ", ".join(f"{name} {n}" for name, n in sorted(cases.items()))
        terminalreporter.write_line(f"misuse suite: {sum(cases.values())} cases ({per})")
