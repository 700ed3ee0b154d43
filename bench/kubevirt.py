"""A cluster after a drain, with KubeVirt played on the emulator, for the keeper's benchmark.

Runs in a process of its own (`python -m bench.kubevirt`, started by `python -m bench.keeper`):
kmock serving nodes (some unready, some cordoned), a Longhorn RWX disk per VM (PVC, PV,
ShareManager, share-manager pod) and running opted-in VMIs with their launcher pods, some of
them apart from their storage as a drain leaves them. Which apart VMs the keeper may move is
known from the start: not those whose storage is on an unready or cordoned node, that are not
live-migratable or that are annotated `kubevirt-scheduler/keep: "false"`.

KubeVirt is played as the keeper reads it. A migration goes Pending, then, once one of the 5
slots of `parallelMigrationsPerCluster` is free, Scheduling (its target pod created on the node
asked for), Scheduled, PreparingTarget, TargetReady, Running (the VMI's migrationState), and
after a delay Succeeded (the VMI on the target node, migrationState ended, the source pod
Succeeded) or, every `--fail-every`-th of ours, Failed (the target pod Failed, the VMI stays).
Changes of VMIs and pods reach the watches `--watch-lag` late, those of migrations at once (an
apiserver keeps a watch cache per resource; under load one falls behind). Someone else keeps
`--foreign` migrations of VMs that are not opted in under way. A third of
the way through, one node is cordoned and another loses Ready: the VMs whose disks they serve
may no longer be moved there (a target pod the scheduler cannot place fails its migration).

Each migration of ours is checked the moment it is created, against the cluster as the request
found it: our migrations in flight within the limit, none for a VM with one in flight or moved by
us before (a failed one backs off for 30 minutes, longer than a run), targeted at the node that
serves the VM's disk, that node Ready and not cordoned, and only for VMs that may be moved (a
migration created within a second of its node changing raced the keeper's watch, as it would
race any controller's: counted apart).
`GET /report` on the control URL answers the figures and every violation; `?final=1` adds the
end state: every movable VM back on its storage node unless its migration failed, the others
where they were.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import datetime
import os
import random
import sys
import uuid
from typing import Any

from aiohttp import web
import kmock
from kmock._internal import apps

from webhook.kinds import EVENT, LEASE, NODE, POD, VMI, VMIM, Resource

from . import objects
from .emulator import Emulator, KubeVirtEmulator, stamp

MANAGED_BY = "app.kubernetes.io/managed-by"
OURS = "kubevirt-colocate"
HOSTNAME = "kubernetes.io/hostname"
PARALLEL = 5  # KubeVirt's default parallelMigrationsPerCluster
BACKOFF = datetime.timedelta(minutes=30)  # the keeper's first backoff after a failure
DRAINED = datetime.timedelta(minutes=20)  # how long ago the drain moved the apart VMs

# What a VM is to the keeper. Apart VMs other than MOVABLE must never get a migration of ours.
CO_LOCATED = "co-located"
MOVABLE = "movable"
ON_CORDONED = "storage on a cordoned node"
ON_UNREADY = "storage on an unready node"
UNMIGRATABLE = "not live-migratable"
OPTED_OUT = 'annotated keep: "false"'
NOT_OPTED_IN = "not opted in"
CORDONED_LATER = "storage node cordoned during the run"
UNREADY_LATER = "storage node not Ready during the run"
# Of the VMs apart, the share held back for each reason (at least one each from 8 apart).
HELD = ((ON_CORDONED, 0.15), (ON_UNREADY, 0.10), (UNMIGRATABLE, 0.025), (OPTED_OUT, 0.025))
FINAL = ("Succeeded", "Failed")
# A migration created this soon after its target or its VM became off limits raced the keeper's
# watch (as it would race any controller): reported, not a violation.
GRACE = datetime.timedelta(seconds=1)


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclasses.dataclass
class Vm:
    name: str
    namespace: str
    uid: str
    role: str
    storage: str  # the node serving its disk
    node: str  # where it runs now
    pod: str  # its launcher pod now
    claim: str = ""
    start: str = ""  # where it ran at start
    held_since: datetime.datetime | None = None  # when it stopped being movable, during the run
    ours: list[str] = dataclasses.field(default_factory=list)  # our migrations of it, oldest first
    failed_at: datetime.datetime | None = None  # when our last migration of it failed
    migrating: str | None = None  # the migration of it in flight, any origin


@dataclasses.dataclass
class Migration:
    name: str
    namespace: str
    vm: Vm
    ours: bool
    target: str | None  # the node asked for (ours), or chosen (someone else's)
    phase: str = ""
    fail: bool = False
    transitions: list[dict[str, str]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Layout:
    healthy: list[str]
    cordoned: list[str]
    unready: list[str]
    vms: list[Vm]


def plan(vmis: int, apart: int, nodes: int, unready: int, cordoned: int, others: int, seed: int) -> Layout:
    """Who runs where: `vmis` opted-in VMs of which `apart` run away from their storage, and
    `others` VMs that are not opted in; every disk on its own share-manager."""
    if nodes - unready - cordoned < 2:
        raise SystemExit("need at least two healthy nodes")
    if not 0 <= apart <= vmis:
        raise SystemExit("--apart must be between 0 and --vmis")
    names = [f"node-{i:03d}" for i in range(nodes)]
    healthy, cordoned_nodes, unready_nodes = (names[:nodes - unready - cordoned],
                                              names[nodes - unready - cordoned:nodes - unready], names[nodes - unready:])
    rng = random.Random(seed)
    roles: list[str] = []
    for role, share in HELD:
        wanted = max(1, round(apart * share)) if apart >= 8 else 0
        if (role == ON_CORDONED and not cordoned_nodes) or (role == ON_UNREADY and not unready_nodes):
            wanted = 0
        roles += [role] * wanted
    roles += [MOVABLE] * (apart - len(roles))
    roles += [CO_LOCATED] * (vmis - apart)
    rng.shuffle(roles)
    roles += [NOT_OPTED_IN] * others
    vms = []
    for i, role in enumerate(roles):
        pool = {ON_CORDONED: cordoned_nodes, ON_UNREADY: unready_nodes}.get(role, healthy)
        storage, node = pool[i % len(pool)], healthy[i % len(healthy)]
        if role in (MOVABLE, UNMIGRATABLE, OPTED_OUT):  # drained off its storage node, uncordoned since
            node = healthy[(i + 1 + rng.randrange(len(healthy) - 1)) % len(healthy)]
        name = f"vm-{i:04d}" if role != NOT_OPTED_IN else f"other-{i:04d}"
        uid = str(uuid.UUID(int=random.Random(f"vmi-{i}").getrandbits(128), version=4))
        vms.append(Vm(name, f"vms-{i % 10}", uid, role, storage, node, f"virt-launcher-{name}-abcde",
                      claim=f"{name}-disk", start=node))
    return Layout(healthy, cordoned_nodes, unready_nodes, vms)


def cluster_objects(layout: Layout, started: datetime.datetime) -> list[dict[str, Any]]:
    """The nodes, and each VM's disk, share-manager, VMI and launcher pod, as the API shows them."""
    found = []
    for name in layout.healthy + layout.cordoned + layout.unready:
        node = objects.node(name)
        if name in layout.cordoned:  # as kubectl drain leaves it
            node["spec"] = {"unschedulable": True, "taints": [
                {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": stamp(started)}]}
        if name in layout.unready:  # the kubelet stopped posting status
            node["status"]["conditions"] = [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}]
            node["spec"] = {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
                                       {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]}
        found.append(node)
    long_ago, drained = stamp(started - datetime.timedelta(days=3)), stamp(started - DRAINED)
    for vm in layout.vms:
        volume = f"pvc-{uuid.UUID(int=random.Random(vm.claim).getrandbits(128), version=4)}"
        share_manager_pod = objects.share_manager_pod(volume, vm.storage)
        share_manager_pod["metadata"]["creationTimestamp"] = long_ago
        share_manager_pod["status"]["startTime"] = long_ago
        found += [objects.pvc(vm.claim, vm.namespace, volume), objects.pv(vm.claim, vm.namespace, volume),
                  objects.share_manager(volume, vm.storage), share_manager_pod]
        apart = vm.node != vm.storage
        vmi = objects.vmi(vm.name, vm.namespace, [vm.claim], vm.node, vm.uid, opted_in=vm.role != NOT_OPTED_IN,
                          migratable=vm.role != UNMIGRATABLE, keep="false" if vm.role == OPTED_OUT else None,
                          migrated_from=vm.storage if apart else None, migration_end=drained)
        found.append(vmi)
        if apart:  # the drain's target pod: the VM's pod since then
            found.append(objects.launcher_pod_of(vmi, vm.node, name=vm.pod, started=drained,
                                                 migration_uid=vmi["status"]["migrationState"]["migrationUid"]))
        else:
            found.append(objects.launcher_pod_of(vmi, vm.node, name=vm.pod, started=long_ago))
    return found


class Tracker:
    """Every migration as it is created and as it ends; what the keeper promised, checked."""

    def __init__(self, layout: Layout, max_inflight: int):
        self.layout, self.max_inflight = layout, max_inflight
        self.vms = {(vm.namespace, vm.name): vm for vm in layout.vms}
        # Nodes a VM must not be sent to: why, and since when (None: from the start).
        self.unfit: dict[str, tuple[str, datetime.datetime | None]] = {
            **{n: ("cordoned", None) for n in layout.cordoned}, **{n: ("not Ready", None) for n in layout.unready}}
        self.raced: list[str] = []
        self.migrations: dict[tuple[str, str], Migration] = {}
        self.violations: list[str] = []
        self.peak_ours = self.peak_all = self.peak_running = 0
        self.running = 0
        self.created = collections.Counter()  # ours, someone else's
        self.ended = collections.Counter()  # ours: Succeeded, Failed

    def in_flight(self, ours: bool | None = None) -> int:
        return sum(1 for m in self.migrations.values() if m.phase not in FINAL and (ours is None or m.ours == ours))

    def check(self, manifest: dict[str, Any], at: datetime.datetime) -> tuple[Vm | None, list[str], list[str]]:
        """A migration of ours about to be stored: every promise, against the cluster as it is
        now. (The VM, what it breaks, what it raced.)"""
        meta, spec = manifest.get("metadata") or {}, manifest.get("spec") or {}
        vm = self.vms.get((meta.get("namespace") or "", spec.get("vmiName")))
        broken: list[str] = []
        raced: list[str] = []
        violated = broken.append
        if vm is None:
            return None, [f"for a VMI that does not exist: {spec.get('vmiName')!r}"], []
        ours = self.in_flight(ours=True) + 1
        if ours > self.max_inflight:
            violated(f"{ours} of our migrations in flight (limit {self.max_inflight})")
        if vm.role != MOVABLE:
            if vm.held_since is not None and at - vm.held_since < GRACE:
                raced.append(f"{vm.name}: {vm.role} {(at - vm.held_since).total_seconds() * 1000:.0f} ms earlier")
            else:
                violated(f"{vm.name} must be left alone ({vm.role})")
        if vm.migrating is not None:
            violated(f"{vm.name} has a migration in flight already ({vm.migrating})")
        elif vm.ours and vm.failed_at is None:
            violated(f"{vm.name} is migrated a second time ({', '.join(vm.ours)} before)")
        elif vm.failed_at is not None and at - vm.failed_at < BACKOFF:
            violated(f"{vm.name} is migrated again {int((at - vm.failed_at).total_seconds())}s after a failure")
        if vm.node == vm.storage:
            violated(f"{vm.name} already runs on {vm.storage}, where its disk is served")
        selector = spec.get("addedNodeSelector") or {}
        target = next((n for n in self.layout.healthy + self.layout.cordoned + self.layout.unready
                       if selector.get(HOSTNAME) == n and len(selector) == 1), None)
        if target is None:
            violated(f"not targeted at one node: addedNodeSelector {selector}")
        elif target in self.unfit:
            why, since = self.unfit[target]
            if since is None or at - since >= GRACE:
                violated(f"targets {target}, which is {why}")
            else:
                raced.append(f"targets {target}, {why} {(at - since).total_seconds() * 1000:.0f} ms earlier")
        elif target != vm.storage:
            violated(f"targets {target}, but the disk of {vm.name} is served from {vm.storage}")
        return vm, broken, raced

    def record(self, migration: str, broken: list[str], raced: list[str]) -> None:
        self.violations += [f"{migration}: {what}" for what in broken]
        self.raced += [f"{migration}: {what}" for what in raced]

    def added(self, migration: Migration) -> None:
        self.migrations[(migration.namespace, migration.name)] = migration
        migration.vm.migrating = migration.name
        if migration.ours:
            migration.vm.ours.append(migration.name)
        self.created[migration.ours] += 1
        self.peak_ours = max(self.peak_ours, self.in_flight(ours=True))
        self.peak_all = max(self.peak_all, self.in_flight())

    def nodes_to_lose(self) -> list[tuple[str, str]]:
        """Two healthy nodes serving the disks of the most movable VMs still apart: one to cordon,
        one to lose Ready. None when fewer than four healthy nodes are left."""
        healthy = [n for n in self.layout.healthy if n not in self.unfit]
        if len(healthy) < 4:
            return []
        waiting = collections.Counter(vm.storage for vm in self.layout.vms
                                      if vm.role == MOVABLE and vm.node != vm.storage and vm.migrating is None)
        chosen = sorted(healthy, key=lambda n: (-waiting[n], n))[:2]
        return [(chosen[0], "cordoned"), (chosen[1], "not Ready")]

    def lost(self, node: str, why: str, at: datetime.datetime) -> None:
        """From now on `node` is off limits, and the VMs waiting to go there stay where they are."""
        self.unfit[node] = (why, at)
        role = CORDONED_LATER if why == "cordoned" else UNREADY_LATER
        for vm in self.layout.vms:
            if vm.role == MOVABLE and vm.storage == node and vm.node != vm.storage and vm.migrating is None:
                vm.role, vm.held_since = role, at

    def report(self, final: bool = False) -> dict[str, Any]:
        opted_in = [vm for vm in self.layout.vms if vm.role != NOT_OPTED_IN]
        movable = [vm for vm in opted_in if vm.role == MOVABLE]
        back = [vm for vm in movable if vm.node == vm.storage]
        failed = [vm for vm in movable if vm.node != vm.storage and vm.failed_at is not None]
        violations = list(self.violations)
        left = [vm for vm in movable if vm.node != vm.storage and vm.failed_at is None]
        if final:
            violations += [f"{vm.namespace}/{vm.name} was not brought back to {vm.storage}" for vm in left]
            violations += [f"{vm.namespace}/{vm.name} ({vm.role}) was moved from {vm.start} to {vm.node}"
                           for vm in opted_in if vm.role != MOVABLE and vm.node != vm.start]
        held = collections.Counter(vm.role for vm in opted_in if vm.role not in (MOVABLE, CO_LOCATED))
        return {
            "vmis": len(opted_in), "not_opted_in": len(self.layout.vms) - len(opted_in),
            "nodes": {"healthy": len(self.layout.healthy), "cordoned": len(self.layout.cordoned),
                      "unready": len(self.layout.unready)},
            "apart_at_start": len(movable) + sum(held.values()), "movable": len(movable), "held": dict(held),
            "movable_at_start": len(movable) + held[CORDONED_LATER] + held[UNREADY_LATER],
            "created": self.created[True], "foreign_created": self.created[False],
            "succeeded": self.ended["Succeeded"], "failed": self.ended["Failed"],
            "brought_back": len(back), "failed_apart": len(failed), "left_apart": len(left),
            "peak_in_flight_ours": self.peak_ours, "peak_in_flight_all": self.peak_all,
            "peak_running": self.peak_running,
            "in_flight_ours": self.in_flight(ours=True), "in_flight_all": self.in_flight(),
            "settled": not left and self.in_flight(ours=True) == 0,
            "lost_nodes": {n: why for n, (why, since) in self.unfit.items() if since is not None},
            "raced": self.raced,
            "violations": violations,
        }


class KubeVirt:
    """virt-controller and virt-handler as far as the keeper can tell: each migration run
    through its phases, at most PARALLEL at once, the VMI and its pods moved at the end."""

    def __init__(self, api: SimulatedCluster, tracker: Tracker, *, delay: tuple[float, float], fail_every: int,
                 foreign: int, seed: int, lose_nodes_after: int = 0):
        self.api, self.tracker = api, tracker
        self.lose_nodes_after = lose_nodes_after  # of our migrations created; 0: never
        self.delay, self.fail_every, self.foreign = delay, fail_every, foreign
        self.rng = random.Random(seed)
        self.slots = asyncio.Semaphore(PARALLEL)
        self.tasks: set[asyncio.Task[None]] = set()
        self.ours_made = 0

    def start(self, manifest: dict[str, Any], vm: Vm | None) -> None:
        """Our migration was stored: run it."""
        if vm is None:
            return
        meta = manifest["metadata"]
        selector = (manifest.get("spec") or {}).get("addedNodeSelector") or {}
        self.ours_made += 1
        migration = Migration(meta["name"], meta["namespace"], vm, True, selector.get(HOSTNAME),
                              fail=bool(self.fail_every) and self.ours_made % self.fail_every == 0)
        self.tracker.added(migration)
        self._spawn(self.run(migration, meta.get("uid") or str(uuid.uuid4())))
        if self.ours_made == self.lose_nodes_after:
            self._spawn(self.lose_nodes())

    async def lose_nodes(self) -> None:
        """While the keeper works: one node is cordoned (an admin starts another drain), another
        stops posting status (its kubelet is down)."""
        for node, why in self.tracker.nodes_to_lose():
            if why == "cordoned":
                change = {"spec": {"unschedulable": True, "taints": [
                    {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": stamp()}]}}
            else:
                change = {"spec": {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}]},
                          "status": {"conditions": [{"type": "Ready", "status": "Unknown",
                                                     "reason": "NodeStatusUnknown"}]}}
            await self.api.change(NODE, None, node, change)
            self.tracker.lost(node, why, now())

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def phase(self, migration: Migration, phase: str, **status: Any) -> None:
        migration.phase = phase
        migration.transitions.append({"phase": phase, "phaseTransitionTimestamp": stamp()})
        await self.api.change(VMIM, migration.namespace, migration.name, {"status": {
            "phase": phase, "phaseTransitionTimestamps": list(migration.transitions), **status}})

    async def run(self, migration: Migration, uid: str) -> None:
        tracker = self.tracker
        try:
            await self.phase(migration, "Pending")
            async with self.slots:
                tracker.running += 1
                tracker.peak_running = max(tracker.peak_running, tracker.running)
                try:
                    await self._migrate(migration, uid)
                finally:
                    tracker.running -= 1
        except Exception as exc:  # a broken simulation must show, not hang the run
            tracker.violations.append(f"simulation error in {migration.name}: {type(exc).__name__}: {exc}")
            raise

    async def _migrate(self, migration: Migration, uid: str) -> None:
        vm = migration.vm
        total = self.rng.uniform(*self.delay)
        step = total * 0.05
        source, target = vm.node, migration.target or vm.node
        started = stamp()
        target_pod = f"virt-launcher-{vm.name}-{uid[:5]}"
        vmi = {"metadata": {"uid": vm.uid, "name": vm.name, "namespace": vm.namespace,
                            "annotations": {} if vm.role == NOT_OPTED_IN else {"kubevirt-scheduler/co-schedule": "true"}},
               "spec": {"volumes": [{"name": "disk0", "persistentVolumeClaim": {"claimName": vm.claim}}]}}
        await self.phase(migration, "Scheduling")
        pod = objects.launcher_pod_of(vmi, target, name=target_pod, started=stamp(), migration_uid=uid)
        if target in self.tracker.unfit:  # kube-scheduler cannot place the target pod: the migration fails
            del pod["spec"]["nodeName"]
            pod["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                                 "reason": "Unschedulable"}]}
            await self.api.add(POD, pod)
            await asyncio.sleep(total)
            await self.api.change(POD, vm.namespace, target_pod, {"status": {"phase": "Failed"}})
            await self._failed(migration, stamp())
            return
        await self.api.add(POD, pod)
        for phase in ("Scheduled", "PreparingTarget", "TargetReady"):
            await asyncio.sleep(step)
            await self.phase(migration, phase)
        state = {"migrationUid": uid, "sourceNode": source, "targetNode": target, "targetPod": target_pod,
                 "startTimestamp": started, "completed": False, "failed": False, "mode": "PreCopy",
                 "endTimestamp": None}
        await self.api.change(VMI, vm.namespace, vm.name, {"status": {"migrationState": state}})
        await self.phase(migration, "Running")
        await asyncio.sleep(total - 4 * step)
        ended = stamp()
        if migration.fail:
            await self.api.change(VMI, vm.namespace, vm.name, {"status": {"migrationState": {
                "failed": True, "endTimestamp": ended}}})
            await self.api.change(POD, vm.namespace, target_pod, {"status": {"phase": "Failed"}})
            await self._failed(migration, ended)
            return
        # virt-handler reports the end on the VMI, virt-controller moves it and finishes the migration.
        await self.api.change(VMI, vm.namespace, vm.name, {
            "metadata": {"labels": {"kubevirt.io/nodeName": target}},
            "status": {"nodeName": target, "activePods": {pod["metadata"]["uid"]: target},
                       "migrationState": {"completed": True, "endTimestamp": ended}}})
        old_pod, vm.node, vm.pod, vm.migrating = vm.pod, target, target_pod, None
        await self.api.change(POD, vm.namespace, old_pod, {"status": {"phase": "Succeeded"}})
        if migration.ours:
            self.tracker.ended["Succeeded"] += 1
        await self.phase(migration, "Succeeded", migrationState={"endTimestamp": ended})

    async def _failed(self, migration: Migration, ended: str) -> None:
        migration.vm.migrating = None
        if migration.ours:
            migration.vm.failed_at = now()
            self.tracker.ended["Failed"] += 1
        await self.phase(migration, "Failed", migrationState={"endTimestamp": ended})

    async def someone_else(self) -> None:
        """Another controller (a descheduler, the workload updater) migrating VMs that are not opted in."""
        others = [vm for vm in self.tracker.layout.vms if vm.role == NOT_OPTED_IN]
        healthy = self.tracker.layout.healthy
        while others:
            vm = self.rng.choice([o for o in others if o.migrating is None] or others)
            if vm.migrating is not None:
                await asyncio.sleep(0.05)
                continue
            target = self.rng.choice([n for n in healthy if n != vm.node and n not in self.tracker.unfit])
            name, uid = f"{vm.name}-upd-{self.rng.randrange(16 ** 5):05x}", str(uuid.uuid4())
            await self.api.add(VMIM, {
                "apiVersion": VMIM.api_version, "kind": VMIM.kind,
                "metadata": {"name": name, "namespace": vm.namespace, "uid": uid, "creationTimestamp": stamp(),
                             "labels": {"kubevirt.io/vmi-name": vm.name}},
                "spec": {"vmiName": vm.name}})
            migration = Migration(name, vm.namespace, vm, False, target)
            self.tracker.added(migration)
            await self.run(migration, uid)
            await asyncio.sleep(self.rng.uniform(0.0, 0.1))

    def run_others(self) -> None:
        for _ in range(self.foreign):
            self._spawn(self.someone_else())


class SimulatedCluster(KubeVirtEmulator):
    """The emulator with KubeVirt in it: each migration of ours checked as it is created, then run."""

    kubevirt: KubeVirt | None = None
    tracker: Tracker | None = None
    watch_lag: float = 0.0  # seconds VMI and pod changes take to reach the watches (reads see them at once)
    _late: asyncio.Queue[tuple[float, Any, dict[str, Any]]] | None = None

    async def _handle(self, request: Any) -> Any:
        resource = request.resource
        if (resource is None or request.method != "POST" or resource.plural != VMIM.plural
                or request.params.get("dryRun") == "All" or not isinstance(request.data, dict)
                or self.tracker is None or self.kubevirt is None):
            return await super()._handle(request)
        metadata = request.data.get("metadata") or {}
        if (metadata.get("labels") or {}).get(MANAGED_BY) != OURS:
            return await super()._handle(request)
        vm, broken, raced = self.tracker.check(request.data, now())
        response = await super()._handle(request)
        self.tracker.record(f"{metadata.get('namespace')}/{metadata.get('name') or metadata.get('generateName')}",
                            broken, raced)
        if response.status < 300:
            self.kubevirt.start(request.data, vm)
        return response

    async def add(self, resource: Resource, obj: dict[str, Any]) -> None:
        """Store a new object and tell the watches, as a create through the API does."""
        key = (kmock.resource(resource.group, resource.version, resource.plural), obj["metadata"].get("namespace"),
               obj["metadata"]["name"])
        async with self._lock:
            self.objects[key] = obj
            event = {"type": "ADDED", "object": self.objects[key].raw}
            if resource in (VMI, POD) and self.watch_lag:
                await self._lagging().put((asyncio.get_running_loop().time() + self.watch_lag, key[0], event))
            else:
                await self._buses[key[0]].put(event)

    async def change(self, resource: Resource, namespace: str | None, name: str, patch: dict[str, Any]) -> None:
        """Merge `patch` into a stored object and tell the watches, as a PATCH through the API does."""
        key = (kmock.resource(resource.group, resource.version, resource.plural), namespace, name)
        async with self._lock:
            stored = self.objects[key]
            stored.patch(patch)
            stored.raw.setdefault("metadata", {})["resourceVersion"] = str(next(self._versions))
            event = {"type": "MODIFIED", "object": stored.raw}
            if resource in (VMI, POD) and self.watch_lag:
                await self._lagging().put((asyncio.get_running_loop().time() + self.watch_lag, key[0], event))
            else:
                await self._buses[key[0]].put(event)

    def _lagging(self) -> asyncio.Queue[tuple[float, Any, dict[str, Any]]]:
        """Events that reach the watches late, in order: an apiserver whose watch cache of one
        resource falls behind the others."""
        if self._late is None:
            self._late = asyncio.Queue()

            async def deliver() -> None:
                loop = asyncio.get_running_loop()
                while True:
                    due, resource, event = await self._late.get()
                    await asyncio.sleep(max(0.0, due - loop.time()))
                    async with self._lock:
                        await self._buses[resource].put(event)

            self.delivery = asyncio.create_task(deliver())
        return self._late


async def serve(args: argparse.Namespace) -> None:
    started = now()
    layout = plan(args.vmis, args.apart, args.nodes, args.unready_nodes, args.cordoned_nodes,
                  max(4, 2 * args.foreign) if args.foreign else 0, args.seed)
    tracker = Tracker(layout, args.max_inflight)
    async with SimulatedCluster() as kmock, apps.Server(kmock) as server:
        emulator = Emulator(kmock, paginate=False)
        for resource in (VMI, VMIM, LEASE, EVENT):
            kmock.resources[resource] = {}
            emulator.by_kind[(resource.api_version, resource.kind)] = resource
        for obj in cluster_objects(layout, started):
            emulator.put(obj)
        movable = sum(1 for vm in layout.vms if vm.role == MOVABLE)
        kubevirt = KubeVirt(kmock, tracker, delay=(args.delay_min, args.delay_max), fail_every=args.fail_every,
                            foreign=args.foreign, seed=args.seed,
                            lose_nodes_after=max(1, movable // 3) if args.lose_nodes else 0)
        kmock.tracker, kmock.kubevirt, kmock.watch_lag = tracker, kubevirt, args.watch_lag

        async def report(request: web.Request) -> web.Response:
            return web.json_response(tracker.report(final=request.query.get("final") == "1"))

        async def others(request: web.Request) -> web.Response:
            kubevirt.run_others()  # once the keeper watches: its first view is the drained cluster
            return web.json_response({"foreign": args.foreign})

        app = web.Application()
        app.router.add_get("/report", report)
        app.router.add_post("/others", others)
        control = web.AppRunner(app, access_log=None)
        await control.setup()
        site = web.TCPSite(control, "127.0.0.1", 0)
        await site.start()
        print(f"{str(server.url).rstrip('/')} http://127.0.0.1:{control.addresses[0][1]}", flush=True)
        try:
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the parent closes stdin
        finally:
            for task in list(kubevirt.tasks):
                task.cancel()
            await control.cleanup()


def add_layout_flags(parser: argparse.ArgumentParser) -> None:
    """The simulated cluster's flags, shared with `python -m bench.keeper`."""
    parser.add_argument("--vmis", type=int, default=500, help="running opted-in VMIs (default 500)")
    parser.add_argument("--apart", type=int, default=200, help="of them apart from their storage at start (default 200)")
    parser.add_argument("--nodes", type=int, default=20, help="nodes (default 20)")
    parser.add_argument("--unready-nodes", type=int, default=2, help="of them not Ready (default 2)")
    parser.add_argument("--cordoned-nodes", type=int, default=2, help="of them cordoned (default 2)")
    parser.add_argument("--delay-min", type=float, default=0.2, help="seconds a migration takes, at least (default 0.2)")
    parser.add_argument("--delay-max", type=float, default=0.5, help="at most (default 0.5)")
    parser.add_argument("--fail-every", type=int, default=20, metavar="K",
                        help="every K-th migration of ours fails (default 20; 0: none)")
    parser.add_argument("--foreign", type=int, default=3,
                        help="migrations of VMs not opted in that someone else keeps under way (default 3)")
    parser.add_argument("--lose-nodes", action=argparse.BooleanOptionalAction, default=True,
                        help="a third of the way, cordon one node and take Ready from another (default on)")
    parser.add_argument("--watch-lag", type=float, default=0.3, metavar="SECONDS",
                        help="changes of VMIs and pods reach the watches this late, of migrations at once "
                             "(default 0.3)")
    parser.add_argument("--max-inflight", type=int, default=2, help="the keeper's --keep-max-inflight (default 2)")
    parser.add_argument("--seed", type=int, default=1)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.kubevirt", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_layout_flags(parser)
    args = parser.parse_args()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
