"""How long the event loop keeps a request waiting: a timer every 0.1 s, and how late it runs."""
from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import time

from .. import metrics
from ..background import Background, Companion

log = logging.getLogger("webhook")

PERIOD = 0.1
WINDOW = 60.0


class LoopLag(Companion):
    """Measures the loop's lag beside admission (a companion of the Service)."""

    def __init__(self) -> None:
        self.samples: collections.deque[tuple[float, float]] = collections.deque()  # (when, lag)
        self.task = Background("loop-lag", self.sample, log=log, failure="measuring the event loop's lag failed")

    async def sample(self) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time() + PERIOD
        await asyncio.sleep(PERIOD)
        self.record(max(loop.time() - due, 0.0))

    def record(self, lag: float, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self.samples.append((now, lag))
        while self.samples and self.samples[0][0] < now - WINDOW:
            self.samples.popleft()
        metrics.LOOP_LAG.observe(lag)
        metrics.LOOP_LAG_MAX.set(max(lag for _, lag in self.samples))

    def recent(self, now: float | None = None) -> float:
        """The largest lag of the last second (0 when none was measured)."""
        since = (time.monotonic() if now is None else now) - 1.0
        lags = itertools.takewhile(lambda sample: sample[0] >= since, reversed(self.samples))
        return max((lag for _, lag in lags), default=0.0)
