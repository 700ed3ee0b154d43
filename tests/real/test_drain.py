"""A drain as KubeVirt and Longhorn carry it out, on a real kube-apiserver and kube-scheduler,
with `serve` registered as the install registers it.

A node of 8 opted-in VMs, each serving its own RWX disk from that node, among three other nodes
of the same CPU generation and two of an older one (which take a new VM but never a migration
from the newer CPU). The drain: the node is cordoned and tainted `kubevirt.io/drain`, the
share-manager pods on it are evicted at once, and then, played here as the real controllers do
it:
- longhorn-manager creates each share-manager pod again a few seconds later (unbound; a create
  the apiserver refuses is tried again a second later, as its resync would), and marks the
  ShareManager running on the node kube-scheduler bound the pod to;
- KubeVirt's evacuation controller creates a `kubevirt-evacuation-` migration for every VMI on
  the node (pkg/virt-controller/watch/drain/evacuation), and its migration controller runs them
  `outbound` at a time per source node (`parallelOutboundMigrationsPerNode`), each with a
  target pod rendered as virt-controller renders it (the source's CPU model and features in its
  nodeSelector, anti-affinity to the VMI's own pods), created through the apiserver, bound by
  kube-scheduler, and the VMI moved once it is bound and the migration has run;
- a kubelet marks each bound pod Running.

Played too with the evicted pods terminating until longhorn-manager's delay is up (a kubelet's
graceful end): `serve` prepares their answers meanwhile (webhook/admission/prepare.py).

What a user of a drain notices is asserted: no share-manager create is refused, every NFS
server serves again within 20 s, every VM is migrated once (none stranded by a target pod that
cannot be placed, none on the older CPU's nodes); migration target pods are left untouched.
"""
from __future__ import annotations

import asyncio
import collections
import copy
import random
import time
from typing import Any

import pytest
from kubefake.envtest import Api, Refused
from tests.support.kube import (OLD_CPU, Serving, annotations, launcher_pod_of, migration_node_selector, node, registration,
                  rwx_disk, share_manager_pod, vm_pod, vmi)
from tests.support.kubevirt_api import eventually

LONGHORN = "longhorn-system"
VMS = "drain"
CONFIGURATION = "kubevirt-colocate-drain"
DRAINED = "drain-src"
OTHERS = ("drain-b", "drain-c", "drain-d")
OLDER = ("drain-old-1", "drain-old-2")
VM_COUNT = 8
SHARE_MANAGER_DELAY = (1.0, 3.0)  # seconds before longhorn-manager creates an evicted share-manager again
TERMINATING = (2.5, 4.0)  # the same, for a share-manager pod left terminating meanwhile
MIGRATION = 0.6  # seconds a migration runs once its target pod is bound
PARALLEL = 5  # parallelMigrationsPerCluster
RETRY = 1.0  # longhorn-manager's next try after a refused create
SERVING_AGAIN = 20.0
DRAIN_TAINT = {"key": "kubevirt.io/drain", "value": "draining", "effect": "NoSchedule"}
POD = {"apiVersion": "v1", "kind": "Pod"}
VMIM = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration"}


