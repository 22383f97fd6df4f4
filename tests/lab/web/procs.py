"""The app under Django's test client, in a spawned process per engine
(Django's settings are per process)."""

from __future__ import annotations

import os
from typing import Any


def exercise(engine: str, db: str, acks: str) -> dict[str, Any]:
    """Every route once; returns each answer, the table counts around the
    writes and what the ledger in ``acks`` holds after the single actions."""
    os.environ["LITEGATE_WEB_ENGINE"] = engine
    os.environ["LITEGATE_WEB_DB"] = db
    os.environ["LITEGATE_WEB_ACKS"] = acks
    os.environ["DJANGO_SETTINGS_MODULE"] = "litegate_lab.web.app.settings"
    import django

    django.setup()
    from django.db import connection
    from django.test import Client
    from litegate_lab.web.app.models import Comment, Post, User

    def counts() -> tuple[int, int, int]:
        return User.objects.count(), Post.objects.count(), Comment.objects.count()

    c = Client()
    out: dict[str, Any] = {
        "vendor": connection.vendor,
        "engine": connection.settings_dict["ENGINE"],
    }
    with connection.cursor() as cur:  # what the engine configuration set (a variant's PRAGMA)
        cur.execute("PRAGMA cache_size")
        out["cache_size"] = cur.fetchone()[0]
    for action in ("post_create", "comment_create", "post_destroy", "comment_destroy",
                   "post_show", "posts_index", "user_show"):  # fmt: skip
        before = counts()
        r = c.post(f"/benchmarking/{action}")
        out[action] = (r.status_code, r.get("Location", ""), before, counts())
    from litegate_lab.web import _acks

    out["ledger"] = sorted(e for e in _acks.entries(acks) if e is not None)
    for mix in ("read_heavy", "balanced", "write_heavy"):
        out[mix] = sorted({c.post(f"/benchmarking/{mix}").status_code for _ in range(30)})
    out["unknown"] = c.post("/benchmarking/nope").status_code
    out["get_on_benchmarking"] = c.get("/benchmarking/balanced").status_code
    post = Post.objects.order_by("id").first()  # one the random deletes left
    assert post is not None
    out["pages"] = [c.get(p).status_code for p in ("/", f"/posts/{post.pk}/", "/users/3/")]
    out["missing_page"] = c.get("/posts/999999/").status_code
    out["seen"] = User.objects.exclude(last_seen_at=None).count()
    out["orphans"] = Comment.objects.exclude(post__in=Post.objects.all()).count()
    return out
