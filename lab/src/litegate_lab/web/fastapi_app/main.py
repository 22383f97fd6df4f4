"""The seed's routes in idiomatic FastAPI + SQLAlchemy 2.0 asyncio, the
same as the Django app's: every ``POST /benchmarking/…`` first marks a
random user as seen (read it, then a one-statement write transaction),
then runs one action, picked with the mix's weights (``.._actions``).
Actions that write read first, then write, inside one ``async with
session.begin()``; reads run in a session of their own on the reader. A
write whose commit returned is acknowledged in the ledger (``.._acks``) and
answers with a 302 redirect to the page it changed (hey follows it, with a
GET). The engine configuration comes from ``LITEGATE_WEB_ENGINE`` and the
file from ``LITEGATE_WEB_DB``, read when a worker starts.
"""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, TypeVar

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import joinedload
from sqlalchemy.sql.base import ExecutableOption

from .. import _acks
from .._actions import UnknownAction, choose
from .._variant import base
from . import ENGINES
from .engines import Engines, make
from .models import Comment, Post, User, utcnow

templates = Jinja2Templates(directory=Path(__file__).parent / "templates")


class Database:
    """The worker's engines and a session factory for each side."""

    def __init__(self, engines: Engines) -> None:
        self.engines = engines
        # Objects outlive their session (a page renders after it closed).
        self.reading = async_sessionmaker(engines.reader, expire_on_commit=False)
        self.writing = async_sessionmaker(engines.writer, expire_on_commit=False)


def _from_environment() -> Database:
    engine = os.environ.get("LITEGATE_WEB_ENGINE", "litegate")
    if base(engine) not in ENGINES:
        raise RuntimeError(f"LITEGATE_WEB_ENGINE must be one of {ENGINES}, got {engine!r}")
    return Database(make(engine, os.environ.get("LITEGATE_WEB_DB", "hn.sqlite3")))


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    db = _from_environment()
    app.state.db = db
    _acks.start()  # this worker's ledger file, if `litegate web serve --acks` asked for one
    try:
        yield
    finally:
        await db.engines.dispose()


app = FastAPI(
    title="litegate HN (seed 003)", lifespan=lifespan, docs_url=None, redoc_url=None,
    openapi_url=None,
)  # fmt: skip


def database(request: Request) -> Database:
    db: Database = request.app.state.db
    return db


DB = Annotated[Database, Depends(database)]
M = TypeVar("M", User, Post, Comment)


async def _random_row(session: AsyncSession, model: type[M], *load: ExecutableOption) -> M | None:
    """The first row at or after a random id (the seed's ``where("id >= ?",
    rand(min..max)).limit(1).first``)."""
    lo, hi = (await session.execute(select(func.min(model.id), func.max(model.id)))).one()
    if lo is None:
        return None
    query = select(model).where(model.id >= random.randint(lo, hi)).order_by(model.id).limit(1)
    row: M | None = await session.scalar(query.options(*load))
    return row


async def _touch_user(db: Database) -> User:
    """The seed's ``before_action``: a random user, marked as seen."""
    async with db.reading() as session:
        user = await _random_row(session, User)
    if user is None:
        raise HTTPException(404, "no users: seed the database (litegate web seed)")
    now = utcnow()
    async with db.writing.begin() as session:
        await session.execute(update(User).where(User.id == user.id).values(last_seen_at=now))
    user.last_seen_at = now
    return user


def _describe(request: Request) -> str:
    client = request.client
    server = request.scope.get("server") or ("", "")
    lines = {
        "REQUEST_METHOD": request.method,
        "PATH_INFO": request.url.path,
        "QUERY_STRING": request.url.query,
        "REMOTE_ADDR": client.host if client else "",
        "SERVER_NAME": server[0],
        "SERVER_PORT": server[1],
        "SERVER_PROTOCOL": "HTTP/" + request.scope.get("http_version", "1.1"),
        "HTTP_HOST": request.headers.get("host"),
        "HTTP_USER_AGENT": request.headers.get("user-agent"),
        "HTTP_ACCEPT": request.headers.get("accept"),
    }
    return "\n".join(f"{k}: {v}" for k, v in lines.items() if v is not None)


async def post_create(request: Request, db: Database, user: User) -> Response:
    async with db.writing.begin() as session:
        post = Post(user_id=user.id, title=f"Post {uuid.uuid4()}", description=_describe(request))
        session.add(post)
        await session.flush()
    _acks.record("post_create", post.id)
    return RedirectResponse(f"/posts/{post.id}/", status_code=302)


