from __future__ import annotations

from django.apps import AppConfig


class HNConfig(AppConfig):
    name = "litegate_lab.web.app"
    label = "hn"
    verbose_name = "seed 003's Hacker News app"

    def ready(self) -> None:
        from .. import _acks

        _acks.start()  # this worker's ledger file, if `litegate web serve --acks` asked for one