class Drain:
    """The cluster, the drain, and the controllers that carry it out; what they saw."""

    def __init__(self, api: Api, outbound: int, seed: int = 7, *, terminating: bool = False) -> None:
        self.api, self.outbound, self.rng = api, outbound, random.Random(seed)
        # Evicted as a kubelet takes them: terminating until their delay is up, then gone (else gone at once).
        self.terminating = terminating
        self.prepared: list[str] = []  # VMs whose share-manager was answered as prepared while it terminated
        self.made: list[dict[str, Any]] = []
        self.vm_node: dict[str, str] = {}  # VM -> the node it runs on
        self.server: dict[str, str | None] = {}  # VM -> the node its disk's NFS server runs on (None: none)
        self.apart: dict[str, float] = collections.defaultdict(float)  # VM -> seconds apart from its NFS server
        self.refused: list[str] = []
        self.back_after: dict[str, float] = {}  # VM -> seconds from eviction to its NFS server serving again
        self.migrations: dict[str, list[str]] = collections.defaultdict(list)  # VM -> its migrations' names
        self.landed: dict[str, str] = {}  # VM -> the node its migration target pod was bound to
        self.stuck: list[str] = []
        self.vmis: dict[str, dict[str, Any]] = {}
        self.sources: dict[str, dict[str, Any]] = {}  # VM -> its running launcher pod
        self.errors: list[str] = []  # API errors the played controllers retried

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        stored = await self.api.create(obj)
        self.made.append(stored)
        return stored

    async def build(self) -> None:
        await self.api.namespace(VMS)
        await self.api.longhorn()
        for name in (DRAINED, *OTHERS):
            await self.create(node(name))
        for name in OLDER:
            await self.create(node(name, cpu=OLD_CPU))
        for i in range(1, VM_COUNT + 1):
            vm, claim = f"vm{i}", f"disk{i}"
            for obj in rwx_disk(claim, DRAINED, namespace=VMS):
                await self.create(obj)
            stored = await self.create(vmi(vm, DRAINED, claim, namespace=VMS))
            self.vmis[vm] = stored
            self.sources[vm] = await self.create(launcher_pod_of(stored))
            self.vm_node[vm], self.server[vm] = DRAINED, DRAINED

    async def clean(self) -> None:
        for namespace in (VMS, LONGHORN):
            for pod in await self.api.list(POD, namespace):
                await self.api.delete(pod)
        for migration in await self.api.list(VMIM, VMS):
            await self.api.delete(migration)
        for obj in reversed(self.made):
            if obj["kind"] != "Pod":
                await self.api.delete(obj)

    async def run(self) -> float:
        """Drain the node; the seconds until every VM has left it and every NFS server is back."""
        started = time.monotonic()
        url = f"{self.api.path({'apiVersion': 'v1', 'kind': 'Node'})}/{DRAINED}"
        code, got = await self.api.request("PATCH", url, {"spec": {"unschedulable": True, "taints": [DRAIN_TAINT]}},
                                           content_type="application/merge-patch+json")
        assert code == 200, got
        evicted = time.monotonic()
        for vm in self.vmis:
            evicted_pod = share_manager_pod(f"pvc-disk{vm[2:]}", DRAINED)
            if self.terminating:  # bound, with no kubelet to confirm its end: it stays, terminating
                code, got = await self.api.request(
                    "DELETE", f"{self.api.path(evicted_pod)}/{evicted_pod['metadata']['name']}",
                    {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 30})
                assert code == 200, got
            else:
                await self.api.delete(evicted_pod)
            self.server[vm] = None
            await self._share_manager_state(vm, "error", None)
        players = [asyncio.create_task(self._longhorn(vm, evicted)) for vm in self.vmis]
        players += [asyncio.create_task(self._evacuation()), asyncio.create_task(self._migrations())]
        watch = asyncio.create_task(self._watch())
        try:
            await eventually(lambda: self.done() or any(t.done() and t.exception() for t in players), 90, 0.1)
            for task in players:
                if task.done() and task.exception():
                    raise task.exception()
        except AssertionError:
            left = [vm for vm, where in self.vm_node.items() if where == DRAINED]
            phases = {m["metadata"]["name"]: (m["spec"]["vmiName"], (m.get("status") or {}).get("phase"))
                      for m in await self.api.list(VMIM, VMS)}
            raise AssertionError(f"the drain did not end: VMs still on {DRAINED}: {left}; NFS servers not back: "
                                 f"{sorted(set(self.vmis) - set(self.back_after))}; migrations: {phases}; "
                                 f"API errors retried: {self.errors[-3:]}") from None
        finally:
            for task in [*players, watch]:
                task.cancel()
            await asyncio.gather(*players, watch, return_exceptions=True)
        return time.monotonic() - started

    def done(self) -> bool:
        return all(self.vm_node[vm] != DRAINED for vm in self.vmis) and len(self.back_after) == len(self.vmis) \
            or bool(self.stuck)

    async def _watch(self) -> None:
        """Count the seconds each VM runs apart from its NFS server (while that server serves)."""
        step = 0.05
        while True:
            await asyncio.sleep(step)
            for vm, where in self.vm_node.items():
                if self.server[vm] is not None and self.server[vm] != where:
                    self.apart[vm] += step

    async def _share_manager_state(self, vm: str, state: str, owner: str | None) -> None:
        sm = {"apiVersion": "longhorn.io/v1beta2", "kind": "ShareManager",
              "metadata": {"name": f"pvc-disk{vm[2:]}", "namespace": LONGHORN}}
        await self.api.set_status(sm, {"state": state, "ownerID": owner or DRAINED})

    async def _bound(self, pod: dict[str, Any], timeout: float) -> str | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = await self.api.get(pod)
            if got and got["spec"].get("nodeName"):
                await self.api.set_status(got, {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]})
                return got["spec"]["nodeName"]
            await asyncio.sleep(0.05)
        return None

    async def _longhorn(self, vm: str, evicted: float) -> None:
        """longhorn-manager: the evicted share-manager pod created again, until the apiserver takes it."""
        await asyncio.sleep(self.rng.uniform(*(TERMINATING if self.terminating else SHARE_MANAGER_DELAY)))
        if self.terminating:  # the kubelet has confirmed its end: gone, and its name free again
            await self.api.delete(share_manager_pod(f"pvc-disk{vm[2:]}", DRAINED))
        while True:
            try:
                pod = await self.api.create(share_manager_pod(f"pvc-disk{vm[2:]}"))
                if "(worked out " in annotations(pod).get("kubevirt-scheduler/reason", ""):
                    self.prepared.append(vm)
                break
            except Refused as refused:
                self.refused.append(f"{vm}: {refused.message}")
                await asyncio.sleep(RETRY)
        where = await self._bound(pod, SERVING_AGAIN * 2)
        if where is None:
            self.stuck.append(f"the share-manager of {vm} was never bound: {annotations(pod)}")
            return
        await self._share_manager_state(vm, "running", where)
        self.server[vm] = where
        self.back_after[vm] = time.monotonic() - evicted

    async def _evacuation(self) -> None:
        """KubeVirt's evacuation controller: a migration for each VMI on the drained node that has none unfinished."""
        while True:
            listed = await self._listed()
            unfinished = {m["spec"]["vmiName"] for m in listed
                          if (m.get("status") or {}).get("phase") not in ("Succeeded", "Failed")}
            for vm, where in self.vm_node.items():
                if where == DRAINED and vm not in unfinished:
                    made = await self.api.create({**VMIM, "metadata": {
                        "generateName": "kubevirt-evacuation-", "namespace": VMS,
                        "annotations": {"kubevirt.io/evacuationMigration": DRAINED}},
                        "spec": {"vmiName": vm}})
                    self.migrations[vm].append(made["metadata"]["name"])
            await asyncio.sleep(1.0)

    async def _listed(self) -> list[dict[str, Any]]:
        """The migrations, as a controller's informer has them: an API error is tried again a
        moment later (and said, should the drain not end)."""
        while True:
            try:
                return await self.api.list(VMIM, VMS)
            except (AssertionError, OSError) as error:
                self.errors.append(f"listing migrations: {error}")
                await asyncio.sleep(0.2)

    async def _migrations(self) -> None:
        """virt-controller's migration controller: pending migrations started, oldest first,
        within the per-node and cluster-wide limits."""
        running: dict[str, asyncio.Task[None]] = {}
        while True:
            for name in [n for n, task in running.items() if task.done()]:
                running.pop(name).result()
            pending = sorted((m for m in await self._listed()
                              if not (m.get("status") or {}).get("phase") and m["metadata"]["name"] not in running),
                             key=lambda m: m["metadata"]["creationTimestamp"])
            for migration in pending:
                leaving = sum(1 for n in running if n.startswith("kubevirt-evacuation-"))  # all leave the drained node
                if len(running) >= PARALLEL or leaving >= self.outbound:
                    break
                running[migration["metadata"]["name"]] = asyncio.create_task(self._migrate(migration))
            await asyncio.sleep(0.1)

    async def _migrate(self, migration: dict[str, Any]) -> None:
        vm = migration["spec"]["vmiName"]
        await self.api.set_status(migration, {"phase": "Scheduling"})
        source = self.sources[vm]
        the_vmi = {**self.vmis[vm], "status": {**self.vmis[vm]["status"], "nodeName": self.vm_node[vm]}}
        source_node = await self.api.get({"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.vm_node[vm]}})
        selector = migration_node_selector(the_vmi, source["spec"]["nodeSelector"], source_node["metadata"]["labels"])
        target = launcher_pod_of(the_vmi, name=f"virt-launcher-{vm}-{migration['metadata']['name'][-5:]}",
                                 migration_uid=migration["metadata"]["uid"],
                                 migration_name=migration["metadata"]["name"], node_selector=selector)
        del target["spec"]["nodeName"]
        target["metadata"]["labels"].pop("kubevirt.io/nodeName")
        target.pop("status")
        created = await self.api.create(target)
        where = await self._bound(created, 20)
        if where is None:
            self.stuck.append(f"the migration target pod of {vm} was never bound")
            await self.api.set_status(migration, {"phase": "Failed"})
            return
        self.landed[vm] = where
        await asyncio.sleep(MIGRATION)
        moved = copy.deepcopy(self.vmis[vm])
        moved["metadata"]["labels"]["kubevirt.io/nodeName"] = where
        url = f"{self.api.path(moved)}/{vm}"
        code, got = await self.api.request("PATCH", url, {
            "metadata": {"labels": {"kubevirt.io/nodeName": where}},
            "status": {"nodeName": where, "migrationState": {
                "sourceNode": self.vm_node[vm], "targetNode": where, "targetPod": created["metadata"]["name"],
                "migrationUid": migration["metadata"]["uid"], "completed": True}}},
            content_type="application/merge-patch+json")
        assert code == 200, got
        self.vmis[vm] = got
        await self.api.set_status(source, {"phase": "Succeeded"})
        self.sources[vm], self.vm_node[vm] = await self.api.get(created), where
        await self.api.set_status(migration, {"phase": "Succeeded"})


@pytest.fixture
async def api(scheduler):
    async with Api(scheduler, owns=True) as api:
        yield api


async def drained(scheduler, api, tls_files, drain: Drain) -> float:
    """`serve` registered as the install registers it, and the drain run through it."""
    serving = await Serving.start(tls_files, "--kubeconfig", str(scheduler.kubeconfig),
                                  "--drain-delay", "0", "--webhook-configuration", CONFIGURATION)
    config = registration(serving, tls_files["ca"], CONFIGURATION)
    try:
        await api.create(config)
        await eventually(lambda: answered(api), 20, 0.2)  # the apiserver calls the webhook
        return await drain.run()
    finally:
        await api.delete(config)
        await serving.stop()


def assert_drained_well(drain: Drain) -> None:
    assert not drain.stuck, drain.stuck
    assert drain.refused == [], f"the apiserver refused {len(drain.refused)} share-manager creates: {drain.refused[:2]}"
    assert max(drain.back_after.values()) <= SERVING_AGAIN, drain.back_after
    assert {vm: len(names) for vm, names in drain.migrations.items()} == {vm: 1 for vm in drain.vmis}
    assert not set(drain.landed.values()) & {DRAINED, *OLDER}, drain.landed
    assert not set(drain.server.values()) & {DRAINED, *OLDER}, drain.server


@pytest.mark.parametrize("outbound", [2, 1])
async def test_a_drain_with_kubevirts_evacuation_brings_every_nfs_server_back_where_its_vm_goes(
        scheduler, api, tls_files, outbound):
    drain = Drain(api, outbound)
    try:
        await drain.build()
        took = await drained(scheduler, api, tls_files, drain)
        assert_drained_well(drain)
        print(f"\n{outbound} outbound: drained in {took:.1f} s; NFS servers back after "
              f"{min(drain.back_after.values()):.1f}–{max(drain.back_after.values()):.1f} s; seconds apart "
              f"{sorted(round(s, 1) for s in drain.apart.values())}")
    finally:
        await drain.clean()


async def test_share_managers_answered_while_their_evicted_pods_terminate_are_created_and_serve_again(
        scheduler, api, tls_files):
    """Evicted pods terminating for a few seconds, as with a kubelet: `serve` prepares their answers
    meanwhile, the apiserver takes the pods created again with them, and the drain ends as well."""
    drain = Drain(api, 2, terminating=True)
    try:
        await drain.build()
        await drained(scheduler, api, tls_files, drain)
        assert_drained_well(drain)
        assert len(drain.prepared) >= VM_COUNT // 2, drain.prepared
    finally:
        await drain.clean()


async def answered(api: Api) -> bool:
    """A dry-run create of a VM's pod comes back with the webhook's decision."""
    got = await api.create(vm_pod("disk1"), dry_run=True, namespace=VMS)
    return "kubevirt-scheduler/decision" in annotations(got)
