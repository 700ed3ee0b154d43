"""The time an admission may take: the apiserver's ?timeout= less a safety margin. One `Deadline` goes with a review
down to each read it makes, each given what is left and held to it even when it does not keep its own timeout
(`call`): an answer after the apiserver gave up is a pod created without ours."""
from __future__ import annotations

import asyncio
import dataclasses
import time
import types
from collections.abc import Awaitable, Callable, Generator
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

    async def call(self, read: Callable[..., Awaitable[T]], *args: Any) -> T:
        """`read(*args, timeout=…)` given what is left of the deadline, and held to it (TimeoutError)."""
        left = self.remaining()
        steps = read(*args, timeout=left).__await__()
        try:
            waiting = steps.send(None)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        async with asyncio.timeout(left):
            return await _rest(steps, waiting)  # type: ignore[no-any-return]


@types.coroutine
def _rest(steps: Generator[Any, Any, T], waiting: Any) -> Generator[Any, Any, T]:
    """The steps of a read after its first (`Deadline.call`), taken as awaiting it would take them:
    what it waits for goes to the task, and what the task sends or throws (a cancellation) to it."""
    while True:
        try:
            try:
                sent = yield waiting
            except GeneratorExit:
                steps.close()
                raise
            except BaseException as error:  # the deadline's cancellation, among others: the read's to handle
                waiting = steps.throw(error)
            else:
                waiting = steps.send(sent)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
