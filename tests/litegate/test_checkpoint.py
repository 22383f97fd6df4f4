"""Checkpoints run off the commit path and keep the WAL bounded."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import litegate
from litegate._checkpoint import Checkpointer
from tests.conftest import wait_until


def wal_size(path: str) -> int:
    try:
        return os.path.getsize(path + "-wal")
    except OSError:
        return 0


def test_checkpointer_replaces_auto_checkpoint(db_path: str) -> None:
    db = litegate.connect(db_path, pragmas={"wal_autocheckpoint": 50})
    db.execute("CREATE TABLE t(v)")
    for i in range(200):
        db.execute("INSERT INTO t VALUES (?)", (i,))
    wait_until(lambda: db.stats()["checkpoints"]["passive"]["count"] >= 1,
               what="a background checkpoint")  # fmt: skip
    s = db.stats()
    assert s["pragmas"]["writer"]["wal_autocheckpoint"] == 0
    assert s["checkpoints"]["errors"] == 0
    db.close()


def test_checkpointer_stops_on_close(db_path: str) -> None:
    db = litegate.connect(db_path)
    ckpt = db._process_state().checkpointer
    assert ckpt is not None
    assert ckpt._thread.is_alive()
    assert ckpt._thread.name == "litegate-checkpointer"
    db.close()
    db.close()
    assert not ckpt._thread.is_alive()  # (other tests' checkpointers are not this one)


def _load(path: str, checkpoints: bool, writes: int) -> int:
    """Writers plus readers that never stop reading; returns the largest WAL seen."""
    db = litegate.connect(
        path, readers=3, checkpoints=checkpoints,
        pragmas={"wal_autocheckpoint": 100 if checkpoints else 0},
    )  # fmt: skip
    db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
    stop = threading.Event()
    biggest = [0]

    def reader(hold: bool) -> None:
        while not stop.is_set():
            if hold:  # a snapshot held for a moment, again and again
                with db.read() as conn:
                    conn.execute("SELECT count(*) FROM t").fetchone()
            else:
                db.query("SELECT max(id) FROM t")

    def writer(k: int) -> None:
        payload = "x" * 500
        for i in range(writes):
            db.execute("INSERT INTO t(v) VALUES (?)", (payload,))
            if i % 50 == 0:
                biggest[0] = max(biggest[0], wal_size(path))

    readers = [threading.Thread(target=reader, args=(h,)) for h in (True, False)]
    writers = [threading.Thread(target=writer, args=(k,)) for k in range(2)]
    for t in readers + writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    for t in readers:
        t.join()
    biggest[0] = max(biggest[0], wal_size(path))
    assert db.query("SELECT count(*) FROM t") == [(2 * writes,)]
    db.close()
    return biggest[0]


def test_wal_stays_bounded_under_continuous_reads(tmp_path: Path) -> None:
    writes = 6000  # x 2 writers x ~600 bytes: ~7 MB of data
    bounded = _load(str(tmp_path / "on.db"), checkpoints=True, writes=writes)
    # Control, same run: no checkpoints at all. The WAL holds everything, which
    # shows this measurement can tell a growing WAL from a bounded one.
    unbounded = _load(str(tmp_path / "off.db"), checkpoints=False, writes=writes)
    assert unbounded > 30_000_000
    # The TRUNCATE threshold is 4 x 100 frames (1.6 MB); between rounds the
    # WAL overshoots by what is written while old readers drain (2-4 MB here).
    # 8 MB leaves room for a loaded CI machine and still fails a WAL that
    # grows with the work: before the checkpointer waited for readers to drain,
    # this same run reached 41 MB.
    assert bounded < 8_000_000, (bounded, unbounded)


def test_the_checkpointers_turn_takes_the_gate_in_line(tmp_path: Path) -> None:
    """The background checkpointer's gated turn never takes the gate past
    sleepers, whatever the databases' policy: on a fair="strict" file every
    grant, its turns included, is a strict one (a turn with the default
    bounded budget used to barge there). Checked on the grant log, which
    records each grant's budget."""
    from litegate import _grantlog

    folder = str(tmp_path / "grants")
    with _grantlog.logging_to(folder):
        db = litegate.connect(
            str(tmp_path / "strict.db"), fair="strict", pragmas={"wal_autocheckpoint": 10}
        )
        db.execute("CREATE TABLE t(v)")
        i = 0
        while db.stats()["checkpoints"]["restart"]["count"] < 2:  # two gated turns
            db.execute("INSERT INTO t VALUES (?)", (i,))
            i += 1
            assert i < 200_000, "no gated checkpoint turn came"
        db.close()
    grants = _grantlog.read(folder)
    assert len(grants) >= i + 3  # CREATE, every insert, and the two turns at least
    assert {(g.overtakes, g.budget_us) for g in grants} == {(0, 0)}


