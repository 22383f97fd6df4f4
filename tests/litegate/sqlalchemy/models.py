"""The ORM models the dialect's tests and their child processes share."""

from __future__ import annotations

from sqlalchemy import String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class Counter(Base):
    __tablename__ = "counter"
    id: Mapped[int] = mapped_column(primary_key=True)
    n: Mapped[int] = mapped_column(default=0)


class Entry(Base):
    __tablename__ = "entry"
    id: Mapped[int] = mapped_column(primary_key=True)
    who: Mapped[str] = mapped_column(String(40))
