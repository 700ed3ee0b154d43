"""`keep`: the keeper in a process of its own (keeper/elected.py), with its operations port
(/healthz, /readyz, /metrics of the keeper's registry). On SIGTERM or SIGINT it stops acting at
once, ends its term, hands the Lease over, and exits 0."""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from typing import Any

from .. import logs, metrics
from ..config import KeepMode, Settings
from .parser import settings_from

log = logging.getLogger("webhook.keeper")


class Keeping:
    """The keeper's process: its ops port, and (unless the keeper is off) the elected keeper."""

    def __init__(self, settings: Settings, elected: Any | None, metrics_host: str, metrics_port: int):
        self.settings, self.elected = settings, elected
        self.metrics_host, self.metrics_port = metrics_host, metrics_port
        self.stopping = False
        self.ops: Any = None

    def not_ready(self) -> list[str]:
        return ["shutting down"] if self.stopping else []

    def degraded(self) -> list[str]:
        return [f"keeper: {note}" for note in self.elected.degraded()] if self.elected is not None else []

    async def run(self) -> None:
        from ..admission import probes, server

        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        app = probes.make_ops_app(self.not_ready, self.degraded, registry=metrics.KEEPER_REGISTRY,
                                  ready=metrics.KEEPER_READY)
        self.ops = await server.start(app, self.metrics_host, self.metrics_port, None)
        try:
            if self.elected is not None:
                self.elected.start()
            log.info("keeping", extra={"fields": {"mode": self.settings.keep, "metrics_port": server.bound_port(self.ops),
                                                  "settings": vars(self.settings)}})
            await stop.wait()
            self.stopping = True
            log.info("stopping")
            if self.elected is not None:
                await self.elected.stop()  # stops acting at once, then hands the Lease over
        finally:
            await self.ops.cleanup()
        log.info("exiting")


async def run_keep(args: argparse.Namespace) -> int:
    from ..cluster import client
    from ..cluster.events import identity
    from ..keeper.elected import ElectedKeeper
    from ..keeper.lease import lease_namespace

    logs.setup(args.log_level or os.environ.get("LOG_LEVEL", "info"), process="keeper")
    settings = settings_from(args)
    if settings.keep is KeepMode.OFF:  # nothing to elect: the probes answer, nothing is read or done
        await Keeping(settings, None, args.metrics_host, args.metrics_port).run()
        return 0
    namespace = lease_namespace(settings)  # ValueError outside a cluster without --lease-namespace
    api = await client.connect(args.kubeconfig)  # the Lease's connection; each term opens its own
    try:
        elected = ElectedKeeper(api, settings, namespace=namespace, identity=identity(), kubeconfig=args.kubeconfig,
                                events=args.events == "on")
        await Keeping(settings, elected, args.metrics_host, args.metrics_port).run()
    finally:
        await api.close()
    return 0
