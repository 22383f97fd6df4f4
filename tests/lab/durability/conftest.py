"""Fixtures for the power-cut filesystem: a mount that the test may cut.

Where FUSE cannot be had (no /dev/fuse, no libfuse 3, not allowed to
mount), the tests that need it skip and say why."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from litegate_lab.durability import FuseUnavailable, PowerCutMount, fuse_problem


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[PowerCutMount]:
    problem = fuse_problem()
    if problem:
        pytest.skip(f"no power-cut filesystem here: {problem}")
    (tmp_path / "disk").mkdir()
    m = PowerCutMount(tmp_path / "disk", tmp_path / "mnt")
    try:
        m.start()
    except FuseUnavailable as exc:
        pytest.skip(f"no power-cut filesystem here: {exc}")
    try:
        yield m
    finally:
        if m.proc is not None:
            m.kill_users()
        m.close()
