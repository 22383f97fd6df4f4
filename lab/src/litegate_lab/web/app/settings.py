"""Settings of the web lab's app. The environment picks the database file
(``LITEGATE_WEB_DB``) and one of four engine configurations
(``LITEGATE_WEB_ENGINE``); the app's code is the same for all four.

- ``naive``: Django's defaults, ENGINE and NAME only (rollback journal);
- ``wal``: the same on a file in WAL mode;
- ``tuned``: Django's best configuration of its own SQLite backend today:
  ``transaction_mode: IMMEDIATE``, a 5 s ``timeout``, WAL and the usual
  PRAGMAs through ``init_command``, persistent connections;
- ``litegate``: ``ENGINE: "litegate.django"`` (its default profile), a 5 s
  gate timeout, persistent connections.
"""

from __future__ import annotations

import os

from .._variant import base
from .engines import ENGINES, cache_settings, database

ENGINE = os.environ.get("LITEGATE_WEB_ENGINE", "litegate")
if base(ENGINE) not in ENGINES:
    raise RuntimeError(f"LITEGATE_WEB_ENGINE must be one of {ENGINES}, got {ENGINE!r}")
_DB = os.environ.get("LITEGATE_WEB_DB", "hn.sqlite3")

DATABASES = {"default": database(ENGINE, _DB)}
# `bench web --cache`: the front page cached (cache_page) by one of Django's
# cache backends, LITEGATE_WEB_CACHE (litegate, database, filebased, redis),
# at LITEGATE_WEB_CACHE_LOCATION (a file, a directory or a redis:// URL).
CACHE = os.environ.get("LITEGATE_WEB_CACHE", "")
CACHE_SECONDS = float(os.environ.get("LITEGATE_WEB_CACHE_SECONDS", "60"))
CACHES = {"default": cache_settings(CACHE, os.environ.get("LITEGATE_WEB_CACHE_LOCATION", ""))}
SECRET_KEY = "litegate-web-lab"  # a lab server on 127.0.0.1, not a site
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
INSTALLED_APPS = ["litegate_lab.web.app"]
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "litegate_lab.web.app.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {},
    }
]
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
WSGI_APPLICATION = "litegate_lab.web.app.wsgi.application"
# Errors (a 500's traceback: "database is locked") on stderr, which the
# bench reads to count them; nothing else.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {"django.request": {"handlers": ["stderr"], "level": "ERROR"}},
}
