"""Long rule work on the event loop, one admission at a time, in slices.

A drain's share-manager judges nodes for two pods (milliseconds on hundreds of nodes), and a
drain re-creates tens of them at once. Run side by side, each gets a turn in every round of the
loop, so anything else waiting for the loop (a VM start's TLS handshake, its headers, its
answer) waits behind a slice of each of them at every step. In one lane, a single slice stands
between two steps of everything else, whatever the storm: VM starts keep their pace, and the
share-managers are answered one after another, the first ones sooner than side by side.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

from ..deadline import Deadline

# The longest the rules hold the event loop at a stretch before everything else waiting for it runs.
SLICE = 0.002


async def in_slices(steps: Iterable[Any], deadline: Deadline, slice_seconds: float = SLICE) -> bool:
    """Take `steps` one by one, giving the event loop back every `slice_seconds` so that other
    admissions are answered meanwhile; False when the deadline came first."""
    until = time.monotonic() + slice_seconds
    for _ in steps:
        if time.monotonic() >= until:
            if deadline.remaining() <= 0:
                return False
            await asyncio.sleep(0)
            until = time.monotonic() + slice_seconds
    return True


class Lane:
    """Where long rule work waits its turn: one admission's steps at a time, each in slices.
    One per server (its event loop); a tool answering one pod needs none."""

    def __init__(self, slice_seconds: float = SLICE) -> None:
        self.slice = slice_seconds
        self._turn = asyncio.Lock()
        self.waiting = 0  # admissions waiting for their turn (the log's and tests' view of the queue)

    async def run(self, steps: Iterable[Any], deadline: Deadline) -> bool:
        """`in_slices` once it is this admission's turn; False when the deadline comes first,
        while waiting or while judging."""
        self.waiting += 1
        try:
            async with asyncio.timeout(max(0.0, deadline.remaining())):
                await self._turn.acquire()
        except TimeoutError:
            return False
        finally:
            self.waiting -= 1
        try:
            return await in_slices(steps, deadline, self.slice)
        finally:
            self._turn.release()
