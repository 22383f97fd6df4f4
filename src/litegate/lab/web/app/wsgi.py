"""The WSGI application gunicorn serves (``litegate web serve``)."""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "litegate.lab.web.app.settings")

from django.core.wsgi import get_wsgi_application

application = get_wsgi_application()