async def comment_create(request: Request, db: Database, user: User) -> Response:
    async with db.writing.begin() as session:
        post = await _random_row(session, Post)
        if post is None:
            raise HTTPException(404, "no posts left")
        comment = Comment(user_id=user.id, post_id=post.id, body=f"Comment {uuid.uuid4()}")
        session.add(comment)
        await session.flush()
    _acks.record("comment_create", comment.id, comment.post_id)
    return RedirectResponse(f"/posts/{comment.post_id}/", status_code=302)


async def post_destroy(request: Request, db: Database, user: User) -> Response:
    async with db.writing.begin() as session:
        post = await _random_row(session, Post)
        if post is None:
            raise HTTPException(404, "no posts left")
        await session.delete(post)  # and its comments (the relationship's cascade)
    _acks.record("post_destroy", post.id)
    return RedirectResponse("/", status_code=302)


async def comment_destroy(request: Request, db: Database, user: User) -> Response:
    async with db.writing.begin() as session:
        comment = await _random_row(session, Comment)
        if comment is None:
            raise HTTPException(404, "no comments left")
        await session.delete(comment)
    _acks.record("comment_destroy", comment.id)
    return RedirectResponse(f"/posts/{comment.post_id}/", status_code=302)


async def post_show(request: Request, db: Database, user: User) -> Response:
    async with db.reading() as session:
        post = await _random_row(session, Post, joinedload(Post.user))
        if post is None:
            raise HTTPException(404, "no posts left")
        return await _post(request, session, post)


async def posts_index(request: Request, db: Database, user: User) -> Response:
    async with db.reading() as session:
        start = await _random_row(session, Post)
        query = select(Post).where(Post.id >= (start.id if start else 0)).order_by(Post.id)
        posts = (await session.scalars(query.limit(100))).all()
    return _posts(request, posts)


async def user_show(request: Request, db: Database, user: User) -> Response:
    async with db.reading() as session:
        return await _user(request, session, user)


_ALL = (post_create, comment_create, post_destroy, comment_destroy, post_show, posts_index,
        user_show)  # fmt: skip
ACTIONS: dict[str, Callable[[Request, Database, User], Awaitable[Response]]] = {
    f.__name__: f for f in _ALL
}


@app.post("/benchmarking/{action}")
async def benchmarking(action: str, request: Request, db: DB) -> Response:
    try:
        action = choose(action)
    except UnknownAction as exc:
        raise HTTPException(404, str(exc)) from None
    user = await _touch_user(db)
    return await ACTIONS[action](request, db, user)


# -- the pages a person can look at --------------------------------------------


def _posts(request: Request, posts: object) -> HTMLResponse:
    return templates.TemplateResponse(request, "posts.html", {"posts": posts})


async def _post(request: Request, session: AsyncSession, post: Post) -> HTMLResponse:
    query = (
        select(Comment).where(Comment.post_id == post.id).options(joinedload(Comment.user))
    ).order_by(Comment.id)
    comments = (await session.scalars(query)).all()
    return templates.TemplateResponse(request, "post.html", {"post": post, "comments": comments})


async def _user(request: Request, session: AsyncSession, user: User) -> HTMLResponse:
    query = select(Post).where(Post.user_id == user.id).order_by(Post.id.desc()).limit(20)
    posts = (await session.scalars(query)).all()
    return templates.TemplateResponse(request, "user.html", {"user": user, "posts": posts})


@app.get("/", response_class=HTMLResponse)
async def posts_page(request: Request, db: DB) -> HTMLResponse:
    async with db.reading() as session:
        query = select(Post).order_by(Post.id.desc()).limit(100)
        return _posts(request, (await session.scalars(query)).all())


@app.get("/posts/{pk}/", response_class=HTMLResponse)
async def post_page(request: Request, pk: int, db: DB) -> HTMLResponse:
    async with db.reading() as session:
        post = await session.get(Post, pk, options=[joinedload(Post.user)])
        if post is None:
            raise HTTPException(404, f"no post {pk}")
        return await _post(request, session, post)


@app.get("/users/{pk}/", response_class=HTMLResponse)
async def user_page(request: Request, pk: int, db: DB) -> HTMLResponse:
    async with db.reading() as session:
        user = await session.get(User, pk)
        if user is None:
            raise HTTPException(404, f"no user {pk}")
        return await _user(request, session, user)
