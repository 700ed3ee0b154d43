"""The bytes of request bodies the admission port holds at once. kube-apiserver gives each review in flight a
connection and never retries (a connection refused is a pod created without our decision): so bodies are
counted, not connections, and one that does not fit waits, unread."""
from __future__ import annotations

import asyncio
import collections

from .. import metrics
from ..config import BODY_BUDGET_MIB

DEFAULT_BYTES = BODY_BUDGET_MIB * 1024 * 1024


class NoRoom(Exception):
    """The deadline came while the body waited for room."""


class Budget:
    """Room for `total` bytes of bodies; `take` waits its turn (first come, first served), `release` frees it."""

    def __init__(self, total: int = DEFAULT_BYTES) -> None:
        self.total = total
        self.held = 0
        self._waiting: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    def _fits(self, size: int) -> bool:
        return self.held + size <= self.total or self.held == 0

    def _take(self, size: int) -> None:
        self.held += size
        metrics.BODY_BYTES_HELD.set(self.held)

    def release(self, size: int) -> None:
        self.held -= size
        metrics.BODY_BYTES_HELD.set(self.held)
        while self._waiting and self._fits(self._waiting[0][0]):
            wanted, turn = self._waiting.popleft()
            if not turn.done():
                self._take(wanted)
                turn.set_result(None)
        metrics.REQUESTS_WAITING.set(len(self._waiting))

    async def take(self, size: int, within: float) -> None:
        """Room for `size` bytes: at once when it fits and nobody is waiting (every review but a
        burst's of large ones: no timer or future), else in line; NoRoom after `within` seconds."""
        if not self._waiting and self._fits(size):
            self._take(size)
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (size, turn)
        self._waiting.append(entry)
        metrics.REQUESTS_WAITING.set(len(self._waiting))
        try:
            async with asyncio.timeout(max(within, 0.0)):
                await asyncio.shield(turn)
        except (TimeoutError, asyncio.CancelledError) as exc:
            if turn.done():  # given room as the wait ended: hand it on
                self.release(size)
            else:
                turn.cancel()
                self._waiting.remove(entry)
                metrics.REQUESTS_WAITING.set(len(self._waiting))
            if isinstance(exc, TimeoutError):
                metrics.BODIES_TURNED_AWAY.inc()
                raise NoRoom(f"no room for a body of {size} bytes before the deadline "
                             f"({self.held} of {self.total} held)") from None
            raise

