"""A throwaway PostgreSQL server for tests and benchmarks.

:class:`PgServer` runs ``initdb`` into a temporary directory, starts the
server with ``pg_ctl`` listening only on a Unix socket (never TCP), creates a
database ``litegate`` owned by the superuser ``litegate``, and on
:meth:`~PgServer.close` stops it and removes what it created::

    with PgServer() as pg:
        conn = psycopg.connect(pg.url)

Password authentication is real (scram-sha-256 with a random password), so
tests can check that wrong credentials fail. As root, ``initdb`` and
``postgres`` refuse to run, so the cluster runs as an unprivileged system user
(``postgres``, else ``nobody``) that owns the data and socket directories.

Everything that stops a server goes by PID: the postmaster's from
``postmaster.pid`` and, on Linux, every process whose working directory is the
cluster's data directory (the postmaster and all its children ``chdir`` there),
so a start that failed half-way leaves nothing running either.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import math
import os
import re
import secrets
import shlex
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import quote

if TYPE_CHECKING:
    from psycopg import sql

SUPERUSER = "litegate"
"""The bootstrap superuser ``initdb -U`` creates."""

DATABASE = "litegate"
"""The database :meth:`PgServer.start` creates, which :attr:`PgServer.url` names."""

BINDIR_ENV = "LITEGATE_PG_BINDIR"

MISSING_HELP = (
    "PostgreSQL server binaries (initdb, pg_ctl, postgres) were not found: install them "
    "(e.g. `apt install postgresql-15`) or set LITEGATE_PG_BINDIR to the directory holding them."
)

_BINARIES = ("initdb", "pg_ctl", "postgres")

# Tried in order when we run as root; initdb and postgres refuse uid 0.
_UNPRIVILEGED_USERS = ("postgres", "nobody")

# sun_path holds 108 bytes with its NUL; the server appends "/.s.PGSQL.<port>" (up to 15
# bytes) and its lock file adds ".lock". 80 leaves room without counting exactly.
_SOCKET_DIR_MAX = 80

_MODES = ("smart", "fast", "immediate")


class PgUnavailable(RuntimeError):
    """No server can run here: the binaries, psycopg or an unprivileged user is missing."""


def _has_binaries(directory: Path) -> bool:
    return all(
        (directory / name).is_file() and os.access(directory / name, os.X_OK) for name in _BINARIES
    )


def _version_key(bindir: Path) -> tuple[int, ...]:
    # /usr/lib/postgresql/<version>/bin: 9.6 < 10 < 15, numerically
    parts = re.findall(r"\d+", bindir.parent.name)
    return tuple(int(p) for p in parts) if parts else (-1,)


def find_bindir() -> Path | None:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``, or ``None``.

    Looks at ``$LITEGATE_PG_BINDIR``, then ``initdb`` on ``PATH`` (symlinks
    resolved, since distributions link only some binaries into ``/usr/bin``),
    then ``pg_config --bindir`` (which libpq's dev package may ship without the
    server, hence the check), then the newest ``/usr/lib/postgresql/*/bin``.
    A candidate counts only if it holds all three binaries.
    """
    from_env = os.environ.get(BINDIR_ENV)
    if from_env:
        directory = Path(from_env).expanduser().resolve()
        if _has_binaries(directory):
            return directory
    on_path = shutil.which("initdb")
    if on_path:
        directory = Path(on_path).resolve().parent
        if _has_binaries(directory):
            return directory
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            out = ""
        if out and _has_binaries(Path(out)):
            return Path(out).resolve()
    for directory in sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_version_key)[::-1]:
        if _has_binaries(directory):
            return directory
    return None


class _RunAs(NamedTuple):
    name: str
    uid: int
    gid: int


