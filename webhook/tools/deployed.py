"""The keeper as deployed, for `status`: its settings read from its Deployment (its COLOCATE_*
values, then its flags, as `keep` reads them, and its pause) and who holds its Lease."""
from __future__ import annotations

import dataclasses
from datetime import datetime

from ..lookup.deployments import container
from ..stores.store import Store, StoreError
from ..config import KeeperSettings, Settings, rows
from ..keeper.upgrade import read_mode
from ..kinds import LEASE
from ..rules.keeping.listed import read_lease

KEEPER_NAMESPACE = "kubevirt-colocate"  # the shipped manifests' namespace: the Lease's without --lease-namespace
DEPLOYMENT_NAME = "kubevirt-colocate-keeper", "keeper"  # the shipped keeper's Deployment and its container


async def deployed_settings(store: Store, settings: Settings, *, timeout: float) -> tuple[Settings, str]:
    """The settings the keeper's Deployment gives `keep`, and whence in words; else `settings` and why."""
    namespace = settings.lease_namespace or KEEPER_NAMESPACE
    where = f"Deployment {namespace}/{DEPLOYMENT_NAME[0]}"
    try:
        found = await container(store, namespace, *DEPLOYMENT_NAME, timeout=timeout)
    except StoreError as exc:
        return settings, f"settings as given here: {where} not read: {exc}"
    if isinstance(found, str):
        return settings, f"settings as given here: {found}"
    env = {name: value for name, value in found.env.items() if value is not None}
    try:  # the keeper's part (and what both share) as `keep` reads it; the rest as given here
        keeper = KeeperSettings.from_command(found.args, env)
    except (TypeError, ValueError) as exc:
        return settings, f"settings as given here: {where}: {exc}"
    held = await read_mode(store, keeper, namespace, timeout=timeout, unread_holds=False)  # as `keep` reads it
    deployed = {row.name: getattr(keeper, row.name) for row in rows(KeeperSettings)} | {"keep": held.mode}
    return dataclasses.replace(settings, **deployed), f"from {where}" + (f"; {held.why}" if held.why else "")


async def leader(store: Store, settings: Settings, now: datetime, timeout: float) -> str:
    """Who holds the keeper's Lease, in words: "pod-x (renewed 5s ago)", "none", or why unknown."""
    namespace = settings.lease_namespace or KEEPER_NAMESPACE
    try:
        lease = await store.get(LEASE, namespace, settings.lease_name, timeout=timeout)
    except StoreError as exc:
        return f"unknown ({exc})"
    if lease is None:
        return f"none (no Lease {namespace}/{settings.lease_name})"
    return read_lease(lease).words(now)
