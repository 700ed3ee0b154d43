"""The keeper as deployed, for `status`: its settings read from its Deployment (its COLOCATE_*
values, then its flags, as `keep` reads them) and who holds its Lease."""
from __future__ import annotations

from datetime import datetime

from .. import kinds
from ..cluster.store import Store, StoreError
from ..config import Settings
from ..kinds import DEPLOYMENT, LEASE
from ..rules.keeping.listed import read_lease

KEEPER_NAMESPACE = "kubevirt-colocate"  # the shipped manifests' namespace: the Lease's without --lease-namespace
DEPLOYMENT_NAME = "kubevirt-colocate-keeper", "keeper"  # the shipped keeper's Deployment and its container


async def deployed_settings(store: Store, settings: Settings, *, timeout: float) -> tuple[Settings, str]:
    """The keeper's Deployment's settings (its COLOCATE_* values, then its flags, as `keep` reads them),
    with where they came from in words; else `settings` and why."""
    namespace = settings.lease_namespace or KEEPER_NAMESPACE
    where = f"Deployment {namespace}/{DEPLOYMENT_NAME[0]}"
    found = await _container(store, namespace, DEPLOYMENT_NAME, where, timeout)
    if isinstance(found, str):
        return settings, f"settings as given here: {found}"
    try:
        return Settings.from_command(*found), f"from {where}"
    except (TypeError, ValueError) as exc:
        return settings, f"settings as given here: {where}: {exc}"


async def _container(store: Store, namespace: str, names: tuple[str, str], where: str,
                     timeout: float) -> tuple[object, dict[str, str]] | str:
    """A Deployment's container's args and (plain) env, or why not in words (`where`: the Deployment)."""
    name, container_name = names
    try:
        deployment = await store.get(DEPLOYMENT, namespace, name, timeout=timeout)
    except StoreError as exc:
        return f"{where} not read: {exc}"
    if deployment is None:
        return f"no {where}"
    containers = kinds.spec(kinds.spec(deployment).get("template")).get("containers")
    container = next((c for c in containers if isinstance(c, dict) and c.get("name") == container_name), None) \
        if isinstance(containers, list) else None
    if container is None:
        return f"{where} has no container {container_name}"
    env = {e["name"]: e["value"] for e in container.get("env") or []
           if isinstance(e, dict) and isinstance(e.get("name"), str) and isinstance(e.get("value"), str)}
    return container.get("args"), env


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
