"""The time an admission may take: the apiserver's ?timeout= less a safety margin.

One `Deadline` goes with a review from its start down to each read it makes; the time each read
is given is worked out here (`call`), as what is left, and the read is held to it even when it
does not keep its own timeout: an answer after the apiserver gave up is a pod created without
our decision.
"""
from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Deadline:
    at: float  # time.monotonic() value

    @classmethod
    def after(cls, timeout: float, margin: float) -> Deadline:
        """Leave `margin` seconds (at most a quarter of the timeout) to answer in."""
        margin = min(margin, timeout / 4)
        return cls(time.monotonic() + max(timeout - margin, 0.0))

    def remaining(self) -> float:
        return max(self.at - time.monotonic(), 0.0)

    def timeout(self) -> asyncio.Timeout:
        """An asyncio timeout that ends with the deadline, for a wait that takes no time of its own
        (raises TimeoutError)."""
        return asyncio.timeout(self.remaining())

    async def call(self, read: Callable[..., Awaitable[T]], *args: Any) -> T:
        """`read(*args, timeout=…)`, given what is left of the deadline and held to it (raises
        TimeoutError when it is not done by then)."""
        left = self.remaining()
        async with asyncio.timeout(left):
            return await read(*args, timeout=left)
