"""Engines on a fresh file per test, disposed at the end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine
from sqlalchemy.orm import Session

from tests.litegate.sqlalchemy.models import Base, Counter


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite+litegate:///{tmp_path / 'app.db'}"


@pytest.fixture
def engine(url: str) -> Iterator[Engine]:
    eng = create_engine(url)
    Base.metadata.create_all(eng)
    with Session(eng) as s, s.begin():
        s.add(Counter(id=1, n=0))
    yield eng
    eng.dispose()
