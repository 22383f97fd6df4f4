"""A FUSE filesystem that loses, at a "power cut", every write not synced.

``python -m litegate_lab.durability._fs BACKING MOUNTPOINT CONTROL`` mounts
BACKING at MOUNTPOINT (libfuse 3 through mfusepy) and answers commands on the
Unix socket CONTROL. :class:`litegate_lab.durability.PowerCutMount` drives it.

The model, in the terms of a machine with a volatile page cache and a disk:

- **The disk** is BACKING. It changes only when a process makes something
  durable: ``fsync``/``fdatasync`` of a file writes that file's changed
  blocks and its size there; ``fsync`` of a directory writes that
  directory's pending name changes (create, unlink, rename, mkdir, rmdir)
  there, in the order they were made. A ``sync`` command writes everything
  (what ``sync(1)`` does before a clean shutdown).
- **The page cache** is this process's memory: every file that has been
  opened is held whole in a bytearray, and reads see every write made so
  far, synced or not. The kernel's own page cache sits in front of it (files
  are opened with ``keep_cache``), which is what lets processes share
  writable ``mmap`` s (SQLite's ``-shm``, litegate's sidecar) exactly as on a
  local disk; dirty mapped pages reach this process when the kernel writes
  them back, and count as unsynced like any write.
- **Locks** are not implemented here on purpose: without a ``lock`` or
  ``flock`` operation the kernel keeps POSIX, OFD and ``flock`` locks
  itself, as for a local filesystem on one host (the tests check OFD
  conflicts between two descriptions in one process and across processes).
- **A power cut** (``cut``) is one instant: under the lock every operation
  takes, the filesystem freezes and from then on fails every operation with
  EIO, so nothing more becomes durable. The controller then SIGKILLs every
  process that uses the mount and sends ``drop``: what was never synced is
  thrown away (``keep`` = 0, the default, as LazyFS does), or a random part
  of it reaches the disk (``keep`` = p: each changed 4 KiB block of a file
  with a durable name is written with probability p, a pending size change
  with probability p, and each directory's pending name changes reach the
  disk in order, each with probability p, up to the first that does not, as
  a journal commits them), which stands for the kernel's background
  writeback and for a sync that the cut interrupted. Then it unmounts; the next mount
  starts from the disk with a cold page cache.

Not modelled: a sector that the cut leaves half-written with garbage (a
block is written whole or not at all), the loss of data that was synced
(no lying disks), modes, owners and times (applied at once, never lost),
hard links and symlinks (refused with ENOTSUP).
"""

from __future__ import annotations

import errno
import json
import os
import random
import socket
import stat
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import mfusepy

BLOCK = 4096  # a page of the page cache: what writeback writes at a time

# libfuse 3's FUSE_CAP_* bits (fuse_common.h) that init turns off
_CAP_POSIX_LOCKS = 1 << 1  # the kernel keeps locks itself
_CAP_FLOCK_LOCKS = 1 << 10
_CAP_AUTO_INVAL_DATA = 1 << 12  # no cache drop on mtime change: the mmaps stay
_CAP_WRITEBACK_CACHE = 1 << 16  # write-through: every write() reaches us at once


class _Dir:
    """A directory that exists in the view (made by mkdir, or loaded)."""

    __slots__ = ()


DIR = _Dir()


@dataclass(eq=False)
class Node:
    """One file as the page cache holds it."""

    ino: int
    data: bytearray
    mode: int
    durable: str | None  # its name on the disk, None while it has none
    dirty: set[int] = field(default_factory=set)  # blocks changed since the last sync
    min_len: int = 0  # the shortest it has been since the last sync
    durable_len: int = 0  # its length on the disk
    nameless: bytes | None = None  # synced content of a node whose name is not durable yet
    opens: int = 0
    mtime_ns: int = field(default_factory=time.time_ns)
    synced_at: int = 0  # CLOCK_MONOTONIC ns when the last complete fsync began


