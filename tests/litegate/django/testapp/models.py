"""Models for the backend's tests."""

from __future__ import annotations

from django.db import models


class Counter(models.Model):
    name = models.CharField(max_length=50, unique=True)
    n = models.IntegerField(default=0)

    class Meta:
        app_label = "testapp"


class Entry(models.Model):
    who = models.CharField(max_length=50)

    class Meta:
        app_label = "testapp"
