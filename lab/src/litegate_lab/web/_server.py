"""A real server of the app (``litegate web serve``: gunicorn for Django,
uvicorn for FastAPI), started and stopped by PID, with its CPU time (by
thread), its error log and its ledger of acknowledged writes."""

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

from . import _acks, _threads


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


class Server:
    """``with Server(db, engine, log, acks=DIR, ...) as srv:`` the app on
    127.0.0.1:port; the log (stderr: tracebacks of 500s) goes to ``log``,
    the workers' acknowledged writes to files in ``acks``."""

    def __init__(
        self,
        db: str,
        engine: str,
        log: Path,
        *,
        acks: Path,
        framework: str = "django",
        workers: int,
        threads: int | None = None,
        keep_alive: int = 0,
        env: dict[str, str] | None = None,
    ) -> None:
        self.db, self.engine, self.log, self.acks = db, engine, log, acks
        self.framework, self.workers, self.threads = framework, workers, threads
        self.keep_alive = keep_alive
        self.env = env  # added to this process's environment for the server
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Server:
        cmd = [sys.executable, "-m", "litegate", "web", "serve", self.db,
               "--framework", self.framework, "--engine", self.engine,
               "--bind", f"127.0.0.1:{self.port}", "--workers", str(self.workers),
               "--keep-alive", str(self.keep_alive), "--acks", str(self.acks)]  # fmt: skip
        if self.threads is not None:
            cmd += ["--threads", str(self.threads)]
        started = _acks.workers(self.acks) if self.acks.exists() else 0
        with open(self.log, "ab") as log:
            env = {**os.environ, **self.env} if self.env else None
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=log, env=env)
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"the server exited with {self.proc.returncode}; its log: "
                    + self.log.read_text()[-1500:]
                )
            # Ready: every worker has started the app (each opens its ledger
            # file then) and one of them answers.
            if _acks.workers(self.acks) - started >= self.workers and self._answers():
                break
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the server did not answer within 60 s")
            time.sleep(0.05)
        return self

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/users/1/", timeout=5) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def thread_sample(self) -> _threads.Sample:
        """Every thread of the master and its workers now, by role, and the
        processes' CPU time so far (``.cpu_s``)."""
        assert self.proc is not None
        pid = self.proc.pid
        return _threads.sample(pid, _children(pid))

    def stop(self) -> int:
        """SIGTERM (the server's graceful stop), then SIGKILL after 20 s; the
        exit status (0 after a graceful stop, -9 if it had to be killed)."""
        proc = self.proc
        if proc is None:
            return 0
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                return proc.wait(10)
            # A single uvicorn process (no supervisor) raises the signal
            # again once its graceful shutdown is done: that is a clean stop.
            return 0 if code == -signal.SIGTERM else code
        return proc.wait(10)

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
