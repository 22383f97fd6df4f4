"""The Django app's tables (``hn_user``, ``hn_post``, ``hn_comment``, made by
``litegate web seed``), mapped with SQLAlchemy's declarative ORM. Nothing
here creates a table: both apps serve the one seeded file, and a test
checks that this mapping matches the schema Django created."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Final

from sqlalchemy import ForeignKey, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def utcnow() -> datetime:
    """Now, as Django stores it with USE_TZ on SQLite: naive UTC."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


# Django's AutoField on SQLite: ids are never reused (the bench's check of
# acknowledged writes relies on it).
_AUTOINCREMENT: Final = {"sqlite_autoincrement": True}


class User(Base):
    __tablename__ = "hn_user"
    __table_args__ = _AUTOINCREMENT

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100))
    email: Mapped[str] = mapped_column(String(200), unique=True)
    last_seen_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Post(Base):
    __tablename__ = "hn_post"
    __table_args__ = _AUTOINCREMENT

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("hn_user.id"), index=True)
    title: Mapped[str] = mapped_column(String(200))
    description: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    user: Mapped[User] = relationship()
    # The schema has no ON DELETE CASCADE (Django emulates it): deleting a
    # post through the ORM deletes its comments first, in the same
    # transaction, as Django's on_delete=CASCADE does.
    comments: Mapped[list[Comment]] = relationship(
        back_populates="post", cascade="all, delete-orphan", order_by="Comment.id"
    )


class Comment(Base):
    __tablename__ = "hn_comment"
    __table_args__ = _AUTOINCREMENT

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("hn_user.id"), index=True)
    post_id: Mapped[int] = mapped_column(ForeignKey("hn_post.id"), index=True)
    body: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    user: Mapped[User] = relationship()
    post: Mapped[Post] = relationship(back_populates="comments")
