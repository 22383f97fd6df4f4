"""SQLAlchemy on litegate: change the URL, keep the code.

```python
engine = create_engine("sqlite+litegate:///app.db")
engine = create_async_engine("sqlite+litegate:///app.db")   # asyncio
```

The dialect is SQLAlchemy's own pysqlite dialect (``name`` stays
``"sqlite"``: its compiler, types, reflection and Alembic support are
unchanged) with three differences:

- every transaction (``Session.begin()``, ``engine.begin()``, the ORM's
  autobegin) takes the file's write gate, shared with every other litegate
  user of the file in every process, in arrival order, and runs ``BEGIN
  IMMEDIATE``: a read-then-write transaction loses no update and never gets
  "database is locked"; commit, rollback, the pool's reset and close give
  the gate back. ``AUTOCOMMIT`` writes take it per statement; reads outside
  a transaction never do;
- ``litegate_read_only=True`` (an execution option) or :func:`read_only`:
  transactions that only read take no gate and never wait behind writers;
  writes in them raise :class:`ReadOnlyScopeError`;
- the default pool for a file is :class:`FairQueuePool`: first come, first
  served.

Query parameters or ``connect_args``: ``profile`` (litegate's PRAGMA
profiles), ``pragmas`` (overrides), ``timeout`` (seconds to wait for the
gate; also sqlite3's busy timeout). A gate timeout raises
:class:`GateTimeout`, SQLAlchemy's ``OperationalError`` and
:class:`litegate.WriteTimeout`; a file that cannot be opened the way
litegate needs it raises :class:`OpenError` (``OperationalError`` and
:class:`litegate.OpenError`).
"""

from ._dbapi import connect
from ._dialect import AsyncLitegateDialect, LitegateDialect
from ._errors import ConfigError, GateTimeout, OpenError, ReadOnlyScopeError, StatementRefused
from ._pool import AsyncFairQueuePool, FairQueuePool
from ._scope import read_only

dialect = LitegateDialect
"""The dialect SQLAlchemy loads for ``sqlite+litegate://`` (its entry point)."""

__all__ = [
    "AsyncFairQueuePool",
    "AsyncLitegateDialect",
    "ConfigError",
    "FairQueuePool",
    "GateTimeout",
    "LitegateDialect",
    "OpenError",
    "ReadOnlyScopeError",
    "StatementRefused",
    "connect",
    "dialect",
    "read_only",
]
