"""KubeVirt on kmock's scaffold and kubefake's apiserver: VMIs, migrations and Leases as plain
custom objects, with the bits of a real apiserver the keeper relies on (kubefake.apiserver)."""
from __future__ import annotations

import asyncio
import contextlib
import datetime
from typing import Any

import aiohttp
from tests.support.stores import TEST_TIMING, api_host, seed
from tests.support.kube import ago, launcher_pod_of, load, migration, nodes, rwx_disk, stamp, vmi  # noqa: F401  (migration, vmi: for the tests)

from kubefake.apiserver import KubernetesApi
from kubefake.migration import FINISHED, complete_migration
from webhook import metrics
from webhook.keeper.keeper import KeeperTiming
from webhook.kinds import LEASE, VMI, VMIM

KUBEVIRT_RESOURCES = (VMI, VMIM, LEASE)


class KubeVirtApi(KubernetesApi):
    """kmock's scaffold with a real apiserver's reads and writes (kubefake.apiserver): generated
    names, uid, creationTimestamp and resourceVersion on create; `dryRun=All`; creates turned away
    by `refuse` and deletes by `refuse_delete` (request -> KubernetesError | None), nothing stored
    or deleted; PUT with 409 on a stale resourceVersion; DELETE with 409 when its `preconditions`
    (uid, resourceVersion) do not hold; virt-api's `pause` and `unpause` of a VMI (kubefake.kubevirt).
    A test's reactions answer first."""


def register(emulator: Any) -> None:
    for resource in KUBEVIRT_RESOURCES:
        emulator.resources[resource] = {}


def put(emulator: Any, resource: Any, obj: dict[str, Any]) -> None:
    meta = obj["metadata"]
    emulator.objects[resource, meta.get("namespace"), meta["name"]] = obj


def launcher(vmi_obj: dict[str, Any], *, created: str | None = None) -> dict[str, Any]:
    """The VMI's running virt-launcher pod on its node."""
    return launcher_pod_of(vmi_obj, started=created)


# --------------------------------------------------------------------------- driving the keeper

# Passes are driven by the tests; the watches recover quickly.
TIMING = KeeperTiming(period=0.2, recheck_targeted=600, request_timeout=2.0, watch=TEST_TIMING)
VMIS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances"
VMIMS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstancemigrations"


def sample(name: str, **labels: str) -> float:
    return metrics.KEEPER_REGISTRY.get_sample_value(name, labels) or 0.0


def cached_vmis(watch):
    """The VMIs the keeper's watch holds, decoded."""
    return [watch.vmis.table.get(key) for key in list(watch.vmis.table.objects)]


