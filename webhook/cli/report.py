"""`explain` (one VM) and `status` (every opted-in VM, and the keeper as deployed): read only."""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

import yaml

from ..config import Settings
from ..deadline import Deadline
from .parser import flags_given, settings_from


def with_timeout(settings: Settings, args: argparse.Namespace) -> Settings:
    """The settings, waiting for the cluster as long as --request-timeout says."""
    return dataclasses.replace(settings, default_timeout=args.request_timeout) if args.request_timeout else settings


def printed(report: dict[str, Any], output: str, text: str) -> str:
    """The report as -o asks: text for people, json or yaml for tools."""
    if output == "json":
        return json.dumps(report, indent=2)
    # through JSON: the modes are str enums, which YAML's safe dumper does not know
    return yaml.safe_dump(json.loads(json.dumps(report)), sort_keys=False).rstrip() if output == "yaml" else text


async def run_explain(args: argparse.Namespace) -> int:
    from ..cluster import client
    from ..stores.direct import ClusterStore
    from ..tools import explain

    # NAMESPACE/VM, or VM in -n NAMESPACE (else the context's namespace, as kubectl takes it)
    namespace, slash, name = args.vm.rpartition("/")
    if (slash and not namespace) or not name or "/" in namespace:
        raise ValueError(f"the VM {args.vm!r}: name it as NAMESPACE/VM, or VM with -n NAMESPACE")
    if slash and args.namespace and args.namespace != namespace:
        raise ValueError(f"the VM {args.vm!r} is in {namespace}, but -n says {args.namespace}")
    namespace = namespace or args.namespace or client.context_namespace(args.kubeconfig, args.context)
    settings = with_timeout(settings_from(args), args)
    store = ClusterStore(await client.connect(args.kubeconfig, args.context))
    try:
        report = await explain.explain(store, settings, namespace, name, Deadline.after(settings.default_timeout, 0))
    except LookupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        await store.close()
    print(printed(report, args.output, explain.render(report) if args.output == "text" else ""))
    return 0


async def run_status(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from ..cluster import client
    from ..stores.direct import ClusterStore
    from ..tools import status
    from ..tools.deployed import deployed_settings
    from ..tools.drain_aims import drain_aims

    given = with_timeout(settings_from(args), args)
    api = await client.connect(args.kubeconfig, args.context)
    store = ClusterStore(api)
    try:
        # The keeper as deployed, unless this command was told otherwise: its flags win.
        deployed, source = await deployed_settings(store, given, timeout=given.default_timeout)
        explicit = flags_given(args)
        settings = dataclasses.replace(deployed, **explicit, default_timeout=given.default_timeout)
        report = await status.status(store, settings, datetime.now(UTC), timeout=settings.default_timeout, api=api,
                                     settings_from=source + (" and the flags given here" if explicit else ""))
        aims = await drain_aims(store, settings, args.drain, [(vm.namespace, vm.name) for vm in report.vms if
                                                               vm.facts.vmi.node == args.drain], settings.default_timeout) \
            if args.drain and settings.aim_evacuations else {}
    finally:
        await store.close()
    if args.namespace:  # decided over every VM (the limits are the cluster's), shown for one namespace
        report = dataclasses.replace(report, vms=[vm for vm in report.vms if vm.namespace == args.namespace])
    drain = report.drain(args.drain, aims) if args.drain else None
    if args.output == "text":
        print(status.render(report) + ("\n" + "\n".join(drain.lines()) if drain else ""))
    else:
        print(printed(report.to_json() | ({"drain": drain.to_json()} if drain else {}), args.output, ""))
    return 0