# -- one checkpointer per file, across processes --------------------------------


def _salt(path: str) -> bytes:
    """The WAL file's salts (bytes 16-24 of its header): they change when a
    writer restarts the log from its beginning."""
    with open(path + "-wal", "rb") as f:
        return f.read(24)[16:24]


def test_wal_reset_fixed_versions() -> None:
    from litegate._checkpoint import wal_reset_fixed

    fixed = ["3.44.6", "3.50.7", "3.51.3", "3.52.0", "4.0"]
    affected = ["3.7.0", "3.40.1", "3.44.5", "3.45.0", "3.50.6", "3.51.2", "junk"]
    assert [wal_reset_fixed(v) for v in fixed + affected] == [True] * 5 + [False] * 7


def test_a_read_transaction_begun_on_an_uncopied_log_stops_a_restart(tmp_path: Path) -> None:
    """The mechanism the ungated checkpoint relies on, on this SQLite: a
    writer whose transaction begins on a fully copied log restarts it (its
    salts change), unless a reader that began while frames were still
    uncopied holds its read mark (then it appends). Same steps twice, with
    and without that reader."""
    import sqlite3
    from contextlib import closing

    for pinned in (False, True):
        path = str(tmp_path / f"pin-{pinned}.db")
        with (
            closing(sqlite3.connect(path, isolation_level=None)) as w,
            closing(sqlite3.connect(path, isolation_level=None)) as r,
            closing(sqlite3.connect(path, isolation_level=None)) as c,
        ):
            w.execute("PRAGMA journal_mode = wal")
            w.execute("PRAGMA wal_autocheckpoint = 0")
            w.execute("CREATE TABLE t(v)")
            w.execute("INSERT INTO t VALUES (1)")  # frames not copied yet
            if pinned:
                r.execute("BEGIN")
                r.execute("SELECT count(*) FROM t").fetchone()  # a read mark on the log
            busy, log, copied = c.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            assert (busy, copied) == (0, log)  # all copied: the log is complete
            before = _salt(path)
            w.execute("INSERT INTO t VALUES (2)")
            after = _salt(path)
            if pinned:
                r.execute("COMMIT")
        assert (before == after) is pinned, (pinned, before, after)


def test_the_wal_index_view_reads_what_sqlite_reports(db_path: str) -> None:
    from litegate._checkpoint import WalIndexView

    db = litegate.connect(db_path, checkpoints=False)
    db.execute("CREATE TABLE t(v)")
    db.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(500)])
    view = WalIndexView.open(db_path + "-shm")
    assert view is not None
    try:
        seen = view.state()
        assert seen is not None
        assert (seen[0], seen[1] > 0) == (0, True)  # nothing copied yet
        r = db.checkpoint("PASSIVE")
        assert view.state() == (r.checkpointed_frames, r.wal_frames)
        db.execute("INSERT INTO t VALUES (1)")
        copied, log = view.state() or (0, 0)
        assert log > copied  # the new commit: restarted or appended, not copied
        db.checkpoint("TRUNCATE")
        assert view.state() == (0, 0)
    finally:
        view.close()
    db.close()


def _seated_checkpointer(db: litegate.Database) -> Checkpointer:
    """This process's checkpointer, once it holds the seat and its connection."""
    ckpt = db._process_state().checkpointer
    assert ckpt is not None
    wait_until(lambda: ckpt.seat.seated and ckpt.conn is not None, what="the seat")
    return ckpt


def _commit_300_pages(db: litegate.Database) -> None:
    """One commit of about 300 pages (a row of 3,000 bytes each) into t(v)."""
    db.execute(
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300) "
        "INSERT INTO t SELECT randomblob(3000) FROM c"
    )


