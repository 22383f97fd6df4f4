"""Argument types shared by the lab's command line and its experiments."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number, got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):  # nan and inf are no durations
        raise argparse.ArgumentTypeError(f"must be a number greater than 0, got {text!r}")
    return value


def csv(choices: Sequence[str]) -> Callable[[str], tuple[str, ...]]:
    """A comma-separated subset of ``choices`` (in the order given, once each)."""

    def parse(text: str) -> tuple[str, ...]:
        items = tuple(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
        bad = [x for x in items if x not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(
                f"pick from {', '.join(choices)} (comma-separated), got {text!r}"
            )
        return items

    return parse


def whole_numbers(least: int = 1) -> Callable[[str], tuple[int, ...]]:
    """Comma-separated whole numbers, at least one, each at least ``least``."""

    def parse(text: str) -> tuple[int, ...]:
        try:
            items = tuple(int(x) for x in text.split(",") if x.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"comma-separated whole numbers, got {text!r}"
            ) from None
        if not items or min(items) < least:
            raise argparse.ArgumentTypeError(f"whole numbers of at least {least}, got {text!r}")
        return items

    return parse
