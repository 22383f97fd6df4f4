""":func:`read_only`: one transaction that only reads, without the gate."""

from __future__ import annotations

from types import TracebackType
from typing import Any

from sqlalchemy import exc
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import Session

OPTION = "litegate_read_only"


class read_only:  # lower case: used like a function, with read_only(session): ...
    """A transaction that only reads: one consistent snapshot, no write gate
    (so it never waits behind writers), and any write in it raises
    :class:`~litegate.sqlalchemy.ReadOnlyScopeError` before anything
    changes. Works like ``begin()`` on what it is given, which must not be
    in a transaction yet:

    ``with read_only(session):`` (commits at the end, like
    ``session.begin()``), ``with read_only(connection):``, ``with
    read_only(engine) as conn:``; the same with ``async with`` on an
    ``AsyncSession``, ``AsyncConnection`` or ``AsyncEngine``.

    For a session or engine whose every transaction only reads, set the
    execution option instead:
    ``sessionmaker(engine.execution_options(litegate_read_only=True))``.
    """

    def __init__(self, target: Any) -> None:
        self._target = target
        self._cm: Any = None
        self._conn: Any = None

    # -- sync --------------------------------------------------------------------
    def __enter__(self) -> Any:
        t = self._target
        if isinstance(t, Session):
            _not_begun(t.in_transaction())
            self._cm = t.begin()
            self._cm.__enter__()
            try:
                t.connection(execution_options={OPTION: True})
            except BaseException as e:
                self._cm.__exit__(type(e), e, e.__traceback__)
                raise
            return t
        if isinstance(t, Engine):
            self._cm = t.execution_options(**{OPTION: True}).begin()
            return self._cm.__enter__()
        if isinstance(t, Connection):
            _not_begun(t.in_transaction())
            self._conn = t.execution_options(**{OPTION: True})
            self._cm = t.begin()
            try:
                self._cm.__enter__()
            except BaseException:
                t.execution_options(**{OPTION: False})
                raise
            return t
        raise TypeError(
            f"read_only() takes a Session, Connection or Engine (or, with async with, their "
            f"asyncio versions), not {type(t).__name__}"
        )

    def __exit__(
        self,
        et: type[BaseException] | None,
        ev: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self._cm.__exit__(et, ev, tb)
        finally:
            if self._conn is not None and not self._conn.closed:
                self._conn.execution_options(**{OPTION: False})

    # -- asyncio -------------------------------------------------------------------
    async def __aenter__(self) -> Any:
        from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession

        t = self._target
        if isinstance(t, AsyncSession):
            _not_begun(t.in_transaction())
            self._cm = t.begin()
            await self._cm.__aenter__()
            try:
                await t.connection(execution_options={OPTION: True})
            except BaseException as e:
                await self._cm.__aexit__(type(e), e, e.__traceback__)
                raise
            return t
        if isinstance(t, AsyncEngine):
            self._cm = t.execution_options(**{OPTION: True}).begin()
            return await self._cm.__aenter__()
        if isinstance(t, AsyncConnection):
            _not_begun(t.in_transaction())
            self._conn = await t.execution_options(**{OPTION: True})
            self._cm = t.begin()
            try:
                await self._cm.__aenter__()
            except BaseException:
                await t.execution_options(**{OPTION: False})
                raise
            return t
        raise TypeError(
            f"async with read_only() takes an AsyncSession, AsyncConnection or AsyncEngine, "
            f"not {type(t).__name__}"
        )

    async def __aexit__(
        self,
        et: type[BaseException] | None,
        ev: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self._cm.__aexit__(et, ev, tb)
        finally:
            if self._conn is not None and not self._conn.closed:
                await self._conn.execution_options(**{OPTION: False})


def _not_begun(in_transaction: bool) -> None:
    if in_transaction:
        raise exc.InvalidRequestError(
            "read_only() must begin the transaction: its snapshot and the absence of the "
            "write gate are decided at BEGIN. Use it before the session or connection runs "
            "anything, or after commit() / rollback()"
        )
