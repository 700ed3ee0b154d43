"""`serve`'s caches frozen out of the collector once each has listed (process/heap.py says why)."""
from __future__ import annotations

import logging
from collections.abc import Iterable

from ..background import Background, Companion
from ..cluster.informer import Informer
from ..process import heap

log = logging.getLogger("webhook.cache")

PERIOD = 1.0  # how often the caches are asked whether they have synced: a freeze comes within it


class FreezeListed(Companion):
    """A companion of the Service: a freeze after each informer's first sync (a relist refills the
    same tables: a handful per process)."""

    def __init__(self, informers: Iterable[Informer], period: float = PERIOD) -> None:
        self.informers = tuple(informers)
        self.frozen: list[str] = []  # the informers whose first sync was followed by a freeze, in order
        self.task = Background("freeze listed", self.step, log=log, failure="freezing a synced cache failed",
                               period=period)

    async def step(self) -> None:
        """Freeze once for the caches that have synced since the last step (none: nothing)."""
        synced = [i.name for i in self.informers if i.synced and i.name not in self.frozen]
        if synced:
            heap.freeze(log, ", ".join(synced))
            self.frozen += synced
