"""Reading a database's live state without taking part in it: the kernel's
lock table (``/proc/locks``, ``/proc/<pid>/fdinfo``), litegate's ticket
table (the ``-litegate`` sidecar, read-only) and SQLite's WAL index header
(the ``-shm`` file, read-only). Nothing here takes a lock or writes a byte,
and nothing drops one: see :func:`read_here`. Linux only, as the gate
itself."""

from __future__ import annotations

import fcntl
import os
import stat
import struct
from dataclasses import dataclass, field

from .._files import SIDECAR
from .._lockformat import (
    GATE,
    TABLE_SIZE,
    is_gate_lock,
    is_seat_lock,
    litestream_lock_offset,
    read_counters,
    read_header,
    read_queue,
    seat_lock_offset,
    slot_lock_offset,
    slot_of_lock,
)

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
    """Who holds SQLite's own locks on the database at ``path`` right now, from
    ``/proc/locks`` (or ``locks``, already read); it takes no lock itself."""
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
    alive: bool = True  # its lock is held: the process that took it is still there


@dataclass
class GateSnapshot:
    """litegate's cross-process queue for one file, as the sidecar and the
    kernel show it."""

    sidecar: bool  # the -litegate file (or something by that name) exists
    valid: bool  # and litegate can use it: connect() opens it
    problem: str = ""  # why connect() refuses it, when not valid
    next_ticket: int = 0
    grants: int = 0  # grants of the gate across processes so far
    holder: Ticket | None = None  # a live holder
    waiting: list[Ticket] = field(default_factory=list)  # live sleepers, in ticket order
    dead: list[Ticket] = field(default_factory=list)  # died asleep in the queue: passed over
    pids: list[int] = field(default_factory=list)  # processes with the sidecar open
    checkpointer_pid: int | None = None  # the process whose checkpointer holds the seat


_GATE_SLOT = -1  # the key of the gate lock's holder in _slot_owners
_SEAT_SLOT = -2  # ... and of the checkpointer's seat


def _slot_owners(sidecar: str, own_fd: int = -1) -> tuple[dict[int, int], list[int]]:
    """slot -> pid holding that slot's lock (key -1: the gate lock), and
    every pid with the sidecar open (from /proc/<pid>/fd and fdinfo;
    processes this user may read), but for this process's ``own_fd`` (the
    one we read the table through)."""
    ident = _ident(sidecar)
    owners: dict[int, int] = {}
    pids: set[int] = set()
    if ident is None:
        return owners, []
    real = os.path.realpath(sidecar)
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            if pid == me and fd == str(own_fd):
                continue
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
                    slot = (
                        _GATE_SLOT
                        if is_gate_lock(lk.start)
                        else _SEAT_SLOT
                        if is_seat_lock(lk.start)
                        else slot_of_lock(lk.start)
                    )
                    if slot is not None:
                        owners[slot] = pid
    return owners, sorted(pids)


_GETLK: int = fcntl.F_OFD_GETLK  # type: ignore[attr-defined,unused-ignore]
_LOCK = struct.Struct("hhqqixxxx")  # struct flock


def _locked(fd: int, offset: int, length: int = 1) -> bool:
    """Whether anyone holds a lock on ``length`` bytes at ``offset`` (0: to
    the end): F_OFD_GETLK only asks the kernel (it takes nothing, and sees
    every process's locks, whoever owns them). True when it will not say."""
    ask = _LOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, offset, length, 0)
    try:
        answer = fcntl.fcntl(fd, _GETLK, ask)
    except OSError:
        return True
    return int(_LOCK.unpack(answer)[0]) != fcntl.F_UNLCK


def _unusable(sidecar: str) -> str:
    """Why connect() could not open ``sidecar`` as its lock file ("" if it
    could), from what the path is: the gate's rules (a directory, or
    anything but a regular file, is refused) and connect()'s (every process
    that opens the database writes it)."""
    try:
        st = os.stat(sidecar)
    except OSError as exc:
        return f"cannot be looked at ({exc.strerror})"
    if stat.S_ISDIR(st.st_mode):
        return "is a directory, not litegate's lock file"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file (a pipe, device or socket), not litegate's lock file"
    if not os.access(sidecar, os.R_OK | os.W_OK):
        return "is read-only for this user, and every process that writes needs to write it"
    return ""


