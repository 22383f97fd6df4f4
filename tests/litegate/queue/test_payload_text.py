"""put_many hands SQLite one JSON array and lets ``json_each`` split it into
rows: each row's text must be exactly the payload's own encoding, for any
JSON object or array."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from litegate.queue import Queue
from litegate.queue._core import _ENCODE
from tests.litegate.misuse import examples

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
containers = st.lists(values, max_size=4) | st.dictionaries(st.text(max_size=8), values, max_size=4)


def test_put_many_stores_each_payloads_own_text(tmp_path: Path) -> None:
    q = Queue(str(tmp_path / "q.db"))

    @given(st.lists(containers, min_size=2, max_size=8))
    @examples(150)
    def case(payloads: list[Any]) -> None:
        ids = q.put_many(payloads)
        with closing(sqlite3.connect(q.db.path)) as conn:
            texts = [
                conn.execute(
                    "SELECT payload FROM litegate_queue_jobs WHERE id = ?", (i,)
                ).fetchone()[0]
                for i in ids
            ]
        assert texts == [_ENCODE(p) for p in payloads]
        assert [q.get(i).payload for i in ids] == payloads

    try:
        case()
    finally:
        q.close()
