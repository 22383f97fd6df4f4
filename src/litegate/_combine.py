"""Group commit across processes: one process commits the single-statement
writes that every process queued, in its own transactions.

Taking turns at the write gate cannot beat plain ``sqlite3`` across
processes: plain ``sqlite3`` is fast because one process writes while the
others sleep for up to seconds, and the cheapest lock whose waiters sleep
costs 30-50 % of its rate. Combining can: one commit serves every process.

- **The combiner** is one process per database file, elected through the
  sidecar: the holder of an OFD lock on the sidecar's byte ``COMBINER``
  (released by the kernel when that process dies). A thread of its own
  listens on an abstract Unix socket (no file to clean up) whose name, a
  random nonce, it publishes in the sidecar's table with its pid. In turns,
  it reads what every client sent (and what its own process's writers
  handed it), takes the write gate, runs all of it in one transaction in
  arrival order (at most the group commit's bound of statements per turn),
  commits, gives the gate back and answers each. One thread does all of
  it, so no answer waits for a hand-off between threads (their GIL); its
  turns take the gate like any writer's, so ``db.write()`` blocks and
  ``transact(fn)`` of every process still get the gate between them under
  bounded fairness.
- **A client** process (any that opened the file with ``combine``) batches
  its threads' writes in its group commit as always; a batch leader whose
  batch holds only plain statements (``db.execute``/``db.executemany``)
  ships the batch as one request, ``(client, seq, statements)``, and waits
  for the answer instead of taking the gate (a thread writing alone
  ships its statement at once, without the queue). A batch with a
  ``transact(fn)`` member (Python cannot travel) runs at home through the
  gate, as without combining. In the combiner's own process the same
  batches go to its thread through memory, in the same line as everyone's.
- **Exactly once.** :func:`apply_all` runs each batch's statements (a
  failing statement gets its own error; the others commit) and records
  ``(client, seq)`` with the outcomes in ``litegate_combined``, in the same
  transaction; a batch whose ``(client, seq)`` is recorded already gets the
  recorded outcomes and runs nothing. A client whose combiner goes away
  before answering (it died: SIGKILL at any step) settles the same batch at
  home through the gate (:func:`apply`): the record says whether it
  committed there (then nothing runs again) or not (then it runs now).
  Whichever runs first wins and the other finds the record, so a batch is
  never applied twice, and never lost once answered. A client that times
  out while its batch still waits at the combiner asks for it back (as a
  cancelled asyncio write is withdrawn), and gets either the withdrawal or
  the outcome.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import marshal
import math
import os
import pickle
import secrets
import select
import selectors
import signal
import socket
import sqlite3
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Protocol, TypeVar

from ._batch import GroupCommit, Request, refusal
from ._errors import Closed, Error, WriteTimeout
from ._guard import RELEASE, ROLLBACK_TO, SAVEPOINT, WriterConnection
from ._time import acquire_until, deadline_of


class Role(Protocol):
    """What a client's hook needs of the file's gate in its process
    (``FileGate``): this process's combiner if it combines, the published
    combiner's socket name otherwise, and taking the role."""

    @property
    def combiner(self) -> Combiner | None: ...

    def combiner_nonce(self) -> int | None: ...

    def combiner_pid(self) -> int | None: ...

    def combiner_quiet_ns(self) -> int: ...

    def try_combine(self) -> bool: ...


RECORD = "litegate_combined"
# A row per client process: its last batch's (seq, outcomes), when, and the
# process's pid (NULL in rows of a litegate before 2026-11-29, which had no
# such column; added when missing).
_RECORD_SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS {RECORD} (client INTEGER PRIMARY KEY, seq INTEGER NOT NULL, "
    "outcomes BLOB NOT NULL, at REAL NOT NULL, pid INTEGER)"
)
_RECORD_PID = f"ALTER TABLE {RECORD} ADD COLUMN pid INTEGER"
_RECORD_SEEN = f"SELECT seq, outcomes FROM {RECORD} WHERE client = ?"
_RECORD_PUT = (
    f"INSERT INTO {RECORD} (client, seq, outcomes, at, pid) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT (client) DO UPDATE SET seq = excluded.seq, outcomes = excluded.outcomes, "
    "at = excluded.at, pid = excluded.pid"
)
# The record keeps a row only while its client may still ask for it: a
# client asks right after its combiner went away or stopped answering, from
# a process that is alive. So a turn (at most once every PRUNE_EVERY_S)
# deletes the rows older than PRUNE_AFTER_S whose process is gone, and rows
# without a pid older than PRUNE_UNKNOWN_S; without it, every client process
# that ever shipped left its row, with its last outcomes, for good.
PRUNE_EVERY_S = 60.0
PRUNE_AFTER_S = 3600.0
PRUNE_UNKNOWN_S = 86400.0

# A test seam: LITEGATE_COMBINER_CRASH=<step> makes a combiner SIGKILL its
# own process at that step of the protocol (received, mid_batch, committed,
# answering), so that the tests prove every step against a dead combiner.
_CRASH = os.environ.get("LITEGATE_COMBINER_CRASH", "")

# A client's lone write takes a free gate at home once the combiner has been
# quiet (no batch in line, no turn) this long; sooner, it ships, to share the
# next turn. Between the turns of a busy combiner the line is empty for less
# than this. LITEGATE_COMBINE_QUIET_MS=inf: a client ships every write (the
# protocol's tests).
try:
    _QUIET_MS = max(0.0, float(os.environ.get("LITEGATE_COMBINE_QUIET_MS", "1")))
except ValueError:
    _QUIET_MS = 1.0
ALWAYS_SHIP = math.isinf(_QUIET_MS)
ALONE = 3

# A batch of one single-row statement ships only from a process whose commits
# sync (PRAGMA synchronous FULL or EXTRA, 2 and 3): there one turn's fsync
# serves every process's writes. Under NORMAL a commit costs no fsync, and
# one-row writes from P single-threaded processes took turns at the gate
# faster than one combiner thread committed them (``litegate bench micro
# --only processes --proc-sides sqlite3,execute,combined``: shipped, 1.02,
# 0.38 and 0.58 x the turns' writes/s at P = 2, 4, 8; under FULL 0.99,
# 1.45 and 2.64 x). Larger batches (a process's threads' writes grouped, an
# executemany, the queue's operations) ship at every level: the queue's
# batches of 100 went 1.1-1.4 x faster combined under NORMAL.
# LITEGATE_COMBINE_SHIP_ONE=always: they ship at every level (the lab's
# ``shipped`` side measures the protocol itself with it).
SHIP_ONE_FROM = 0 if os.environ.get("LITEGATE_COMBINE_SHIP_ONE") == "always" else 2
QUIET_NS = 0 if ALWAYS_SHIP else int(_QUIET_MS * 1e6)


# A combiner whose statements wait STALLED_S or more without running, in
# STALLS turns in a row, resigns (its process's GIL is busy elsewhere: the
# interpreter hands it over every 5 ms, and a turn's statements wait for it
# each time); its process takes the role again no sooner than RESIGNED_S.
STALLED_S = 0.02
STALLS = 3
RESIGNED_S = 10.0