def test_a_round_with_nothing_to_copy_runs_no_checkpoint(
    db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Checkpointer, "IDLE_WAKE_SECONDS", 60.0)  # rounds only when called
    db = litegate.connect(db_path)
    db.execute("CREATE TABLE t(v)")
    ckpt = _seated_checkpointer(db)
    db.checkpoint("PASSIVE")  # everything copied
    before = ckpt.passive.count
    ckpt.checkpoint()
    assert (ckpt.passive.count, ckpt.idle_rounds) == (before, 1)
    db.execute("INSERT INTO t VALUES (1)")
    ckpt.checkpoint()
    assert (ckpt.passive.count, ckpt.idle_rounds) == (before + 1, 1)
    assert ckpt.last is not None
    assert ckpt.last[1] == ckpt.last[2]  # copied what there was
    db.close()


def test_a_round_follows_the_logs_growth_not_only_the_commit_count(
    db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The doorbell rings every ``wal_autocheckpoint`` commits of a process;
    one commit that writes hundreds of pages must not wait for it (nor for
    the idle wake): while the log grows, the checkpointer counts frames."""
    monkeypatch.setattr(Checkpointer, "IDLE_WAKE_SECONDS", 60.0)  # no round by the clock
    monkeypatch.setattr(Checkpointer, "WATCH_LINGER", 600.0)  # once it watches, it keeps on
    db = litegate.connect(db_path, pragmas={"wal_autocheckpoint": 100})
    db.execute("CREATE TABLE t(v)")
    ckpt = _seated_checkpointer(db)
    before = ckpt.passive.count + ckpt.idle_rounds
    ckpt.seat.ring()  # a round now; the log has grown since the checkpointer last looked
    wait_until(lambda: ckpt.passive.count + ckpt.idle_rounds > before, what="the rung round")
    copied = ckpt.passive.count
    _commit_300_pages(db)  # the doorbell does not ring
    wait_until(lambda: ckpt.passive.count > copied, what="a round for the log's growth")
    assert ckpt.last is not None
    assert ckpt.last[2] >= 300  # it copied the big commit's frames
    db.close()


def test_a_burst_after_a_quiet_spell_is_seen_without_the_doorbell(
    db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Quiet, the checkpointer still looks at the log now and then: one
    commit of hundreds of pages gets its round long before the idle wake."""
    monkeypatch.setattr(Checkpointer, "IDLE_WAKE_SECONDS", 60.0)  # no round by the clock
    monkeypatch.setattr(Checkpointer, "WATCH_LINGER", 0.0)  # never watching closely
    db = litegate.connect(db_path, pragmas={"wal_autocheckpoint": 100})
    db.execute("CREATE TABLE t(v)")
    ckpt = _seated_checkpointer(db)
    copied = ckpt.passive.count
    _commit_300_pages(db)  # the doorbell does not ring
    wait_until(lambda: ckpt.passive.count > copied, what="a round for the burst")
    db.close()


def _seated(path: str) -> int | None:
    from litegate.ops._inspect import checkpointer_pid

    return checkpointer_pid(path)


class _Holders:
    """Processes that keep the database open (``workers.keep_open``) until
    :meth:`stop`."""

    def __init__(self, path: str, n: int, **kwargs: object) -> None:
        import multiprocessing as mp

        from tests.litegate.workers import keep_open

        ctx = mp.get_context("spawn")
        self._stop = path + ".stop"
        self.procs: list[Any] = []
        for _ in range(n):
            ready = ctx.Event()
            p = ctx.Process(target=keep_open, args=(path, ready, self._stop), kwargs=kwargs)
            p.start()
            assert ready.wait(60)
            self.procs.append(p)

    def stop(self) -> None:
        open(self._stop, "w").close()
        for p in self.procs:
            p.join(30)
            if p.exitcode is None:
                p.kill()
                p.join(10)


def test_one_checkpointer_per_file_across_processes(db_path: str) -> None:
    """Every process that opens the file runs a checkpointer thread; one
    holds the seat, and every process reports the same one; commits of
    every process count towards its rounds."""
    import multiprocessing as mp

    from tests.litegate.workers import commit_from

    with litegate.connect(db_path) as db:
        db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v)")
    holders = _Holders(db_path, 3)
    procs = holders.procs
    try:
        holder = _seated(db_path)
        assert holder in {p.pid for p in procs}
        with mp.get_context("spawn").Pool(2) as pool:
            seen = pool.starmap(commit_from, [(db_path, 50), (db_path, 50)])
        assert seen == [holder, holder]
        db = litegate.connect(db_path)
        s = db.stats()["checkpoints"]
        assert (s["checkpointer_pid"], s["this_process"]) == (holder, False)
        assert s["passive"]["count"] == 0  # a standby never checkpoints
        db.close()
    finally:
        holders.stop()


