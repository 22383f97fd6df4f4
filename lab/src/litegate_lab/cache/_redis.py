"""A throwaway ``redis-server`` (Debian's package) for the cache bench: on
127.0.0.1 and a free port, no persistence, in a temporary directory,
started and stopped by its PID."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

MISSING = (
    "redis-server is not installed: `make redis` installs Debian's redis-server (as root, "
    "with apt-get), or pass --backends without redis"
)


class RedisUnavailable(RuntimeError):
    pass


def find() -> str | None:
    return shutil.which("redis-server") or (
        "/usr/bin/redis-server" if os.access("/usr/bin/redis-server", os.X_OK) else None
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """``with RedisServer() as r:`` a server at ``r.url``; its log at ``r.log``."""

    def __init__(self) -> None:
        binary = find()
        if binary is None:
            raise RedisUnavailable(MISSING)
        self.binary = binary
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._tmp = tempfile.mkdtemp(prefix="litegate-bench-redis-")
        self.log = Path(self._tmp) / "redis.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisServer:
        conf = Path(self._tmp) / "redis.conf"
        conf.write_text(
            "bind 127.0.0.1\n"
            f"port {self.port}\n"
            "protected-mode yes\n"
            'save ""\n'
            "appendonly no\n"
            f"dir {self._tmp}\n"
            f"logfile {self.log}\n"
            "daemonize no\n"
            "databases 1\n"
        )
        self.proc = subprocess.Popen(
            [self.binary, str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 15
        while not _ping(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = self.log.read_text()[-1000:] if self.log.exists() else ""
                self.stop()
                raise RedisUnavailable(f"redis-server did not start: {log}")
            time.sleep(0.02)
        return self

    def version(self) -> str:
        out = subprocess.run([self.binary, "--version"], capture_output=True, text=True)
        return out.stdout.strip()

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
