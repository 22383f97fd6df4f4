"""A SIGKILLed process's files are not released at once: its socket's peer
may read the end of the stream while a lock the process held is still held.

A forked child takes an open file description lock (the combiner role's kind,
``F_OFD_SETLK``), says so through a socket pair, and SIGKILLs itself when
told. The parent, at the end of the stream, tries the lock in a loop and
counts the kills after which it was still held, and for how long. Why a
client that finds the combiner gone may not take its role at once, and
tries again at its next write (tests/litegate/test_combine.py, "killed at
any step"): ``python lab/probes/kill_release_order.py --kills 300``.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import signal
import socket
import struct
import tempfile
import time

_OFD_SETLK = 37  # F_OFD_SETLK (Linux); the stdlib names it from 3.12 only


def _lock(fd: int) -> bool:
    try:
        fcntl.fcntl(fd, _OFD_SETLK, struct.pack("hhqqi4x", fcntl.F_WRLCK, 0, 100, 1, 0))
    except OSError:
        return False
    return True


def _child(path: str, sock: socket.socket, pad_mb: int) -> None:
    fd = os.open(path, os.O_RDWR)
    assert _lock(fd)
    _pad = b"x" * (pad_mb << 20)  # (memory to give back at exit, as a Python process has)
    sock.send(b"held")
    sock.recv(1)
    os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=300, help="how many children to kill")
    parser.add_argument("--pad-mb", type=int, default=50, help="memory each child touches")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "lock")
        open(path, "wb").close()
        held, longest = 0, 0.0
        for _ in range(args.kills):
            ours, theirs = socket.socketpair()
            pid = os.fork()
            if pid == 0:
                ours.close()
                _child(path, theirs, args.pad_mb)
            theirs.close()
            assert ours.recv(4) == b"held"
            ours.send(b"x")
            assert ours.recv(1) == b""  # the end of the stream: the child's socket is gone
            start = time.perf_counter()
            tries = 0
            while True:
                fd = os.open(path, os.O_RDWR)
                try:
                    if _lock(fd):
                        break
                finally:
                    os.close(fd)
                tries += 1
            if tries:
                held += 1
                longest = max(longest, time.perf_counter() - start)
            os.waitpid(pid, 0)
            ours.close()
    print(
        f"{args.kills} kills: the lock was still held at the end of the stream after {held} "
        f"({100 * held / args.kills:.0f} %), for up to {longest * 1e3:.2f} ms"
    )


if __name__ == "__main__":
    main()
