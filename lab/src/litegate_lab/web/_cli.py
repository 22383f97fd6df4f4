"""``litegate web seed DB`` and ``litegate web serve DB``: seed 003's app."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sqlite3
import subprocess
import sys
from contextlib import closing

from . import _variant
from .app.engines import ENGINES as DJANGO_ENGINES
from .fastapi_app import ENGINES as FASTAPI_ENGINES

PROG = "litegate web"
FRAMEWORKS = ("django", "fastapi")
ALL_ENGINES = DJANGO_ENGINES  # a superset of the FastAPI app's
ENGINES = {"django": DJANGO_ENGINES, "fastapi": FASTAPI_ENGINES}
SETTINGS = "litegate_lab.web.app.settings"

DESCRIPTION = """\
Seed 003's Hacker-News-style app (users, posts, comments; the
/benchmarking/... routes that `litegate bench web` loads with hey), in
Django under gunicorn or in FastAPI + SQLAlchemy asyncio under uvicorn;
both serve the file that `seed` makes.

  litegate web seed hn.db
  litegate web serve hn.db --engine litegate --bind 127.0.0.1:8000
  litegate web serve hn.db --framework fastapi --engine tuned

Pages: / (latest posts), /posts/ID/, /users/ID/. Routes, all POST:
/benchmarking/read_heavy, write_heavy, balanced (mixes of the actions, with
the seed's weights), post_create, comment_create, post_destroy,
comment_destroy, post_show, posts_index, user_show.
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    s = sub.add_parser("seed", help="a fresh, seeded database (replaces DB)")
    s.add_argument("db", metavar="DB", help="the SQLite file to create")
    s.add_argument("--users", type=int, default=100, help="users (100)")
    s.add_argument("--posts", type=int, default=1000, help="posts (1000)")
    s.add_argument("--comments", type=int, default=10, help="comments per post (10)")
    v = sub.add_parser(
        "serve", help="serve the app: Django under gunicorn (gthread) or FastAPI under uvicorn"
    )
    v.add_argument("db", metavar="DB", help="a file made by 'litegate web seed'")
    v.add_argument(
        "--framework",
        choices=FRAMEWORKS,
        default="django",
        help="django: the Django app under gunicorn (default); fastapi: the same app on "
        "FastAPI + SQLAlchemy asyncio under uvicorn",
    )
    v.add_argument(
        "--engine",
        default="litegate",
        help="naive: the framework's defaults; wal (django only): the same in WAL mode; "
        "tuned: the framework's documented best (IMMEDIATE, busy timeout, PRAGMAs); "
        "litegate: ENGINE 'litegate.django' or 'sqlite+litegate' (default); "
        "litegate+NAME=VALUE[+NAME=VALUE]: litegate with PRAGMAs over its profile's",
    )
    v.add_argument(
        "--bind",
        default="127.0.0.1:8000",
        help="127.0.0.1:PORT or unix:PATH (nothing else: a lab server) (127.0.0.1:8000)",
    )
    v.add_argument("--workers", type=int, default=2, help="worker processes (2)")
    v.add_argument(
        "--threads",
        type=int,
        default=None,
        help="threads per gunicorn worker (django only; 3); a uvicorn worker is one event loop",
    )
    v.add_argument(
        "--keep-alive",
        type=int,
        default=0,
        metavar="S",
        help="keep-alive seconds; 0 (the default here) closes each connection after its "
        "response, so that a gthread worker never parks a client's idle connection while "
        "others wait and a uvicorn worker does not keep the clients it accepted first: "
        "the load then measures the database, not connection scheduling",
    )
    v.add_argument(
        "--acks",
        metavar="DIR",
        default=None,
        help="append every acknowledged write to a file per worker in DIR (created if "
        "missing), for 'litegate bench web' to check the database against",
    )
    v.add_argument("--access-log", action="store_true", help="log every request on stderr")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "seed":
        return _seed(args)
    return _serve(args)


def _setup(db: str, engine: str) -> None:
    os.environ["LITEGATE_WEB_DB"] = os.path.abspath(db)
    os.environ["LITEGATE_WEB_ENGINE"] = engine
    os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS
    import django

    django.setup()


def _seed(args: argparse.Namespace) -> int:
    for name in ("users", "posts", "comments"):
        if getattr(args, name) < 1:
            return _error(f"--{name} must be at least 1")
    _setup(args.db, "litegate")
    from .app.seed import seed

    counts = seed(args.db, users=args.users, posts=args.posts, comments=args.comments)
    print(
        f"{args.db}: {counts['users']} users, {counts['posts']} posts, "
        f"{counts['comments']} comments"
    )
    return 0


def journal_for(engine: str) -> str:
    """The journal mode an engine configuration runs with: Django's default
    (naive) has the rollback journal; the others WAL."""
    return "delete" if _variant.base(engine) == "naive" else "wal"


def _serve(args: argparse.Namespace) -> int:
    bind = args.bind
    if not (bind.startswith("127.0.0.1:") or bind.startswith("unix:")):
        return _error(f"--bind must be 127.0.0.1:PORT or unix:PATH, got {bind!r}")
    engines = ENGINES[args.framework]
    try:
        base = _variant.settings(args.engine)[0]
    except ValueError as exc:
        return _error(f"--engine: {exc}")
    if base not in engines:
        return _error(
            f"--engine {args.engine} is not one of the {args.framework} app's: "
            + ", ".join(engines)
        )
    if args.workers < 1 or (args.threads is not None and args.threads < 1):
        return _error("--workers and --threads must be at least 1")
    if args.keep_alive < 0:
        return _error("--keep-alive must be 0 (close each connection) or more seconds")
    if args.framework == "fastapi" and args.threads is not None:
        return _error("--threads is for django (gunicorn gthread); a uvicorn worker has none")
    db = os.path.abspath(args.db)
    if not os.path.exists(db):
        return _error(f"{args.db} does not exist: create it with 'litegate web seed {args.db}'")
    missing = _missing(args.framework, args.engine)
    if missing:
        return _error(missing)
    with closing(sqlite3.connect(db)) as conn:
        conn.execute(f"PRAGMA journal_mode = {journal_for(args.engine)}")
    env = {**os.environ, "LITEGATE_WEB_DB": db, "LITEGATE_WEB_ENGINE": args.engine}
    if args.acks:
        os.makedirs(args.acks, exist_ok=True)
        env["LITEGATE_WEB_ACKS"] = os.path.abspath(args.acks)
    if args.framework == "django" and env.get("LITEGATE_WEB_CACHE") == "database":
        # DatabaseCache's table, in the app's database (Django's createcachetable)
        subprocess.run(
            [sys.executable, "-m", "django", "createcachetable"],
            env={**env, "DJANGO_SETTINGS_MODULE": SETTINGS}, check=True, timeout=120,
        )  # fmt: skip
    if args.framework == "django":
        env["DJANGO_SETTINGS_MODULE"] = SETTINGS
        cmd = [sys.executable, "-m", "gunicorn", "--worker-class", "gthread",
               "--workers", str(args.workers), "--threads", str(args.threads or 3),
               "--keep-alive", str(args.keep_alive), "--bind", bind,
               "--graceful-timeout", "10", "--log-level", "warning",
               "litegate_lab.web.app.wsgi:application"]  # fmt: skip
        if args.access_log:
            cmd += ["--access-logfile", "-"]
    else:
        env["LITEGATE_WEB_KEEP_ALIVE"] = str(args.keep_alive)
        where = (
            ["--uds", bind[len("unix:") :]]
            if bind.startswith("unix:")
            else ["--host", "127.0.0.1", "--port", bind.rsplit(":", 1)[1]]
        )
        cmd = [sys.executable, "-m", "uvicorn", *where, "--workers", str(args.workers),
               "--timeout-keep-alive", str(args.keep_alive or 5),
               "--timeout-graceful-shutdown", "10", "--log-level", "warning",
               "--access-log" if args.access_log else "--no-access-log",
               "litegate_lab.web.fastapi_app.asgi:application"]  # fmt: skip
    sys.stdout.flush()
    sys.stderr.flush()
    # This process becomes the server's master (gunicorn's arbiter, uvicorn's
    # supervisor or its one worker): one PID to stop.
    os.execve(sys.executable, cmd, env)
    return 0  # pragma: no cover - execve does not return


_NEEDS = {
    "django": ("gunicorn",),
    "fastapi": ("fastapi", "uvicorn", "jinja2", "aiosqlite", "greenlet"),
}


def _missing(framework: str, engine: str) -> str:
    """What the server would lack, as an error message ('' if nothing)."""
    absent = [m for m in _NEEDS[framework] if importlib.util.find_spec(m) is None]
    if absent:
        return f"{', '.join(absent)} not installed: pip install litegate-lab"
    if framework == "fastapi" and _variant.base(engine) == "litegate":
        from sqlalchemy.dialects import registry
        from sqlalchemy.exc import NoSuchModuleError

        try:
            registry.load("sqlite.litegate")
        except NoSuchModuleError:
            return (
                "SQLAlchemy has no sqlite+litegate dialect here: reinstall litegate "
                "(pip install -e lab) so that its entry point is registered"
            )
    return ""


def _error(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2