# A combined write whose timeout passed while it waited in the combiner's line.
WITHDRAWN = (
    "the write waited past its timeout in the combiner's line and was withdrawn: it never ran. "
    "A turn waits for the write gate, so a long transaction of some process holds it up "
    "(litegate top shows who); raise timeout= or make write transactions shorter"
)
UNANSWERED = (
    "the write waited past its timeout and the combiner (pid {pid}) did not answer: it never "
    "ran (its record says so). Is that process stopped (SIGSTOP, a debugger)? This process "
    "writes at home, through the gate, for the next {away:.0f} s (or until it goes on)"
)
UNSENT = (
    "the write waited past its timeout to be handed to the combiner (pid {pid}), which did not "
    "read it: it never ran. Is that process stopped (SIGSTOP, a debugger)? This process writes "
    "at home, through the gate, for the next {away:.0f} s"
)
# How long a client whose write timed out waits for the combiner to answer
# its withdrawal before it settles the write at home (CANCEL_WAIT), and how
# long its writes then run at home, without shipping (AWAY_S): a combiner
# that does not answer (its process stopped) must not hold every client's
# write past its timeout.
CANCEL_WAIT = 0.5
AWAY_S = 10.0


def _crash_point(step: str) -> None:
    if step == _CRASH:
        os.kill(os.getpid(), signal.SIGKILL)


# A statement, (sql, params, many), or a call of a function registered with
# :func:`shippable`, (its name, its keyword arguments, None).
Statement = tuple[str, Any, "bool | None"]

F = TypeVar("F", bound=Callable[..., Any])

# Functions of the write connection that may run in another process by name
# (litegate.queue's store functions): only these, and only with plain data
# as arguments, travel.
_SHIPPABLE: dict[str, Callable[..., Any]] = {}


def shippable(fn: F) -> F:
    """Let ``fn(conn, **kwargs)`` run in the combiner's transaction when a
    ``db.transact(partial(fn, **kwargs))`` of another process ships."""
    _SHIPPABLE[f"{fn.__module__}.{fn.__qualname__}"] = fn
    return fn


def _call_of(fn: Callable[..., Any]) -> Statement | None:
    """A transact() function as a shippable call, or None."""
    if not (isinstance(fn, partial) and not fn.args):
        return None
    name = f"{getattr(fn.func, '__module__', '')}.{getattr(fn.func, '__qualname__', '')}"
    if _SHIPPABLE.get(name) is not fn.func or not _data(fn.keywords):
        return None
    return (name, dict(fn.keywords), None)


# What a statement did: ("ok", rowcount, lastrowid, rows) or ("error", the error).
Outcome = tuple[Any, ...]
# db.execute()'s result, (rowcount, lastrowid, rows); None: not shipped.
WriteOutcome = tuple[int, "int | None", list[Any]] | None

_LEN = struct.Struct("!I")
WIRE = 2  # the wire's version: 1 pickled its frames, 2 marshals them
_MAX_MESSAGE = 1 << 30
_PLAIN = (int, float, str, bytes, type(None))


# -- what runs in the committing transaction --------------------------------------


class Work:
    """One batch at the combiner: ``(client, seq, statements)``, how its
    answer goes back (``answer(kind, payload)``, on the combiner's thread,
    after its turn), and whether its client still waits for it
    (``waiting()``: a client that gave up settles the batch at home), and
    the PRAGMA synchronous its process writes with (``sync``: its turn
    commits with the strongest of its batches' levels)."""

    __slots__ = ("answer", "client", "outcomes", "pid", "seq", "statements", "sync", "waiting")

    def __init__(self, client: int, seq: int, statements: list[Statement],
                 answer: Callable[[str, Any], None],
                 waiting: Callable[[], bool] | None = None, sync: int = 0,
                 pid: int = 0) -> None:  # fmt: skip
        self.client = client
        self.pid = pid  # the client's process (0: not known), kept in the record
        self.seq = seq
        self.statements = statements
        self.answer = answer
        self.waiting = waiting
        self.sync = sync
        self.outcomes: list[Outcome] | None = None


class _Isolate(Exception):
    """A statement failed part way and kept some of its changes (ON
    CONFLICT FAIL): its batch fails alone, the turn runs again without it."""

    def __init__(self, work: Work, error: BaseException) -> None:
        super().__init__(error)
        self.work = work
        self.error = error


def apply_all(conn: WriterConnection, works: Sequence[Work],
              refusal: Callable[[str], Exception | None],
              max_time: float = math.inf, prune: bool = False) -> list[Work]:  # fmt: skip
    """A turn's batches, in order, in the open transaction, each once, each
    recorded under its ``(client, seq)`` in the same transaction (client 0,
    the combiner's own process, has nothing to record).

    Once: a batch runs here only while its client still waits for it,
    checked with the gate held. A client gives up (closes its socket) only
    when its combiner went away, stopped, or left a withdrawal unanswered,
    and then settles the batch at home through the gate, after this turn or
    before it: after, it finds this turn's record; before, this check sees
    its socket closed and the batch does not run here. (:func:`apply`, at
    home, reads the record instead.)
    Raises :class:`_Isolate` for a batch that must fail alone.

    Bounded: once the batches have run for ``max_time`` seconds, the rest
    wait for the next turn; they are returned (not run, not recorded).
    ``prune``: the record's rows no client can ask for go too
    (:func:`prune_record`)."""
    records = []
    now = time.time()
    started = time.monotonic()
    later: list[Work] = []
    for i, w in enumerate(works):
        if i and time.monotonic() - started >= max_time:
            later = list(works[i:])
            break
        if w.waiting is not None and not w.waiting():
            continue  # its client settles it at home (w.outcomes stays None)
        w.outcomes = _run(conn, w, refusal)
        if w.client:
            records.append((w.client, w.seq, pickle.dumps(w.outcomes), now, w.pid or None))
            if _CRASH:
                _crash_point("mid_batch")
    if records:
        try:
            conn.executemany(_RECORD_PUT, records)
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                conn.execute(_RECORD_SCHEMA)
            elif "no column named pid" in str(exc):
                conn.execute(_RECORD_PID)  # (a record an older litegate made)
            else:
                raise
            conn.executemany(_RECORD_PUT, records)
    if prune:
        prune_record(conn, now)
    return later


def prune_record(conn: WriterConnection, now: float) -> int:
    """Delete the record's rows that no client can ask for any more: older
    than ``PRUNE_AFTER_S`` and of a process that is gone, or with no pid and
    older than ``PRUNE_UNKNOWN_S``. Returns how many went."""
    try:
        old = conn.execute(
            f"SELECT client, pid, at FROM {RECORD} WHERE at < ?", (now - PRUNE_AFTER_S,)
        ).fetchall()
    except sqlite3.OperationalError:  # (no record yet, or one without pids: next time)
        return 0
    gone = [
        (client,)
        for client, pid, at in old
        if (not _alive(pid) if pid else at < now - PRUNE_UNKNOWN_S)
    ]
    if gone:
        conn.executemany(f"DELETE FROM {RECORD} WHERE client = ?", gone)
    return len(gone)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # (there, another user's)
    return True


