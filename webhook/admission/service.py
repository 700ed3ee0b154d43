"""The running webhook: ops port, HTTPS admission port, and a shutdown that drops nothing:
on SIGTERM /readyz fails at once, reviews are answered for the drain delay, then those in flight finished."""
from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

from .. import metrics
from ..cluster.events import NO_EVENTS, QUIET, Events
from ..stores.store import Store
from ..config import AdmissionSettings
from ..process import listening, ops
from ..process.listening import Port
from ..process.loop import stop_signals
from . import server
from .budget import DEFAULT_BYTES
from .looplag import LoopLag
from .prepare import Preparer
from .tls import ReloadingTLS

log = logging.getLogger("webhook")


@dataclasses.dataclass(frozen=True)
class Listen:
    host: str = "0.0.0.0"
    port: int = 9443
    metrics_host: str = "0.0.0.0"
    metrics_port: int = 8080
    drain_delay: float = 5.0
    shutdown_timeout: float = 20.0
    body_budget: int = DEFAULT_BYTES  # bytes of request bodies held at once (budget.py)


class Service:
    """Admission and its `companions` (the stranded-pod report, the opt-in check, the loop's lag: start(),
    async stop(), degraded()), whose notes join the store's in /readyz; admission never waits on them."""

    def __init__(self, store: Store, settings: AdmissionSettings, listen: Listen, tls: ReloadingTLS,
                 events: Events = NO_EVENTS, companions: Sequence[Any] = (), *, preparing: bool = False):
        self.store, self.settings, self.listen, self.tls, self.events = store, settings, listen, tls, events
        self.preparing = preparing  # a drain's share-managers answered before they are created (prepare.py)
        self.lag = LoopLag()
        self.arrivals = listening.Arrivals()  # when each review's wait began, for its latency
        self.companions = (self.lag, *companions)
        # An Event's POST waits for the reviews in flight, and for a pause between a burst's arrivals.
        events.yield_to(lambda: self.arrivals.busy_within(QUIET))
        self.ops_runner: Port | ops.Apart | None = None
        self.runner: Port | None = None  # the admission port
        metrics.STORE.source = store.stats
        self.handler = self.webhook()  # the admission port's

    def not_ready(self) -> list[str]:
        checks = (("shutting down", self.handler.draining), ("not listening yet", self.runner is None),
                  ("store not synced", not self.store.synced()))
        return [reason for reason, failing in checks if failing]

    def webhook(self) -> server.Webhook:
        """The admission port's handler (the benchmark's floor answers with one of its own)."""
        return server.make_webhook(self.store, self.settings, events=self.events, lag=self.lag,
                                   body_budget=self.listen.body_budget, arrivals=self.arrivals)

    def degraded(self) -> list[str]:
        return self.store.degraded() + [note for companion in self.companions for note in companion.degraded()]

    async def start(self) -> None:
        """Probes first (a live process), then the admission port, answering from direct reads until the caches sync."""
        self.store.start()
        self.ops_runner = await ops.Apart(ops.Probes(self.not_ready, self.degraded)).start(
            self.listen.metrics_host, self.listen.metrics_port)
        if self.preparing:  # with admission's own lane, promises and answers
            preparer = Preparer(self.store, self.settings, self.handler.admissions)  # type: ignore[arg-type]
            self.companions = (*self.companions, preparer)
        self.runner = await listening.start(self.handler, self.listen.host, self.listen.port, self.tls.context,
                                            shutdown_timeout=self.listen.shutdown_timeout, arrivals=self.arrivals)
        self.tls.start()
        for companion in self.companions:
            companion.start()
        log.info("serving", extra={"fields": {
            "host": self.listen.host, "port": listening.bound_port(self.runner),
            "metrics_port": listening.bound_port(self.ops_runner),
            "loop": type(asyncio.get_running_loop()).__module__}})

    async def stop(self) -> None:
        self.handler.draining = True
        for companion in self.companions:  # first: nothing beside admission runs on while this replica drains
            await companion.stop()
        log.info("draining", extra={"fields": {"seconds": self.listen.drain_delay}})
        await asyncio.sleep(self.listen.drain_delay)
        if self.runner is not None:
            await self.runner.cleanup()  # stop accepting, wait for in-flight requests
            self.runner = None
        log.info("stopped accepting; in-flight requests finished")
        await self._release()

    async def _release(self) -> None:
        """Close whatever is open (after a drain, or after a failed start)."""
        for companion in self.companions:
            await companion.stop()  # a second call does nothing
        await self.events.close()
        await self.store.close()
        await self.tls.stop()
        for runner in (self.runner, self.ops_runner):
            if runner is not None:
                await runner.cleanup()
        self.runner = self.ops_runner = None

    async def run(self) -> None:
        """Serve until SIGTERM or SIGINT, then shut down gracefully."""
        with stop_signals() as stop:
            try:
                await self.start()
            except BaseException:  # e.g. the port is taken: release what did start, then fail
                await self._release()
                raise
            await stop.wait()
        await self.stop()
        log.info("exiting")
