"""`serve`: the admission webhook, from the cluster (or a snapshot). It runs no keeper: that is
`keep`, in a Deployment of its own; a keeper's flag given to `serve` is refused (parser.py)."""
from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Mapping
from typing import Any

from .. import logs
from ..config import KEEPER_SETTINGS
from .parser import MIB, settings_from
from .review import snapshot

log = logging.getLogger("webhook")


def keeper_variables(env: Mapping[str, str]) -> list[str]:
    """The keeper's COLOCATE_* variables in `serve`'s environment: not read (the chart's `env`
    goes to both containers), and said once, since only the keeper's own Deployment sets them."""
    return sorted(row.env for row in KEEPER_SETTINGS if env.get(row.env))


async def run_serve(args: argparse.Namespace, service: Any = None) -> int:
    """`service`: the Service class to run (admission/service.py's; the benchmark's floor is another)."""
    from ..admission.optin import OptInCheck
    from ..admission.service import Listen, Service
    from ..admission.stranded import StrandedReporter
    from ..admission.tls import ReloadingTLS
    from ..cluster import client
    from ..stores.cache import WatchedClusterStore
    from ..stores.direct import ClusterStore
    from ..cluster.events import NO_EVENTS, EventSink, Events
    from ..stores.store import Store

    logs.setup(args.log_level or os.environ.get("LOG_LEVEL", "info"))
    settings = settings_from(args)
    if variables := keeper_variables(os.environ):
        log.info("the keeper's variables are the keeper's: serve does not read them", extra={"fields": {
            "variables": variables}})
    store: Store
    events: Events = NO_EVENTS
    companions: list[Any] = []
    if args.state:
        store = snapshot(args.state)
    else:
        api = await client.connect(args.kubeconfig)
        store = WatchedClusterStore(api, settings)
        events = EventSink(api) if args.events == "on" else NO_EVENTS
        companions.append(StrandedReporter(store, settings, events))
        companions.append(OptInCheck(ClusterStore(api), settings.opt_in_annotation, args.webhook_configuration))
    # Follows the files as cert-manager or the kubelet replace them (see tls.py).
    reloader = ReloadingTLS(args.tls_cert_file, args.tls_key_file, client_ca_file=args.client_ca_file)
    listen = Listen(host=args.host, port=args.port, metrics_host=args.metrics_host, metrics_port=args.metrics_port,
                    drain_delay=args.drain_delay, shutdown_timeout=args.shutdown_timeout,
                    body_budget=args.body_budget * MIB)
    log.info("starting", extra={"fields": {"source": args.state or "cluster", "settings": vars(settings)}})
    await (service or Service)(store, settings, listen, reloader, events, companions).run()
    return 0
