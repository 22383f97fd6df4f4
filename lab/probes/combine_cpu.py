"""Where a combined write's CPU goes: litegate's combiner against its wire alone.

P single-threaded client processes write one row at a time for ``--seconds``
through a combiner that runs in a process of its own (it opens the file first,
so it holds the role, and writes nothing itself), three ways:

- ``litegate``: ``db.execute()`` with ``connect(combine=True)``, clients
  shipping every write (``LITEGATE_COMBINE_QUIET_MS=inf``), the combiner
  running its turns (gate, transaction, exactly-once record, answers);
- ``wire``: the same client code (``Shipper.ship``) against a server that
  reads litegate's messages and answers each at once, with no SQL: the cost of
  the protocol alone;
- ``socket``: one ``sendall`` and one ``recv`` of the same bytes against that
  server: the cost of a round trip between processes on this machine.

Printed for each: writes/s, and CPU time per write (``time.process_time``,
all threads) of a client and of the combiner or server; for ``litegate``,
the writes a combiner's turn served on average. ``--sides`` runs some of
the three. A combined write
costs the client's share plus the combiner's, and the combiner is one
thread: on 2 cores, writes/s cannot pass 2 / (their sum). ``python
lab/probes/combine_cpu.py --procs 8``; compare with the feasibility probe's
minimal combiner (``../shared/probes/combiner.py`` in the project's brief).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import selectors
import shutil
import socket
import sqlite3
import tempfile
import time
from typing import Any

INSERT = "INSERT INTO w(v) VALUES ('x')"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--procs", type=int, default=8, help="client processes")
    parser.add_argument("--seconds", type=float, default=3.0, help="how long they write")
    parser.add_argument("--sync", default="NORMAL", choices=("NORMAL", "FULL"))
    parser.add_argument(
        "--sides", default="litegate,wire,socket", help="which of litegate, wire, socket to run"
    )
    args = parser.parse_args()
    os.environ["LITEGATE_COMBINE_QUIET_MS"] = "inf"  # (spawned children: every write ships)
    for side in args.sides.split(","):
        folder = tempfile.mkdtemp(prefix="litegate-probe-")
        try:
            rate, client, server, per_turn = run(side, os.path.join(folder, "w.db"), args)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        print(
            f"{side:9s} P={args.procs}: {rate:9,.0f} writes/s; CPU per write: "
            f"client {client:5.1f} us, combiner/server {server:5.1f} us"
            + (f"; {per_turn:.1f} writes a turn" if per_turn else ""),
            flush=True,
        )


def run(side: str, path: str, args: argparse.Namespace) -> tuple[float, float, float, float]:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE w(id INTEGER PRIMARY KEY, v TEXT)")
    conn.close()
    ctx = mp.get_context("spawn")
    ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    nonce = int.from_bytes(os.urandom(7), "big") or 1
    host = ctx.Process(target=_host, args=(side, path, args.sync, nonce, ready, stop, out))
    host.start()
    if not ready.wait(60):
        raise SystemExit("the combiner did not start")
    barrier = ctx.Barrier(args.procs)
    clients = [
        ctx.Process(target=_client, args=(side, path, args.sync, nonce, barrier, args.seconds, out))
        for _ in range(args.procs)
    ]
    for p in clients:
        p.start()
    got = [out.get(timeout=120) for _ in clients]
    for p in clients:
        p.join(60)
    stop.set()
    served, server_cpu, turns = out.get(timeout=60)
    host.join(60)
    writes = sum(n for n, _ in got)
    client_cpu = sum(cpu for _, cpu in got) / writes
    per_turn = served / turns if turns else 0.0
    return writes / args.seconds, client_cpu * 1e6, server_cpu / max(served, 1) * 1e6, per_turn


def _host(side: str, path: str, sync: str, nonce: int, ready: Any, stop: Any, out: Any) -> None:
    if side == "litegate":
        import litegate

        db = litegate.connect(path, combine=True, pragmas={"synchronous": sync})
        db.execute(INSERT)  # (opens first: this process combines)
        combined = db.stats()["writes"]["combined"]
        if not combined["this_process_combines"]:
            raise SystemExit("the host did not take the combiner role")
        t0 = time.process_time()
        ready.set()
        stop.wait(600)
        combined = db.stats()["writes"]["combined"]
        out.put((combined["served_statements"], time.process_time() - t0, combined["turns"]))
        db.close()
        return
    _echo_server(nonce, ready, stop, out)


def _echo_server(nonce: int, ready: Any, stop: Any, out: Any) -> None:
    """litegate's wire with no database: every request answered at once."""
    from litegate import _combine

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(_combine.address(nonce))
    listener.listen(64)
    listener.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    served = 0
    t0 = time.process_time()
    ready.set()
    while not stop.is_set():
        for key, _ in sel.select(0.05):
            if key.fileobj is listener:
                sock, _ = listener.accept()
                sock.setblocking(True)
                sel.register(sock, selectors.EVENT_READ, _combine._Reader(sock))
                continue
            reader = key.data
            try:
                message = reader.next()
            except (OSError, ConnectionError):
                sel.unregister(reader.sock)
                reader.sock.close()
                continue
            _combine._send(reader.sock, ("done", message[2], [("ok", 1, 1, [])], 1))
            served += 1
    out.put((served, time.process_time() - t0, 0))
    listener.close()


def _client(
    side: str, path: str, sync: str, nonce: int, barrier: Any, seconds: float, out: Any
) -> None:
    if side == "litegate":
        import litegate

        db = litegate.connect(path, combine=True, pragmas={"synchronous": sync})

        def one() -> None:
            db.execute(INSERT)

    else:
        from litegate import _combine

        shipper = _combine.Shipper()
        if not shipper.connect(nonce):
            raise SystemExit("the server is not there")
        statements: list[Any] = [(INSERT, (), False)]
        if side == "wire":

            def one() -> None:
                shipper.ship(statements, None)

        else:
            sock = shipper._sock
            assert sock is not None
            frame = _combine._frame(("run", 1, 1, statements, 1))

            def one() -> None:
                sock.sendall(frame)
                sock.recv(65536)

    one()  # (connected, warm)
    barrier.wait(60)
    end = time.monotonic() + seconds
    n = 0
    t0 = time.process_time()
    while time.monotonic() < end:
        one()
        n += 1
    out.put((n, time.process_time() - t0))


if __name__ == "__main__":
    main()