def test_the_seat_is_taken_over_within_a_second_after_sigkill(db_path: str) -> None:
    """SIGKILL the seated process, again and again: each time another
    process holds the seat within a second (a standby looks every 0.1 s),
    and never two at once (the kernel's lock)."""
    import signal

    with litegate.connect(db_path) as db:
        db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v)")
    holders = _Holders(db_path, 4)
    alive = {p.pid: p for p in holders.procs}
    try:
        for _ in range(3):
            holder = _seated(db_path)
            assert holder is not None
            assert holder in alive
            t0 = time.monotonic()
            os.kill(holder, signal.SIGKILL)
            alive.pop(holder).join(10)
            wait_until(lambda: _seated(db_path) in alive, timeout=10, what="a new checkpointer")
            assert time.monotonic() - t0 < 1.0
    finally:
        holders.stop()


def test_closing_the_file_hands_the_seat_over(db_path: str) -> None:
    db = litegate.connect(db_path)
    db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v)")
    wait_until(lambda: db.stats()["checkpoints"]["this_process"], what="this process to sit")
    holders = _Holders(db_path, 1)
    procs = holders.procs
    try:
        assert db.stats()["checkpoints"]["checkpointer_pid"] == os.getpid()
        db.close()
        wait_until(lambda: _seated(db_path) == procs[0].pid, timeout=1.0, what="the handover")
    finally:
        holders.stop()


def test_litestream_mode_asked_in_another_process(
    db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """checkpoints="litestream" in one process reaches the checkpointer
    seated in another: it restarts the log no more (Litestream's to do)."""
    db = litegate.connect(db_path, pragmas={"wal_autocheckpoint": 10})
    db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v)")
    ckpt = db._process_state().checkpointer
    assert ckpt is not None
    wait_until(lambda: ckpt.seat.seated, what="this process to hold the seat")
    holders = _Holders(db_path, 1, checkpoints="litestream")
    try:
        turns = ckpt.restart.count
        with _snapshot_held(db_path):
            for i in range(2000):
                db.execute("INSERT INTO t(v) VALUES (?)", (i,))
            rounds = ckpt.passive
            wait_until(lambda: rounds.count + ckpt.idle_rounds + ckpt.gated_passive >= 5,
                       what="rounds")  # fmt: skip
            s = db.stats()["checkpoints"]
        assert s["litestream"] is True
        assert ckpt.restart.count == turns
        assert s["last"]["log"] > 4 * 10  # it grew past where a turn would restart it
    finally:
        holders.stop()
    db.close()


