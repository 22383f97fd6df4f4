"""One write gate per file per process, shared by every Database (and, for
Django, every connection) on the file."""

from __future__ import annotations

import gc
import os
import threading

import pytest

import litegate
from litegate import _gate
from tests.conftest import collect_dropped, wait_until


def test_databases_on_one_file_share_one_gate(db_path: str) -> None:
    a = litegate.connect(db_path, timeout=10)
    b = litegate.connect(db_path, timeout=10)
    a.execute("CREATE TABLE t(v)")
    assert a._process_state().filegate is b._process_state().filegate
    assert a.path in _gate._REGISTRY
    order: list[str] = []
    with a.write() as conn:
        conn.execute("INSERT INTO t VALUES ('a')")

        def other() -> None:
            with b.write() as c2:
                c2.execute("INSERT INTO t VALUES ('b')")
                order.append("b")

        t = threading.Thread(target=other)
        t.start()
        # b waits in this process's line for the gate, not in the kernel
        wait_until(lambda: a._process_state().filegate.waiting == 1, what="b to queue")
        order.append("a")
    t.join()
    assert order == ["a", "b"]
    assert a.stats()["gate"]["cross_process_waits"] == 0
    assert b.stats()["gate"]["cross_process_waits"] == 0
    a.close()
    assert b.path in _gate._REGISTRY  # b still uses it
    b.close()
    assert b.path not in _gate._REGISTRY


def test_a_thread_holding_the_gate_through_one_database_cannot_wait_on_another(
    db_path: str,
) -> None:
    a = litegate.connect(db_path, timeout=10)
    b = litegate.connect(db_path, timeout=10)
    a.execute("CREATE TABLE t(v)")
    with a.write() as conn:
        conn.execute("INSERT INTO t VALUES (1)")
        with (
            pytest.raises(litegate.NestedWriteError, match="another connection or Database"),
            b.write(),
        ):
            pass  # pragma: no cover - never entered
        with pytest.raises(litegate.NestedWriteError):
            b.execute("INSERT INTO t VALUES (2)")
    # nothing is left held: both work afterwards
    b.execute("INSERT INTO t VALUES (3)")
    assert a.query("SELECT v FROM t ORDER BY v") == [(1,), (3,)]
    a.close()
    b.close()


def test_file_gate_open_is_shared_and_counted(tmp_path: object) -> None:
    path = str(tmp_path) + "/x.db"
    g1 = _gate.FileGate.open(path)
    g2 = _gate.FileGate.open(path)
    assert g1 is g2
    assert "users=2" in repr(g1)
    assert g1.acquire(1.0)
    assert g1.held
    assert g1.owner == threading.get_ident()
    with pytest.raises(litegate.NestedWriteError):
        g2.acquire(1.0)
    g1.release()
    assert not g1.held
    g1.close()
    assert path in _gate._REGISTRY
    g2.close()
    assert path not in _gate._REGISTRY


def checkpointer_threads() -> int:
    return [t.name for t in threading.enumerate()].count("litegate-checkpointer")


def test_a_database_collected_without_close_gives_its_gate_use_back(db_path: str) -> None:
    """A Database dropped without close() gives the file's gate its use back
    once it is collected (its state refers back to it: a cycle), so the gate
    and its checkpointer stop with the last use, as close() would have it;
    one that is still open keeps the gate going meanwhile."""
    path = os.path.realpath(db_path)
    kept = litegate.connect(db_path)
    dropped = litegate.connect(db_path)
    dropped.execute("CREATE TABLE t(v)")
    dropped.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(10)])
    gate = _gate._REGISTRY[path]
    assert gate._users == 2
    gc.disable()  # (so the cycle goes only when this test collects it)
    try:
        del dropped
        collect_dropped()
    finally:
        gc.enable()
    wait_until(lambda: gate._users == 1, what="the dropped Database's use to be given back")
    assert gate._ckpt is not None  # kept still uses the file: its checkpointer runs on
    kept.execute("INSERT INTO t VALUES (10)")  # and it writes through the same gate
    assert _gate._REGISTRY[path] is gate
    assert kept.query("SELECT count(*) FROM t") == [(11,)]
    gc.disable()
    try:
        del kept
        collect_dropped()
    finally:
        gc.enable()
    wait_until(lambda: path not in _gate._REGISTRY, what="the gate's last use to be given back")
    assert gate._users == 0
    assert gate._ckpt is None  # its checkpointer stopped


def test_closing_a_database_gives_its_gate_use_back_once(db_path: str) -> None:
    """close() gives the use back itself and detaches the collector's, so a
    later collection does not give it back a second time (which would take
    another Database's use)."""
    path = os.path.realpath(db_path)
    a = litegate.connect(db_path)
    b = litegate.connect(db_path)
    gate = _gate._REGISTRY[path]
    a.close()
    assert gate._users == 1
    del a
    collect_dropped()
    assert gate._users == 1  # still b's
    assert _gate._REGISTRY[path] is gate
    b.close()
    assert path not in _gate._REGISTRY


def test_one_checkpointer_per_file_per_process(
    db_path: str, tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    from litegate._checkpoint import Checkpointer

    monkeypatch.setattr(Checkpointer, "IDLE_WAKE_SECONDS", 60.0)  # no round mid-test
    before = checkpointer_threads()
    a = litegate.connect(db_path)
    b = litegate.connect(db_path)
    other = litegate.connect(str(tmp_path) + "/other.db")
    assert checkpointer_threads() == before + 2  # one for db_path, one for other.db
    assert a._process_state().checkpointer is b._process_state().checkpointer
    a.execute("CREATE TABLE t(v)")
    b.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(10)])
    ckpt = a._process_state().checkpointer
    assert ckpt is not None
    assert ckpt._commits == 2  # commits of both Databases count towards it
    a.close()
    assert checkpointer_threads() == before + 2  # b still uses the file
    b.close()
    other.close()
    wait_until(lambda: checkpointer_threads() == before, what="the checkpointers to stop")


def test_close_while_the_keeper_thread_is_being_started(
    db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """close() between the keeper thread's creation and its start raises
    nothing (it once joined a thread not yet started: RuntimeError), and the
    keeper, started late, stops at once on the closed gate."""
    gate = _gate.FileGate.open(db_path)
    creating, go_on = threading.Event(), threading.Event()
    real = threading.Thread

    class SlowToStart(real):  # type: ignore[valid-type,misc]
        def start(self) -> None:
            creating.set()
            assert go_on.wait(10)
            super().start()

    monkeypatch.setattr(threading, "Thread", SlowToStart)
    starter = real(target=gate._start_keeper)
    starter.start()
    assert creating.wait(10)
    monkeypatch.setattr(threading, "Thread", real)
    gate.close()  # the keeper exists but has not started
    go_on.set()
    starter.join(10)
    keeper = gate._keeper
    assert keeper is not None
    keeper.join(10)
    assert not keeper.is_alive()
