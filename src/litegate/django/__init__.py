"""``ENGINE: "litegate.django"``: Django's SQLite backend with litegate's write gate.

```python
DATABASES = {"default": {"ENGINE": "litegate.django", "NAME": BASE_DIR / "db.sqlite3",
                         "OPTIONS": {"profile": "default", "timeout": 5}}}
```

The outermost ``atomic()`` takes the file's write gate (this process's FIFO,
then the cross-process ticket queue) and runs ``BEGIN IMMEDIATE``; COMMIT,
ROLLBACK and close give it back. A write in autocommit mode (``save()``,
``update()``, raw SQL) takes the gate for its one statement; a write in a
transaction begun otherwise (manual transactions, ``BEGIN`` sent as SQL,
``transaction_mode="DEFERRED"``) takes it until that transaction ends.
Reads take no gate. ``BEGIN`` / ``COMMIT`` / ``END`` / ``ROLLBACK`` sent
through a cursor inside ``atomic()`` raise :class:`TransactionControlError`;
the PRAGMAs that would break the file for other connections raise
``litegate.ConfigError``. Guide: ``docs/guides/django.md``.

``with litegate.django.read_only():`` is an ``atomic()`` block that only
reads: no gate, writes refused with :class:`ReadOnlyScopeError`.

Misconfiguration is typed: an unknown or unusable ``OPTIONS`` key or value,
a bad ``NAME``, profile or timeout is :class:`SettingsError` (Django's
``ImproperlyConfigured`` and ``litegate.ConfigError``); a database file
litegate cannot open (missing directory, a directory, no write access, a bad
sidecar, not SQLite) is :class:`DatabaseOpenError` (Django's
``OperationalError`` and ``litegate.OpenError``), with what to do.

Django itself is imported only by ``litegate.django.base`` (which Django
loads when a connection is made, and which the names above come from);
importing this package needs no Django.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "DatabaseOpenError",
    "GateTimeout",
    "ReadOnlyScopeError",
    "SettingsError",
    "TransactionControlError",
    "read_only",
]


def __getattr__(name: str) -> Any:
    # Django is imported on first use of these names, not with the package.
    if name in __all__:
        from . import base

        return getattr(base, name)
    raise AttributeError(f"module 'litegate.django' has no attribute {name!r}")
