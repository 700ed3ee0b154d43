"""`keep`: the keeper in a process of its own (keeper/service.py)."""
from __future__ import annotations

import argparse
import os

from .. import logs
from ..config import KeeperSettings, KeepMode
from .parser import settings_from
from .values import log_level


async def run_keep(args: argparse.Namespace) -> int:
    from ..cluster import client
    from ..stores.direct import ClusterStore
    from ..cluster.events import identity
    from ..keeper.elected import ElectedKeeper
    from ..keeper.lease import lease_namespace
    from ..keeper.service import KeeperService
    from ..keeper.upgrade import read_mode
    from ..process.heap import collect_young_less

    logs.setup(log_level(args.log_level, os.environ), process="keeper")
    collect_young_less()  # process/heap.py: a first pass makes millions of objects, most of them kept
    settings = settings_from(args)
    ports = {"metrics_host": args.metrics_host, "metrics_port": args.metrics_port}
    if settings.keep is KeepMode.OFF:  # nothing to elect: the probes answer, nothing is read or done
        await KeeperService(settings, lambda _: None, **ports).run()
        return 0
    namespace = lease_namespace(settings)  # ValueError outside a cluster without --lease-namespace
    api = await client.connect(args.kubeconfig)  # the Lease's connection; each term opens its own

    def elect(acting: KeeperSettings) -> ElectedKeeper:
        return ElectedKeeper(api, acting, namespace=namespace, identity=identity(), kubeconfig=args.kubeconfig,
                             events=args.events == "on")

    try:
        await KeeperService(settings, elect, check=lambda: read_mode(ClusterStore(api), settings, namespace),
                            **ports).run()
    finally:
        await api.close()
    return 0
