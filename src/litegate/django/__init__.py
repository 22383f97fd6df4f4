"""``ENGINE: "litegate.django"``: Django's SQLite backend with litegate's write gate.

```python
DATABASES = {"default": {"ENGINE": "litegate.django", "NAME": BASE_DIR / "db.sqlite3",
                         "OPTIONS": {"profile": "default", "timeout": 5}}}
```

The outermost ``atomic()`` takes the file's write gate (this process's FIFO,
then the cross-process ticket queue) and runs ``BEGIN IMMEDIATE``; COMMIT,
ROLLBACK and close give it back. A write in autocommit mode (``save()``,
``update()``, raw SQL) takes the gate for its one statement. Reads take no
gate. See the README's Django section.

Django itself is imported only by ``litegate.django.base``, which Django
loads when a connection is made; importing this package needs no Django.
"""

from __future__ import annotations

__all__: list[str] = []
