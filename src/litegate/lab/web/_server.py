"""A real gunicorn serving the app (``litegate web serve``), started and
stopped by PID, with its CPU time and its error log."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import TracebackType

_TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _cpu_of(pid: int) -> float:
    """User + system seconds of one process (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


class Server:
    """``with Server(db, engine, ...) as srv:`` gunicorn on 127.0.0.1:port;
    the log (stderr: tracebacks of 500s) goes to ``log``."""

    def __init__(
        self, db: str, engine: str, log: Path, *, workers: int, threads: int, keep_alive: int = 0
    ) -> None:
        self.db, self.engine, self.log = db, engine, log
        self.workers, self.threads, self.keep_alive = workers, threads, keep_alive
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Server:
        cmd = [sys.executable, "-m", "litegate", "web", "serve", self.db,
               "--engine", self.engine, "--bind", f"127.0.0.1:{self.port}",
               "--workers", str(self.workers), "--threads", str(self.threads),
               "--keep-alive", str(self.keep_alive)]  # fmt: skip
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=log)
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"the server exited with {self.proc.returncode}; its log: "
                    + self.log.read_text()[-1500:]
                )
            try:
                with urllib.request.urlopen(self.url + "/users/1/", timeout=5) as r:
                    if r.status == 200 and len(_children(self.proc.pid)) >= self.workers:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the server did not answer within 60 s")
            time.sleep(0.05)
        return self

    def cpu_seconds(self) -> float:
        """CPU time of the master and its workers so far."""
        assert self.proc is not None
        pid = self.proc.pid
        return _cpu_of(pid) + sum(_cpu_of(c) for c in _children(pid))

    def stop(self) -> int:
        """SIGTERM (gunicorn's graceful stop), then SIGKILL after 20 s; the
        exit status."""
        proc = self.proc
        if proc is None:
            return 0
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                return proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        return proc.wait(10)

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
