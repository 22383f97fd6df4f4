"""A size sampled on a thread of the parent during a cell: the SQLite WAL
file's (``_run.WalSampler``) or the PostgreSQL database's
(``_pg.DbSizeSampler``). One loop for both; each says what ``size()`` is."""

from __future__ import annotations

import threading
import time


class Sampler:
    """Samples ``size()`` every ``interval`` seconds from :meth:`start` to
    :meth:`stop` (one sample more there): ``samples`` as (seconds, bytes)."""

    NAME = "sampler"

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.samples: list[tuple[float, int]] = []
        self.t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=self.NAME, daemon=True)

    def size(self) -> int:
        raise NotImplementedError

    def start(self) -> None:
        self.t0 = time.monotonic()
        self._thread.start()

    def _loop(self) -> None:
        while True:
            self.samples.append((time.monotonic() - self.t0, self.size()))
            if self._stop.wait(self.interval):
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.samples.append((time.monotonic() - self.t0, self.size()))

    @property
    def peak(self) -> int:
        return max((b for _, b in self.samples), default=0)

    def close(self) -> None:
        """Let go of what ``size()`` reads (nothing, unless overridden)."""
