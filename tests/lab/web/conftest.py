"""The web lab's fixtures: one seeded file for the whole session (both apps
serve it), copied per test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("web") / "seeded.db"
    out = subprocess.run(
        [sys.executable, "-m", "litegate", "web", "seed", str(path), "--posts", "200"],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    assert out.stdout.strip().endswith("100 users, 200 posts, 2000 comments")
    return path


def copy_of(seeded: Path, target: Path) -> str:
    """A copy of the seeded file (a file in WAL mode whose WAL was
    checkpointed: the main file is all of it)."""
    target.write_bytes(seeded.read_bytes())
    return str(target)
