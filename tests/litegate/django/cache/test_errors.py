"""Bad input: Django's own exceptions or litegate's typed errors, and the
file as it was."""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import sqlite3
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

import litegate
from litegate.django.cache import CacheSettingsError, LitegateCache
from litegate.django.cache._store import forget_store
from tests.conftest import running_as_root

from .conftest import MakeCache


class Unpicklable:
    def __getstate__(self) -> Any:
        raise pickle.PickleError("no")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_unpicklable_values_fail_before_any_write(cache: LitegateCache) -> None:
    cache.set("k", "before")
    for call in (
        lambda: cache.set("k", Unpicklable()),
        lambda: cache.add("new", Unpicklable()),
        lambda: cache.set_many({"a": 1, "k": Unpicklable()}),
    ):
        with pytest.raises(pickle.PickleError):
            call()
    with pytest.raises(TypeError, match="pickle"):
        cache.set("k", threading.Lock())
    assert cache.get("k") == "before"
    assert cache.get_many(["a", "new"]) == {}
    assert cache.stats()["entries"] == 1


@pytest.mark.parametrize(
    ("options", "location", "message"),
    [
        ({"max_entrys": 5}, "x.db", "did you mean 'max_entries'"),
        ({"max_entries": 0}, "x.db", "at least 1"),
        ({"max_bytes": "1MB"}, "x.db", "whole number"),
        ({"max_entries": True}, "x.db", "whole number"),
        ({"table": ""}, "x.db", "table name"),
        ({"table": "sqlite_master"}, "x.db", "not starting with sqlite_"),
        ({"readers": 0}, "x.db", "readers"),
        ({"timeout": -1}, "x.db", "greater than zero"),
        ({"pragmas": ["synchronous"]}, "x.db", "must be a dict"),
        ({}, "", "needs LOCATION"),
        ({"database": "default"}, "x.db", "no LOCATION"),
    ],
)
def test_bad_settings_are_settings_errors(
    tmp_path: Path, options: dict[str, Any], location: str, message: str
) -> None:
    where = str(tmp_path / location) if location else ""
    with pytest.raises(CacheSettingsError, match=message) as info:
        LitegateCache(where, {"OPTIONS": options})
    assert isinstance(info.value, ImproperlyConfigured)
    assert isinstance(info.value, litegate.ConfigError)


def test_bad_profile_or_pragma_is_a_settings_error_at_first_use(make_cache: MakeCache) -> None:
    for options in ({"profile": "fast"}, {"pragmas": {"journal_mode": "DELETE"}}):
        cache = make_cache(**options)
        with pytest.raises(CacheSettingsError):
            cache.get("k")


def test_database_alias_must_be_a_sqlite_file() -> None:
    cache = LitegateCache("", {"OPTIONS": {"database": "nope"}})
    with pytest.raises(CacheSettingsError, match="not an alias"):
        cache.get("k")


def test_two_caches_on_one_file_need_the_same_options(make_cache: MakeCache) -> None:
    make_cache(readers=2).set("k", 1)
    with pytest.raises(CacheSettingsError, match="different OPTIONS"):
        make_cache(readers=3).get("k")


def test_a_file_that_is_not_sqlite_is_left_alone(make_cache: MakeCache, tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"not a database\n" * 100)
    before = _digest(path)
    cache = make_cache(location=str(path))
    with pytest.raises(litegate.OpenError, match="not a SQLite database"):
        cache.set("k", 1)
    with pytest.raises(litegate.OpenError):
        cache.get("k")
    assert _digest(path) == before


def test_a_table_that_is_not_a_cache_table_is_left_alone(make_cache: MakeCache,
                                                         tmp_path: Path) -> None:  # fmt: skip
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE litegate_cache (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO litegate_cache (name) VALUES ('mine')")
    conn.close()
    cache = make_cache(location=str(path))
    with pytest.raises(litegate.OpenError, match="not a litegate cache table"):
        cache.set("k", 1)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT name FROM litegate_cache").fetchall() == [("mine",)]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    assert "litegate_cache_stats" not in tables  # the whole creation was rolled back


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder another user can reach (pytest's tmp_path is private)."""
    top = Path(tempfile.mkdtemp(prefix="litegate-cache-ro-"))
    top.chmod(0o755)
    yield top
    shutil.rmtree(top, ignore_errors=True)


def test_a_read_only_cache_file_is_an_open_error(shared_dir: Path) -> None:
    path = shared_dir / "cache.sqlite3"
    cache = LitegateCache(str(path), {})
    cache.set("k", "v")
    forget_store(str(path))
    for f in shared_dir.iterdir():
        f.chmod(0o444)
    before = _digest(path)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - reports through the pipe
        os.close(r)
        msg = "no error"
        try:
            if running_as_root():
                os.setgid(65534)
                os.setuid(65534)
            LitegateCache(str(path), {}).get("k")
        except litegate.OpenError as exc:
            msg = f"OpenError: {exc}"
        except BaseException as exc:
            msg = f"untyped {exc!r}"
        os.write(w, msg.encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as pipe:
        msg = pipe.read()
    os.waitpid(pid, 0)
    assert msg.startswith("OpenError:"), msg
    assert "read-only" in msg, msg
    assert _digest(path) == before
