"""Long work on the event loop, paced: the loop given back every SLICE seconds of it.

Everything of a process shares its one event loop: an admission's answer, the probes, a Lease's
renewal, an Event. Work that takes longer than a few milliseconds at a stretch (judging hundreds
of nodes, a pass over thousands of VMs from memory, where no await yields) takes a turn of at most
a slice, then lets whatever else waits for the loop run (`Pacer`, `in_slices`).
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

from ..deadline import Deadline

# The longest long work holds the event loop at a stretch before everything else waiting for it runs.
SLICE = 0.002


class Pacer:
    """`await pacer()` between steps of long work: gives the event loop back once `slice_seconds`
    of it have gone to the work since the last time (else returns at once, without yielding)."""

    def __init__(self, slice_seconds: float = SLICE) -> None:
        self.slice = slice_seconds
        self.until = time.monotonic() + slice_seconds

    async def give_back(self) -> None:
        """Let everything waiting for the loop run, then start a new slice."""
        await asyncio.sleep(0)
        self.until = time.monotonic() + self.slice

    async def __call__(self) -> None:
        if time.monotonic() >= self.until:
            await self.give_back()


async def in_slices(steps: Iterable[Any], deadline: Deadline, slice_seconds: float = SLICE) -> bool:
    """Take `steps` one by one, paced (`Pacer`), so that other work is done meanwhile; False when
    the deadline came first (checked each time the loop is given back)."""
    pacer = Pacer(slice_seconds)
    for _ in steps:
        if time.monotonic() >= pacer.until:
            if deadline.remaining() <= 0:
                return False
            await pacer.give_back()
    return True
