"""The ASGI application uvicorn serves (``litegate web serve --framework
fastapi``): the app, and with ``LITEGATE_WEB_KEEP_ALIVE=0`` (``serve
--keep-alive 0``, the default) a ``Connection: close`` on every response,
so that each request comes on a new connection, as gunicorn's
``--keep-alive 0`` does for the Django app: a load of short requests is
then spread over the workers at each accept, instead of each client
staying with the worker that accepted its first connection."""

from __future__ import annotations

import os

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._threads import name_os_threads
from .main import app

name_os_threads()  # the bench tells the worker's threads apart in /proc by name


def close_each_connection(inner: ASGIApp) -> ASGIApp:
    """``inner``, answering every HTTP request with ``Connection: close``."""

    async def application(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await inner(scope, receive, send)
            return

        async def closing(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [*message.get("headers", ()), (b"connection", b"close")]
                message = {**message, "headers": headers}
            await send(message)

        await inner(scope, receive, closing)

    return application


application: ASGIApp = (
    close_each_connection(app) if os.environ.get("LITEGATE_WEB_KEEP_ALIVE") == "0" else app
)
