"""A short run of the chaos soak (``soak.py``; ``make soak`` runs it for
five minutes): mixed policies, fork and spawn, SIGKILL and SIGSTOP of
workers wherever they are, then no stall, no hang, nothing acknowledged
lost and the grant log's bounds."""

from __future__ import annotations

import pytest

from tests.litegate import soak


@pytest.mark.slow
def test_a_short_chaos_soak_finds_nothing_wrong() -> None:
    result = soak.run(seconds=8.0, workers=6, seed=20261126)
    assert result.problems == [], result.summary()
    assert result.kills >= 10  # the chaos happened
    assert result.grants > 1_000
    assert result.acknowledged > 1_000
