"""`explain` (one VM) and `status` (every opted-in VM, and the keeper as deployed): read only."""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from ..cluster.store import StoreError
from ..deadline import Deadline
from .parser import flags_given, settings_from


async def run_explain(args: argparse.Namespace) -> int:
    from ..cluster import client
    from ..cluster.direct import ClusterStore
    from ..tools import explain

    namespace, _, name = args.vm.partition("/")
    if not namespace or not name:
        print("error: name the VM as NAMESPACE/VM", file=sys.stderr)
        return 2
    settings = settings_from(args)
    store = ClusterStore(await client.connect(args.kubeconfig))
    try:
        report = await explain.explain(store, settings, namespace, name, Deadline.after(settings.default_timeout, 0))
    except LookupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except StoreError as exc:
        print(f"error: cannot read the cluster: {exc}", file=sys.stderr)
        return 1
    finally:
        await store.close()
    print(json.dumps(report, indent=2) if args.output == "json" else explain.render(report))
    return 0


async def run_status(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from ..cluster import client
    from ..cluster.direct import ClusterStore
    from ..tools import status
    from ..tools.deployed import deployed_settings

    given = settings_from(args)
    api = await client.connect(args.kubeconfig)
    store = ClusterStore(api)
    try:
        # The keeper as deployed, unless this command was told otherwise: its flags win.
        deployed, source = await deployed_settings(store, given, timeout=given.default_timeout)
        explicit = flags_given(args)
        settings = dataclasses.replace(deployed, **explicit)
        report = await status.status(store, settings, datetime.now(UTC), timeout=settings.default_timeout, api=api,
                                     settings_from=source + (" and the flags given here" if explicit else ""))
    except StoreError as exc:
        print(f"error: cannot read the cluster: {exc}", file=sys.stderr)
        return 1
    finally:
        await store.close()
    if args.output == "json":
        print(json.dumps(report.to_json() | ({"drain": report.drain(args.drain).to_json()} if args.drain else {}),
                         indent=2))
    else:
        print(status.render(report) + ("\n" + "\n".join(report.drain(args.drain).lines()) if args.drain else ""))
    return 0
