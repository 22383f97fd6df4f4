"""A Django cache on SQLite through litegate.

```python
CACHES = {"default": {"BACKEND": "litegate.django.cache.LitegateCache",
                      "LOCATION": BASE_DIR / "cache.sqlite3",
                      "OPTIONS": {"max_entries": 1_000_000, "max_bytes": 256 * 2**20}}}
```

Its own SQLite file by default (``OPTIONS["database"]``: a table in an app
database instead); writes through litegate's write gate and group commit,
reads from its read pool; ``add``/``incr``/``decr`` atomic across processes;
first-in-first-out eviction by entries and bytes, and expiry, in batches on
a background thread. Guide: ``docs/guides/django-cache.md``.
"""

from ._backend import CacheSettingsError, LitegateCache

__all__ = ["CacheSettingsError", "LitegateCache"]