def _run(conn: WriterConnection, w: Work,
         refusal: Callable[[str], Exception | None]) -> list[Outcome]:  # fmt: skip
    """One batch's statements, each with its own outcome. A plain statement
    that fails undoes itself (SQLite's statement journal); one that kept
    part of its changes needs its batch undone alone (:class:`_Isolate`);
    an executemany, or a statement among several, gets a SAVEPOINT."""
    outcomes: list[Outcome] = []
    single = len(w.statements) == 1 and w.statements[0][2] is False
    for sql, params, many in w.statements:
        if many is None:
            outcomes.append(_call(conn, sql, params))
            continue
        refused = refusal(sql)
        if refused is not None:
            outcomes.append(("error", encode_error(refused)))
            continue
        if single:
            before = conn.total_changes
            try:
                cur = conn.execute(sql, params)
                rows = cur.fetchall()
            except Exception as exc:
                if not conn.in_transaction:
                    raise  # SQLite dropped the transaction (disk full): the turn fails
                if conn.total_changes != before:
                    raise _Isolate(w, conn.guard.typed(exc)) from exc
                outcomes.append(("error", encode_error(conn.guard.typed(exc))))
                continue
            outcomes.append(("ok", cur.rowcount, cur.lastrowid, rows))
            continue
        conn.control(SAVEPOINT)
        try:
            cur = conn.executemany(sql, params) if many else conn.execute(sql, params)
            rows = cur.fetchall()
        except Exception as exc:
            if not conn.in_transaction:
                raise
            conn.control(ROLLBACK_TO)
            conn.control(RELEASE)
            outcomes.append(("error", encode_error(conn.guard.typed(exc))))
            continue
        conn.control(RELEASE)
        outcomes.append(("ok", cur.rowcount, cur.lastrowid, rows))
    return outcomes


def _call(conn: WriterConnection, name: str, kwargs: dict[str, Any]) -> Outcome:
    """A shipped call, in its own SAVEPOINT: its value, or its error (its
    changes undone)."""
    fn = _SHIPPABLE.get(name)
    module = name.rpartition(".")[0]
    if fn is None and module.startswith("litegate."):
        with contextlib.suppress(ImportError):
            importlib.import_module(module)  # registers its functions
        fn = _SHIPPABLE.get(name)
    if fn is None:
        return ("error", encode_error(Error(f"{name} cannot run in the combiner")))
    conn.control(SAVEPOINT)
    try:
        value = fn(conn, **kwargs)
    except Exception as exc:
        if not conn.in_transaction:
            raise
        conn.control(ROLLBACK_TO)
        conn.control(RELEASE)
        return ("error", encode_error(conn.guard.typed(exc)))
    conn.control(RELEASE)
    return ("value", value)


def apply(
    conn: WriterConnection,
    client: int,
    seq: int,
    statements: list[Statement],
    refusal: Callable[[str], Exception | None],
    run: bool = True,
) -> list[Outcome] | None:
    """One batch, once: for a client settling at home what it shipped to a
    combiner that went away. If the record holds ``(client, seq)``, the
    batch committed there: its recorded outcomes, nothing run again; else
    it runs now, and is recorded (``run=False``: None, nothing run)."""
    try:
        row = conn.execute(_RECORD_SEEN, (client,)).fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" not in str(exc):
            raise
        row = None
    if row is not None and row[0] == seq:
        recorded: list[Outcome] = _loads(row[1])
        return recorded
    if not run:
        return None
    w = Work(client, seq, statements, _no_answer, pid=os.getpid())
    try:
        apply_all(conn, [w], refusal)
    except _Isolate as isolated:
        raise isolated.error from None
    assert w.outcomes is not None
    return w.outcomes


def _no_answer(kind: str, payload: Any) -> None:
    pass


def encode_error(exc: BaseException) -> tuple[Any, ...]:
    """A statement's error, as plain data that another process turns back
    into the same exception (:func:`decode_error`)."""
    cls = type(exc)
    return (
        cls.__module__,
        cls.__qualname__,
        tuple(a if isinstance(a, _PLAIN) else str(a) for a in exc.args),
        getattr(exc, "sqlite_errorcode", None),
        getattr(exc, "sqlite_errorname", None),
    )


def decode_error(data: tuple[Any, ...]) -> BaseException:
    module, name, args, code, code_name = data
    cls: Any = None
    if module in ("sqlite3", "_sqlite3") or module.startswith("litegate."):
        with contextlib.suppress(Exception):
            cls = importlib.import_module(module)
            for part in name.split("."):
                cls = getattr(cls, part)
    if not (isinstance(cls, type) and issubclass(cls, BaseException)):
        return Error(f"{module}.{name}: {args[0] if args else ''}")
    try:
        exc = cls(*args)
    except Exception:
        return Error(f"{module}.{name}: {args[0] if args else ''}")
    if code is not None:
        exc.sqlite_errorcode = code  # type: ignore[attr-defined]
        exc.sqlite_errorname = code_name  # type: ignore[attr-defined]
    return exc


# -- the record's outcomes: pickles read back as data only ------------------------