def gate_snapshot(path: str) -> GateSnapshot:
    """litegate's cross-process queue for the database at ``path``, read from
    its ``-litegate`` sidecar and the kernel's locks without taking any: the
    holder, the sleepers in ticket order, those that died asleep, the
    processes that have the sidecar open and the seated checkpointer."""
    sidecar = path + SIDECAR
    if not os.path.lexists(sidecar):
        return GateSnapshot(sidecar=False, valid=False)  # connect() creates it
    if not os.path.exists(sidecar):
        return GateSnapshot(
            sidecar=True,
            valid=False,
            problem=f"is a symlink to {os.path.realpath(sidecar)}, which does not exist "
            "(litegate does not create its lock file through a symlink)",
        )
    problem = _unusable(sidecar)
    if problem:
        return GateSnapshot(sidecar=True, valid=False, problem=problem)
    try:
        fd = os.open(sidecar, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return GateSnapshot(sidecar=True, valid=False, problem=f"cannot be read ({exc.strerror})")
    try:
        return _snapshot(sidecar, fd)
    finally:
        os.close(fd)  # the gate's locks are OFD locks: closing this drops none of them


def _snapshot(sidecar: str, fd: int) -> GateSnapshot:
    owners, pids = _slot_owners(sidecar, fd)
    header = read_header(fd)
    magic, nxt = header.magic, header.next_ticket
    # connect()'s rules (_filelock's table set-up): a blank or short file is
    # filled in, an older litegate's is set up anew if nobody has it locked;
    # other first bytes, or a counter no writer could have reached, and it
    # refuses the file.
    problem = ""
    if header.kind == "old":
        if _locked(fd, 1, 0):
            problem = (
                "is an older litegate's lock file (format 1), and a process of that litegate "
                "has the database open"
            )
        else:
            return GateSnapshot(sidecar=True, valid=True, pids=pids)  # set up anew on open
    elif header.kind == "foreign":
        problem = f"is not a litegate lock file (its first bytes are {magic!r})"
    elif header.damage == "ticket":
        problem = (
            f"is damaged: its ticket counter reads {nxt}, which litegate never writes (it "
            "grows by one a wait)"
        )
    elif header.damage == "grant":
        # connect() opens it, but every grant would overflow the counter
        problem = (
            f"is damaged: its grant counter reads {header.grants}, which litegate never "
            "writes (it grows by one a write transaction); writes through the gate fail"
        )
    if problem:
        return GateSnapshot(sidecar=True, valid=False, problem=problem, pids=pids)
    counters = (read_counters(sidecar) if header.kind == "current" else None) or {}
    grants = int(counters.get("grants", 0))
    snap = GateSnapshot(sidecar=True, valid=True, next_ticket=nxt, grants=grants, pids=pids)
    # The kernel says whether the gate is held, right now: a holder that died
    # lost its lock with its life, and the gate is free (nothing else to say).
    # The same for the checkpointer's seat.
    if _locked(fd, seat_lock_offset()):
        snap.checkpointer_pid = owners.get(_SEAT_SLOT) or int(
            counters.get("checkpointer_pid", 0) or 0
        )
    if _locked(fd, GATE):
        snap.holder = Ticket(grants, "holding", owners.get(_GATE_SLOT))
    table = (
        read_queue(sidecar)
        if header.kind == "current" and os.fstat(fd).st_size >= TABLE_SIZE
        else None
    )
    if table is None:
        return snap  # no tickets yet
    found = [
        Ticket(t, state, owners.get(slot), _locked(fd, slot_lock_offset(slot)))
        for t, slot, state in table[1]
    ]
    if not all(t.alive for t in found):
        # No lock on a ticket still in the queue: its process died, unless it
        # just left (its record first, its lock last): look again.
        again = read_queue(sidecar)
        still = set() if again is None else {(t, state) for t, _slot, state in again[1]}
        found = [t for t in found if t.alive or (t.ticket, t.state) in still]
    for t in found:
        (snap.waiting if t.alive else snap.dead).append(t)
    return snap


def litestream_asked(path: str) -> bool:
    """Whether a process has the database open with
    ``checkpoints="litestream"`` (it read-locks a byte of the sidecar)."""
    try:
        fd = os.open(path + SIDECAR, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return _locked(fd, litestream_lock_offset())
    finally:
        os.close(fd)


def mappers(path: str) -> list[int]:
    """The pids of processes that map the database file itself into memory
    (``mmap_size`` > 0: SQLite reads its pages through the mapping), from
    /proc/<pid>/maps (processes this user may look at)."""
    try:
        st = os.stat(path)
        entries = os.listdir("/proc")
    except OSError:
        return []
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"
    found = []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/maps") as f:
                for line in f:
                    parts = line.split(None, 5)
                    if len(parts) >= 5 and parts[4] == str(st.st_ino) and parts[3] == dev:
                        found.append(int(entry))
                        break
        except OSError:
            continue
    return sorted(found)


def checkpointer_pid(path: str) -> int | None:
    """The pid of the process whose checkpointer is seated on database
    ``path`` (None: no litegate process checkpoints it now), from the
    sidecar and the kernel's locks; it only reads."""
    sidecar = path + SIDECAR
    try:
        fd = os.open(sidecar, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not _locked(fd, seat_lock_offset()):
            return None
    finally:
        os.close(fd)  # (OFD locks: closing this drops none of them)
    counters = read_counters(sidecar) or {}
    return int(counters.get("checkpointer_pid", 0)) or None


def _fd_here(ident: tuple[int, int]) -> int | None:
    """A descriptor this process already has open on the file ``ident``
    (st_dev, st_ino), if any."""
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:  # pragma: no cover - no /proc
        return None
    for name in fds:
        try:
            st = os.stat(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == ident:
            return int(name)
    return None


def read_here(path: str, size: int, offset: int = 0) -> bytes | None:
    """``size`` bytes of ``path`` from ``offset``, read without disturbing
    this process's locks on it. Closing any descriptor of a file drops every
    POSIX lock the process holds on it: SQLite's locks, if this process has
    the database open (then ``litegate doctor``'s own reads would let
    another process checkpoint under a live reader, or delete a WAL in
    use). So a descriptor the process already has is read from when there
    is one, and a new one opened (and closed) only when there is none. None
    if the file cannot be read."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    ident = (st.st_dev, st.st_ino)
    fd = _fd_here(ident)
    if fd is not None:
        try:
            data = os.pread(fd, size, offset)
            again = os.fstat(fd)
        except OSError:
            return None
        # the descriptor may have been closed, and its number reused, meanwhile
        return data if (again.st_dev, again.st_ino) == ident else None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.pread(fd, size, offset)
    except OSError:
        return None
    finally:
        os.close(fd)


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
    head = read_here(path + "-shm", 136)
    if head is None or len(head) < 100:
        return None
    version, _unused, change, init, _big, szpage, mxframe = struct.unpack_from("=IIIBBHI", head, 0)
    if not init or version != 3007000:
        return None
    backfill = struct.unpack_from("=I", head, 96)[0]
    size = 65536 if szpage == 1 else szpage
    return WalIndex(change, size, mxframe, backfill)
