"""A fresh, seeded database: ~100 users, ~1,000 posts, ~10 comments per
post (the seed's sizes), the same rows for the same ``seed``."""

from __future__ import annotations

import os
import random
import sqlite3
from contextlib import closing


def seed(path: str, *, users: int = 100, posts: int = 1000, comments: int = 10,
         rng_seed: int = 3) -> dict[str, int]:  # fmt: skip
    """Create ``path`` (replacing it) with the app's tables and rows, in
    WAL mode; ``litegate web serve --engine naive`` switches it back to a
    rollback journal. Runs in this process (Django set up for the file)."""
    for suffix in ("", "-wal", "-shm", "-litegate"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
    from django.core.management import call_command
    from django.db import connection, transaction
    from django.utils import timezone

    from .models import Comment, Post, User

    call_command("migrate", run_syncdb=True, verbosity=0)
    rnd = random.Random(rng_seed)
    now = timezone.now()
    with transaction.atomic():
        us = User.objects.bulk_create(
            User(name=f"User {i}", email=f"user{i}@example.org", last_seen_at=now)
            for i in range(1, users + 1)
        )
        ps = Post.objects.bulk_create(
            Post(user=rnd.choice(us), title=f"Post {i}", description=f"The text of post {i}.")
            for i in range(1, posts + 1)
        )
        Comment.objects.bulk_create(
            (
                Comment(user=rnd.choice(us), post=p, body=f"Comment {k} on post {p.pk}")
                for p in ps
                for k in range(comments)
            ),
            batch_size=2000,
        )
    counts = {
        "users": User.objects.count(),
        "posts": Post.objects.count(),
        "comments": Comment.objects.count(),
    }
    connection.close()
    return counts
