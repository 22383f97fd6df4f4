"""A SQLModel table for the SQLModel test (SQLModel registers tables
globally: declared once, here)."""

from __future__ import annotations

from sqlmodel import Field, SQLModel


class Hero(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    name: str
    age: int
