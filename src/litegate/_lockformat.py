"""The format of the gate's lock file (``<db>-litegate``): where each field
of its shared table sits, where each of its locks sits, and readers that
look at a lock file without taking part in it (no lock taken, nothing
written), for ``litegate doctor`` and ``top``.

:mod:`._filelock` runs the gate over this format; ``ops`` reads it through
the readers here, so the layout is written down once.
"""

from __future__ import annotations

import os
import struct
from typing import NamedTuple

SLOTS = 4096
MAGIC = b"LGTQ0002"
OLD_MAGIC = b"LGTQ0001"  # litegate before bounded fairness: strict ticket order only
HEADER = 128
# header fields (little endian)
H_NEXT = 8  # u64: the next ticket
H_GRANTS = 16  # u64: grants of the gate so far
H_HEAD = 24  # u64: head ticket + 1, 0 for none (a hint: the slot record decides)
H_WAKE = 32  # u32: the futex word, bumped by every hand-off
H_WANT = 36  # u32: a futex word rung by a waiter while the gate's holder is idle
H_IDLE = 40  # u64: pid of a process that keeps the gate while idle (0: none)
H_HANDOFFS = 48  # u64: releases that handed the gate to a head whose budget ran out
H_BARGES = 56  # u64: grants taken past a waiting head
# The file's background checkpointer (one per file across processes):
H_CKPT_PID = 64  # u64: pid of the process whose checkpointer holds the seat (0: none)
H_CKPT_BELL = 76  # u32: rung every few commits: the futex word the checkpointer sleeps on
# The combiner's (see _combine.py): its pid and the nonce that names its
# socket, written by the holder of the COMBINER lock.
H_COMBINER_PID = 80  # u64
H_COMBINER_NONCE = 88  # u64
# u64: BUSY while the combiner has batches in line or a turn running, else
# when it last went idle (CLOCK_MONOTONIC ns; 0: never busy)
H_COMBINER_BUSY = 96
BUSY = 2**64 - 1
SLOT = struct.Struct("<QQQQIIII")  # ticket, state, arrived_ns, head_ns, overtaken, k, t_us, pid
SLOT_SIZE = SLOT.size
TABLE_SIZE = HEADER + SLOTS * SLOT_SIZE
U64 = struct.Struct("<Q")
# the same fields as indexes into the table viewed as u64 words: a hot path
# reads one with a single subscript instead of a struct call
W_HEAD = H_HEAD >> 3
W_IDLE = H_IDLE >> 3
MUTEX = 0
GATE = 1 << 31  # lock-only offsets past the data: they need no bytes
COMBINER = GATE + 2  # held by the process that combines other processes' writes
CKPT_SEAT = GATE + 1  # held by the file's one background checkpointer, for its tenure
# Held by whoever runs one of litegate's checkpoints (one at a time, across
# processes). A lock on a header byte of litegate's own that holds no data,
# as MUTEX sits on byte 0; always taken before the gate, never while holding it.
CKPT_RUN = 79
# Read-locked by every process with a Database opened with checkpoints="litestream".
LITESTREAM = 78
SLOT_LOCK_BASE = 1 << 32
NO_LIMIT = 0xFFFFFFFF  # a budget field without a bound

WAITING, HOLDING, DONE, ABANDONED, HEAD = 1, 2, 3, 4, 5
STATE_NAMES = {
    WAITING: "waiting",
    HOLDING: "holding",
    DONE: "done",
    ABANDONED: "abandoned",
    HEAD: "head",
}
TICKET_LIMIT = 1 << 62  # a counter at or past this was not written by litegate


def table_problem(head: bytes) -> str | None:
    """What makes a lock file of this format unusable (connect refuses it),
    from its first bytes; None if nothing does. No writer takes 2**62
    tickets or grants: a counter at or past that is damage (and would make
    every grant fail)."""
    head = head.ljust(HEADER, b"\0")
    if head[:8] not in (MAGIC, b"\0" * 8):
        return f"its first bytes are {bytes(head[:8])!r}, not litegate's"
    for what, offset in (("ticket", H_NEXT), ("grant", H_GRANTS)):
        n = U64.unpack_from(head, offset)[0]
        if n >= TICKET_LIMIT:
            return f"its {what} counter reads {n}, which litegate never writes"
    return None


