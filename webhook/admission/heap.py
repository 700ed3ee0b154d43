"""Full garbage collections that stop every admission for tens of milliseconds: once a cache has
synced, what is alive is collected one last time and moved out of the collector's reach.

At 1,000 nodes and 25,000 VMs the caches' tables and indexes hold tens of thousands of entries, and
CPython's full collection visits every entry of every container it tracks: 35–50 ms, the event loop
stopped meanwhile, each time a quarter as many objects again as it holds have outlived the younger
generations. Under a burst of reviews (each held while it is judged) that is every few hundred
milliseconds: a drain's storm of share-managers met one or two of them. Those containers live as
long as the process and no reference cycle holds them, so a collection can never free them, only
walk them. `gc.freeze` leaves them, and whatever else is alive then, out of every later collection;
an object frozen and dropped later is still freed by its reference count. What a freeze can cost: a
reference cycle alive at that moment and dropped later is never collected. One freeze per cache's
first sync (a relist refills the same tables): a handful per process.

What a freeze cannot leave out is what a drain's burst itself leaves alive for a while: at 5,000
nodes a young collection over it took 15–31 ms. Those are held while reviews arrive, and run in
the pause after the burst (`HeldInBursts`).
"""
from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Iterable

from ..background import Background, Companion
from ..cluster.informer import Informer
from ..process.listening import Arrivals

log = logging.getLogger("webhook.cache")

PERIOD = 1.0  # how often the caches are asked whether they have synced: a freeze comes within it

# A young collection once this many more objects are alive than at the last one (CPython: 700). A
# drain's burst holds tens of thousands at once (each review parsed, its pod, its answer, in flight
# together): at 700 the young collections walked them again and again, moved them on, and what they
# moved set off full collections, 19 ms each at 1,000 nodes (`bench.storm`: 3 in 5 storms of 200
# share-managers, 26 ms of collections a storm); at 50,000 one young collection in 5 storms (10 ms),
# no other. What waits longer for it: reference cycles, rare here (an exception's traceback), a few MiB.
YOUNG = 50_000


def collect_young_less() -> None:
    """The young generation's threshold at YOUNG, the older ones' as they are."""
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG, older, oldest)


class FreezeListed(Companion):
    """A companion of the Service: after each informer's first sync, collect and freeze."""

    def __init__(self, informers: Iterable[Informer], period: float = PERIOD) -> None:
        self.informers = tuple(informers)
        self.frozen: list[str] = []  # the informers whose first sync was followed by a freeze, in order
        self.task = Background("freeze listed", self.step, log=log, failure="freezing a synced cache failed",
                               period=period)

    async def step(self) -> None:
        """Freeze once for the caches that have synced since the last step (none: nothing)."""
        synced = [i.name for i in self.informers if i.synced and i.name not in self.frozen]
        if not synced:
            return
        began = time.perf_counter()
        gc.collect(1)  # the lists' own garbage is freed, not kept for good: the young generations (a full
        # collection, over every cache, would hold the process, its probes' thread too, for up to a second)
        gc.freeze()
        self.frozen += synced
        log.info("cache frozen", extra={"fields": {
            "resource": ", ".join(synced), "objects_frozen": gc.get_freeze_count(),
            "seconds": round(time.perf_counter() - began, 3)}})


# The automatic collections held while reviews arrive together (one accepted beside others, in
# their handshakes or in flight), until none has been in flight for HELD_QUIET, HELD_SECONDS at most.
# At 5,000 nodes the objects a drain's storm leaves alive for a while (its answers, its pods' rows
# and indexes) took a young collection 15–31 ms, and one in two bursts met one, the event loop
# stopped meanwhile: a VM start's review waited for it. Held, each collection runs in the pause after
# the burst; what it costs: cycles made during a burst (rare here) wait until then, and under
# unbroken arrivals one collection runs each HELD_SECONDS. Reviews one after another are not held:
# nothing waits behind one (held at every arrival, the fallback path's p99, one connection, measured
# 10.9–11.3 ms against 9.6–9.8 without: `python -m bench`).
HELD_QUIET = 0.1
HELD_SECONDS = 1.0


class HeldInBursts:
    """A companion of the Service (start, stop, degraded): CPython's automatic collections held while
    reviews arrive (`arrivals`). No task of its own: a timer while they are held."""

    def __init__(self, arrivals: Arrivals, quiet: float = HELD_QUIET, longest: float = HELD_SECONDS) -> None:
        self.arrivals, self.quiet, self.longest = arrivals, quiet, longest
        self.since: float | None = None  # when the collections were held, if they are
        self.timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self.arrivals.on_arrival.append(self.hold)

    async def stop(self) -> None:
        if self.hold in self.arrivals.on_arrival:
            self.arrivals.on_arrival.remove(self.hold)
        self.let_go()

    def degraded(self) -> list[str]:
        return []

    def hold(self) -> None:
        """At an arrival beside others: no automatic collection until the burst is answered (a
        collection paused otherwise, as while a review is parsed, is left as it is)."""
        if self.since is not None or not gc.isenabled():
            return
        gc.disable()
        self.since = time.monotonic()
        self.timer = asyncio.get_running_loop().call_later(self.quiet, self._look)

    def _look(self) -> None:
        if self.since is not None and self.arrivals.busy_within(self.quiet) and \
                time.monotonic() - self.since < self.longest:
            self.timer = asyncio.get_running_loop().call_later(self.quiet, self._look)
            return
        self.let_go()

    def let_go(self) -> None:
        """The automatic collections again: one that is due runs at the next allocation."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.since is not None:
            self.since = None
            gc.enable()
