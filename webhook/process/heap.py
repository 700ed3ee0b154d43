"""The garbage collector, set in this one place for either process (`serve`, `keep`), for one reason:
a collection walks every object it tracks, the event loop and the probes' thread (the GIL) stopped
meanwhile, and should not walk what it cannot free.

- The caches (millions of containers at 5,000 nodes) live as long as the process, in no reference
  cycle: a full collection over them took up to a second. What is alive once a cache has synced is
  frozen out of every later collection (`freeze`); dropped later, it is still freed by its reference
  count. A reference cycle alive then is never freed: so a freeze comes after a first sync only,
  never after a keeper's pass (270 MiB more a pass at 75,000 VMs).
- Reading a review holds all it parses until it is read (100,000 objects for a pod of 20,000 claims):
  no automatic collection meanwhile (`paused`). (A keeper's pass, paused too, measured the same.)
- A drain's burst holds tens of thousands of objects at once: `serve`'s young collections wait for
  YOUNG new objects, not CPython's 700, which set off a full collection every few hundred ms.
"""
from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Iterator

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


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No automatic collection within (as it was before, after)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
