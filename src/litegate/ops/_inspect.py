"""Reading a database's live state without taking part in it: the kernel's
lock table (``/proc/locks``, ``/proc/<pid>/fdinfo``), litegate's ticket
table (the ``-litegate`` sidecar, read-only) and SQLite's WAL index header
(the ``-shm`` file, read-only). Nothing here takes a lock or writes a byte.
Linux only, as the gate itself."""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field

from .._filelock import is_gate_lock, read_counters, read_queue, slot_of_lock

# SQLite's locks (os_unix.c, wal.c): in WAL mode, byte 120 of the -shm file
# is the write lock, 121 the checkpointer's, 123..127 the read marks; in
# rollback-journal mode, bytes past 1 GiB of the database file.
WAL_WRITE, WAL_CKPT, WAL_RECOVER, WAL_READ_FIRST, WAL_READ_LAST = 120, 121, 122, 123, 127
PENDING_BYTE = 0x40000000
RESERVED_BYTE = PENDING_BYTE + 1


@dataclass(frozen=True)
class LockLine:
    kind: str  # POSIX, OFDLCK, FLOCK
    write: bool
    pid: int  # -1 for OFD locks (they belong to an open file, not a process)
    dev: tuple[int, int]
    inode: int
    start: int
    end: int  # -1: to the end of the file
    blocked: bool  # a waiter ("->"), not a holder


def _parse_lock(text: str) -> LockLine | None:
    parts = text.split()
    blocked = "->" in parts
    parts = [p for p in parts if p != "->"]
    # N: KIND ADVISORY|MANDATORY READ|WRITE PID MAJ:MIN:INODE START END
    try:
        kind, mode, pid = parts[1], parts[3], int(parts[4])
        maj, mnr, ino = parts[5].split(":")
        start = int(parts[6])
        end = -1 if parts[7] == "EOF" else int(parts[7])
    except (IndexError, ValueError):
        return None
    return LockLine(
        kind, mode == "WRITE", pid, (int(maj, 16), int(mnr, 16)), int(ino), start, end, blocked
    )


def proc_locks() -> list[LockLine]:
    try:
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    return [lk for lk in map(_parse_lock, lines) if lk is not None]


def _ident(path: str) -> tuple[tuple[int, int], int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (os.major(st.st_dev), os.minor(st.st_dev)), st.st_ino


def _covers(lock: LockLine, byte: int) -> bool:
    return lock.start <= byte and (lock.end == -1 or byte <= lock.end)


@dataclass
class SqliteLocks:
    """Who holds SQLite's own locks on the file right now."""

    journal: str  # "wal" (locks on -shm) or "rollback" (locks on the file)
    writer_pids: list[int] = field(default_factory=list)  # SQLite's write lock
    checkpointer_pids: list[int] = field(default_factory=list)
    reader_pids: list[int] = field(default_factory=list)  # WAL read marks / SHARED
    waiting_pids: list[int] = field(default_factory=list)  # blocked on any of them


def sqlite_locks(path: str, locks: list[LockLine] | None = None) -> SqliteLocks:
    locks = proc_locks() if locks is None else locks
    shm = _ident(path + "-shm")
    if shm is not None:
        mine = [lk for lk in locks if (lk.dev, lk.inode) == shm and lk.kind == "POSIX"]
        out = SqliteLocks("wal")
        for lk in mine:
            if lk.blocked:
                out.waiting_pids.append(lk.pid)
            elif _covers(lk, WAL_WRITE) and lk.write:
                out.writer_pids.append(lk.pid)
            elif _covers(lk, WAL_CKPT) and lk.write:
                out.checkpointer_pids.append(lk.pid)
            elif any(_covers(lk, b) for b in range(WAL_READ_FIRST, WAL_READ_LAST + 1)):
                out.reader_pids.append(lk.pid)
        return _dedupe(out)
    out = SqliteLocks("rollback")
    db = _ident(path)
    for lk in locks:
        if db is None or (lk.dev, lk.inode) != db or lk.kind != "POSIX":
            continue
        if lk.blocked:
            out.waiting_pids.append(lk.pid)
        elif _covers(lk, RESERVED_BYTE) or (_covers(lk, PENDING_BYTE) and lk.write):
            out.writer_pids.append(lk.pid)
        elif lk.start >= PENDING_BYTE + 2:
            (out.writer_pids if lk.write else out.reader_pids).append(lk.pid)
    return _dedupe(out)


def _dedupe(s: SqliteLocks) -> SqliteLocks:
    for name in ("writer_pids", "checkpointer_pids", "reader_pids", "waiting_pids"):
        setattr(s, name, sorted(set(getattr(s, name))))
    return s


@dataclass
class Ticket:
    ticket: int  # a waiter's ticket; for the holder, the number of its grant
    state: str
    pid: int | None  # the process whose open sidecar holds the lock


@dataclass
class GateSnapshot:
    """litegate's cross-process queue for one file, as the sidecar and the
    kernel show it."""

    sidecar: bool  # the -litegate file exists
    valid: bool  # and is a litegate lock file
    next_ticket: int = 0
    grants: int = 0  # grants of the gate across processes so far
    holder: Ticket | None = None
    waiting: list[Ticket] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)  # processes with the sidecar open