@dataclass
class Counters:
    writes: int = 0
    write_bytes: int = 0
    reads: int = 0
    fsyncs: int = 0
    fsyncdirs: int = 0
    synced_blocks: int = 0
    ops: int = 0
    refused: int = 0  # operations failed with EIO after the cut


class PowerCutFS(mfusepy.Operations):  # type: ignore[misc]
    """The operations (libfuse's high-level, path-based API)."""

    use_ns = True
    flag_nopath = True  # file operations get the handle, not a path
    flag_nullpath_ok = True

    def __init__(self, backing: str) -> None:
        self.backing = os.path.realpath(backing)
        self._lock = threading.Lock()  # every operation; the cut takes it too
        self._frozen = False
        self._view: dict[str, Node | _Dir | None] = {}  # path -> node, DIR, None (gone)
        self._pending: dict[str, list[tuple[Any, ...]]] = {}  # dir -> name changes
        self._dir_synced: dict[str, list[tuple[Any, ...]]] = {}  # synced in a nameless dir
        self._handles: dict[int, Node] = {}
        self._dir_handles: dict[int, str] = {}
        self._next_fh = 1
        self._next_ino = 1
        self._nodes: dict[int, Node] = {}  # every node with a durable name or an open handle
        self.counters = Counters()
        self.want = 0  # the capabilities the kernel was left with (for tests)
        self._next = threading.Event()  # set by "mount" or "exit" once unmounted
        self._exit = False

    # -- helpers ----------------------------------------------------------
    def _disk(self, path: str) -> str:
        return os.path.join(self.backing, path.lstrip("/"))

    @contextmanager
    def _op(self) -> Iterator[None]:
        with self._lock:
            if self._frozen:
                self.counters.refused += 1
                raise mfusepy.FuseOSError(errno.EIO)
            self.counters.ops += 1
            yield

    def _kind(self, path: str) -> Node | _Dir | None:
        """What ``path`` is in the view, loading a file from the disk on
        first use."""
        if path in self._view:
            return self._view[path]
        if path != "/" and self._kind(os.path.dirname(path)) is not DIR:
            return None
        try:
            st = os.lstat(self._disk(path))
        except FileNotFoundError:
            return None
        if stat.S_ISDIR(st.st_mode):
            self._view[path] = DIR
            return DIR
        if not stat.S_ISREG(st.st_mode):
            return None
        with open(self._disk(path), "rb") as f:
            data = bytearray(f.read())
        node = self._new_node(data, st.st_mode, durable=path)
        node.mtime_ns = st.st_mtime_ns
        self._view[path] = node
        return node

    def _new_node(self, data: bytearray, mode: int, durable: str | None) -> Node:
        node = Node(self._next_ino, data, mode, durable, min_len=len(data), durable_len=len(data))
        self._next_ino += 1
        self._nodes[node.ino] = node
        return node

    def _file(self, path: str | None, fh: Any) -> Node:
        if fh is not None:
            return self._handles[fh.fh if hasattr(fh, "fh") else fh]
        assert path is not None
        node = self._kind(path)
        if node is None:
            raise mfusepy.FuseOSError(errno.ENOENT)
        if node is DIR:
            raise mfusepy.FuseOSError(errno.EISDIR)
        assert isinstance(node, Node)
        return node

    def _log(self, path: str, *change: Any) -> None:
        self._pending.setdefault(os.path.dirname(path), []).append(change)

    def _handle(self, node: Node) -> int:
        fh = self._next_fh
        self._next_fh += 1
        self._handles[fh] = node
        node.opens += 1
        return fh

    def _forget(self, node: Node) -> None:
        """Drop a node nothing can reach any more: no handle, no durable
        name, no name in the view, no pending change that names it."""
        if node.opens or node.durable is not None:
            return
        if any(v is node for v in self._view.values()):
            return
        if any(c[0] == "link" and c[2] is node for cs in self._pending.values() for c in cs):
            return
        self._nodes.pop(node.ino, None)

    # -- setup ------------------------------------------------------------
    def init_with_config(self, conn: Any, config: Any) -> None:
        if conn is not None:
            conn.want &= ~(
                _CAP_POSIX_LOCKS | _CAP_FLOCK_LOCKS | _CAP_AUTO_INVAL_DATA | _CAP_WRITEBACK_CACHE
            )
            self.want = int(conn.want)
        if config is not None:
            config.hard_remove = 1  # unlink an open file: no .fuse_hidden rename
            config.use_ino = 0
            config.nullpath_ok = 1

    # -- attributes -------------------------------------------------------
    def getattr(self, path: str | None, fh: Any = None) -> dict[str, Any]:
        with self._op():
            if fh is None and path is not None:
                kind = self._kind(path)
                if kind is None:
                    raise mfusepy.FuseOSError(errno.ENOENT)
                if kind is DIR:
                    return self._dir_attrs(path)
                assert isinstance(kind, Node)
                node = kind
            else:
                node = self._file(path, fh)
            linked = node.opens == 0 or any(v is node for v in self._view.values())
            return {
                "st_mode": node.mode,
                "st_nlink": 1 if linked else 0,
                "st_size": len(node.data),
                "st_uid": os.getuid(),
                "st_gid": os.getgid(),
                "st_mtime": node.mtime_ns,
                "st_ctime": node.mtime_ns,
                "st_atime": node.mtime_ns,
                "st_blksize": BLOCK,
                "st_blocks": (len(node.data) + 511) // 512,
            }

    def _dir_attrs(self, path: str) -> dict[str, Any]:
        try:
            st = os.lstat(self._disk(path))
            mode, mtime = st.st_mode, st.st_mtime_ns
        except FileNotFoundError:  # made by mkdir, not durable yet
            mode, mtime = stat.S_IFDIR | 0o755, time.time_ns()
        return {"st_mode": mode, "st_nlink": 2, "st_size": 4096, "st_mtime": mtime,
                "st_ctime": mtime, "st_atime": mtime, "st_uid": os.getuid(),
                "st_gid": os.getgid()}  # fmt: skip

    def chmod(self, path: str | None, mode: int, fh: Any = None) -> int:
        with self._op():
            kind = self._file(path, fh) if fh is not None else self._kind(path or "/")
            if isinstance(kind, Node):
                kind.mode = stat.S_IFMT(kind.mode) | stat.S_IMODE(mode)
            return 0

    def chown(self, path: str | None, uid: int, gid: int, fh: Any = None) -> int:
        with self._op():
            return 0  # owners are not modelled (one user)

    def utimens(self, path: str | None, times: Any = None, fh: Any = None) -> int:
        with self._op():
            kind = self._file(path, fh) if fh is not None else self._kind(path or "/")
            if isinstance(kind, Node):
                kind.mtime_ns = times[1] if times else time.time_ns()
            return 0

    def statfs(self, path: str) -> dict[str, int]:
        with self._op():
            st = os.statvfs(self.backing)
            return {key: getattr(st, key) for key in (
                "f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files",
                "f_ffree", "f_favail", "f_flag", "f_namemax")}  # fmt: skip

    # -- files ------------------------------------------------------------
    def create(self, path: str, mode: int, fi: Any) -> int:
        with self._op():
            if self._kind(os.path.dirname(path)) is not DIR:
                raise mfusepy.FuseOSError(errno.ENOENT)
            old = self._kind(path)
            if isinstance(old, Node):  # O_CREAT without O_EXCL on a name that exists
                fi.fh = self._handle(old)
            else:
                node = self._new_node(bytearray(), stat.S_IFREG | stat.S_IMODE(mode), None)
                self._view[path] = node
                self._log(path, "link", os.path.basename(path), node)
                fi.fh = self._handle(node)
            fi.keep_cache = 1
            fi.direct_io = 0
            return 0

    def open(self, path: str, fi: Any) -> int:
        with self._op():
            node = self._file(path, None)
            fi.fh = self._handle(node)
            fi.keep_cache = 1  # we are the only writer: the kernel's cache stays right
            fi.direct_io = 0  # shared writable mmap needs the page cache
            return 0

    def read(self, path: str | None, size: int, offset: int, fi: Any) -> bytes:
        with self._op():
            node = self._handles[fi.fh]
            self.counters.reads += 1
            return bytes(node.data[offset : offset + size])

    def write(self, path: str | None, data: bytes, offset: int, fi: Any) -> int:
        with self._op():
            node = self._handles[fi.fh]
            buf = node.data
            end = offset + len(data)
            if offset > len(buf):
                buf.extend(bytes(offset - len(buf)))
            buf[offset:end] = data
            if data:
                node.dirty.update(range(offset // BLOCK, (end - 1) // BLOCK + 1))
            node.mtime_ns = time.time_ns()
            self.counters.writes += 1
            self.counters.write_bytes += len(data)
            return len(data)

    def truncate(self, path: str | None, length: int, fh: Any = None) -> int:
        with self._op():
            node = self._file(path, fh)
            buf = node.data
            if length < len(buf):
                del buf[length:]
                node.min_len = min(node.min_len, length)
                if length % BLOCK:
                    node.dirty.add(length // BLOCK)
            elif length > len(buf):
                old = len(buf)
                buf.extend(bytes(length - old))
                node.dirty.update(range(old // BLOCK, (length - 1) // BLOCK + 1))
            node.mtime_ns = time.time_ns()
            return 0

    def flush(self, path: str | None, fi: Any) -> int:
        with self._op():
            return 0  # close() makes nothing durable

    def release(self, path: str | None, fi: Any) -> int:
        with self._lock:  # even when frozen: the kernel only says the file is closed
            node = self._handles.pop(fi.fh, None)
            if node is not None:
                node.opens -= 1
                self._forget(node)
            return 0

    def fsync(self, path: str | None, datasync: int, fi: Any) -> int:
        with self._op():
            node = self._handles[fi.fh]
            began = time.monotonic_ns()  # one clock for every process on Linux
            self._sync_file(node)
            node.synced_at = began  # every write made before this is durable
            self.counters.fsyncs += 1
            return 0

    def _sync_file(self, node: Node, *, keep: float = 1.0, rng: random.Random | None = None) -> int:
        """Write ``node``'s changes to the disk: all of them (keep = 1), or
        each changed block with probability ``keep`` and its size change
        with the same probability. Returns the blocks written."""
        if node.durable is None:
            if keep >= 1.0:  # durable content, but under no durable name yet
                node.nameless = bytes(node.data)
                node.dirty.clear()
                node.min_len = node.durable_len = len(node.data)
            return 0
        chosen = sorted(node.dirty)
        resize = True
        if rng is not None and keep < 1.0:
            chosen = [b for b in chosen if rng.random() < keep]
            resize = rng.random() < keep
        written = 0
        fd = os.open(self._disk(node.durable), os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            if resize and node.min_len < node.durable_len:
                os.ftruncate(fd, node.min_len)
            for b in chosen:
                start = b * BLOCK
                chunk = node.data[start : start + BLOCK]
                if chunk:
                    os.pwrite(fd, chunk, start)
                    written += 1
            if resize:
                os.ftruncate(fd, len(node.data))
            # No os.fsync: a cut here stops processes, not this machine, so
            # what is written to the backing directory is as good as on disk.
        finally:
            os.close(fd)
        if keep >= 1.0:
            node.dirty.clear()
            node.min_len = node.durable_len = len(node.data)
        self.counters.synced_blocks += written
        return written

    # -- directories ------------------------------------------------------
    def opendir(self, path: str) -> int:
        with self._op():
            if self._kind(path) is not DIR:
                raise mfusepy.FuseOSError(errno.ENOTDIR)
            fh = self._next_fh
            self._next_fh += 1
            self._dir_handles[fh] = path
            return fh

    def releasedir(self, path: str | None, fh: int) -> int:
        with self._lock:
            self._dir_handles.pop(fh, None)
            return 0

    def readdir(self, path: str | None, fh: int) -> list[str]:
        with self._op():
            where = self._dir_handles.get(fh, path or "/")
            names: set[str] = set()
            with suppress(FileNotFoundError):
                names.update(os.listdir(self._disk(where)))
            prefix = where.rstrip("/") + "/"
            for p, kind in self._view.items():
                if p.startswith(prefix) and "/" not in p[len(prefix) :] and p != where:
                    if kind is None:
                        names.discard(p[len(prefix) :])
                    else:
                        names.add(p[len(prefix) :])
            return [".", "..", *sorted(names)]

    def fsyncdir(self, path: str | None, datasync: int, fh: int) -> int:
        with self._op():
            self._sync_dir(self._dir_handles.get(fh, path or "/"))
            self.counters.fsyncdirs += 1
            return 0

    def _sync_dir(self, where: str, upto: int | None = None) -> int:
        """Apply ``where``'s pending name changes to the disk, in order
        (the first ``upto`` of them). Returns how many were applied."""
        changes = self._pending.pop(where, [])
        if upto is not None:
            changes, rest = changes[:upto], changes[upto:]
            if rest:
                self._pending[where] = rest
        if not os.path.isdir(self._disk(where)):
            # synced, but the directory itself has no durable name yet: its
            # entries reach the disk when it does (like a file's nameless content)
            self._dir_synced.setdefault(where, []).extend(changes)
            return len(changes)
        for change in changes:
            kind, name = change[0], change[1]
            path = os.path.join(where, name)
            disk = self._disk(path)
            if kind == "link":  # a name for a node (create, or the new end of a rename)
                node: Node = change[2]
                self._drop_durable(path)
                if node.durable is not None and os.path.exists(self._disk(node.durable)):
                    os.link(self._disk(node.durable), disk)  # both names until the old goes
                else:
                    with open(disk, "wb") as f:
                        f.write(node.nameless or b"")
                    node.durable_len = len(node.nameless or b"")
                    node.min_len = min(node.min_len, node.durable_len)
                    node.dirty.update(range(0, (len(node.data) + BLOCK - 1) // BLOCK))
                node.durable = path
                node.nameless = None
            elif kind == "unlink":
                self._drop_durable(path)
            elif kind == "mkdir":
                os.mkdir(disk)
                synced = self._dir_synced.pop(path, [])
                if synced:  # what was synced in it before it had a name
                    later = self._pending.pop(path, [])
                    self._pending[path] = synced
                    self._sync_dir(path)
                    if later:
                        self._pending[path] = later
            elif kind == "rmdir":
                os.rmdir(disk)
        return len(changes)

    def _drop_durable(self, path: str) -> None:
        disk = self._disk(path)
        if os.path.isdir(disk):
            return
        with suppress(FileNotFoundError):
            os.unlink(disk)
        for node in list(self._nodes.values()):
            if node.durable == path:
                node.durable = None
                self._forget(node)

    # -- names ------------------------------------------------------------
    def unlink(self, path: str) -> int:
        with self._op():
            node = self._kind(path)
            if node is None:
                raise mfusepy.FuseOSError(errno.ENOENT)
            if node is DIR:
                raise mfusepy.FuseOSError(errno.EISDIR)
            self._view[path] = None
            self._log(path, "unlink", os.path.basename(path))
            assert isinstance(node, Node)
            self._forget(node)
            return 0

    def rename(self, old: str, new: str, flags: int = 0) -> int:
        with self._op():
            node = self._kind(old)
            if node is None:
                raise mfusepy.FuseOSError(errno.ENOENT)
            if not isinstance(node, Node):
                raise mfusepy.FuseOSError(errno.ENOTSUP)  # directories: not needed here
            target = self._kind(new)
            if target is DIR:
                raise mfusepy.FuseOSError(errno.EISDIR)
            if flags:  # RENAME_NOREPLACE / EXCHANGE: SQLite and litegate use neither
                raise mfusepy.FuseOSError(errno.EINVAL)
            self._view[new] = node
            self._view[old] = None
            # the new name first: a crash between the two directories' syncs
            # may leave both names, never neither (what journaling filesystems do)
            self._log(new, "link", os.path.basename(new), node)
            self._log(old, "unlink", os.path.basename(old))
            return 0

    def mkdir(self, path: str, mode: int) -> int:
        with self._op():
            if self._kind(path) is not None:
                raise mfusepy.FuseOSError(errno.EEXIST)
            if self._kind(os.path.dirname(path)) is not DIR:
                raise mfusepy.FuseOSError(errno.ENOENT)
            self._view[path] = DIR
            self._log(path, "mkdir", os.path.basename(path))
            return 0

    def rmdir(self, path: str) -> int:
        with self._op():
            if self._kind(path) is not DIR:
                raise mfusepy.FuseOSError(errno.ENOTDIR)
            prefix = path.rstrip("/") + "/"
            live = [p for p, k in self._view.items() if p.startswith(prefix) and k is not None]
            try:
                listed = os.listdir(self._disk(path))
            except FileNotFoundError:
                listed = []
            on_disk = [n for n in listed if prefix + n not in self._view or self._view[prefix + n]]
            if live or on_disk:
                raise mfusepy.FuseOSError(errno.ENOTEMPTY)
            self._view[path] = None
            self._log(path, "rmdir", os.path.basename(path))
            return 0

    def link(self, target: str, source: str) -> int:
        raise mfusepy.FuseOSError(errno.ENOTSUP)

    def symlink(self, target: str, source: str) -> int:
        raise mfusepy.FuseOSError(errno.ENOTSUP)

    # -- the cut ----------------------------------------------------------
    def freeze(self) -> dict[str, Any]:
        """The power cut's instant: nothing becomes durable after this.
        Returns what was in the page cache and not on the disk."""
        with self._lock:
            self._frozen = True
            return self._unsynced()

    def _unsynced(self) -> dict[str, Any]:
        files = {}
        for node in self._nodes.values():
            name = node.durable or next(
                (p for p, v in self._view.items() if v is node), f"<unlinked {node.ino}>"
            )
            files[name] = {
                "unsynced_blocks": len(node.dirty),
                "size": len(node.data),
                "durable_size": node.durable_len,
                "durable_name": node.durable is not None,
                "last_sync_ns": node.synced_at,
            }
        names = {d: len(c) for d, c in self._pending.items() if c}
        return {
            "files": files,
            "name_changes": names,
            "counters": vars(self.counters).copy(),
            "monotonic_ns": time.monotonic_ns(),
        }

    def drop(self, keep: float, seed: int) -> dict[str, Any]:
        """After :meth:`freeze`: what reaches the disk of what was unsynced
        (nothing when ``keep`` is 0), then forget the rest."""
        rng = random.Random(seed)
        kept_names = kept_blocks = 0
        with self._lock:
            if not self._frozen:
                raise RuntimeError("drop() before freeze()")
            if keep > 0:
                for where in sorted(self._pending):
                    # in order, each with probability keep, until one did not make it
                    upto = 0
                    while upto < len(self._pending[where]) and rng.random() < keep:
                        upto += 1
                    kept_names += self._sync_dir(where, upto)
                for node in list(self._nodes.values()):
                    kept_blocks += self._sync_file(node, keep=keep, rng=rng)
            self._view.clear()
            self._pending.clear()
            self._dir_synced.clear()
            self._nodes.clear()
        return {"keep": keep, "seed": seed, "kept_name_changes": kept_names,
                "kept_blocks": kept_blocks}  # fmt: skip

    def sync(self) -> dict[str, Any]:
        """Make everything durable (``sync(1)``)."""
        with self._op():
            names = sum(self._sync_dir(d) for d in sorted(self._pending))
            blocks = sum(self._sync_file(n) for n in list(self._nodes.values()))
            return {"name_changes": names, "blocks": blocks}

    def wait_for_remount(self) -> bool:
        """After an unmount: True once told to mount again (and ready to:
        empty and thawed), False when told to exit."""
        self._next.wait()
        with self._lock:
            self._next.clear()
            if self._exit:
                return False
            self._view.clear()
            self._pending.clear()
            self._dir_synced.clear()
            self._nodes.clear()
            self._handles.clear()
            self._dir_handles.clear()
            self._frozen = False
            return True

    def remount(self, *, exit: bool = False) -> dict[str, Any]:
        with self._lock:
            self._exit = exit
        self._next.set()
        return {}

    def status(self) -> dict[str, Any]:
        with self._lock:
            out = self._unsynced()
            out["frozen"] = self._frozen
            out["want"] = self.want
            return out


class _FUSE(mfusepy.FUSE):  # type: ignore[misc]
    """mfusepy's FUSE, with the file handle passed on where libfuse 3 gives
    one and mfusepy drops it (truncate, chmod, chown, utimens): with
    ``nullpath_ok`` the path is then NULL, and ftruncate() of a file that
    was unlinked while open has no path at all."""

    def _path(self, path: bytes | None) -> str | None:
        return None if path is None else path.decode(self.encoding, self.errors)

    def truncate_fuse_3(self, path: bytes | None, length: int, fip: Any) -> int:
        return int(
            self.operations.truncate(self._path(path), length, fip.contents if fip else None)
        )

    def chmod_fuse_3(self, path: bytes | None, mode: int, fip: Any) -> int:
        return int(self.operations.chmod(self._path(path), mode, fip.contents if fip else None))

    def chown_fuse_3(self, path: bytes | None, uid: int, gid: int, fip: Any) -> int:
        return int(self.operations.chown(self._path(path), uid, gid, fip.contents if fip else None))

    def utimens_fuse_3(self, path: bytes | None, buf: Any, fip: Any) -> int:
        times = None
        if buf:
            times = (
                mfusepy.time_of_timespec(buf.contents.actime, use_ns=True),
                mfusepy.time_of_timespec(buf.contents.modtime, use_ns=True),
            )
        return int(self.operations.utimens(self._path(path), times, fip.contents if fip else None))


def serve_control(fs: PowerCutFS, sock_path: str) -> threading.Thread:
    """Answer one JSON command per line on a Unix socket, on a thread."""
    with suppress(FileNotFoundError):
        os.unlink(sock_path)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(sock_path)
    srv.listen(4)

    def handle(conn: socket.socket) -> None:
        with conn, conn.makefile("rwb") as f:
            for line in f:
                try:
                    req = json.loads(line)
                    cmd = req.get("cmd")
                    if cmd == "status":
                        reply: dict[str, Any] = fs.status()
                    elif cmd == "freeze":
                        reply = fs.freeze()
                    elif cmd == "drop":
                        reply = fs.drop(float(req.get("keep", 0.0)), int(req.get("seed", 0)))
                    elif cmd == "sync":
                        reply = fs.sync()
                    elif cmd == "mount":
                        reply = fs.remount()
                    elif cmd == "exit":
                        reply = fs.remount(exit=True)
                    else:
                        raise ValueError(f"unknown command {cmd!r}")
                    reply = {"ok": True, **reply}
                except Exception as exc:  # reported to the controller, not fatal here
                    reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                f.write(json.dumps(reply).encode() + b"\n")
                f.flush()

    def loop() -> None:
        while True:
            conn, _ = srv.accept()
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    t = threading.Thread(target=loop, name="powercut-control", daemon=True)
    t.start()
    return t


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m litegate_lab.durability._fs BACKING MOUNTPOINT CONTROL_SOCKET",
              file=sys.stderr)  # fmt: skip
        return 2
    backing, mountpoint, control = argv
    os.chdir("/")  # never hold the mount (or anything under it) as our cwd
    fs = PowerCutFS(backing)
    serve_control(fs, control)
    while True:
        # Mounted until the controller unmounts it (after a cut, or to stop);
        # then it waits for "mount" (a remount after a cut: a new FUSE
        # connection, so the kernel's page cache starts cold too) or "exit".
        _FUSE(
            fs,
            mountpoint,
            foreground=True,
            raw_fi=True,
            fsname="litegate-powercut",
            subtype="powercut",
            allow_other=os.geteuid() == 0,
        )
        if not fs.wait_for_remount():
            return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
