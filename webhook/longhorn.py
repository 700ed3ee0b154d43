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
from collections.abc import Generator, Sequence
from typing import Any

from .config import Settings
from .deadline import Deadline
from .placement import Fact, consumer_exemption
from .store import POD, PV, PVC, SHARE_MANAGER, Resource, Store, StoreError, valid_name

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


Lookup = tuple[Resource, "str | None", str]


def disk_steps(settings: Settings, namespace: str, claim: str) -> Generator[Lookup, Any, Fact]:
    """The look-ups that resolve one disk, as a generator: it yields (resource, namespace, name)
    and is sent the object (or None); it returns the Fact. Drivers decide where objects come
    from: memory first (`resolve_now`), the API when memory cannot tell (`resolve_io`)."""
    if not valid_name(claim):  # the apiserver does not check claimName; we never put one in a path unchecked
        return Fact(claim, None, f"disk {claim[:60]!r} is not a valid PVC name")
    pvc = yield (PVC, namespace, claim)
    pv_name = ((pvc or {}).get("spec") or {}).get("volumeName")
    pv = (yield (PV, None, pv_name)) if pv_name else None
    volume, why = volume_of(namespace, claim, pvc, pv, settings.csi_driver)
    if volume is None:
        return Fact(claim, None, why)
    pod = yield (POD, settings.longhorn_namespace, SHARE_MANAGER_POD_PREFIX + volume)
    share_manager = yield (SHARE_MANAGER, settings.longhorn_namespace, volume)
    node, why = share_manager_node(volume, pod, share_manager)
    return Fact(claim, node, why, volume=volume)


def resolve_now(store: Store, steps: Generator[Lookup, Any, Fact]) -> Fact | None:
    """Run the steps from the store's memory only; None as soon as a look-up would need the API."""
    peek = getattr(store, "peek", None)
    try:
        lookup = next(steps)
        while peek is not None:
            known, obj = peek(*lookup)
            if not known:
                return None
            lookup = steps.send(obj)
    except StopIteration as done:
        return done.value
    return None


async def resolve_io(store: Store, steps: Generator[Lookup, Any, Fact], claim: str, deadline: Deadline) -> Fact:
    """Run the steps through the store's reads, each within what is left of the deadline."""
    try:
        async with asyncio.timeout(deadline.remaining()):  # also bounds a store that ignores `timeout`
            lookup = next(steps)
            while True:
                obj = await store.get(*lookup, timeout=deadline.remaining())
                lookup = steps.send(obj)
    except StopIteration as done:
        return done.value
    except StoreError as exc:
        return Fact(claim, None, f"disk {claim}: {exc}")
    except TimeoutError:
        return Fact(claim, None, f"disk {claim}: no answer before the deadline")


async def resolve_disks(
    store: Store, settings: Settings, namespace: str, claims: Sequence[str], deadline: Deadline
) -> list[Fact]:
    """Disks known in memory are resolved at once (no task, no I/O); the others concurrently
    through the API. Whatever is unfinished at the deadline is reported as such."""
    facts: list[Fact | None] = [resolve_now(store, disk_steps(settings, namespace, c)) for c in claims]
    missing = [i for i, fact in enumerate(facts) if fact is None]
    if len(missing) == 1:
        (i,) = missing
        facts[i] = await resolve_io(store, disk_steps(settings, namespace, claims[i]), claims[i], deadline)
    elif missing:
        tasks = {i: asyncio.ensure_future(resolve_io(store, disk_steps(settings, namespace, claims[i]), claims[i], deadline))
                 for i in missing}
        done, pending = await asyncio.wait(tasks.values(), timeout=deadline.remaining())
        for task in pending:
            task.cancel()
        for i, task in tasks.items():
            if task in done and task.exception() is None:
                facts[i] = task.result()
            elif task in done:
                facts[i] = Fact(claims[i], None, f"disk {claims[i]}: {type(task.exception()).__name__}")
            else:
                facts[i] = Fact(claims[i], None, f"disk {claims[i]}: no answer before the deadline")
    return [fact for fact in facts if fact is not None]


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
