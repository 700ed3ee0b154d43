"""A drain's share-managers on the event loop, one admission at a time, in slices: between two steps
of anything else (a VM start) stands one slice of one of them, whatever the storm."""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from ..deadline import Deadline


class Lane:
    """One admission's long work at a time, its long loops in slices (`pace.in_slices`); one per server (its loop)."""

    def __init__(self) -> None:
        self._turn = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def turn(self, deadline: Deadline) -> AsyncIterator[bool]:
        """This admission's turn, held until the block ends: True, or False when the deadline came first."""
        try:
            async with deadline.timeout():
                await self._turn.acquire()
        except TimeoutError:
            yield False
            return
        try:
            yield True
        finally:
            self._turn.release()
