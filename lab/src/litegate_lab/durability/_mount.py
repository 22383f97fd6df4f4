"""Mounting the power-cut filesystem, and cutting its power.

:class:`PowerCutMount` starts ``_fs`` in its own process (its memory is the
machine's volatile page cache), waits until the mount answers, and on
:meth:`PowerCutMount.cut` freezes it, SIGKILLs every process that uses it,
drops what was never synced and unmounts it; :meth:`PowerCutMount.start`
mounts it again, cold. :func:`fuse_problem` says why that cannot be done
here, if it cannot.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from .._procs import pythonpath

FSTYPE = "fuse.powercut"


class FuseUnavailable(RuntimeError):
    """FUSE cannot be used here; the message says why and what to do."""


def fuse_problem() -> str | None:
    """None when a power-cut filesystem can be mounted on this machine, else
    a sentence saying why not and what to do."""
    if not sys.platform.startswith("linux"):
        return f"the power-cut filesystem needs Linux's FUSE (this is {sys.platform})"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse does not exist: this kernel or container has no FUSE"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is not readable and writable by this user: run as root"
    if shutil.which("fusermount3") is None:
        return (
            "fusermount3 is missing: install libfuse 3 (`make fuse` does it as root, or "
            "`apt-get install fuse3`)"
        )
    try:
        import mfusepy  # noqa: F401  (loads libfuse3.so.3)
    except ImportError:
        return "mfusepy is not installed: pip install -e lab (make .venv/.installed)"
    except OSError as exc:  # mfusepy raises EnvironmentError when libfuse is missing
        return f"libfuse 3 cannot be loaded ({exc}): `make fuse` or `apt-get install fuse3`"
    return None


def mounted(mountpoint: str) -> bool:
    """Whether ``mountpoint`` carries a power-cut filesystem now."""
    target = os.path.realpath(mountpoint)
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields = left.split()
            if len(fields) > 4 and _unescape(fields[4]) == target and right.split()[0] == FSTYPE:
                return True
    return False


def _unescape(path: str) -> str:
    # /proc/*/mountinfo writes space, tab, newline and backslash as octal escapes
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        path = path.replace(code, char)
    return path


def users(mountpoint: str, *, exclude: set[int] | frozenset[int] = frozenset()) -> list[int]:
    """PIDs of the processes that use anything under ``mountpoint``: as an
    open file, a mapping (``mmap``), the working directory, the root or the
    program. Read from /proc without touching the mount (readlink of /proc
    links does not go to the filesystem), so it works while it is frozen."""
    top = os.path.realpath(mountpoint)
    under = top + "/"

    def inside(p: str) -> bool:
        p = p.removesuffix(" (deleted)")
        return p == top or p.startswith(under)

    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid in exclude:
            continue
        base = f"/proc/{pid}"
        try:
            names = ["cwd", "root", "exe", *(f"fd/{fd}" for fd in os.listdir(f"{base}/fd"))]
        except OSError:
            names = ["cwd", "root", "exe"]  # gone, or not ours to look at
        hit = False
        for name in names:
            try:  # one at a time: a descriptor may be closed while we look
                hit = inside(os.readlink(f"{base}/{name}"))
            except OSError:
                continue
            if hit:
                break
        if not hit:
            try:
                with open(f"{base}/maps", encoding="utf-8", errors="replace") as f:
                    hit = any(
                        inside(parts[5])
                        for parts in (line.split(maxsplit=5) for line in f)
                        if len(parts) == 6
                    )
            except OSError:
                pass
        if hit:
            found.append(pid)
    return found


@dataclass
class CutReport:
    """What one power cut did."""

    at_cut: dict[str, Any]  # the filesystem at the instant of the cut (files, pending names)
    killed: list[int]  # PIDs SIGKILLed because they used the mount
    dropped: dict[str, Any]  # what of the unsynced state reached the disk (keep, seed, counts)
    seconds: dict[str, float] = field(default_factory=dict)  # freeze, kill, drop, unmount


class PowerCutMount:
    """The power-cut filesystem over ``backing``, mounted at ``mountpoint``.

    ``with PowerCutMount(backing, mnt) as m:`` mounts it (and unmounts it on
    exit, after a ``sync`` unless ``clean=False``). Only this process and the
    filesystem's own are spared by a cut: a cut raises if this process uses
    the mount itself (open files, cwd), rather than kill it.
    """

    START_TIMEOUT = 20.0

    def __init__(self, backing: str | os.PathLike[str], mountpoint: str | os.PathLike[str]) -> None:
        self.backing = os.path.realpath(backing)
        self.mountpoint = os.path.realpath(mountpoint)
        self._tmp = tempfile.mkdtemp(prefix="litegate-powercut-")
        self.control = os.path.join(self._tmp, "control.sock")
        self.log_path = os.path.join(self._tmp, "fs.log")
        self.proc: subprocess.Popen[bytes] | None = None  # the server, while mounted
        self._server: subprocess.Popen[bytes] | None = None  # the server, mounted or not
        self.cuts = 0

    def __repr__(self) -> str:
        state = "mounted" if self.proc is not None else "unmounted"
        return f"<PowerCutMount {self.mountpoint!r} over {self.backing!r} {state} cuts={self.cuts}>"

    # -- mounting -----------------------------------------------------------
    def start(self) -> None:
        """Mount (again): the filesystem starts from what ``backing`` holds."""
        if self.proc is not None:
            raise RuntimeError(f"{self.mountpoint} is already mounted by this object")
        if self._server is not None and self._server.poll() is None:
            self.proc = self._server  # unmounted after a cut, waiting: mount again
            self.request("mount")
            self._wait_mounted()
            return
        problem = fuse_problem()
        if problem:
            raise FuseUnavailable(problem)
        if mounted(self.mountpoint):
            raise RuntimeError(f"{self.mountpoint} already carries a power-cut filesystem")
        os.makedirs(self.mountpoint, exist_ok=True)
        env = {**os.environ, "PYTHONPATH": pythonpath()}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "litegate_lab.durability._fs",
                 self.backing, self.mountpoint, self.control],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, cwd="/",
            )  # fmt: skip
        self._server = self.proc
        self._wait_mounted()

    def _wait_mounted(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + self.START_TIMEOUT
        while not (mounted(self.mountpoint) and self._answers()):
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.proc = self._server = None
                raise FuseUnavailable(
                    f"the power-cut filesystem exited with status {code} while mounting "
                    f"{self.mountpoint}: {self._log_tail()}"
                )
            if time.monotonic() > deadline:
                self._kill_server()
                raise FuseUnavailable(
                    f"the power-cut filesystem did not mount {self.mountpoint} within "
                    f"{self.START_TIMEOUT:g} s: {self._log_tail()}"
                )
            time.sleep(0.01)

    def _answers(self) -> bool:
        try:
            self.request("status")
        except OSError:
            return False
        return True

    def _log_tail(self) -> str:
        try:
            text = Path(self.log_path).read_text(errors="replace").strip()
        except OSError:
            return "(no log)"
        return text[-800:] or "(empty log)"

    def request(self, cmd: str, **args: Any) -> dict[str, Any]:
        """One command to the filesystem's control socket."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(60)
            s.connect(self.control)
            with s.makefile("rwb") as f:
                f.write(json.dumps({"cmd": cmd, **args}).encode() + b"\n")
                f.flush()
                line = f.readline()
        if not line:
            raise ConnectionError(f"the power-cut filesystem closed the control socket on {cmd!r}")
        reply: dict[str, Any] = json.loads(line)
        if not reply.pop("ok", False):
            raise RuntimeError(f"power-cut filesystem: {cmd}: {reply.get('error')}")
        return reply

    def status(self) -> dict[str, Any]:
        """Files held in memory (unsynced blocks, sizes), pending name
        changes per directory, operation counters."""
        return self.request("status")

    def sync(self) -> dict[str, Any]:
        """Make everything durable, as ``sync(1)`` does."""
        return self.request("sync")

    # -- the cut ------------------------------------------------------------
    def cut(self, keep: float = 0.0, seed: int = 0) -> CutReport:
        """Cut the power now: freeze, SIGKILL every user, drop the unsynced
        state (``keep``: the chance that each unsynced block and size change
        still reached the disk; 0 = all lost), unmount. Call :meth:`start`
        to mount again."""
        if self.proc is None:
            raise RuntimeError(f"{self.mountpoint} is not mounted")
        t0 = time.perf_counter()
        at_cut = self.request("freeze")
        t1 = time.perf_counter()
        killed = self.kill_users()
        t2 = time.perf_counter()
        dropped = self.request("drop", keep=keep, seed=seed)
        t3 = time.perf_counter()
        self._unmount()
        t4 = time.perf_counter()
        self.cuts += 1
        return CutReport(
            at_cut,
            killed,
            dropped,
            {"freeze": t1 - t0, "kill": t2 - t1, "drop": t3 - t2, "unmount": t4 - t3},
        )

    def kill_users(self, timeout: float = 10.0) -> list[int]:
        """SIGKILL every process that uses the mount until none is left
        (a process may start using it while we look)."""
        me = os.getpid()
        server = {self._server.pid} if self._server is not None else set()
        killed: list[int] = []
        deadline = time.monotonic() + timeout
        while True:
            pids = users(self.mountpoint, exclude=server)
            if me in pids:
                raise RuntimeError(
                    f"this process ({me}) uses {self.mountpoint} itself; a power cut would "
                    "kill it. Open the database in a child process"
                )
            if not pids:
                return killed
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue
                if pid not in killed:
                    killed.append(pid)
            if time.monotonic() > deadline:
                raise RuntimeError(f"processes {pids} still use {self.mountpoint} after SIGKILL")
            time.sleep(0.005)  # they exit (and close their files) asynchronously

    def _unmount(self, timeout: float = 20.0) -> None:
        """Unmount; the server stays, waiting to mount again or to exit."""
        deadline = time.monotonic() + timeout
        while mounted(self.mountpoint):
            done = subprocess.run(
                ["fusermount3", "-u", self.mountpoint], capture_output=True, check=False
            )
            if done.returncode == 0:
                break
            if time.monotonic() > deadline:  # busy for too long: detach it anyway
                subprocess.run(["fusermount3", "-u", "-z", self.mountpoint], check=False)
                break
            time.sleep(0.01)
        self.proc = None

    def _kill_server(self) -> None:
        server, self.proc, self._server = self._server, None, None
        if server is not None and server.poll() is None:
            server.kill()
            server.wait(10)
        if mounted(self.mountpoint):
            subprocess.run(["fusermount3", "-u", "-z", self.mountpoint], check=False)

    # -- closing ------------------------------------------------------------
    def stop(self, *, clean: bool = True) -> None:
        """Unmount and end the filesystem's process. ``clean``: sync first
        (a shutdown, not a cut); else what was not synced is lost, as at a
        cut, but nobody is killed (the unmount waits for users to go). Safe
        to call twice."""
        try:
            if self.proc is not None and self.proc.poll() is None:
                if clean and not self.status()["frozen"]:
                    self.sync()
                self.request("freeze")
                self.request("drop", keep=0.0, seed=0)
                self._unmount()
            server = self._server
            if server is not None and server.poll() is None:
                self.request("exit")
                server.wait(10)
        finally:
            self._kill_server()  # only if something above failed: nothing is left then

    def close(self) -> None:
        """Stop (cleanly) and remove the control directory."""
        try:
            self.stop()
        finally:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> PowerCutMount:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        if et is not None and self.proc is not None:
            self.kill_users()  # the test failed: do not hang on a busy mount
        self.close()
