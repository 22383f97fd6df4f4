"""WAL frames per operation, read from SQLite's WAL index.

In WAL mode every page a transaction changes is one frame appended to the
``-wal`` file at its commit (and copied back to the database by a
checkpoint later): the frames an operation appends are the pages it wrote.
The live count is ``mxFrame`` in the WAL-index header at the start of the
``-shm`` file (wal.c's ``WalIndexHdr``); its salt changes when a writer
starts the log again from the beginning (after a checkpoint copied all of
it back), and ``mxFrame`` then counts from zero. So, between two reads of
the header in the process that writes::

    frames = mxFrame_after - (mxFrame_before if the salt is unchanged else 0)

exact for an operation of one write transaction (SQLite restarts the log
only as a transaction writes its first frame). Read with
``litegate.ops.read_here``: through a descriptor the process already
has on the ``-shm`` file, so reading never drops SQLite's POSIX locks on it.

This module is imported by spawned children: standard library and litegate
only.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

WAL_INDEX_VERSION = 3007000
"""``iVersion`` of every WAL index SQLite writes (wal.c, WALINDEX_MAX_VERSION)."""

HEADER = 48
"""Bytes of one copy of ``WalIndexHdr``; the -shm file starts with two copies."""

OPS = ("put", "claim", "ack")
"""The single-job operations measured, in the order they run."""


class WalHeader(NamedTuple):
    frames: int  # mxFrame: valid frames in the log
    salt: int  # aSalt[0..1]: new each time the log restarts


def read_header(path: str, tries: int = 100) -> WalHeader | None:
    """The WAL-index header of the database file ``path``, or None if there
    is none (not in WAL mode, not opened yet). As SQLite's readers do, the
    two copies of the header must agree: a writer between them means read
    again."""
    from litegate.ops import read_here

    for _ in range(tries):
        head = read_here(path + "-shm", 2 * HEADER)
        if head is None or len(head) < 2 * HEADER:
            return None
        if head[:HEADER] != head[HEADER:]:
            continue  # torn: a commit was writing it
        (version,) = struct.unpack_from("=I", head, 0)
        if version != WAL_INDEX_VERSION or not head[12]:  # iVersion, isInit
            return None
        (frames,) = struct.unpack_from("=I", head, 16)  # mxFrame
        (salt,) = struct.unpack_from("=Q", head, 32)  # aSalt, both words
        return WalHeader(frames, salt)
    return None


def appended(before: WalHeader, after: WalHeader) -> int:
    """Frames appended between two reads of the header (see the module
    docstring): the growth of ``mxFrame``, or every frame of a log that
    restarted in between."""
    if after.salt != before.salt:
        return after.frames
    return after.frames - before.frames
