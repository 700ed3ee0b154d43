"""`serve`: the admission webhook, from the cluster (or a snapshot). It runs no keeper: that is
`keep`, in a Deployment of its own."""
from __future__ import annotations

import argparse
import logging
import os
from typing import Any

from .. import logs
from ..config import KeepMode
from .parser import MIB, RETIRED, settings_from
from .review import snapshot

log = logging.getLogger("webhook")


def retired_flags(args: argparse.Namespace) -> dict[str, str]:
    """The keeper's flags given to `serve` as an older release took them: ignored now, and said
    (`--keep off` asks for what `serve` does anyway)."""
    given = {row.option: getattr(args, f"retired_{row.name}") for row in RETIRED
             if getattr(args, f"retired_{row.name}", None) is not None}
    return {} if given == {"--keep": str(KeepMode.OFF)} else given


async def run_serve(args: argparse.Namespace) -> int:
    from ..admission.optin import OptInCheck
    from ..admission.service import Listen, Service
    from ..admission.tls import ReloadingTLS
    from ..cluster import client
    from ..cluster.cache import WatchedClusterStore
    from ..cluster.direct import ClusterStore
    from ..cluster.events import NO_EVENTS, EventSink, Events
    from ..cluster.reporter import StrandedReporter
    from ..cluster.store import Store

    logs.setup(args.log_level or os.environ.get("LOG_LEVEL", "info"))
    settings = settings_from(args)
    retired = retired_flags(args)
    if retired:
        log.warning("keeper flags ignored: serve runs no keeper; `kubevirt-colocate keep` does (the Deployment "
                    "kubevirt-colocate-keeper)", extra={"fields": {"flags": retired}})
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
    keepers = {row.name for row in RETIRED}
    shown = {name: value for name, value in vars(settings).items() if name not in keepers}
    log.info("starting", extra={"fields": {"source": args.state or "cluster", "settings": shown}})
    await Service(store, settings, listen, reloader, events, companions, decide=args.admission == "rules").run()
    return 0
