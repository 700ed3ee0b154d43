"""`serve`: the admission webhook, from the cluster (or a snapshot). It runs no keeper: that is
`keep`, in a Deployment of its own; a keeper's flag given to `serve` is refused (parser.py)."""
from __future__ import annotations

import argparse
import logging
import os
from typing import Any

from .. import logs
from ..config import KEEPER_SETTINGS
from .parser import MIB, settings_from
from .values import log_level
from .review import snapshot

log = logging.getLogger("webhook")


FILE_FLAGS = {"certificate": "--tls-cert-file", "key": "--tls-key-file", "client CA": "--client-ca-file"}


def serving_tls(args: argparse.Namespace, check: bool = False) -> Any:
    """The serving certificate's ReloadingTLS (`check`: only its files loaded, said nowhere); ValueError
    naming the flag, the file and what is wrong with it."""
    from ..admission.pem import BadFile
    from ..admission.tls import ReloadingTLS, build_context

    try:
        if check:
            return build_context(args.tls_cert_file, args.tls_key_file, args.client_ca_file)
        return ReloadingTLS(args.tls_cert_file, args.tls_key_file, client_ca_file=args.client_ca_file)
    except BadFile as exc:
        raise ValueError(f"{FILE_FLAGS[exc.role]} {exc}") from None


async def run_serve(args: argparse.Namespace, service: Any = None) -> int:
    """`service`: the Service class to run (admission/service.py's; the benchmark's floor is another)."""
    from ..admission.optin import OptInCheck
    from ..admission.service import Listen, Service
    from ..admission.stranded import StrandedReporter
    from ..cluster import client
    from ..stores.cache import WatchedClusterStore
    from ..stores.direct import ClusterStore
    from ..admission.heap import FreezeListed
    from ..process.heap import collect_young_less
    from ..cluster.events import NO_EVENTS, EventSink, Events
    from ..stores.store import Store

    logs.setup(log_level(args.log_level, os.environ))
    collect_young_less()  # process/heap.py
    settings = settings_from(args)
    # The chart's `env` goes to both containers: the keeper's COLOCATE_* here are not read, and said so once.
    if variables := sorted(row.env for row in KEEPER_SETTINGS if os.environ.get(row.env)):
        log.info("the keeper's variables are the keeper's: serve does not read them", extra={"fields": {
            "variables": variables}})
    store: Store
    events: Events = NO_EVENTS
    companions: list[Any] = []
    if args.state:
        store = snapshot(args.state)
    serving_tls(args, check=True)  # before the cluster is read: the files are flags' values
    if not args.state:
        api = await client.connect(args.kubeconfig)
        store = WatchedClusterStore(api, settings)
        events = EventSink(api) if args.events == "on" else NO_EVENTS
        companions.append(FreezeListed(store.informers))
        companions.append(StrandedReporter(store, settings, events))
        companions.append(OptInCheck(ClusterStore(api), settings.opt_in_annotation, args.webhook_configuration))
    reloader = serving_tls(args)  # follows the files as cert-manager or the kubelet replace them (tls.py)
    listen = Listen(host=args.host, port=args.port,
                    metrics_host=args.metrics_host, metrics_port=args.metrics_port, drain_delay=args.drain_delay,
                    shutdown_timeout=args.shutdown_timeout, body_budget=args.body_budget * MIB)
    log.info("starting", extra={"fields": {"source": args.state or "cluster", "settings": vars(settings)}})
    await (service or Service)(store, settings, listen, reloader, events, companions, preparing=not args.state).run()
    return 0
