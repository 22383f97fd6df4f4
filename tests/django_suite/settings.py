"""Settings for Django's own test suite (its tests/runtests.py) against one
engine: DJANGO_SUITE_ENGINE, with file-based databases in DJANGO_SUITE_DIR
(the parallel runner clones file-based test databases; in-memory ones would
not test that)."""

from __future__ import annotations

import os

_ENGINE = os.environ.get("DJANGO_SUITE_ENGINE", "litegate.django")
_DIR = os.environ["DJANGO_SUITE_DIR"]

DATABASES = {
    alias: {
        "ENGINE": _ENGINE,
        "NAME": os.path.join(_DIR, f"{alias}.db"),
        "TEST": {"NAME": os.path.join(_DIR, f"test_{alias}.db")},
    }
    for alias in ("default", "other")
}
SECRET_KEY = "django_tests_secret_key"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
USE_TZ = False

if _ENGINE == "litegate.django":
    # The tests that fail with litegate on purpose (run.py's EXPECTED) run
    # as expected failures, so the parallel runner can report them.
    TEST_RUNNER = "runner.ExpectedFailureRunner"
