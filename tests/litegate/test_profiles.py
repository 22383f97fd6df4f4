"""Profiles are exactly the benchmark report's PRAGMAs, and what is in force is read back."""

from __future__ import annotations

import pytest

import litegate
from litegate import _profiles


def test_seed_004_profiles_exactly() -> None:
    assert _profiles.PROFILES["conservative"] == {
        "journal_mode": "WAL",
        "synchronous": "FULL",
        "busy_timeout": 10000,
        "wal_autocheckpoint": 500,
        "cache_size": -2000,
    }
    assert _profiles.PROFILES["balanced"] == {
        "journal_mode": "WAL",
        "synchronous": "NORMAL",
        "busy_timeout": 5000,
        "wal_autocheckpoint": 1000,
        "cache_size": -20000,
        "temp_store": "MEMORY",
    }
    assert _profiles.PROFILES["aggressive"] == {
        "journal_mode": "WAL",
        "synchronous": "NORMAL",
        "busy_timeout": 2000,
        "wal_autocheckpoint": 5000,
        "cache_size": -20000,
        "mmap_size": 134217728,
    }
    assert set(litegate.PROFILES) == {"default", "conservative", "balanced", "aggressive"}


# SQLite reads settings back as numbers: synchronous FULL=2 NORMAL=1; temp_store MEMORY=2
READ_BACK = {
    "conservative": {"synchronous": 2, "cache_size": -2000, "wal_autocheckpoint": 500},
    "balanced": {"synchronous": 1, "cache_size": -20000, "temp_store": 2},
    "aggressive": {"synchronous": 1, "mmap_size": 134217728, "wal_autocheckpoint": 5000},
    "default": {"synchronous": 1, "foreign_keys": 1, "temp_store": 2},
}


@pytest.mark.parametrize("profile", sorted(READ_BACK))
def test_profile_in_force(db_path: str, profile: str) -> None:
    # checkpoints=False: SQLite's own auto-checkpoint keeps the profile's value
    db = litegate.connect(db_path, profile=profile, checkpoints=False)
    db.query("SELECT 1")
    pragmas = db.stats()["pragmas"]
    for name, value in READ_BACK[profile].items():
        assert pragmas["writer"][name] == value, name
        assert pragmas["readers"][name] == value, name
    assert pragmas["writer"]["journal_mode"] == "wal"
    assert (
        pragmas["writer"]["wal_autocheckpoint"] == _profiles.PROFILES[profile]["wal_autocheckpoint"]
    )
    assert db.stats()["checkpoints"] is None
    assert db.timeout == _profiles.PROFILES[profile]["busy_timeout"] / 1000  # type: ignore[operator]
    db.close()


def test_override_and_remove(db_path: str) -> None:
    db = litegate.connect(
        db_path, profile="aggressive", pragmas={"synchronous": "FULL", "mmap_size": None}
    )
    w = db.stats()["pragmas"]["writer"]
    assert w["synchronous"] == 2
    assert "mmap_size" not in w
    db.close()


def test_bool_override(db_path: str) -> None:
    db = litegate.connect(db_path, pragmas={"foreign_keys": False})
    assert db.stats()["pragmas"]["writer"]["foreign_keys"] == 0
    db.close()
