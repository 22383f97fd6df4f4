"""``litegate web seed DB`` and ``litegate web serve DB``: seed 003's app."""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
from contextlib import closing

from .app.engines import ENGINES

PROG = "litegate web"
SETTINGS = "litegate.lab.web.app.settings"

DESCRIPTION = """\
Seed 003's Hacker-News-style Django app (users, posts, comments; the
/benchmarking/... routes that `litegate bench web` loads with hey).

  litegate web seed hn.db
  litegate web serve hn.db --engine litegate --bind 127.0.0.1:8000

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
    v = sub.add_parser("serve", help="serve the app with gunicorn (gthread)")
    v.add_argument("db", metavar="DB", help="a file made by 'litegate web seed'")
    v.add_argument(
        "--engine",
        choices=ENGINES,
        default="litegate",
        help="naive: Django's defaults; wal: the same in WAL mode; tuned: Django's own best "
        "(IMMEDIATE, timeout, PRAGMAs, persistent connections); litegate: "
        "ENGINE 'litegate.django' (default)",
    )
    v.add_argument(
        "--bind",
        default="127.0.0.1:8000",
        help="127.0.0.1:PORT or unix:PATH (nothing else: a lab server) (127.0.0.1:8000)",
    )
    v.add_argument("--workers", type=int, default=2, help="gunicorn worker processes (2)")
    v.add_argument("--threads", type=int, default=3, help="threads per worker (3)")
    v.add_argument(
        "--keep-alive",
        type=int,
        default=0,
        metavar="S",
        help="gunicorn's keep-alive seconds; 0 (the default here) closes each connection "
        "after its response, so that a gthread worker never parks a client's idle "
        "connection while others wait: the load then measures the database, not "
        "connection scheduling",
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
    return "delete" if engine == "naive" else "wal"


def _serve(args: argparse.Namespace) -> int:
    bind = args.bind
    if not (bind.startswith("127.0.0.1:") or bind.startswith("unix:")):
        return _error(f"--bind must be 127.0.0.1:PORT or unix:PATH, got {bind!r}")
    if args.workers < 1 or args.threads < 1:
        return _error("--workers and --threads must be at least 1")
    db = os.path.abspath(args.db)
    if not os.path.exists(db):
        return _error(f"{args.db} does not exist: create it with 'litegate web seed {args.db}'")
    try:
        import gunicorn  # noqa: F401
    except ImportError:
        return _error("gunicorn is not installed: pip install 'litegate[web]'")
    with closing(sqlite3.connect(db)) as conn:
        conn.execute(f"PRAGMA journal_mode = {journal_for(args.engine)}")
    env = {
        **os.environ,
        "LITEGATE_WEB_DB": db,
        "LITEGATE_WEB_ENGINE": args.engine,
        "DJANGO_SETTINGS_MODULE": SETTINGS,
    }
    cmd = [sys.executable, "-m", "gunicorn", "--worker-class", "gthread",
           "--workers", str(args.workers), "--threads", str(args.threads),
           "--keep-alive", str(args.keep_alive), "--bind", bind,
           "--graceful-timeout", "10", "--log-level", "warning",
           "litegate.lab.web.app.wsgi:application"]  # fmt: skip
    if args.access_log:
        cmd += ["--access-logfile", "-"]
    sys.stdout.flush()
    sys.stderr.flush()
    # This process becomes gunicorn's master: one PID to stop.
    os.execve(sys.executable, cmd, env)
    return 0  # pragma: no cover - execve does not return


def _error(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2
