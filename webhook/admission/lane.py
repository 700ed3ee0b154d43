"""A drain's share-managers on the event loop, one admission at a time, in slices: between two steps
of anything else (a VM start) stands one slice of one of them, whatever the storm."""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable
from typing import Any

from ..deadline import Deadline
from ..process.pace import SLICE, in_slices


class Lane:
    """Where long rule work waits its turn: one admission's work at a time (`turn`), its long loops in slices
    (`slices`). One per server (its event loop); a tool answering one pod needs none."""

    def __init__(self, slice_seconds: float = SLICE) -> None:
        self.slice = slice_seconds
        self._turn = asyncio.Lock()
        self.waiting = 0  # admissions waiting for their turn (the log's and tests' view of the queue)

    @contextlib.asynccontextmanager
    async def turn(self, deadline: Deadline) -> AsyncIterator[bool]:
        """This admission's turn, held until the block ends: True once it has it, False when the
        deadline came first (the block then runs without it, and should answer at once)."""
        self.waiting += 1
        try:
            async with deadline.timeout():
                await self._turn.acquire()
        except TimeoutError:
            self.waiting -= 1
            yield False
            return
        self.waiting -= 1
        try:
            yield True
        finally:
            self._turn.release()

    async def slices(self, steps: Iterable[Any], deadline: Deadline) -> bool:
        """`in_slices` at this lane's slice, by an admission that has its turn."""
        return await in_slices(steps, deadline, self.slice)