@contextlib.contextmanager
def _snapshot_held(path: str) -> Iterator[None]:
    """A read transaction held open, as Litestream holds one: the log cannot
    restart on its own (a writer restarts it once a PASSIVE copied it all
    and no reader uses it), so it grows past where a turn would restart it,
    and only a turn could (a test that the turns stopped, not that the
    writes were slow enough for PASSIVE rounds to catch up)."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as reader:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM sqlite_master").fetchone()
        yield
        reader.execute("COMMIT")


def test_litestream_found_on_the_file(db_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Checkpointer, "LITESTREAM_LOOK_SECONDS", 0.0)
    db = litegate.connect(db_path, pragmas={"wal_autocheckpoint": 10})
    db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v)")
    ckpt = db._process_state().checkpointer
    assert ckpt is not None
    for i in range(200):
        db.execute("INSERT INTO t(v) VALUES (?)", (i,))
    wait_until(lambda: ckpt.restart.count >= 1, what="a RESTART turn without Litestream")
    assert db.stats()["checkpoints"]["litestream"] is False
    db.execute("CREATE TABLE _litestream_seq (id INTEGER PRIMARY KEY, seq INTEGER)")
    wait_until(lambda: db.stats()["checkpoints"]["litestream"], what="Litestream found")
    turns = ckpt.restart.count
    rounds = ckpt.passive.count + ckpt.idle_rounds
    with _snapshot_held(db_path):
        for i in range(500):
            db.execute("INSERT INTO t(v) VALUES (?)", (i,))
        wait_until(lambda: ckpt.passive.count + ckpt.idle_rounds >= rounds + 3, what="rounds")
        last = ckpt.last
    assert ckpt.restart.count == turns
    assert last is not None
    assert last[1] > 4 * 10  # it grew past where a turn would restart it
    db.close()


def test_a_bad_checkpoints_option_is_a_config_error(db_path: str) -> None:
    with pytest.raises(litegate.ConfigError, match='True, False or "litestream"'):
        litegate.connect(db_path, checkpoints="sometimes")


def _write_until(db: litegate.Database, done: Any, what: str) -> None:
    for i in range(200_000):
        if done():
            return
        db.execute("INSERT INTO t(v) VALUES (?)", (i,))
    raise AssertionError(f"200,000 writes and still not {what}")


def test_turns_hold_off_while_a_reader_outlasts_them(
    db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader that never ends (a report, Litestream's) stops every RESTART.
    The turns give up with a patience that doubles (5, 10, 20, 40, 80 ms,
    then the cap, 100 ms); after two give up at the cap, no more turns
    (no more stops of every writer) until a round copies past where it
    stopped: the reader has ended, and the next turn restarts the log."""
    monkeypatch.setattr(Checkpointer, "HOLD_OFF", 3600.0)
    db = litegate.connect(db_path, pragmas={"wal_autocheckpoint": 10})
    db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v)")
    ckpt = db._process_state().checkpointer
    assert ckpt is not None
    with _snapshot_held(db_path):
        _write_until(db, lambda: ckpt.restart_pinned >= 3, "held off")
        assert ckpt.restart.count == 7  # 5, 10, 20, 40, 80, 100 and 100 ms, then none
        assert ckpt.restart_skipped == 7
    skipped = ckpt.restart_skipped
    _write_until(db, lambda: ckpt.restart.count > 7, "a turn after the reader ended")
    wait_until(lambda: ckpt.last is not None and ckpt.last[0] == 0, what="a RESTART")
    assert ckpt.restart_skipped == skipped
    db.close()


def test_the_turns_threshold_rises_while_readers_make_them_wait(db_path: str) -> None:
    """A gated turn that waits for a reader on the old log (here: gives up)
    doubles the log length that starts the next one, up to restart_frames
    (4 x wal_autocheckpoint); a quick one halves it, down to
    wal_autocheckpoint."""
    db = litegate.connect(db_path, pragmas={"wal_autocheckpoint": 10})
    db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v)")
    ckpt = db._process_state().checkpointer
    assert ckpt is not None
    assert (ckpt.restart_at, ckpt.restart_frames) == (10, 40)
    seen = []
    with _snapshot_held(db_path):
        for turns in (1, 2, 3):
            _write_until(db, lambda n=turns: ckpt.restart.count >= n, f"{turns} turns")
            seen.append(ckpt.restart_at)
    assert ckpt.restart_skipped == 3  # each gave up
    assert seen == [20, 40, 40]
    # Rounds also come once a second without writes: a turn may have run
    # since (before the COMMIT, waiting; or after it, quick). Read where the
    # threshold is now between rounds (a round holds ckpt.calls).
    with ckpt.calls:
        turns, start = ckpt.restart.count, ckpt.restart_at
    assert start in (10, 20, 40)
    for quick in (1, 2, 3):
        _write_until(db, lambda n=turns + quick: ckpt.restart.count >= n, "a quick turn")
        assert ckpt.last is not None
        assert ckpt.last[0] == 0
        seen.append(ckpt.restart_at)
    assert seen[3:] == [max(start >> k, 10) for k in (1, 2, 3)]
    assert db.stats()["checkpoints"]["restart_at"] == 10
    db.close()


