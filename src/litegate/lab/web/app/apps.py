from __future__ import annotations

from django.apps import AppConfig


class HNConfig(AppConfig):
    name = "litegate.lab.web.app"
    label = "hn"
    verbose_name = "seed 003's Hacker News app"
