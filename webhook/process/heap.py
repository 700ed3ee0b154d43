"""The garbage collector, set once: in either process (`serve`, `keep`) what is alive once a cache
has synced is frozen out of every later collection, and `serve`'s young collections wait for YOUNG.

One reason: the caches hold hundreds of thousands of containers (millions at 5,000 nodes) that live
as long as the process and sit in no reference cycle, so a collection can never free them, only walk
them: a full one took 35–50 ms at 1,000 nodes and up to a second at 5,000, the event loop and the
probes' thread (the GIL) stopped meanwhile, and a drain's burst of reviews, tens of thousands of
objects alive at once, set one off every few hundred milliseconds at CPython's threshold of 700.
Frozen, they are walked no more; dropped later, they are still freed by their reference count. What
a freeze costs, a reference cycle alive then and dropped later never freed, is why it comes only
after a cache's first sync, never after a keeper's pass or a burst (270 MiB a pass at 75,000 VMs).
"""
from __future__ import annotations

import gc
import logging
import time

YOUNG = 50_000  # objects made before a young collection (CPython: 700); cycles (a traceback) wait a little longer


def collect_young_less() -> None:
    """The young generation's threshold at YOUNG, the older ones' as they are."""
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG, older, oldest)


def freeze(log: logging.Logger, what: str) -> None:
    """What is alive now out of every later collection, the young generations' garbage freed first
    (a full collection over the caches would hold the process for up to a second)."""
    began = time.perf_counter()
    gc.collect(1)
    gc.freeze()
    log.info("cache frozen", extra={"fields": {"resource": what, "objects_frozen": gc.get_freeze_count(),
                                               "seconds": round(time.perf_counter() - began, 3)}})
