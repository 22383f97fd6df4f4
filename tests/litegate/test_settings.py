"""One resolution of the timeout and the checkpoint policy for every face:
``connect()`` and SQLAlchemy's URL (Django's OPTIONS: in
tests/litegate/django/test_backend.py) take a value alike and refuse it with
the same words, each saying only where the value came from."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import sqlalchemy as sa

import litegate
from litegate._settings import resolve_settings

BAD = [
    ({"timeout": 0}, "timeout must be greater than zero, got 0; use float('inf')"),
    ({"timeout": -1.5}, "timeout must be greater than zero, got -1.5; use float('inf')"),
    ({"timeout": "soon"}, "timeout must be a number of seconds, got 'soon'"),
    ({"pragmas": {"busy_timeout": 0}}, "busy_timeout=0 would make every wait"),
]


def test_resolve_settings_takes_the_profiles_busy_timeout_and_the_checkpoint_policy() -> None:
    s = resolve_settings("default", {"busy_timeout": 7000, "wal_autocheckpoint": 250}, None)
    assert s.timeout == 7.0
    assert s.every == 250  # commits between background checkpoints
    assert s.pragmas["wal_autocheckpoint"] == 0  # SQLite's own, inside COMMIT: off
    assert s.pragmas["journal_size_limit"] == 8 * 250 * 4096
    assert s.pragmas["busy_timeout"] == 7000
    own = resolve_settings("default", None, 1e12, checkpoints=False, busy_from_timeout=True)
    assert own.timeout == math.inf  # FOREVER and up: no limit
    assert "busy_timeout" not in own.pragmas  # sqlite3's timeout= sets it
    assert own.pragmas.get("wal_autocheckpoint") != 0  # SQLite checkpoints as it likes
    assert own.every == 1000


@pytest.mark.parametrize(("given", "message"), BAD)
def test_connect_and_sqlalchemy_refuse_a_timeout_with_the_same_words(
    tmp_path: Path, given: dict[str, object], message: str
) -> None:
    path = tmp_path / "x.db"
    with pytest.raises(litegate.ConfigError) as core:
        litegate.connect(path, **given)  # type: ignore[arg-type]
    assert message in str(core.value)
    engine = sa.create_engine(f"sqlite+litegate:///{path}", connect_args=given)
    try:
        with pytest.raises(litegate.ConfigError) as face:
            engine.connect()
    finally:
        engine.dispose()
    assert str(face.value) == f"sqlite+litegate: {core.value}"
