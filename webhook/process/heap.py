"""The garbage collector, set here for either process, for one reason: a collection walks every object it tracks, the
loop and the probes' thread stopped meanwhile, and should not walk what it cannot free: what lives once the caches
synced is frozen out, a review's parsing pauses it, young collections wait for YOUNG new objects (a drain's burst)."""
from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Iterator

YOUNG = 50_000  # objects made before a young collection (CPython: 700); cycles (a traceback) wait a little longer


def collect_young_less() -> None:
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
