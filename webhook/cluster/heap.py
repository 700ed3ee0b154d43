"""Full garbage collections that stop every admission for 100 ms: once a cache has synced, what is
alive is collected one last time and moved out of the collector's reach.

At 1,000 nodes and 25,000 VMs the caches' tables and indexes are dicts of tens of thousands of
entries each (table.py), and CPython's full collection visits every entry of every container it
tracks: 80–100 ms, the event loop stopped meanwhile, each time a quarter as many objects again as
it holds have outlived the younger generations (every half second while a cache lists, then as
watch events and admissions churn). Those containers live as long as the process and no reference
cycle holds them, so a collection can never free them, only walk them. `gc.freeze` leaves them,
and whatever else is alive then, out of every later collection (entries added to them later
included); an object frozen and dropped later is still freed by its reference count. What a freeze
can cost: a reference cycle alive at that moment and dropped later is never collected. A freeze
happens once per cache (a relist does not freeze again): a handful per process.
"""
from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Iterable

from .informer import Informer

log = logging.getLogger("webhook.cache")


class FreezeListed:
    """A companion of the Service: after each informer's first sync, collect and freeze."""

    def __init__(self, informers: Iterable[Informer]) -> None:
        self.informers = tuple(informers)
        self.frozen: list[str] = []  # the informers whose first sync was followed by a freeze, in order
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="freeze listed")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def degraded(self) -> list[str]:
        return []

    async def _run(self) -> None:
        waiting = {asyncio.ensure_future(i.synced_event.wait()): i for i in self.informers if i.name not in self.frozen}
        try:
            while waiting:
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                for synced in done:
                    self.freeze(waiting.pop(synced).name)
        finally:
            for wait in waiting:
                wait.cancel()

    def freeze(self, name: str) -> None:
        began = time.perf_counter()
        gc.collect()  # the list's own garbage is freed, not kept for good
        gc.freeze()
        self.frozen.append(name)
        log.info("cache frozen", extra={"fields": {
            "resource": name, "objects_frozen": gc.get_freeze_count(),
            "seconds": round(time.perf_counter() - began, 3)}})