_GATE_SLOT = -1  # the key of the gate lock's holder in _slot_owners


def _slot_owners(sidecar: str) -> tuple[dict[int, int], list[int]]:
    """slot -> pid holding that slot's lock (key -1: the gate lock), and
    every pid with the sidecar open (from /proc/<pid>/fd and fdinfo;
    processes this user may read)."""
    ident = _ident(sidecar)
    owners: dict[int, int] = {}
    pids: set[int] = set()
    if ident is None:
        return owners, []
    real = os.path.realpath(sidecar)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") != real:
                    continue
                with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                    info = f.read().splitlines()
            except OSError:
                continue
            pids.add(pid)
            for line in info:
                if line.startswith("lock:"):
                    lk = _parse_lock(line.split("\t", 1)[1])
                    if lk is None or lk.blocked:
                        continue
                    slot = _GATE_SLOT if is_gate_lock(lk.start) else slot_of_lock(lk.start)
                    if slot is not None:
                        owners[slot] = pid
    return owners, sorted(pids)


def gate_snapshot(path: str) -> GateSnapshot:
    sidecar = path + "-litegate"
    try:
        table = read_queue(sidecar)
    except OSError:
        return GateSnapshot(sidecar=False, valid=False)
    if table is None:
        return GateSnapshot(sidecar=True, valid=False)
    nxt, live = table
    counters = read_counters(sidecar) or {}
    owners, pids = _slot_owners(sidecar)
    grants = int(counters.get("grants", 0))
    snap = GateSnapshot(sidecar=True, valid=True, next_ticket=nxt, grants=grants, pids=pids)
    holder = owners.get(_GATE_SLOT)
    if holder is not None:  # the kernel says who holds the gate lock, right now
        snap.holder = Ticket(grants, "holding", holder)
    for t, slot, state in live:
        snap.waiting.append(Ticket(t, state, owners.get(slot)))
    return snap


@dataclass(frozen=True)
class WalIndex:
    """The live WAL index header in the -shm file (wal.c's WalIndexHdr and
    WalCkptInfo): commits since the file was opened, frames in the WAL,
    frames already copied back to the database."""

    changes: int  # iChange: bumped by every write transaction
    page_size: int
    frames: int  # mxFrame
    backfilled: int  # nBackfill


def wal_index(path: str) -> WalIndex | None:
    try:
        fd = os.open(path + "-shm", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        head = os.pread(fd, 136, 0)
    finally:
        os.close(fd)
    if len(head) < 100:
        return None
    version, _unused, change, init, _big, szpage, mxframe = struct.unpack_from("=IIIBBHI", head, 0)
    if not init or version != 3007000:
        return None
    backfill = struct.unpack_from("=I", head, 96)[0]
    size = 65536 if szpage == 1 else szpage
    return WalIndex(change, size, mxframe, backfill)
