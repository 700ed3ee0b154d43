"""`keep`'s process: its operations port and the elected keeper in the mode it may act in (upgrade.py). SIGTERM:
it stops acting, hands the Lease over, exits 0."""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from .. import metrics
from ..background import Background
from ..config import KeeperSettings, KeepMode
from ..process import listening, ops
from ..process.loop import stop_signals
from .upgrade import RECHECK, Hold

log = logging.getLogger("webhook.keeper")


class KeeperService:
    """`elect(settings)`: the elected keeper for these settings (start(), async stop(), degraded());
    `check()`: the mode it may act in now (None: its own, nothing to read)."""

    def __init__(self, settings: KeeperSettings, elect: Callable[[KeeperSettings], Any], *, metrics_host: str,
                 metrics_port: int, check: Callable[[], Awaitable[Hold]] | None = None, recheck: float = RECHECK):
        self.settings, self.elect, self.check = settings, elect, check
        self.metrics_host, self.metrics_port = metrics_host, metrics_port
        self.hold = Hold(settings.keep)
        self.elected: Any | None = None
        self.stopping = False
        self.ops: Any = None
        self.rechecks = Background("upgrade-hold", self.recheck, log=log, period=recheck, wait_first=True,
                                   failure="reading the webhook's Deployment failed")

    def not_ready(self) -> list[str]:
        return ["shutting down"] if self.stopping else []

    def degraded(self) -> list[str]:
        notes = [self.hold.why] if self.hold.why else []
        return notes + ([f"keeper: {note}" for note in self.elected.degraded()] if self.elected is not None else [])

    async def act_as(self, hold: Hold) -> None:
        """The elected keeper in `hold`'s mode (none when off), the one before stopped first."""
        if hold.why:
            log.warning("keeper held", extra={"fields": {"mode": hold.mode, "why": hold.why}})
        self.hold = hold
        if self.elected is not None:
            await self.elected.stop()  # stops acting at once, then hands the Lease over
            self.elected = None
        if hold.mode is not KeepMode.OFF:
            self.elected = self.elect(dataclasses.replace(self.settings, keep=hold.mode))
            self.elected.start()

    async def recheck(self) -> None:
        assert self.check is not None
        hold = await self.check()
        if hold.mode is not self.hold.mode:
            log.info("keeper mode changes", extra={"fields": {"from": self.hold.mode, "to": hold.mode, "why": hold.why}})
            await self.act_as(hold)
        self.hold = hold

    async def run(self) -> None:
        with stop_signals() as stop:
            probes = ops.Probes(self.not_ready, self.degraded, registry=metrics.KEEPER_REGISTRY, ready=metrics.KEEPER_READY)
            self.ops = await ops.Apart(probes).start(self.metrics_host, self.metrics_port)
            try:
                await self.act_as(await self.check() if self.check is not None else Hold(self.settings.keep))
                if self.check is not None:
                    self.rechecks.start()
                log.info("keeping", extra={"fields": {"mode": self.hold.mode, "settings": vars(self.settings),
                                                      "metrics_port": listening.bound_port(self.ops)}})
                await stop.wait()
                self.stopping = True
                log.info("stopping")
                await self.rechecks.stop()
                if self.elected is not None:
                    await self.elected.stop()  # stops acting at once, then hands the Lease over
            finally:
                await self.ops.cleanup()
        log.info("exiting")