class _DataOnly(pickle.Unpickler):
    """The outcomes kept in the record are data: tuples, lists, dicts,
    strings, numbers, bytes, None. An unpickler that refuses every class and
    function: a record can never run code here, whoever wrote the file."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"litegate's combiner carries data, not {module}.{name}")


def _loads(data: bytes) -> Any:
    return _DataOnly(io.BytesIO(data)).load()


# -- the wire: length-prefixed marshal frames over a Unix socket --------------------
#
# marshal, not pickle: it writes and reads only the built-in types (numbers,
# strings, bytes, tuples, lists, dicts, None), never a class or a function,
# so a message can never run code; and it is what a combined write spends
# its CPU on twice in each direction (a frame read 0.5 us against 1.5 us for
# pickle's unpickler with its classes refused). Its one type beyond data, a
# code object, is never run: as a parameter, SQLite refuses it. A request of
# any shape litegate does not send drops its connection (_statements_ok).
# Both ends are processes of the same user (SO_PEERCRED, checked each way).


class Unsendable(Error):
    """A value that cannot travel between processes (only numbers, strings,
    bytes, None, and tuples, lists and dicts of them do)."""


def _frame(message: Any) -> bytes:
    try:
        body = marshal.dumps(message)
    except ValueError as exc:
        raise Unsendable(
            f"a combined write's parameters or result rows hold a value that cannot travel "
            f"between processes ({exc}); use numbers, strings, bytes or None"
        ) from None
    return _LEN.pack(len(body)) + body


def _send(sock: socket.socket, message: Any) -> None:
    sock.sendall(_frame(message))


def _decode(body: bytes | memoryview) -> Any:
    try:
        return marshal.loads(body)
    except (ValueError, EOFError, TypeError) as exc:
        raise ConnectionError(f"a message litegate does not send ({exc})") from None


class _Reader:
    """Messages from a socket, as few ``recv`` calls as it takes (one, for a
    small message already there), not one for the length and one more."""

    __slots__ = ("_buf", "out", "pid", "sock")

    def __init__(self, sock: socket.socket, pid: int = 0) -> None:
        self.sock = sock
        self.pid = pid  # (the combiner's side: the client's process, from SO_PEERCRED)
        self._buf = bytearray()
        # (the combiner's side: answer bytes the socket did not take yet)
        self.out = bytearray()

    def next(self) -> Any:
        """The next message, waiting for it (the socket's own blocking and
        receive timeout apply: ``BlockingIOError`` when that runs out)."""
        buf = self._buf
        if not buf:
            # The common case: one receive brings exactly one whole message,
            # decoded where it lies (no copy into the buffer and out again).
            part = self.sock.recv(65536)
            have = len(part)
            if have >= 4 and have == 4 + _LEN.unpack_from(part)[0]:
                return _decode(memoryview(part)[4:])
            if not part:
                raise ConnectionError("the other end went away")
            buf += part
        while True:
            have = len(buf)
            if have >= 4:
                end = 4 + _LEN.unpack_from(buf)[0]
                if end > _MAX_MESSAGE:
                    raise ConnectionError("a message larger than litegate sends")
                if have >= end:
                    message = _decode(bytes(buf[4:end]))
                    del buf[:end]
                    return message
                want = end - have
            else:
                want = 65536
            part = self.sock.recv(max(want, 65536))
            if not part:
                raise ConnectionError("the other end went away")
            buf += part

    def arrived(self) -> list[Any]:
        """The combiner's side, on a non-blocking socket: the whole messages
        that one receive completes (none if nothing came, or only part of a
        message: the rest waits here for the next). Never waits: a client
        that stops half way through a message holds up nobody else.
        ``ConnectionError`` once the other end has gone."""
        try:
            part = self.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return []
        if not part:
            raise ConnectionError("the other end went away")
        buf = self._buf
        if not buf and len(part) >= 4 and len(part) == 4 + _LEN.unpack_from(part)[0]:
            return [_decode(memoryview(part)[4:])]  # (the common case, where it lies)
        buf += part
        messages = []
        while len(buf) >= 4:
            end = 4 + _LEN.unpack_from(buf)[0]
            if end > _MAX_MESSAGE:
                raise ConnectionError("a message larger than litegate sends")
            if len(buf) < end:
                break
            messages.append(_decode(bytes(buf[4:end])))
            del buf[:end]
        return messages


def _receive_timeout(sock: socket.socket, seconds: float | None) -> None:
    """Make the (blocking) socket's next receives give up after ``seconds``
    (None: never): the kernel times the wait, so a receive is one system
    call, not a poll and a receive."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(seconds))


