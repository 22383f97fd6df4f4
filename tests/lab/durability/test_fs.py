"""The power-cut filesystem, mounted for real: what survives a cut and what
does not, shared mmaps, OFD and POSIX locks (kept by the kernel), and who
a cut kills. The test process does its I/O itself and closes every file
before it cuts (a cut refuses to kill its controller)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import mmap
import multiprocessing as mp
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from litegate_lab.durability import PowerCutMount

from litegate._filelock import ProcessLock

pytestmark = pytest.mark.slow


def _write(path: Path, data: bytes, *, sync: bool, mode: int = os.O_WRONLY | os.O_CREAT) -> None:
    fd = os.open(path, mode, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _recut(mount: PowerCutMount, keep: float = 0.0, seed: int = 0) -> None:
    mount.cut(keep=keep, seed=seed)
    mount.start()


def test_reads_see_unsynced_writes_and_a_cut_drops_them(mount: PowerCutMount) -> None:
    mnt = Path(mount.mountpoint)
    _write(mnt / "f", b"synced", sync=True)
    _sync_dir(mnt)
    _write(mnt / "f", b"SYNCED, then more", sync=False, mode=os.O_WRONLY)
    assert (mnt / "f").read_bytes() == b"SYNCED, then more"
    assert (Path(mount.backing) / "f").read_bytes() == b"synced"  # the disk has the synced part
    status = mount.status()["files"]["/f"]
    assert (status["unsynced_blocks"], status["durable_size"], status["size"]) == (1, 6, 17)
    _recut(mount)
    assert (mnt / "f").read_bytes() == b"synced"


def test_fdatasync_makes_data_durable(mount: PowerCutMount) -> None:
    mnt = Path(mount.mountpoint)
    _write(mnt / "f", b"", sync=True)
    _sync_dir(mnt)
    fd = os.open(mnt / "f", os.O_WRONLY)
    os.pwrite(fd, b"x" * 10_000, 0)
    os.fdatasync(fd)
    os.pwrite(fd, b"y" * 5, 20_000)  # extends the file: unsynced
    os.close(fd)
    _recut(mount)
    assert (mnt / "f").read_bytes() == b"x" * 10_000


def test_a_new_name_needs_a_directory_fsync(mount: PowerCutMount) -> None:
    mnt = Path(mount.mountpoint)
    _write(mnt / "kept", b"1", sync=True)
    _sync_dir(mnt)
    _write(mnt / "lost", b"2", sync=True)  # the file is synced, its name is not
    assert sorted(os.listdir(mnt)) == ["kept", "lost"]
    _recut(mount)
    assert os.listdir(mnt) == ["kept"]


def test_unlink_rename_and_truncate_are_undone_unless_synced(mount: PowerCutMount) -> None:
    mnt = Path(mount.mountpoint)
    for name in ("a", "b", "c"):
        _write(mnt / name, name.encode() * 100, sync=True)
    _sync_dir(mnt)
    os.unlink(mnt / "a")
    os.rename(mnt / "b", mnt / "b2")
    os.truncate(mnt / "c", 10)
    assert sorted(os.listdir(mnt)) == ["b2", "c"]
    _recut(mount)
    assert sorted(os.listdir(mnt)) == ["a", "b", "c"]
    assert (mnt / "c").read_bytes() == b"c" * 100
    # the same, synced this time
    os.unlink(mnt / "a")
    os.rename(mnt / "b", mnt / "b2")
    fd = os.open(mnt / "c", os.O_WRONLY)
    os.ftruncate(fd, 10)
    os.fsync(fd)
    os.close(fd)
    _sync_dir(mnt)
    _recut(mount)
    assert sorted(os.listdir(mnt)) == ["b2", "c"]
    assert ((mnt / "b2").read_bytes(), (mnt / "c").read_bytes()) == (b"b" * 100, b"c" * 10)


def test_directories_follow_the_same_rules(mount: PowerCutMount) -> None:
    mnt = Path(mount.mountpoint)
    os.mkdir(mnt / "d")
    _write(mnt / "d" / "f", b"x", sync=True)
    _sync_dir(mnt / "d")  # f's name is in d, but d itself is not in the root yet
    _recut(mount)
    assert os.listdir(mnt) == []
    os.mkdir(mnt / "d")
    _sync_dir(mnt)
    _write(mnt / "d" / "f", b"x", sync=True)
    _sync_dir(mnt / "d")
    _recut(mount)
    assert (mnt / "d" / "f").read_bytes() == b"x"


def test_keep_decides_how_much_unsynced_state_reaches_the_disk(mount: PowerCutMount) -> None:
    mnt = Path(mount.mountpoint)
    blocks = 64
    _write(mnt / "f", bytes(4096 * blocks), sync=True)
    _sync_dir(mnt)

    def scribble() -> None:
        _write(mnt / "f", b"\xff" * (4096 * blocks), sync=False, mode=os.O_WRONLY)
        _write(mnt / "new", b"n", sync=False)

    def survivors() -> int:
        data = (mnt / "f").read_bytes()
        return sum(1 for b in range(blocks) if data[4096 * b] == 0xFF)

    def reset() -> None:
        _write(mnt / "f", bytes(4096 * blocks), sync=True, mode=os.O_WRONLY)
        if (mnt / "new").exists():
            os.unlink(mnt / "new")
        _sync_dir(mnt)

    scribble()
    _recut(mount, keep=1.0)  # everything made it before the power went
    assert (survivors(), os.path.exists(mnt / "new")) == (blocks, True)
    reset()
    scribble()
    _recut(mount, keep=0.5, seed=7)  # some blocks, deterministically for a seed
    assert 0 < survivors() < blocks
    reset()
    scribble()
    _recut(mount, keep=0.0)
    assert (survivors(), os.path.exists(mnt / "new")) == (0, False)


def _child_mmap_write(path: str, q: mp.Queue[bytes]) -> None:
    fd = os.open(path, os.O_RDWR)
    m = mmap.mmap(fd, 8192)
    q.put(bytes(m[0:5]))  # what the parent wrote through its own mapping
    m[4096:4101] = b"child"
    q.put(b"done")
    time.sleep(60)  # keep the mapping until killed


def test_shared_writable_mmap_between_processes(mount: PowerCutMount) -> None:
    path = Path(mount.mountpoint) / "shm"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    os.ftruncate(fd, 8192)
    m = mmap.mmap(fd, 8192)
    m[0:5] = b"hello"
    ctx = mp.get_context("spawn")
    q: mp.Queue[bytes] = ctx.Queue()
    p = ctx.Process(target=_child_mmap_write, args=(str(path), q))
    p.start()
    try:
        assert q.get(timeout=30) == b"hello"
        assert q.get(timeout=30) == b"done"
        assert m[4096:4101] == b"child"  # the same page cache
        assert os.pread(fd, 5, 4096) == b"child"  # read() sees mapped writes too
    finally:
        m.close()
        os.close(fd)
    report = mount.cut()  # never synced: gone, and the child using it is killed
    p.join(10)
    assert p.exitcode == -9
    assert report.killed == [p.pid]
    mount.start()
    assert not path.exists()


def _lock(kind: int, offset: int) -> bytes:
    return struct.pack("hhqqixxxx", kind, os.SEEK_SET, offset, 1, 0)


_OFD_SETLK: int = fcntl.F_OFD_SETLK  # type: ignore[attr-defined,unused-ignore]
_OFD_SETLKW: int = fcntl.F_OFD_SETLKW  # type: ignore[attr-defined,unused-ignore]

_CHILD_LOCK = """
import fcntl, os, struct, sys, time
path, mode = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_RDWR)
cmd = {"ofd": fcntl.F_OFD_SETLK, "ofdw": fcntl.F_OFD_SETLKW, "posix": fcntl.F_SETLK}[mode]
try:
    fcntl.fcntl(fd, cmd, struct.pack("hhqqixxxx", fcntl.F_WRLCK, 0, 5, 1, 0))
