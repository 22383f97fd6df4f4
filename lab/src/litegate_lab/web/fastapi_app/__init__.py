"""Seed 003's "Hacker News" app on FastAPI + SQLAlchemy 2.0 asyncio, served
by uvicorn: the same tables, routes, mixes and seed data as the Django app
(``..app``), with three engine configurations of the same code
(``LITEGATE_WEB_ENGINE``, see :mod:`.engines`)."""

ENGINES = ("naive", "tuned", "litegate")
"""The engine configurations (:mod:`.engines`); here, so that the command
line can list them without importing SQLAlchemy."""