def _read_start(path: str, size: int) -> bytes:
    """The first ``size`` bytes of the lock file at ``path`` (fewer if it is
    shorter), read without a lock."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.pread(fd, size, 0)
    finally:
        os.close(fd)


def read_queue(path: str) -> tuple[int, list[tuple[int, int, str]]] | None:
    """The ticket table of lock file ``path``, read without taking part:
    no lock taken, nothing written (for ``litegate doctor`` / ``top``).
    Returns (next ticket, [(ticket, slot, state name)] of the tickets still
    in the queue, oldest first), None if the file is not a litegate lock
    file; OSError if it cannot be read."""
    table = _read_start(path, TABLE_SIZE)
    if table[:8] != MAGIC or len(table) < TABLE_SIZE:
        return None
    nxt = U64.unpack_from(table, H_NEXT)[0]
    live = []
    for t in range(max(0, nxt - SLOTS), nxt):
        slot = t % SLOTS
        rec = SLOT.unpack_from(table, HEADER + slot * SLOT_SIZE)
        if rec[0] == t and rec[1] in (WAITING, HEAD):
            live.append((t, slot, STATE_NAMES[rec[1]]))
    return nxt, live


def read_counters(path: str) -> dict[str, int] | None:
    """The gate's shared counters (grants, hand-offs, barges, the pid of a
    process keeping the gate while idle, the pid last seated as the file's
    checkpointer), read without taking part; None if not a litegate lock
    file. The checkpointer's pid is a hint: whether a
    checkpointer holds the seat now is the kernel's (see :func:`is_seat_lock`)."""
    head = _read_start(path, HEADER)
    if head[:8] != MAGIC or len(head) < HEADER:
        return None
    return {
        "next_ticket": U64.unpack_from(head, H_NEXT)[0],
        "grants": U64.unpack_from(head, H_GRANTS)[0],
        "handoffs": U64.unpack_from(head, H_HANDOFFS)[0],
        "barges": U64.unpack_from(head, H_BARGES)[0],
        "idle_holder_pid": U64.unpack_from(head, H_IDLE)[0],
        "checkpointer_pid": U64.unpack_from(head, H_CKPT_PID)[0],
    }


def slot_of_lock(offset: int) -> int | None:
    """The slot whose lock sits at byte ``offset`` of a lock file (as
    /proc shows locks), None for the other locks (mutex, gate)."""
    return offset - SLOT_LOCK_BASE if SLOT_LOCK_BASE <= offset < SLOT_LOCK_BASE + SLOTS else None


def is_gate_lock(offset: int) -> bool:
    """True for the lock whose holder holds the gate (as /proc shows locks)."""
    return offset == GATE


def is_seat_lock(offset: int) -> bool:
    """True for the lock held by the file's background checkpointer."""
    return offset == CKPT_SEAT


def litestream_lock_offset() -> int:
    """The byte a process with ``checkpoints="litestream"`` read-locks."""
    return LITESTREAM


def seat_lock_offset() -> int:
    """Where the file's background checkpointer holds its lock (to ask the
    kernel whether one is seated)."""
    return CKPT_SEAT


def is_checkpoint_lock(offset: int) -> bool:
    """True for the lock held while one of litegate's checkpoints runs."""
    return offset == CKPT_RUN


class Header(NamedTuple):
    """What a lock file's first bytes say, as connect() judges them."""

    kind: str
    """"current" (this format), "old" (an older litegate's: set up anew on
    open if nobody has it locked), "blank" (filled in on open) or "foreign"
    (refused)."""
    magic: bytes
    next_ticket: int
    grants: int

    @property
    def damage(self) -> str | None:
        """A counter no writer could have reached ("ticket" or "grant"), if any."""
        if self.next_ticket >= TICKET_LIMIT:
            return "ticket"
        if self.kind == "current" and self.grants >= TICKET_LIMIT:
            return "grant"
        return None


def read_header(fd: int) -> Header:
    """The header of the lock file open on ``fd`` (read with pread: the
    file's offset and locks are left alone)."""
    head = os.pread(fd, HEADER, 0).ljust(HEADER, b"\0")
    magic = head[:8]
    kind = (
        "current"
        if magic == MAGIC
        else "old"
        if magic == OLD_MAGIC
        else "blank"
        if magic == bytes(8)
        else "foreign"
    )
    return Header(kind, magic, U64.unpack_from(head, H_NEXT)[0], U64.unpack_from(head, H_GRANTS)[0])


def slot_lock_offset(slot: int) -> int:
    """Where the lock of ticket slot ``slot`` sits (held by its sleeper)."""
    return SLOT_LOCK_BASE + slot
