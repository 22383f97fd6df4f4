"""What differs between SQLAlchemy 2.0 and 2.1 for this package."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from sqlalchemy.util import concurrency

T = TypeVar("T")

# Suspend SQLAlchemy's greenlet until an awaitable is done: ``await_`` in
# 2.1, ``await_only`` in 2.0 (2.1 keeps the old name until 2.2).
_await: Callable[[Awaitable[Any]], Any] = (
    getattr(concurrency, "await_", None) or concurrency.await_only
)


def await_(awaitable: Awaitable[T]) -> T:
    result: T = _await(awaitable)
    return result


def in_greenlet() -> bool:
    """Inside SQLAlchemy's asyncio greenlet (False without greenlet)."""
    fn = getattr(concurrency, "in_greenlet", None)
    return bool(fn is not None and fn())