def _unprivileged_user() -> _RunAs | None:
    """Who runs initdb and the server: ``None`` (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    import pwd  # Unix only, like everything here; imported late so the module always imports

    for name in _UNPRIVILEGED_USERS:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        if entry.pw_uid != 0:
            return _RunAs(name, entry.pw_uid, entry.pw_gid)
    raise PgUnavailable(
        "running as root, and PostgreSQL refuses to run as root, but no unprivileged user "
        f"({', '.join(_UNPRIVILEGED_USERS)}) exists to run it as: create one "
        "(e.g. `useradd --system postgres`) or run as a regular user."
    )


def _traversable(path: Path, who: _RunAs) -> bool:
    """Whether ``who`` can reach ``path``: search permission on it and every parent.

    Follows POSIX's classes (owner, then group, then other, exclusively); ACLs
    are ignored, which at worst sends the cluster to a private temp dir.
    """
    groups = set(os.getgrouplist(who.name, who.gid))
    for p in (path, *path.parents):
        st = p.stat()
        if st.st_uid == who.uid:
            bit = stat.S_IXUSR
        elif st.st_gid in groups:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return False
    return True


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie counts as gone: it runs nothing)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, belongs to someone else
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        return True  # no /proc (not Linux): signal 0 is all we know
    return state not in ("Z", "X")


def _wait_reaped(pids: list[int], timeout: float) -> None:
    """Wait (bounded) until exited PIDs have been reaped, so that they are gone for good.

    The postmaster is pg_ctl's orphan: its parent is init, or us when we are PID 1 or a
    subreaper, and then reaping it is our job. Some inits reap lazily (a second or two):
    until then the PID still answers ``kill(pid, 0)``. A zombie runs nothing, so giving
    up after ``timeout`` is harmless.
    """
    deadline = time.monotonic() + timeout
    left = list(pids)
    while left:
        for pid in list(left):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                left.remove(pid)
            except PermissionError:
                pass
        if not left or time.monotonic() >= deadline:
            return
        time.sleep(0.02)


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    """Poll until every PID has exited or ``timeout`` passes; the ones still alive."""
    deadline = time.monotonic() + timeout
    while True:
        left = [pid for pid in pids if _alive(pid)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.02)


class PgServer:
    """A PostgreSQL cluster in a temporary directory, reachable only through a Unix socket.

    ``base`` is the directory the cluster goes under (created if missing; a
    fresh temp dir when ``None``). It gets ``data/`` (the cluster),
    ``sock/`` (the socket) and ``postgres.log`` (initdb, pg_ctl and server
    output). ``data`` must not exist yet. Two cases move a directory elsewhere:
    a socket path too long for ``sun_path`` gets a short temp dir of its own,
    and, as root, a ``base`` the server's user cannot reach (pytest's
    ``tmp_path`` sits under a 0700 directory) gets the cluster in a private
    temp dir; the log stays in ``base`` either way.

    :meth:`close` removes everything created: the whole ``base`` when it was a
    temp dir of ours, else the data and socket directories, leaving the log.
    """

    def __init__(
        self, base: str | os.PathLike[str] | None = None, *, fsync: bool = False, port: int = 5432
    ) -> None:
        if not 0 < port < 65536:
            raise ValueError(f"port must be in 1..65535, not {port}")
        # Every check that can fail runs before anything is created on disk.
        bindir = find_bindir()
        if bindir is None:
            raise PgUnavailable(MISSING_HELP)
        if importlib.util.find_spec("psycopg") is None:
            raise PgUnavailable(
                "psycopg is needed to drive the server: pip install 'litegate[postgres]'."
            )
        self.bindir: Path = bindir
        self._runas = _unprivileged_user()
        self.fsync = fsync
        self.port = port
        self.password: str = secrets.token_urlsafe(24)
        self._owner_pid = os.getpid()  # a forked child must not stop its parent's server
        self._initialized = False
        self._bootstrapped = False
        self._closed = False
        # What close() removes, in order; appended as each directory is created.
        self._owned: list[Path] = []
        try:
            self._layout(base)
        except BaseException:
            self._remove_owned()
            raise
        _track(self)

    # -- layout ----------------------------------------------------------------

    def _mkdir(self, path: Path, mode: int) -> Path:
        path.mkdir(mode=mode)
        path.chmod(mode)  # mkdir's mode goes through the umask
        return path

    def _layout(self, base: str | os.PathLike[str] | None) -> None:
        root_mode = 0o755 if self._runas else 0o700  # root: the server's user must traverse
        if base is None:
            self.base = Path(tempfile.mkdtemp(prefix="litegate-pg-")).resolve()
            self._owned.append(self.base)
            self.base.chmod(root_mode)
        else:
            self.base = Path(base).absolute()
            missing = [p for p in (self.base, *self.base.parents) if not p.exists()]
            for p in reversed(missing):  # outermost first
                self._mkdir(p, 0o755)
            self.base = self.base.resolve()
        self.log_path: Path = self.base / "postgres.log"

        cluster = self.base
        if self._runas and not _traversable(cluster, self._runas):
            cluster = self._private_dir("litegate-pg-", limit=None)
        self.data_dir: Path = cluster / "data"
        self._mkdir(self.data_dir, 0o700)
        self._owned.append(self.data_dir)
        self._give(self.data_dir)

        sock = cluster / "sock"
        if len(os.fsencode(sock)) > _SOCKET_DIR_MAX:
            sock = self._private_dir("lgpg-", limit=_SOCKET_DIR_MAX)
        else:
            self._mkdir(sock, root_mode)
            self._owned.append(sock)
        self._give(sock)
        self.socket_dir: str = str(sock)

    def _private_dir(self, prefix: str, limit: int | None) -> Path:
        """A temp dir of ours the server's user can reach (and short enough, given ``limit``)."""
        for parent in dict.fromkeys((tempfile.gettempdir(), "/tmp")):
            if not os.path.isdir(parent):
                continue
            # mkdtemp appends 8 random characters to the prefix
            if limit is not None and len(os.fsencode(parent)) + len(prefix) + 9 > limit:
                continue
            if self._runas and not _traversable(Path(parent), self._runas):
                continue
            path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
            self._owned.append(path)
            path.chmod(0o755 if self._runas else 0o700)
            return path
        raise PgUnavailable(
            "no temporary directory fits the server (reachable by its user, short enough for a "
            "Unix socket path): set TMPDIR to a short directory such as /tmp."
        )

    def _give(self, path: Path) -> None:
        if self._runas:
            os.chown(path, self._runas.uid, self._runas.gid)

    def _remove_owned(self) -> None:
        # Newest first: a dir inside another one of ours goes before its parent.
        for path in reversed(self._owned):
            shutil.rmtree(path, ignore_errors=True)
        self._owned.clear()

    # -- commands --------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        # PG* variables (PGDATA, PGPORT, PGHOST ...) would steer the tools; drop them.
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"  # messages in the log stay greppable whatever the locale
        return env

    def _run(self, tool: str, *args: str, timeout: float) -> subprocess.CompletedProcess[bytes]:
        """Run a PostgreSQL tool as the server's user, its output appended to the log.

        The log is opened here and handed down as stdout instead of ``pg_ctl
        -l``: the server's user may be unable to reach ``base``, we are not,
        and the postmaster inherits the descriptor all the same.
        """
        argv = [str(self.bindir / tool), *args]
        with self.log_path.open("ab") as log:
            log.write(f"\n$ {shlex.join(argv)}\n".encode())
            log.flush()
            return subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir.parent,
                env=self._env(),
                timeout=timeout,
                check=False,
                user=self._runas.uid if self._runas else None,
                group=self._runas.gid if self._runas else None,
                extra_groups=[] if self._runas else None,  # shed root's supplementary groups
            )

    def _log_tail(self, limit: int = 3000) -> str:
        try:
            with self.log_path.open("rb") as log:
                log.seek(0, os.SEEK_END)
                log.seek(max(0, log.tell() - limit))
                return log.read().decode(errors="replace")
        except OSError:
            return "(no log)"

    def _check(self, result: subprocess.CompletedProcess[bytes], what: str) -> None:
        if result.returncode != 0:
            raise RuntimeError(
                f"{what} failed (exit {result.returncode}); log {self.log_path}:\n"
                f"{self._log_tail()}"
            )

    def _initdb(self, timeout: float) -> None:
        pwfile = self.data_dir.parent / f"pwfile-{secrets.token_hex(4)}"
        fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(self.password + "\n")
            self._give(pwfile)
            result = self._run(
                "initdb",
                "-D",
                str(self.data_dir),
                "-U",
                SUPERUSER,
                "--pwfile",
                str(pwfile),
                # local is what we use; host too so initdb has no trust rule to warn about
                "--auth-local=scram-sha-256",
                "--auth-host=scram-sha-256",
                "-E",
                "UTF8",
                "--locale=C",  # no dependency on the machine's installed locales
                "--no-sync",  # a throwaway cluster need not survive a power cut
                timeout=timeout,
            )
        finally:
            pwfile.unlink(missing_ok=True)
        self._check(result, "initdb")

        def q(value: str) -> str:
            return "'" + value.replace("'", "''") + "'"

        settings = {
            "listen_addresses": q(""),  # Unix socket only: no TCP listener at all
            "unix_socket_directories": q(self.socket_dir),
            "port": str(self.port),
            "max_connections": "200",
            "shared_buffers": "128MB",
            # Durability off by default makes a test server fast; benchmarks that measure
            # commits pass fsync=True. synchronous_commit stays on either way.
            "fsync": "on" if self.fsync else "off",
            "full_page_writes": "on" if self.fsync else "off",
            "logging_collector": "off",  # the server writes to the log we hand it
        }
        # Appended, so the file keeps its owner (the server's user) and our lines win.
        with (self.data_dir / "postgresql.conf").open("a") as conf:
            conf.write("\n# litegate_lab._pgserver\n")
            conf.writelines(f"{k} = {v}\n" for k, v in settings.items())
        self._initialized = True

    # -- lifecycle -------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """The postmaster's PID while it runs (it changes across :meth:`restart`)."""
        try:
            first = (self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0]
            pid = int(first)
        except (OSError, ValueError):
            return None
        return pid if _alive(pid) else None

    def start(self, timeout: float = 30.0) -> PgServer:
        """``initdb`` (the first time), ``pg_ctl start -w``, create database ``litegate``."""
        if self._closed:
            raise RuntimeError("this PgServer is closed")
        if self.pid is not None:
            return self
        seconds = str(max(1, math.ceil(timeout)))
        try:
            if not self._initialized:
                self._initdb(timeout)
            argv = ("start", "-D", str(self.data_dir), "-w", "-t", seconds)
            self._check(self._run("pg_ctl", *argv, timeout=timeout + 10), "pg_ctl start")
            if not self._bootstrapped:
                self._bootstrap()
                self._bootstrapped = True
        except BaseException:
            # Half-way (pg_ctl timed out, the bootstrap failed, Ctrl-C): nothing stays up.
            self._kill_ours()
            raise
        return self

    def _bootstrap(self) -> None:
        from psycopg import sql

        # PG15 already grants PUBLIC no CREATE on schema public; older servers do, and
        # tests rely on a plain role being unable to create anything. template1 first, so
        # every database created later inherits it.
        revoke = sql.SQL("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        self._execute([revoke], dbname="template1")
        self._execute([sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE))])

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m mode -w``, waiting until the postmaster has exited.

        Does nothing when the server is not running.
        """
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {_MODES}, not {mode!r}")
        pid = self.pid
        if pid is None:
            return
        argv = ("stop", "-D", str(self.data_dir), "-m", mode, "-w", "-t", "60")
        result = self._run("pg_ctl", *argv, timeout=70)
        # pg_ctl returns once postmaster.pid is gone, a moment before the process exits.
        if _wait_gone([pid], 10):
            self._check(result, "pg_ctl stop")
            raise RuntimeError(f"the postmaster (PID {pid}) outlived pg_ctl stop -m {mode}")

    def restart(self, mode: str = "fast") -> None:
        """``pg_ctl restart -m mode -w``: every connection breaks, the postmaster PID changes."""
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {_MODES}, not {mode!r}")
        if self._closed:
            raise RuntimeError("this PgServer is closed")
        if not self._bootstrapped or self.pid is None:
            self.start()
            return
        argv = ("restart", "-D", str(self.data_dir), "-m", mode, "-w", "-t", "60")
        self._check(self._run("pg_ctl", *argv, timeout=130), "pg_ctl restart")

    def close(self) -> None:
        """Stop the server (escalating to signals if need be), then remove what we created."""
        if self._closed:
            return
        self._closed = True
        try:
            postmaster = self.pid
            pids = self._our_pids()
            if postmaster is not None and postmaster not in pids:
                pids.append(postmaster)
            with contextlib.suppress(RuntimeError, OSError, subprocess.SubprocessError):
                self.stop("fast")
            self._kill_ours()
            # close() promises the PIDs are gone, not merely zombies (see _wait_reaped).
            _wait_reaped(pids, 5.0)
        finally:
            self._remove_owned()
            _untrack(self)

    def __enter__(self) -> PgServer:
        try:
            return self.start()
        except BaseException:
            self.close()  # __exit__ will not run
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<PgServer {self.data_dir} pid={self.pid}>"

    def _our_pids(self) -> list[int]:
        """This cluster's processes: each ``chdir``s to the data directory (Linux /proc)."""
        pids: list[int] = []
        target = os.path.realpath(self.data_dir)
        with contextlib.suppress(OSError):
            for entry in os.scandir("/proc"):
                if not entry.name.isdigit() or int(entry.name) == os.getpid():
                    continue
                try:
                    if os.readlink(f"/proc/{entry.name}/cwd") == target:
                        pids.append(int(entry.name))
                except OSError:
                    continue  # gone meanwhile, a zombie, or not ours to see
        return pids

    def _kill_ours(self) -> None:
        """Stop by signals whatever of this cluster still runs: SIGQUIT, then SIGKILL."""
        postmaster = self.pid
        if postmaster is not None:
            # SIGQUIT is an immediate shutdown: the postmaster ends its children and
            # removes its shared memory, which SIGKILL would leave behind.
            with contextlib.suppress(ProcessLookupError):
                os.kill(postmaster, signal.SIGQUIT)
            _wait_gone([postmaster], 10)
        pids = self._our_pids()
        if postmaster is not None and postmaster not in pids:
            pids.append(postmaster)
        for pid in pids:
            if _alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        left = _wait_gone(pids, 10)
        if left:
            raise RuntimeError(f"PostgreSQL processes {left} survived SIGKILL")

    # -- databases, roles, URLs ------------------------------------------------

    def _execute(
        self, statements: list[sql.SQL | sql.Composed], *, dbname: str = "postgres"
    ) -> None:
        import psycopg

        url = self.url_for(dbname=dbname)
        with psycopg.connect(url, autocommit=True, connect_timeout=30) as conn:
            for statement in statements:
                conn.execute(statement)

    def create_database(self, name: str, *, owner: str | None = None) -> str:
        """``CREATE DATABASE name [OWNER owner]``; the superuser's URL for it."""
        from psycopg import sql

        statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if owner is not None:
            statement = sql.SQL("{} OWNER {}").format(statement, sql.Identifier(owner))
        self._execute([statement])
        return self.url_for(dbname=name)

    def create_role(self, name: str, password: str, *, login: bool = True) -> str:
        """A plain role; its URL for database ``litegate``.

        It may connect to ``litegate`` but not create anything in schema
        ``public`` (PG15's default, enforced on older servers by the bootstrap).
        """
        from psycopg import sql

        self._execute(
            [
                sql.SQL("CREATE ROLE {} {} PASSWORD {}").format(
                    sql.Identifier(name),
                    sql.SQL("LOGIN" if login else "NOLOGIN"),
                    sql.Literal(password),  # utility statements take no bind parameters
                ),
                sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(
                    sql.Identifier(DATABASE), sql.Identifier(name)
                ),
            ]
        )
        return self.url_for(user=name, password=password)

    def url_for(
        self, *, user: str | None = None, password: str | None = None, dbname: str | None = None
    ) -> str:
        """A libpq URL through the socket. The superuser's password is the default
        only for the superuser; another ``user`` without ``password`` gets none."""
        if user is None:
            user = SUPERUSER
            if password is None:
                password = self.password
        auth = quote(user, safe="")
        if password is not None:
            auth += ":" + quote(password, safe="")
        db = quote(dbname if dbname is not None else DATABASE, safe="")
        return f"postgresql://{auth}@/{db}?host={quote(self.socket_dir, safe='/')}&port={self.port}"

    @property
    def url(self) -> str:
        """The superuser's URL for database ``litegate``."""
        return self.url_for()


# -- the atexit safety net ------------------------------------------------------
# Servers not yet closed, strongly held: one is left running on purpose until close()
# or exit, even when its caller dropped the object (PgServer().start().url).
_open: dict[int, PgServer] = {}
_atexit_registered = False


def _track(server: PgServer) -> None:
    global _atexit_registered
    if not _atexit_registered:
        atexit.register(_close_at_exit)
        _atexit_registered = True
    _open[id(server)] = server


def _untrack(server: PgServer) -> None:
    _open.pop(id(server), None)


def _close_at_exit() -> None:
    for server in list(_iter_own()):
        with contextlib.suppress(Exception):
            server.close()


def _iter_own() -> Iterator[PgServer]:
    # A forked child that exits through atexit inherited this dict; the servers are not its own.
    me = os.getpid()
    return (s for s in _open.values() if s._owner_pid == me)