async def eventually(check, timeout: float = 3.0, step: float = 0.02):
    """Poll `check()` (sync or async) until it is truthy and return that value; fail the test
    when it is not within `timeout` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        got = check()
        if asyncio.iscoroutine(got):
            got = await got
        if got:
            return got
        if loop.time() > deadline:
            raise AssertionError(f"not so within {timeout:g} s: the last check gave {got!r}")
        await asyncio.sleep(step)


class Cluster:
    """The emulated cluster as KubeVirt and an admin change it, through the API."""

    def __init__(self, emulator: Any):
        self.emulator = emulator

    def seed(self, objects: list[dict[str, Any]]) -> None:
        kubevirt = [o for o in objects if o["kind"] in (VMI.kind, VMIM.kind)]
        seed(self.emulator, [o for o in objects if o not in kubevirt])
        register(self.emulator)
        self.emulator.resources["v1/events"] = {}
        for obj in kubevirt:
            put(self.emulator, VMI if obj["kind"] == VMI.kind else VMIM, obj)

    @contextlib.asynccontextmanager
    async def api(self):
        async with aiohttp.ClientSession(api_host(self.emulator), raise_for_status=True) as session:
            yield session

    async def patch(self, path: str, body: dict[str, Any]) -> None:
        async with self.api() as session:
            await session.patch(path, json=body)

    async def create(self, path: str, body: dict[str, Any]) -> None:
        async with self.api() as session:
            await session.post(path, json=body)

    def migrations(self, ours: bool = True) -> list[dict[str, Any]]:
        found = [obj.raw for (resource, _, _), obj in self.emulator.objects.items()
                 if resource.plural == VMIM.plural and not obj.deleted]
        return [m for m in found if not ours or
                (m["metadata"].get("labels") or {}).get("app.kubernetes.io/managed-by") == "kubevirt-colocate"]

    def events(self) -> list[dict[str, Any]]:
        return [obj.raw for (resource, _, _), obj in self.emulator.objects.items()
                if resource.plural == "events" and not obj.deleted]

    async def finish(self, migration_name: str, phase: str, vmi_name: str | None = None, node: str | None = None) -> None:
        """What KubeVirt does when a migration ends: on success the VMI on its new node, its
        migrationState naming the migration, its conditions as they were (a paused VM stays paused:
        the target keeps it so, and the VMI keeps its Paused condition); then the migration's phase
        (kubefake.migration, for a migration that has not finished; one a test marked finished
        before is only caught up with)."""
        found = self.emulator.apiserver.stored((VMIM, "default", migration_name)) if vmi_name and node else None
        if found is not None and phase == "Succeeded" and (found.raw.get("status") or {}).get("phase") not in FINISHED:
            await complete_migration(self.emulator.apiserver, "default", migration_name, node,
                                     target_pod=f"virt-launcher-{vmi_name}-x7k2p")
            return
        if vmi_name and node:
            await self.move_vm(vmi_name, node, migration_name)
        await self.patch(f"{VMIMS}/{migration_name}", {"status": {"phase": phase, "phaseTransitionTimestamps": [
            {"phase": phase, "phaseTransitionTimestamp": stamp()}]}})

    async def move_vm(self, vmi_name: str, node: str, migration_name: str | None = None) -> None:
        """The VMI now runs on `node`, in a launcher pod there (the old one finished)."""
        status: dict[str, Any] = {"nodeName": node}
        if migration_name:
            migration = self.emulator.objects[VMIM, "default", migration_name].raw
            status["migrationState"] = {"migrationUid": migration["metadata"].get("uid"), "targetNode": node,
                                        "startTimestamp": stamp(), "endTimestamp": stamp(), "completed": True}
        await self.patch(f"{VMIS}/{vmi_name}", {"status": status})
        # A pod is never moved (its node is set once, by its binding): the VM runs in a pod started on
        # `node`, here under the old one's name.
        path = f"/api/v1/namespaces/default/pods/virt-launcher-{vmi_name}-x7k2p"
        async with self.api() as session:
            async with session.get(path) as response:
                pod = await response.json()
            await session.delete(path)
            keep = ("name", "namespace", "labels", "annotations", "ownerReferences")
            pod["metadata"] = {k: v for k, v in pod["metadata"].items() if k in keep}
            pod["spec"]["nodeName"] = node
            pod.setdefault("status", {})["startTime"] = stamp()
            await session.post("/api/v1/namespaces/default/pods", json=pod)

    async def move_storage(self, volume: str, node: str, started: datetime.datetime | None = None) -> None:
        """Longhorn restarts the share-manager on `node`: a new pod, started (and serving) `started` (now)."""
        path = f"/api/v1/namespaces/longhorn-system/pods/share-manager-{volume}"
        async with self.api() as session:
            async with session.get(path) as response:
                pod = await response.json()
            await session.delete(path)
            pod["metadata"] = {k: v for k, v in pod["metadata"].items() if k in ("name", "namespace", "labels")}
            pod["spec"]["nodeName"] = node
            pod.setdefault("status", {})["startTime"] = stamp(started)
            await session.post("/api/v1/namespaces/longhorn-system/pods", json=pod)




def apart_vm(name: str = "vm1", *, node: str = "node-a", storage: str = "node-b", namespace: str = "default",
             **vmi_options: Any) -> list[dict[str, Any]]:
    """A running opted-in VM on `node` whose one disk is served from `storage`, with its launcher pod."""
    obj = vmi(name, node, f"{name}-disk", namespace=namespace, **vmi_options)
    disk = rwx_disk(f"{name}-disk", storage, namespace=namespace)
    for share_manager_pod in disk[3:]:
        share_manager_pod["metadata"]["creationTimestamp"] = ago(days=4)
    return disk + [obj, launcher(obj)]


def evacuated_vm(ended: datetime.datetime, *, priority: str = "system-maintenance") -> list[dict[str, Any]]:
    """vm1 on node-a, its disk served from node-b, brought there from node-b by KubeVirt's
    evacuation (tests/fixtures/vmim-evacuation.yaml) that ended at `ended`, which the VMI names:
    made for the descheduler's eviction (system-maintenance) by default, for a drain with
    `priority="system-critical"`."""
    objects = apart_vm(migrated_from="node-b", migration_end=stamp(ended))
    evacuation = load("vmim-evacuation.yaml")
    evacuation["metadata"]["creationTimestamp"] = stamp(ended - datetime.timedelta(seconds=30))
    evacuation["spec"]["priority"] = priority
    evacuation["status"]["phaseTransitionTimestamps"] = [
        {"phase": phase, "phaseTransitionTimestamp": stamp(ended - datetime.timedelta(seconds=seconds))}
        for phase, seconds in (("Pending", 30), ("Scheduling", 30), ("Scheduled", 29), ("PreparingTarget", 29),
                               ("TargetReady", 28), ("Running", 28), ("Succeeded", 0))]
    evacuation["status"]["migrationState"].update(startTimestamp=stamp(ended - datetime.timedelta(seconds=28)),
                                                  endTimestamp=stamp(ended))
    vm1 = next(o for o in objects if o["kind"] == "VirtualMachineInstance")
    vm1["status"]["migrationState"]["migrationUid"] = evacuation["metadata"]["uid"]
    return objects + [evacuation]


def three_nodes() -> list[dict[str, Any]]:
    return nodes("node-a", "node-b", "node-c")


