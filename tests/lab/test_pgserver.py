"""The throwaway PostgreSQL server the PostgreSQL tests and benchmarks run on.

One module-scoped server serves most tests (initdb costs about a second);
the lifecycle tests that must end a server start their own.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from litegate_lab import _pgserver
from litegate_lab._pgserver import MISSING_HELP, PgServer, PgUnavailable, find_bindir

if find_bindir() is None:
    pytest.skip(MISSING_HELP, allow_module_level=True)

psycopg = pytest.importorskip("psycopg")
errors = pytest.importorskip("psycopg.errors")


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    with PgServer() as server:
        yield server


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_connect_as_superuser(pg: PgServer) -> None:
    assert pg.url.startswith(f"postgresql://litegate:{pg.password}@/litegate?host=")
    with psycopg.connect(pg.url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
        row = conn.execute(
            "SELECT current_user, current_database(), usesuper FROM pg_user "
            "WHERE usename = current_user"
        ).fetchone()
        assert row == ("litegate", "litegate", True)


def test_wrong_credentials_fail(pg: PgServer) -> None:
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(pg.url_for(password="not-" + pg.password)).close()
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(pg.url_for(user="nobody-here", password="x")).close()


def test_role_cannot_create_in_public(pg: PgServer) -> None:
    url = pg.create_role("app_user", "app-secret")
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT current_user").fetchone() == ("app_user",)
        with pytest.raises(errors.InsufficientPrivilege):
            conn.execute("CREATE TABLE public.x (id int)")
        with pytest.raises(errors.InsufficientPrivilege):
            conn.execute("CREATE SCHEMA litegate_queue")
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(pg.url_for(user="app_user", password="wrong")).close()
    # NOLOGIN: the role exists, its password is right, logging in is refused
    nologin = pg.create_role("app_nologin", "pw", login=False)
    with pytest.raises(psycopg.OperationalError, match="not permitted to log in"):
        psycopg.connect(nologin).close()


def test_create_database(pg: PgServer) -> None:
    pg.create_role("db_owner", "owner-secret")
    url = pg.create_database("other db", owner="db_owner")  # a name that needs quoting
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT current_database(), pg_get_userbyid(datdba) FROM pg_database "
            "WHERE datname = current_database()"
        ).fetchone()
        assert row == ("other db", "db_owner")


def _tcp_listening_inodes() -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A":  # TCP_LISTEN
                inodes.add(fields[9])
    return inodes


def test_unix_socket_only(pg: PgServer) -> None:
    with psycopg.connect(pg.url) as conn:

        def show(name: str) -> str:
            row = conn.execute(f"SHOW {name}").fetchone()
            assert row is not None
            return str(row[0])

        assert show("listen_addresses") == ""
        assert show("unix_socket_directories") == pg.socket_dir
        assert conn.execute("SELECT inet_server_addr()").fetchone() == (None,)
        assert show("fsync") == "off"
        assert show("full_page_writes") == "off"
        assert show("synchronous_commit") == "on"  # commits are what we measure
        assert show("max_connections") == "200"
        assert show("shared_buffers") == "128MB"
    assert os.path.exists(os.path.join(pg.socket_dir, f".s.PGSQL.{pg.port}"))
    # And from the kernel's side: no socket of the postmaster is a TCP listener.
    pid = pg.pid
    assert pid is not None
    fd_dir = Path(f"/proc/{pid}/fd")
    if not fd_dir.is_dir():
        return
    sockets = set()
    for fd in fd_dir.iterdir():
        m = re.fullmatch(r"socket:\[(\d+)\]", os.readlink(fd))
        if m:
            sockets.add(m.group(1))
    assert sockets, "the postmaster should hold its Unix socket"
    assert not sockets & _tcp_listening_inodes()


def test_restart_breaks_connections(pg: PgServer) -> None:
    old_pid = pg.pid
    assert old_pid is not None
    with psycopg.connect(pg.url, autocommit=True) as old:
        assert old.execute("SELECT 1").fetchone() == (1,)
        pg.restart()
        with pytest.raises(psycopg.OperationalError):
            old.execute("SELECT 1")
    assert pg.pid is not None
    assert pg.pid != old_pid
    assert not _pgserver._alive(old_pid)  # exited (init may not have reaped it yet)
    with psycopg.connect(pg.url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_stop_start_close(tmp_path: Path) -> None:
    """Stop and start again (no second initdb), then close: no process, no directory.

    ``base`` given under pytest's 0700 directory: as root the cluster moves to
    a private temp dir the server's user can reach, and a long ``base`` gets a
    short socket directory. close() removes both and keeps the log.
    """
    base = tmp_path / ("long-" * 20) / "pg"
    server = PgServer(base, port=6543)
    try:
        assert base.is_dir()
        assert len(server.socket_dir) <= 80
        assert server.pid is None
        server.start()
        first = server.pid
        assert first is not None
        with psycopg.connect(server.url) as conn:
            assert conn.execute("SHOW port").fetchone() == ("6543",)
        server.stop()
        server.stop()  # idempotent
        assert server.pid is None
        assert not _pgserver._alive(first)
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(server.url, connect_timeout=5).close()
        assert server.start() is server
        second = server.pid
        assert second is not None
        assert second != first
        with psycopg.connect(server.url) as conn:  # the password and database survived
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        server.close()
    assert _gone(second)
    assert not server.data_dir.exists()
    assert not Path(server.socket_dir).exists()
    assert server.pid is None
    assert server.log_path.parent == base.resolve()
    log = server.log_path.read_text()
    assert log.count("/initdb ") == 1
    server.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        server.start()


def test_close_removes_temp_dir() -> None:
    with PgServer() as server:
        pid = server.pid
        assert pid is not None
        base = server.base
        assert server.data_dir.is_relative_to(base)
    assert _gone(pid)
    assert not base.exists()
    assert not Path(server.socket_dir).exists()


def test_failed_start_leaves_nothing_running(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(self: PgServer) -> None:
        raise RuntimeError("bootstrap failed")

    monkeypatch.setattr(PgServer, "_bootstrap", boom)
    server = PgServer()
    try:
        with pytest.raises(RuntimeError, match="bootstrap failed"):
            server.start()
        # The postmaster was up when the bootstrap failed; start() took it down.
        assert server.pid is None
        assert server._our_pids() == []
    finally:
        server.close()
    assert not server.base.exists()


def test_find_bindir_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    found = find_bindir()
    assert found is not None
    monkeypatch.setenv("LITEGATE_PG_BINDIR", str(found))
    assert find_bindir() == found
    # A directory without the binaries is passed over for the next place to look.
    monkeypatch.setenv("LITEGATE_PG_BINDIR", str(tmp_path))
    assert find_bindir() == found


@pytest.mark.skipif(os.geteuid() != 0, reason="only root needs another user")
def test_root_without_unprivileged_user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_pgserver, "_UNPRIVILEGED_USERS", ("no-such-user-litegate",))
    with pytest.raises(PgUnavailable, match="no unprivileged user"):
        PgServer()
