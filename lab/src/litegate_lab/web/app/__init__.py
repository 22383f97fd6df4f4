"""Seed 003's "Hacker News" app, in Django: users, posts, comments, the
``/benchmarking/…`` routes the seed loads with ``hey``, and three plain HTML
pages. The database engine is one switch (``LITEGATE_WEB_ENGINE``)."""