def _send_timeout(sock: socket.socket, seconds: float | None) -> None:
    """The same for its sends (a send that runs out raises BlockingIOError)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(seconds))


def _timeval(seconds: float | None) -> bytes:
    if seconds is None:
        sec, usec = 0, 0
    else:
        seconds = max(seconds, 1e-6)
        sec, usec = int(seconds), int((seconds % 1) * 1e6) or (0 if seconds >= 1 else 1)
    return struct.pack("ll", sec, usec)


# A request up to this size goes into the socket at once (a Unix socket's
# send buffer takes ~208 KiB, and a client has one request in flight, and at
# most a withdrawal after it), so only a larger one is sent with a timeout.
_SOCKET_TAKES = 64 * 1024


def address(nonce: int) -> str:
    """The combiner's socket: in Linux's abstract namespace (a leading NUL),
    so that it goes with its process and leaves no file behind. The name
    carries the wire's version (``WIRE``): a process of a litegate that
    speaks another finds no combiner there, and writes at home through the
    gate, as a process that cannot reach one does."""
    return f"\0litegate-combiner-w{WIRE}-{nonce:016x}"


# -- the combiner's side ---------------------------------------------------------------
class Combiner:
    """Serves every process's batches of plain statements, on one thread of
    its own, in turns: it reads what the clients sent (and what this
    process's own writers handed it, :meth:`submit_local`), takes the write
    gate, runs it all in one transaction (:func:`apply_all`), commits, gives
    the gate back and answers each. Started once this process holds the
    combiner role (see ``FileGate``); ``batcher`` is the group commit of the
    Database it serves through (its ``in_turn`` takes the gate and runs a
    transaction, its ``max_batch`` bounds a turn)."""

    # How long a turn waits for the gate before it looks at the sockets again
    # (withdrawals, new batches) and tries again.
    GATE_LOOK = 0.05

    def __init__(
        self,
        batcher: GroupCommit,
        show_busy: Callable[[bool], None],
        resign: Callable[[], None],
    ) -> None:
        self.batcher = batcher
        self._resign = resign  # (gives the role up: another process takes it)
        self._stalled = 0  # turns in a row whose statements waited STALLED_S without running
        # Tells every process whether batches wait in the line or a turn runs
        # (the sidecar's H_COMBINER_BUSY): while not, a client's lone write
        # takes a free gate at home instead of a round trip to this thread.
        self._show_busy = show_busy
        self._shown = True  # (so the first look writes idle over a dead combiner's BUSY)
        self._remote_ns = 0  # when another process's batch last came (CLOCK_MONOTONIC)
        self._pruned = -math.inf  # (monotonic) when a turn last pruned the record: its first does
        self.nonce = secrets.randbits(63) or 1
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(address(self.nonce))
        self._listener.listen(256)
        self._listener.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        # Guards _wake_w, written by any thread to wake this one, against the
        # thread's close of it at the end: a write after the close would go
        # to whatever file took the number meanwhile (the database's, whose
        # first byte it would overwrite). Held only for that one write.
        self._wake_lock = threading.Lock()
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._lock = threading.Lock()  # guards _queue, _sleeping, _stop; no I/O under it
        self._queue: deque[Work] = deque()  # in arrival order, not yet in a turn
        self._sleeping = False
        self._stop = False
        # The client sockets with something to read, as one look found them
        # with the gate held (see _waits); None: not looked at this turn.
        self._ready: set[Any] | None = None
        self.served = 0  # batches answered
        self.statements = 0
        self.turns = 0
        self._thread = threading.Thread(target=self._serve, name="litegate-combiner", daemon=True)
        self._thread.start()

    # -- this process's own writers -----------------------------------------------
    def submit_local(self, statements: list[Statement], deadline: float | None) -> list[Outcome]:
        """A batch of this process's, in the same line as everyone's; waits
        for its outcomes. ``WriteTimeout`` if the deadline passes while it
        still waits for a turn (it is withdrawn: it never runs)."""
        done = threading.Lock()
        done.acquire()
        result: list[tuple[str, Any]] = []

        def answer(kind: str, payload: Any) -> None:
            result.append((kind, payload))
            done.release()

        w = Work(0, 0, statements, answer, sync=self.batcher.sync_level)
        self._enqueue(w)
        if not acquire_until(done, math.inf if deadline is None else deadline):
            with self._lock:
                withdrawn = w in self._queue
                if withdrawn:
                    self._queue.remove(w)
            if withdrawn:
                raise WriteTimeout(WITHDRAWN)
            done.acquire()  # in a turn now: its outcome is ours, however late
        kind, payload = result[0]
        if kind == "done":
            outcomes: list[Outcome] = payload[0]
            return outcomes
        raise payload

    def idle(self) -> bool:
        """Nothing waits in the line, and no other process's batch came in
        the last ``QUIET_NS``: a batch of this process's own would be alone in the
        next turn, so it runs at home through the gate instead (the same one
        transaction, without two hops between threads). While other
        processes' batches keep coming, this process's join the line, in
        arrival order: writing at home between the turns, it took most of
        the writes (Jain's index over 4 and 8 writing processes 0.33 and
        0.22, against 0.997 and 0.995 in line)."""
        if self._queue:
            return False
        return not self._remote_ns or time.monotonic_ns() - self._remote_ns >= QUIET_NS

    def _enqueue(self, w: Work) -> None:
        with self._lock:
            if self._stop:
                raise Closed("the combiner stopped")
            self._queue.append(w)
            wake, self._sleeping = self._sleeping, False
        if wake:
            self._ring()

    def _ring(self) -> None:
        """Wake the thread from its poll (unless it has ended)."""
        with self._wake_lock:
            if self._wake_w >= 0:
                with contextlib.suppress(OSError):
                    os.write(self._wake_w, b"x")

    # -- the thread -----------------------------------------------------------------
    def _serve(self) -> None:
        try:
            while True:
                with self._lock:
                    if self._stop:
                        break
                    idle = not self._queue
                    self._sleeping = idle
                # (this thread alone writes the word: idle before it sleeps,
                # busy once batches are in line, before their turn)
                self._show(not idle)
                self._poll(1.0 if idle else 0.0)
                if idle:
                    with self._lock:
                        waiting = bool(self._queue)
                    self._show(waiting)
                self._turn()
        finally:
            with self._lock:  # (also when a turn raised: nothing joins the line now)
                self._stop = True
            self._fail_queued(Closed("the combiner stopped; try again"))
            self._teardown()

    def _show(self, busy: bool) -> None:
        if busy != self._shown:
            self._shown = busy
            self._show_busy(busy)

    def _poll(self, timeout: float) -> None:
        """Accept clients and read what they sent (batches join the line,
        withdrawals are answered)."""
        for key, events in self._selector.select(timeout):
            if key.fileobj is self._listener:
                self._accept()
            elif key.fileobj == self._wake_r:
                with contextlib.suppress(OSError):
                    os.read(self._wake_r, 4096)
            else:
                if events & selectors.EVENT_WRITE:
                    self._flush(key.data)
                if events & selectors.EVENT_READ:
                    self._read(key.data)

    def _turn(self) -> None:
        """One transaction for what waits (the first batches of the line, up
        to the group commit's bound of statements), then the answers."""
        with self._lock:
            works: list[Work] = []
            n = 0
            while self._queue and n < self.batcher.max_batch:
                w = self._queue.popleft()
                works.append(w)
                n += len(w.statements)
        later: list[Work] = []
        while works:
            # A turn commits as durably as the most demanding of its batches'
            # processes asks (a FULL client's batch in a NORMAL combiner's
            # turn: that turn's COMMIT syncs the WAL): each write that returns
            # is as durable as its own Database's settings say.
            sync = max(w.sync for w in works)
            try:
                later = self.batcher.in_turn(
                    partial(self._apply_timed, works=works),
                    time.monotonic() + self.GATE_LOOK,
                    sync_level=sync,
                )
            except _Isolate as isolated:  # it fails alone; the rest run again
                isolated.work.answer("failed", isolated.error)
                works.remove(isolated.work)
                continue
            except WriteTimeout:
                # The gate is busy (a long transaction): back to the head of
                # the line, look at the sockets (withdrawals), try again.
                with self._lock:
                    self._queue.extendleft(reversed(works))
                return
            except BaseException as exc:  # the transaction failed as a whole
                for w in works:
                    w.answer("failed", exc)
                return
            break
        if later:  # past the turn's time bound: first in line for the next turn
            with self._lock:
                self._queue.extendleft(reversed(later))
        if not works:
            return
        self.turns += 1
        with self._lock:
            more = bool(self._queue)
        self._show(more)  # (before the answers: a client answered looks at it at once)
        served = [w for w in works if w.outcomes is not None]  # (None: settled at home)
        for w in served:
            self.served += 1
            self.statements += len(w.statements)
            w.answer("done", (w.outcomes, len(served)))
        if self._stalled >= STALLS and not self._stop:
            # Its turns keep waiting for this process's GIL (another thread
            # runs CPU-bound Python) with the gate held: every process's
            # writes wait too. Another process takes the role.
            self._resign()

    def _apply_timed(self, conn: WriterConnection, works: list[Work]) -> list[Work]:
        """:func:`apply_all`, and how long its statements waited without
        running on this thread (its process's GIL held by another thread,
        or the CPU by other processes): a turn holds the gate meanwhile."""
        wall, cpu = time.perf_counter(), time.thread_time()
        self._ready = None  # (the sockets are looked at again, the gate held)
        try:
            now = time.monotonic()
            prune = now >= self._pruned + PRUNE_EVERY_S
            if prune:
                self._pruned = now
            return apply_all(conn, works, refusal, self.batcher.max_time, prune)
        finally:
            stalled = (time.perf_counter() - wall) - (time.thread_time() - cpu)
            self._stalled = self._stalled + 1 if stalled >= STALLED_S else 0

    def _fail_queued(self, exc: BaseException) -> None:
        """The combiner stops: what waits in its line never ran. This
        process's own batches get ``exc`` (``Closed``: their leaders run them
        at home); other processes' get no answer: their sockets close with
        the server, and each client settles its batch at home, once (the
        record says it did not commit here)."""
        with self._lock:
            works, self._queue = list(self._queue), deque()
        for w in works:
            if not w.client:
                w.answer("failed", exc)

    # -- clients ---------------------------------------------------------------------
    def _accept(self) -> None:
        with contextlib.suppress(BlockingIOError, InterruptedError):
            sock, _ = self._listener.accept()
            pid = _trusted(sock)
            if pid is None:
                sock.close()  # (that client settles at home, through the gate)
                return
            # (non-blocking: the combiner's thread never waits for one client,
            # neither for the rest of its message nor to hand it an answer)
            sock.setblocking(False)
            self._selector.register(sock, selectors.EVENT_READ, _Reader(sock, pid))

    def _read(self, reader: _Reader) -> None:
        """What a client sent: the whole messages one receive completes (a
        message's rest, still on its way, waits for the next poll). A client
        that sends what litegate does not send is dropped (it settles at
        home)."""
        try:
            for message in reader.arrived():
                if not self._take(reader, message):
                    raise ConnectionError("a message litegate does not send")
        except (OSError, ConnectionError):
            self._drop(reader.sock)

    def _answer(self, reader: _Reader, seq: int, kind: str, payload: Any) -> None:
        """A batch's answer to its client (:func:`_answer_frame`): sent now
        as far as the socket takes it, the rest when it can take more (a
        client that does not read, stopped or slow, holds up nobody else)."""
        frame = _answer_frame(seq, kind, payload)
        sock = reader.sock
        if reader.out:  # (earlier bytes still wait: in order, after them)
            reader.out += frame
            return
        try:
            if _CRASH == "answering":
                sock.send(frame[: len(frame) // 2])
                _crash_point("answering")
            sent = sock.send(frame)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            return  # (the client went away: it settles at home)
        if sent < len(frame):
            reader.out += frame[sent:]
            with contextlib.suppress(KeyError, ValueError):
                self._selector.modify(sock, selectors.EVENT_READ | selectors.EVENT_WRITE, reader)

    def _flush(self, reader: _Reader) -> None:
        """More of the answers a client's socket did not take at once."""
        try:
            sent = reader.sock.send(reader.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(reader.sock)
            return
        del reader.out[:sent]
        if not reader.out:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.modify(reader.sock, selectors.EVENT_READ, reader)

    def _take(self, reader: _Reader, message: Any) -> bool:
        """A request joins the line, or a cancel takes one out of it; False
        for anything else."""
        if type(message) is not tuple or not message:
            return False
        if message[0] == "run" and len(message) == 5:
            _, client, seq, statements, sync = message
            if not (type(client) is int and type(seq) is int and _statements_ok(statements)):
                return False
            # (its process's PRAGMA synchronous: 0 OFF .. 3 EXTRA)
            sync = sync if type(sync) is int and 0 <= sync <= 3 else 0
            if _CRASH:
                _crash_point("received")
            self._remote_ns = time.monotonic_ns()
            w = Work(client, seq, statements, partial(self._answer, reader, seq),
                     partial(self._waits, reader.sock), sync, reader.pid)  # fmt: skip
            with self._lock:
                self._queue.append(w)
            return True
        if message[0] == "cancel" and len(message) == 3:
            _, client, seq = message
            with self._lock:
                w2 = next((w for w in self._queue if (w.client, w.seq) == (client, seq)), None)
                if w2 is not None:
                    self._queue.remove(w2)
            if w2 is not None:
                self._answer(reader, seq, "cancelled", None)
            return True
        return False

    def _waits(self, sock: socket.socket) -> bool:
        """Does this client still wait for its batch? Asked with the gate
        held, for each batch of a turn (:func:`apply_all`). A client gives
        up only by closing its socket (or dying), which leaves the socket
        with something to read; so one look at every socket a turn (epoll,
        level-triggered: new messages, or the end of a closed one), and a
        peek only at those that have something, rather than a system call
        for each batch (a peek a batch cost the combiner 6 us a write at 8
        processes, docs/results/queue.md)."""
        if sock.fileno() < 0:
            return False  # dropped here (it sent what could not be read)
        if self._ready is None:
            self._ready = {
                key.fileobj
                for key, events in self._selector.select(0)
                if events & selectors.EVENT_READ
            }
        return sock not in self._ready or _open(sock)

    def _drop(self, sock: socket.socket) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(sock)
        sock.close()

    def stop(self) -> None:
        """Stop serving: the listener closes (clients then take the role or
        run at home); batches still waiting for a turn get :class:`Closed`."""
        with self._lock:
            self._stop = True
        self._ring()
        if self._thread is not threading.current_thread():
            self._thread.join(5)

    def _teardown(self) -> None:
        for key in list(self._selector.get_map().values()):
            obj = key.fileobj
            if isinstance(obj, socket.socket) and obj is not self._listener:
                obj.close()
        self._selector.close()
        self._listener.close()
        os.close(self._wake_r)
        with self._wake_lock:
            os.close(self._wake_w)
            self._wake_w = -1


def _trusted(sock: socket.socket) -> int | None:
    """The pid of the process at the other end (0: not visible from here) if
    it is one of this user's (or root's), else None: serve only those, since
    an abstract socket has no file permissions and a batch runs with this
    process's rights."""
    try:
        pid, uid, _gid = struct.unpack(
            "3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        )
    except OSError:
        return None
    return pid if uid in (os.getuid(), 0) else None


def stopped(pid: int | None) -> bool:
    """Is process ``pid`` stopped (SIGSTOP, Ctrl-Z) or held by a debugger?
    Its state in ``/proc`` (False when it cannot be read)."""
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rpartition(b")")[2].split(None, 1)[0]
    except (OSError, IndexError):
        return False
    return state in (b"T", b"t")


def _open(sock: socket.socket) -> bool:
    """Is the client at the other end still there (not closed, not dead)?
    A look that takes nothing (what it sent is read later). Asked of the
    kernel (POLLRDHUP: the other end has shut down), not by peeking at a
    byte: a client that gave up on an unanswered withdrawal closes with that
    withdrawal still unread, and a peek would read its byte as a client
    still there (a batch then ran whose client had been told it never
    would)."""
    try:
        fd = sock.fileno()
        if fd < 0:
            return False
        look = select.poll()
        look.register(fd, select.POLLIN | select.POLLRDHUP)
        events = look.poll(0)
    except OSError:
        return False
    gone = select.POLLRDHUP | select.POLLHUP | select.POLLERR | select.POLLNVAL
    return not any(ev & gone for _fd, ev in events)


def _statements_ok(statements: Any) -> bool:
    """The shape litegate sends: a list of (sql, parameters, many) with many
    a bool, or of (a shippable function's name, its keyword arguments, None)."""
    if type(statements) is not list or not statements:
        return False
    for st in statements:
        if type(st) is not tuple or len(st) != 3 or type(st[0]) is not str:
            return False
        many = st[2]
        if many is None:
            if type(st[1]) is not dict:
                return False
        elif type(many) is not bool:
            return False
    return True


def _answer_frame(seq: int, kind: str, payload: Any) -> bytes:
    """An answer to a client, framed: its outcomes, a batch-wide error, or
    its withdrawal."""
    message: tuple[Any, ...]
    if kind == "done":
        if _CRASH:
            _crash_point("committed")
        message = ("done", seq, *payload)  # its outcomes, and how many batches shared the turn
    elif kind == "failed":
        message = ("failed", seq, encode_error(payload))
    else:
        message = ("cancelled", seq)
    try:
        return _frame(message)
    except Unsendable as exc:  # (a result row with a value marshal does not write)
        return _frame(("failed", seq, encode_error(exc)))


# -- a client's side -------------------------------------------------------------------


class Unsure(Exception):
    """The batch was sent and no answer came: the combiner went away."""


class Unsent(Exception):
    """The batch's deadline passed while its request was still being sent
    (the combiner did not read it: its process stopped?). The connection is
    closed: the combiner drops the part it got, and nothing of it runs."""


class Stopped(Unsure):
    """No answer within a standing look (``Shipper.LOOK``), and the
    combiner's process is stopped: the connection is closed (the combiner
    will not run the batch) and the batch is settled at home."""


class Unanswered(Unsure):
    """The batch's deadline passed and the combiner did not answer its
    withdrawal within ``CANCEL_WAIT`` (its process stopped?): the
    connection is closed, so the combiner will not run it now (it looks at
    its clients' sockets with the gate held)."""


class Shipper:
    """One client of the combiner: ships batches of plain statements as
    ``(client, seq)`` requests, one at a time (its group commit has one
    leader at a time). ``sync``: its process's PRAGMA synchronous, sent with
    each batch (the turn commits at least that durably)."""

    # The standing receive timeout: how often a long wait looks at its
    # deadline, and at whether the combiner's process is stopped.
    LOOK = 0.5

    def __init__(self, sync: int = 0) -> None:
        self.sync = sync
        self.client = secrets.randbits(62) + 1
        self.seq = 0
        self._sock: socket.socket | None = None
        self._reader: _Reader | None = None
        self._wait = -1.0  # the socket's receive timeout, as last set
        self._nonce = 0
        self.pid = 0  # the combiner's process, as its socket says
        self.shipped = 0  # batches the combiner answered
        self.alone = 0  # the last ones, in a row, had a turn to themselves
        self.at_home = 0  # batches resolved at home after the combiner went away

    def connect(self, nonce: int) -> bool:
        """Be connected to the combiner published as ``nonce``; False if it
        cannot be reached."""
        if self._sock is not None and self._nonce == nonce:
            return True
        self.close()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(address(nonce))
        except OSError:
            sock.close()
            return False
        pid = _trusted(sock)  # (an abstract name any user can bind: serve only ours)
        if pid is None:
            sock.close()
            return False
        self.pid = pid
        self._sock, self._reader, self._nonce = sock, _Reader(sock), nonce
        self._wait = -1.0
        return True

    def ship(self, statements: list[Statement], deadline: float | None) -> list[Outcome]:
        """Send a batch and wait for its outcomes. ``WriteTimeout`` if the
        deadline passed while it still waited at the combiner (withdrawn:
        nothing of it ran); :class:`Unsure` (with the request's seq) if the
        combiner went away after it was sent."""
        sock, reader = self._sock, self._reader
        assert sock is not None
        assert reader is not None
        self.seq += 1
        seq = self.seq
        frame = _frame(("run", self.client, seq, statements, self.sync))
        try:
            if len(frame) > _SOCKET_TAKES and deadline is not None:
                # A request larger than the socket takes at once waits for
                # the combiner to read it: not past the deadline (a stopped
                # combiner reads nothing).
                _send_timeout(sock, max(deadline - time.monotonic(), 1e-6))
                try:
                    sock.sendall(frame)
                finally:
                    with contextlib.suppress(OSError):
                        _send_timeout(sock, None)
            else:
                sock.sendall(frame)
        except BlockingIOError as exc:  # (the send timed out: part of it went)
            self.close()
            raise Unsent(seq) from exc
        except OSError as exc:
            self.close()
            raise Unsure(seq) from exc
        cancelled = 0.0  # (when the withdrawal was asked for)
        while True:
            try:
                if cancelled:
                    left: float | None = cancelled + CANCEL_WAIT - time.monotonic()
                    if left is not None and left <= 0:
                        self.close()
                        raise Unanswered(seq)
                else:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise BlockingIOError  # (already late: withdraw it)
                # The kernel times the wait: a standing LOOK seconds (set once),
                # or what is left of the deadline when that is shorter.
                wait = self.LOOK if left is None or left > self.LOOK else left
                if wait != self._wait:
                    _receive_timeout(sock, wait)
                    self._wait = wait
                answer = reader.next()
            except BlockingIOError:  # the receive timed out
                late = deadline is not None and time.monotonic() >= deadline
                if not cancelled and stopped(self.pid):
                    # Its process is stopped: the batch is settled at home
                    # (the record says whether it ran; closed, it will not),
                    # run there if there is time left, else withdrawn.
                    self.close()
                    raise (Unanswered(seq) if late else Stopped(seq)) from None
                if cancelled or not late:
                    continue  # a standing look ran out, or the withdrawal's wait (above)
                cancelled = time.monotonic()
                try:
                    _send(sock, ("cancel", self.client, seq))
                except OSError as exc:
                    self.close()
                    raise Unsure(seq) from exc
                continue
            except (OSError, ConnectionError) as exc:
                self.close()
                raise Unsure(seq) from exc
            if answer[1] != seq:
                continue  # (a late answer to an earlier, cancelled request)
            kind = answer[0]
            if kind == "done":
                self.shipped += 1
                # (turns to itself in a row: shipping gained nothing)
                self.alone = self.alone + 1 if len(answer) > 3 and answer[3] == 1 else 0
                outcomes: list[Outcome] = answer[2]
                return outcomes
            if kind == "cancelled":
                raise WriteTimeout(WITHDRAWN)
            raise decode_error(answer[2])

    def close(self) -> None:
        sock, self._sock, self._reader = self._sock, None, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()


class Ship:
    """A client process's hook in its group commit (``GroupCommit.ship``):
    a batch of plain statements goes to the combiner of another process; a
    batch that cannot (a ``transact`` function, parameters that are not plain
    values) or finds no combiner runs here, through the gate. If no process
    combines, this one takes the role."""

    def __init__(self, gate: Role, sync: int = 0) -> None:
        self.gate = gate
        self.shipper = Shipper(sync)
        self.away_until = 0.0  # (monotonic) writes run at home until then (Unanswered)
        self.unanswered = 0  # withdrawals the combiner did not answer (Unanswered)

    def __call__(
        self,
        batch: list[Request],
        deadline: float | None,
        in_turn: Callable[[Callable[[WriterConnection], Any], float | None], Any],
    ) -> bool:
        if self.here(lone=False):
            return False  # through the gate, here
        combiner = self.gate.combiner
        one_row = len(batch) == 1 and batch[0].fn is None and not batch[0].many
        if combiner is None and one_row and not self.ships_one():
            return False  # (one row under NORMAL: its turn at the gate is faster)
        statements: list[Statement] = []
        for r in batch:
            if r.fn is not None:
                call = _call_of(r.fn)
                if call is None:
                    return False  # Python that cannot travel: the batch runs here
                statements.append(call)
            elif _plain(r.params, r.many):
                statements.append((r.sql, list(r.params) if r.many else r.params, r.many))
            else:
                return False
        if combiner is not None:  # others' batches wait: ours joins their turn, through memory
            try:
                outcomes = combiner.submit_local(statements, deadline)
            except Closed:
                return False  # it stopped meanwhile: run here
            _settle(batch, outcomes)
            return True
        nonce = self.gate.combiner_nonce()
        if nonce is None or not self.shipper.connect(nonce):
            self.gate.try_combine()  # nobody combines (any more): this process will
            return False
        _settle(batch, self._ship(statements, deadline, in_turn))
        return True

    def one(self, batcher: GroupCommit, sql: str, params: Any, limit: float) -> WriteOutcome:
        """``db.execute()`` of a thread alone in a client process: shipped at
        once, a batch of one, without the group commit's queue (its
        request, its leader's hand-offs: 76-84 -> 65-69 us of a client's
        CPU a write at 8 processes, docs/results/queue.md). None if it must
        take the usual way: this process combines, the parameters cannot
        travel, no combiner is reachable (that way takes the role), or
        another thread of this process leads or waits (the write joins its
        batch). ``limit``: the write's timeout in seconds (inf: none)."""
        if self.gate.combiner is not None or not self.ships_one() or not _plain(params, False):
            return None
        if not batcher.lead_alone():
            return None
        done = False
        try:
            # (the lead first: the shipper, its socket included, is the leader's)
            nonce = self.gate.combiner_nonce()
            if nonce is None or not self.shipper.connect(nonce):
                return None
            deadline = deadline_of(limit)
            outcome = self._ship([(sql, params, False)], deadline, batcher.in_turn)[0]
            done = outcome[0] == "ok"
        finally:
            batcher.end_alone(done)
        if done:
            return outcome[1], outcome[2], outcome[3]
        raise decode_error(outcome[1])

    def _ship(self, statements: list[Statement], deadline: float | None,
              in_turn: Callable[[Callable[[WriterConnection], Any], float | None], Any],
              ) -> list[Outcome]:  # fmt: skip
        try:
            return self.shipper.ship(statements, deadline)
        except Unsent:
            self._away()
            raise WriteTimeout(UNSENT.format(pid=self.gate.combiner_pid(), away=AWAY_S)) from None
        except Unsure as unsure:
            # The combiner went away, stopped, or left the batch's withdrawal
            # unanswered, after it was sent: settle it here, once (the record,
            # read with the gate held, says whether it committed there; the
            # connection closed, nothing of it runs there any more). Withdrawn
            # (its deadline passed), it does not run here either.
            withdrawn = isinstance(unsure, Unanswered)
            if isinstance(unsure, (Stopped, Unanswered)):
                self._away()
            self.gate.try_combine()
            settle = partial(
                apply,
                client=self.shipper.client,
                seq=unsure.args[0],
                statements=statements,
                refusal=refusal,
                run=not withdrawn,
            )
            # (however long the gate takes: a combiner stopped in the middle of
            # its turn holds it and may yet commit this batch, and a timeout
            # here could not say whether it ran)
            outcomes: list[Outcome] | None = in_turn(settle, math.inf)
            if outcomes is None:
                raise WriteTimeout(
                    UNANSWERED.format(pid=self.gate.combiner_pid(), away=AWAY_S)
                ) from None
            self.shipper.at_home += 1
            return outcomes

    def _away(self) -> None:
        """The combiner does not answer (its process stopped?): this process
        writes at home for ``AWAY_S`` (see :meth:`here`)."""
        self.unanswered += 1
        self.away_until = time.monotonic() + AWAY_S

    def ships_one(self) -> bool:
        """Does a batch of one single-row statement ship from this client
        process? Only if its commits sync (``SHIP_ONE_FROM``; or always, with
        ``LITEGATE_COMBINE_SHIP_ONE=always``), or when every write ships
        (``LITEGATE_COMBINE_QUIET_MS=inf``, the protocol's tests)."""
        return ALWAYS_SHIP or self.shipper.sync >= SHIP_ONE_FROM

    def here(self, lone: bool) -> bool:
        """Does a write of this process run here, through the gate, rather
        than ship? ``lone``: a lone write that found the gate free (it then
        runs without a queue); else a batch that found it taken.

        The combiner's own process: while no other process's batch comes
        (``Combiner.idle``): a turn would run ours alone, after a hop to the
        combiner's thread and back (a one-job put cost 3.3x the CPU). A
        client: a lone write while the combiner has been quiet (no batch in
        line, no turn) for ``QUIET_NS``; either, once its last ``ALONE``
        batches each had a turn to themselves and the combiner has no line
        now. Shipped, such a write would run alone, after a round trip to
        another process's thread (a one-row put 0.21 against 0.04 ms, and 37
        ms while that process ran CPU-bound Python on another thread:
        docs/results/queue.md, "Combined writes for the queue"). Under load
        the combiner is busy, and every write that finds the gate taken
        ships, to share its next turn."""
        combiner = self.gate.combiner
        if combiner is not None:
            return combiner.idle()
        if self.away_until:  # (the combiner did not answer lately: see Unanswered)
            now = time.monotonic()
            if now < self.away_until:
                return True
            if stopped(self.shipper.pid):  # (still stopped: not yet)
                self.away_until = now + AWAY_S
                return True
            self.away_until = 0.0
        if ALWAYS_SHIP:
            return False
        quiet = self.gate.combiner_quiet_ns()
        if lone and quiet >= QUIET_NS:
            return True
        return quiet > 0 and self.shipper.alone >= ALONE

    def close(self) -> None:
        self.shipper.close()


def _settle(batch: list[Request], outcomes: list[Outcome]) -> None:
    for r, outcome in zip(batch, outcomes, strict=True):
        if outcome[0] == "ok":
            r.result = (outcome[1], outcome[2], outcome[3])
        elif outcome[0] == "value":
            r.value = outcome[1]
            r.result = (0, None, [])
        else:
            r.error = decode_error(outcome[1])


def _data(value: Any, depth: int = 0) -> bool:
    """Plain data all the way down, of the exact built-in types the wire
    carries (an int subclass such as an enum member is not: it runs at home)."""
    t = type(value)
    if t in _PLAIN_TYPES:
        return True
    if depth > 8:
        return False
    if t is tuple or t is list:
        return all(_data(v, depth + 1) for v in value)
    if t is dict:
        return all(type(k) in (str, int) and _data(v, depth + 1) for k, v in value.items())
    return False


def _plain(params: Any, many: bool) -> bool:
    """Parameters that mean the same in another process: plain values in a
    tuple, list or dict (not objects that this process's sqlite3 adapters
    would turn into values)."""
    if not many:
        if isinstance(params, dict):
            return all(type(v) in _PLAIN_TYPES for v in params.values())
        return isinstance(params, (tuple, list)) and all(type(v) in _PLAIN_TYPES for v in params)
    if not isinstance(params, (list, tuple)):
        return False  # (a generator: shipping would consume it)
    return all(_plain(row, False) for row in params)


_PLAIN_TYPES: frozenset[type] = frozenset((*_PLAIN, bool))
