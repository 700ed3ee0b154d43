"""What came of each of the keeper's writes, and when a pass stops writing. A failed write holds its VM
alone, with a backoff of its own (`rules.keeping.record`: client-go's per-item exponential); only the API
lost stops a pass: LOST different VMs in a row failing without an answer about their object (one is a
tenant's webhook, two can share a namespace's, a third is the API, etcd or virt-api). A token bucket
bounds all writes, as client-go's controller rate limiter does: a pass's handful at once, then RATE.
"""
from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable

from ..rules.keeping.record import Action
from .kubevirt_api import Created

BURST = 10  # writes at once: more than a pass makes while nothing is wrong
RATE = 1.0  # writes a second past the burst
LOST = 3  # different VMs failing in a row, nothing answered in between: the API is lost


@dataclasses.dataclass(frozen=True, slots=True)
class Result:
    """What came of one action on a VM, in words: the migration created (namespace/name), done (or
    nothing left to do), or the VM held (`holds`: it failed; `status`: the API's answer, 0: none)."""

    key: tuple[str, str]
    action: Action
    words: str = ""
    created: str | None = None
    done: bool = False
    holds: bool = False
    status: int = 0
    uid: str = ""  # the VMI's, of one unpaused


def failed(key: tuple[str, str], action: Action, answer: Created, words: str) -> Result:
    """A failed write: the VM is held, with the API's words ("API answered 500: …", "no answer within 5s")."""
    return Result(key=key, action=action, words=f"{words}: {answer.error}", holds=True, status=answer.status)


def about_the_object(status: int) -> bool:
    """The API answered about the object asked for (a 4xx but 429): it is there, and answers."""
    return 400 <= status < 500 and status != 429


class Writes:
    """The keeper's writes: the bucket (across passes) and this pass's failures in a row (`begin`)."""

    def __init__(self, rate: float = RATE, burst: int = BURST, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep):
        self.rate, self.burst, self.clock, self.sleep = rate, burst, clock, sleep
        self.tokens, self.at = float(burst), clock()
        self.failing: set[tuple[str, str]] = set()
        self.lost = ""  # why this pass stopped writing ("": it did not)

    def begin(self) -> None:
        """A new pass: the API is given a fresh chance."""
        self.failing, self.lost = set(), ""

    async def take(self) -> bool:
        """One write's token, waiting for it past the burst; False once the pass has stopped writing."""
        while not self.lost:
            now = self.clock()
            self.tokens, self.at = min(float(self.burst), self.tokens + (now - self.at) * self.rate), now
            if self.tokens >= 1:
                self.tokens -= 1
                return True
            await self.sleep((1 - self.tokens) / self.rate)
        return False

    def came(self, result: Result) -> Result:
        """Count a write's result towards the API lost: LOST different VMs in a row failing."""
        if result.done or about_the_object(result.status):
            self.failing.clear()
        elif result.holds:
            self.failing.add(result.key)
            if len(self.failing) >= LOST:
                self.lost = f"the API failed for {LOST} different VMs in a row, the pass stopped: {result.words}"
        return result
