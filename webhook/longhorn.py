"""PVC → PV → Longhorn volume → the node of its share-manager.

Facts (longhorn/longhorn-manager, controller/share_manager_controller.go): since 1.4 the
share-manager pod `share-manager-<volume>` is placed by kube-scheduler and ShareManager
`status.ownerID` follows its node only while `status.state == running`; otherwise ownerID
is stale. Migratable RWX block volumes have no ShareManager at all (404 is normal).

The pure functions take objects and say why; `resolve_disks` fetches through a Store.
A disk that fails any step contributes no node and is never an error.
"""
from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from .config import Settings
from .deadline import Deadline
from .placement import Fact, consumer_exemption
from .store import POD, PV, PVC, SHARE_MANAGER, Store, StoreError, valid_name

SHARE_MANAGER_POD_PREFIX = "share-manager-"


def claims_of(obj: dict[str, Any]) -> list[str]:
    """PVC names of a pod's (or VMI's) volumes, in order, once each.

    In the pod, DataVolumes appear as PVCs; in a VM or VMI spec, a `dataVolume` volume's PVC
    has the DataVolume's name.
    """
    claims: list[str] = []
    volumes = (obj.get("spec") or {}).get("volumes")
    for volume in volumes if isinstance(volumes, list) else []:
        if not isinstance(volume, dict):
            continue
        source = volume.get("persistentVolumeClaim") or volume.get("dataVolume")
        name = (source.get("claimName") or source.get("name")) if isinstance(source, dict) else None
        if isinstance(name, str) and name and name not in claims:
            claims.append(name)
    return claims


def volume_of(
    namespace: str, claim: str, pvc: dict[str, Any] | None, pv: dict[str, Any] | None, driver: str
) -> tuple[str | None, str]:
    """The Longhorn volume behind a claim (PV spec.csi.volumeHandle), or None and why."""
    if pvc is None:
        return None, f"PVC {namespace}/{claim} not found"
    spec = pvc.get("spec") or {}
    if "ReadWriteMany" not in (spec.get("accessModes") or []):
        return None, f"PVC {namespace}/{claim} is not ReadWriteMany"
    pv_name = spec.get("volumeName")
    if not pv_name:
        return None, f"PVC {namespace}/{claim} is not bound yet"
    if pv is None:
        return None, f"PV {pv_name} not found"
    csi = (pv.get("spec") or {}).get("csi") or {}
    if csi.get("driver") != driver:
        return None, f"PV {pv_name} is not a {driver} volume"
    handle = csi.get("volumeHandle")
    if not handle:
        return None, f"PV {pv_name} has no volumeHandle"
    # The volume name is the handle: equal to the PV name only for dynamic provisioning.
    return handle, f"PVC {namespace}/{claim} is Longhorn volume {handle}"


def share_manager_node(
    volume: str, pod: dict[str, Any] | None, share_manager: dict[str, Any] | None
) -> tuple[str | None, str]:
    """Node of the volume's share-manager: the pod's node, else a *running* ShareManager's ownerID."""
    if pod is not None:
        meta = pod.get("metadata") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if node and not meta.get("deletionTimestamp") and phase not in ("Succeeded", "Failed"):
            return node, f"share-manager of {volume} runs on {node}"
    if share_manager is None:
        return None, f"volume {volume} has no share-manager"
    status = share_manager.get("status") or {}
    state = status.get("state") or "unknown"
    if state != "running":
        # ownerID of a stopped/starting/stopping/error share-manager is stale: never use it.
        return None, f"share-manager of {volume} is {state}"
    owner = status.get("ownerID")
    if not owner:
        return None, f"share-manager of {volume} is running but names no node"
    return owner, f"share-manager of {volume} runs on {owner}"


async def resolve_disk(
    store: Store, settings: Settings, namespace: str, claim: str, deadline: Deadline
) -> Fact:
    if not valid_name(claim):  # the apiserver does not check claimName; we never put one in a path unchecked
        return Fact(claim, None, f"disk {claim[:60]!r} is not a valid PVC name")
    try:
        pvc = await store.get(PVC, namespace, claim, timeout=deadline.remaining())
        pv_name = ((pvc or {}).get("spec") or {}).get("volumeName")
        pv = await store.get(PV, None, pv_name, timeout=deadline.remaining()) if pv_name else None
        volume, why = volume_of(namespace, claim, pvc, pv, settings.csi_driver)
        if volume is None:
            return Fact(claim, None, why)
        pod, share_manager = await asyncio.gather(
            store.get(POD, settings.longhorn_namespace, SHARE_MANAGER_POD_PREFIX + volume, timeout=deadline.remaining()),
            store.get(SHARE_MANAGER, settings.longhorn_namespace, volume, timeout=deadline.remaining()),
        )
    except StoreError as exc:
        return Fact(claim, None, f"disk {claim}: {exc}")
    node, why = share_manager_node(volume, pod, share_manager)
    return Fact(claim, node, why, volume=volume)


async def resolve_disks(
    store: Store, settings: Settings, namespace: str, claims: Sequence[str], deadline: Deadline
) -> list[Fact]:
    """Resolve every disk concurrently; whatever is unfinished at the deadline is unknown."""
    tasks = [asyncio.ensure_future(resolve_disk(store, settings, namespace, c, deadline)) for c in claims]
    if not tasks:
        return []
    done, pending = await asyncio.wait(tasks, timeout=deadline.remaining())
    for task in pending:
        task.cancel()
    facts = []
    for claim, task in zip(claims, tasks):
        if task in done and not task.cancelled() and task.exception() is None:
            facts.append(task.result())
        elif task in done and task.exception() is not None:
            facts.append(Fact(claim, None, f"disk {claim}: {type(task.exception()).__name__}"))
        else:
            facts.append(Fact(claim, None, f"disk {claim}: no answer before the deadline"))
    return facts


async def resolve_consumers(
    store: Store, settings: Settings, volume: str, deadline: Deadline
) -> tuple[list[Fact], list[str]]:
    """The nodes of the running opted-in VMs that use a volume: PV(volumeHandle) → claimRef → pods.

    Returns one fact per consuming pod, and why the other pods did not count. Raises
    StoreError when the API cannot tell.
    """
    facts: list[Fact] = []
    skipped: list[str] = []
    seen: set[tuple[str, str]] = set()
    for pv in await store.pvs_by_volume_handle(volume, timeout=deadline.remaining()):
        spec = pv.get("spec") or {}
        if ((spec.get("csi") or {}).get("driver")) != settings.csi_driver:
            continue
        ref = spec.get("claimRef") or {}
        namespace, claim = ref.get("namespace"), ref.get("name")
        if not namespace or not claim:
            continue
        for pod in await store.pods_by_claim(namespace, claim, timeout=deadline.remaining()):
            meta = pod.get("metadata") or {}
            key = (namespace, meta.get("name") or "")
            if key in seen:
                continue
            seen.add(key)
            name = f"{namespace}/{key[1]}"
            why = consumer_exemption(pod, settings)
            if why is None:
                node = pod["spec"]["nodeName"]
                facts.append(Fact(f"VM pod {name}", node, f"VM pod {name} runs on {node}", volume=volume))
            else:
                skipped.append(f"{name}: {why}")
    return facts, skipped
