"""Seed 003's app, whatever the framework: the actions of ``POST
/benchmarking/…`` and the weights of the seed's three mixes. The Django app
(``app/``) and the FastAPI app (``fastapi_app/``) both route through
:func:`choose`; the schema and the seed data are one file made by ``litegate
web seed``, which both serve."""

from __future__ import annotations

import random

READS = ("post_show", "posts_index", "user_show")
WRITES = ("post_create", "comment_create", "post_destroy", "comment_destroy")
ACTIONS = WRITES + READS

# The seed's controller: each mix's weights per action.
MIXES: dict[str, dict[str, float]] = {
    "read_heavy": {
        "post_create": 0.10,
        "comment_create": 0.10,
        "post_destroy": 0.02,
        "comment_destroy": 0.03,
        "post_show": 0.25,
        "posts_index": 0.25,
        "user_show": 0.25,
    },
    "write_heavy": {
        "post_create": 0.25,
        "comment_create": 0.25,
        "post_destroy": 0.05,
        "comment_destroy": 0.20,
        "post_show": 0.05,
        "posts_index": 0.15,
        "user_show": 0.05,
    },
    "balanced": {
        "post_create": 0.17,
        "comment_create": 0.17,
        "post_destroy": 0.05,
        "comment_destroy": 0.11,
        "post_show": 0.17,
        "posts_index": 0.17,
        "user_show": 0.16,
    },
}


class UnknownAction(LookupError):
    """Neither a mix nor an action: the route answers 404."""


def choose(name: str) -> str:
    """The action a request for ``/benchmarking/<name>`` runs: ``name``
    itself, or for a mix one action drawn with the mix's weights."""
    mix = MIXES.get(name)
    if mix is not None:
        return random.choices(list(mix), weights=list(mix.values()))[0]
    if name not in ACTIONS:
        raise UnknownAction(f"no benchmarking action {name!r}")
    return name