def test_a_checkpointer_that_met_a_locked_file_looks_again_soon(
    db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The defect: a new file's first writer holds it locked while it turns
    WAL on; a checkpointer whose first open met that waited IDLE_WAKE_SECONDS
    (1 s) before it tried again, and the log grew unchecked meanwhile (to
    26-37 MB in the bounded-WAL scenario above, 1 run in about 16). A busy
    open now looks again as soon as a standby would (seat.LOOK_SECONDS)."""
    import sqlite3

    from litegate._gate import FileGate

    monkeypatch.setattr(Checkpointer, "IDLE_WAKE_SECONDS", 3600.0)  # (an hour: never, here)
    opened = FileGate._open_checkpoint_conn
    failures = [1]

    def locked_once(gate: FileGate) -> sqlite3.Connection:
        if failures[0]:
            failures[0] -= 1
            raise sqlite3.OperationalError("database is locked")
        return opened(gate)

    monkeypatch.setattr(FileGate, "_open_checkpoint_conn", locked_once)
    db = litegate.connect(db_path, pragmas={"wal_autocheckpoint": 10})
    ckpt = db._process_state().checkpointer
    assert ckpt is not None
    wait_until(lambda: ckpt.errors == 1 and ckpt.seat.seated and ckpt.conn is not None,
               timeout=10.0, what="the checkpointer seated after the busy open")  # fmt: skip
    db.execute("CREATE TABLE t(v)")
    for i in range(100):
        db.execute("INSERT INTO t VALUES (?)", (i,))
    wait_until(lambda: ckpt.passive.count >= 1, timeout=10.0, what="a checkpoint")
    db.close()


def test_maintenance_waits_for_another_process_checkpoint(db_path: str) -> None:
    """litegate's checkpoints run one at a time: db.checkpoint() waits for
    one running elsewhere (here: the lock held through a second open of the
    sidecar, which the kernel treats as another process), within its timeout."""
    from litegate._filelock import CheckpointSeat, ProcessLock

    db = litegate.connect(db_path)
    db.execute("CREATE TABLE t(v)")
    other = ProcessLock(db_path + "-litegate")
    seat = CheckpointSeat(other)
    assert seat.lock_checkpoints(1.0)
    try:
        with pytest.raises(litegate.WriteTimeout, match="one at a time"):
            db.checkpoint("TRUNCATE", timeout=0.2)
        with pytest.raises(litegate.WriteTimeout, match="one at a time"):
            db.vacuum(timeout=0.2)
    finally:
        seat.unlock_checkpoints()
        seat.close()
        other.close()
    assert db.checkpoint("TRUNCATE", timeout=5).busy is False
    db.close()


def test_a_checkpoint_whose_lock_wait_used_the_whole_timeout_is_a_write_timeout(
    db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """db.checkpoint(timeout=T) and db.vacuum(timeout=T) wait for another
    checkpoint of litegate's first; when that wait took all of T, what is
    left for the gate is nothing: a WriteTimeout, not the ConfigError a
    zero timeout is (found by the chaos soak)."""
    from litegate._filelock import CheckpointSeat

    db = litegate.connect(db_path)
    db.execute("CREATE TABLE t(v)")
    real = CheckpointSeat.lock_checkpoints

    def slow(self: CheckpointSeat, timeout: float | None) -> bool:
        got = real(self, timeout)
        time.sleep(0.0 if timeout is None else timeout)  # got it at the very end
        return got

    monkeypatch.setattr(CheckpointSeat, "lock_checkpoints", slow)
    with pytest.raises(litegate.WriteTimeout, match="one at a time"):
        db.checkpoint("PASSIVE", timeout=0.05)
    with pytest.raises(litegate.WriteTimeout, match="one at a time"):
        db.vacuum(timeout=0.05)
    monkeypatch.setattr(CheckpointSeat, "lock_checkpoints", real)
    assert db.checkpoint("PASSIVE", timeout=5).busy is False
    db.close()


def test_on_a_sqlite_with_the_fix_the_rounds_run_without_the_read_transaction(
    db_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rule relaxes on SQLite 3.51.3 / 3.50.7 / 3.44.6 and later: no
    read transaction around the ungated PASSIVE (nor a connection for it).
    Here the version check is made to say "fixed"."""
    from litegate import _checkpoint

    monkeypatch.setattr(_checkpoint, "wal_reset_fixed", lambda _v=None: True)
    db = litegate.connect(db_path, pragmas={"wal_autocheckpoint": 10})
    db.execute("CREATE TABLE t(v)")
    ckpt = db._process_state().checkpointer
    assert ckpt is not None
    assert ckpt.pin_needed is False
    for i in range(200):
        db.execute("INSERT INTO t VALUES (?)", (i,))
    wait_until(lambda: ckpt.passive.count >= 2, what="PASSIVE rounds")
    assert ckpt.pin is None
    assert db.stats()["checkpoints"]["wal_reset_fixed"] is True
    assert ckpt.errors == 0
    db.close()