except OSError as exc:
    print("busy", exc.errno, flush=True)
else:
    print("got", time.monotonic(), flush=True)
"""


def _child_lock(path: Path, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD_LOCK, str(path), mode], stdout=subprocess.PIPE, text=True
    )


def test_ofd_and_posix_locks_are_kept_by_the_kernel(mount: PowerCutMount) -> None:
    path = Path(mount.mountpoint) / "locks"
    _write(path, b"", sync=False)
    fd1, fd2 = os.open(path, os.O_RDWR), os.open(path, os.O_RDWR)
    try:
        fcntl.fcntl(fd1, _OFD_SETLK, _lock(fcntl.F_WRLCK, 5))
        # OFD locks belong to the open file: a second description conflicts,
        # even in the same process
        with pytest.raises(BlockingIOError):
            fcntl.fcntl(fd2, _OFD_SETLK, _lock(fcntl.F_WRLCK, 5))
        assert _child_lock(path, "ofd").communicate(timeout=30)[0].split()[0] == "busy"
        assert _child_lock(path, "posix").communicate(timeout=30)[0].split()[0] == "busy"
        waiter = _child_lock(path, "ofdw")  # blocks in the kernel until we let go
        time.sleep(0.3)
        assert waiter.poll() is None
        released = time.monotonic()
        fcntl.fcntl(fd1, _OFD_SETLK, _lock(fcntl.F_UNLCK, 5))
        out = waiter.communicate(timeout=30)[0].split()
        assert out[0] == "got"
        assert float(out[1]) >= released
    finally:
        os.close(fd1)
        os.close(fd2)


_HOLDER = """
import sys, time
from litegate._filelock import ProcessLock
lock = ProcessLock(sys.argv[1])
assert lock.acquire(10)
print("held", flush=True)
time.sleep(60)
"""


def test_litegates_gate_works_on_the_mount_and_survives_a_killed_holder(
    mount: PowerCutMount,
) -> None:
    """The sidecar's ticket table is mmap-ed and its slots are OFD locks:
    a second process waits, and gets the gate when the holder dies."""
    sidecar = Path(mount.mountpoint) / "app.db-litegate"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(sidecar)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        lock = ProcessLock(str(sidecar))
        try:
            assert lock.acquire(0.2) is False  # queued behind the holder, timed out
            holder.kill()
            holder.wait(10)
            assert lock.acquire(10) is True  # the kernel dropped the dead holder's locks
            lock.release()
        finally:
            lock.close()
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.communicate(timeout=10)  # waits, and closes its pipe


def test_a_cut_kills_exactly_the_processes_that_use_the_mount(mount: PowerCutMount) -> None:
    mnt = Path(mount.mountpoint)
    _write(mnt / "f", b"data", sync=False)
    sleep = "import time; time.sleep(60)"
    scripts = {
        "open file": f"f = open({str(mnt / 'f')!r}); {sleep}",
        "cwd": f"import os; os.chdir({str(mnt)!r}); {sleep}",
        "mapping only": (
            f"import mmap, os; fd = os.open({str(mnt / 'f')!r}, os.O_RDWR); "
            f"m = mmap.mmap(fd, 4); os.close(fd); {sleep}"
        ),
        "elsewhere": sleep,
    }
    procs = {k: subprocess.Popen([sys.executable, "-c", v]) for k, v in scripts.items()}
    try:
        time.sleep(1.0)  # let them open what they open
        report = mount.cut()
        for p in procs.values():
            if p.poll() is None and p is not procs["elsewhere"]:
                p.wait(10)
        assert sorted(report.killed) == sorted(
            procs[k].pid for k in ("open file", "cwd", "mapping only")
        )
        assert all(procs[k].returncode == -9 for k in ("open file", "cwd", "mapping only"))
        assert procs["elsewhere"].poll() is None
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
            p.wait(10)
    mount.start()
    assert not (mnt / "f").exists()  # never synced


def test_a_cut_refuses_to_kill_the_process_that_asked_for_it(mount: PowerCutMount) -> None:
    fd = os.open(Path(mount.mountpoint) / "mine", os.O_RDWR | os.O_CREAT)
    try:
        with pytest.raises(RuntimeError, match=r"uses .* itself"):
            mount.cut()
    finally:
        with contextlib.suppress(OSError):  # frozen: close() reports EIO, and closes
            os.close(fd)
    mount.kill_users()  # frozen already; nothing else uses it
    mount.request("drop", keep=0.0, seed=0)


def test_after_the_freeze_every_operation_fails_with_eio(mount: PowerCutMount) -> None:
    path = Path(mount.mountpoint) / "f"
    _write(path, b"x", sync=False)
    mount.request("freeze")
    with pytest.raises(OSError, match="Input/output error") as info:
        _write(path, b"y", sync=True, mode=os.O_WRONLY)
    assert info.value.errno == errno.EIO
    assert mount.status()["frozen"] is True
