"""Long work on the event loop, paced: the loop given back every SLICE seconds of it."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from typing import Any

from ..deadline import Deadline

# The longest long work holds the event loop at a stretch before everything else waiting for it runs.
SLICE = 0.002


class Pacer:
    """`await pacer()` between steps of long work: the loop given back once SLICE seconds of it went to the work."""

    def __init__(self) -> None:
        self.until = time.monotonic() + SLICE

    async def give_back(self) -> None:
        await asyncio.sleep(0)
        self.until = time.monotonic() + SLICE

    async def __call__(self) -> None:
        if time.monotonic() >= self.until:
            await self.give_back()


async def in_slices(steps: Iterable[Any], deadline: Deadline) -> bool:
    """`steps` taken paced (`Pacer`); False when the deadline came first (checked as the loop is given back)."""
    pacer = Pacer()
    for _ in steps:
        if time.monotonic() >= pacer.until:
            if deadline.remaining() <= 0:
                return False
            await pacer.give_back()
    return True


class AfterReviews:
    """Background work that gives way to the reviews in flight: `wait` returns once `busy()` says none is, or once
    the waits since the last quiet moment lasted `hold` seconds; then at once for as long again, then a new hold."""

    def __init__(self, hold: float, look_again: float = 0.01) -> None:
        self.hold, self.look_again = hold, look_again
        self.busy: Callable[[], bool] = lambda: False
        self._held_since: float | None = None  # when the work began to wait for the reviews in flight

    async def wait(self) -> None:
        while self.busy():
            now = time.monotonic()
            if self._held_since is None or now - self._held_since >= 2 * self.hold:
                self._held_since = now  # a new hold (none yet, or the last one is over)
            elif now - self._held_since >= self.hold:
                return  # held for the whole hold: at once, until as long again has passed
            await asyncio.sleep(self.look_again)
        self._held_since = None
