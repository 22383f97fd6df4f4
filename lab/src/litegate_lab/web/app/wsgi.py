"""The WSGI application gunicorn serves (``litegate web serve``)."""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "litegate_lab.web.app.settings")

from django.core.wsgi import get_wsgi_application

from .._threads import name_os_threads

name_os_threads()  # the bench tells the worker's threads apart in /proc by name
application = get_wsgi_application()
