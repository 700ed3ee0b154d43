"""The time an admission may take: the apiserver's ?timeout= less a safety margin. One `Deadline`
goes with a review down to each read it makes, each given what is left and held to it even when it does
not keep its own timeout (`call`): an answer after the apiserver gave up is a pod created without ours.
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
        """An asyncio timeout ending with the deadline, for a wait that takes no timeout of its own."""
        return asyncio.timeout(self.remaining())

    async def call(self, read: Callable[..., Awaitable[T]], *args: Any) -> T:
        """`read(*args, timeout=…)` given what is left of the deadline, and held to it (TimeoutError)."""
        left = self.remaining()
        async with asyncio.timeout(left):
            return await read(*args, timeout=left)
