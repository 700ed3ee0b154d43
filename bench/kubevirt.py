"""A cluster after a drain, with KubeVirt played on the emulator, for the keeper's benchmark.

Runs in a process of its own (`python -m bench.kubevirt`, started by `python -m bench.keeper`):
kubefake's apiserver serving nodes (some unready, some cordoned; `--old-cpu-nodes` of an older
CPU generation, Broadwell-IBRS among Skylake-Client-IBRS, with an older QEMU), a Longhorn RWX disk per VM (PVC,
PV, ShareManager, share-manager pod) and running opted-in VMIs with their launcher pods, some of
them apart from their storage as a drain leaves them. Each node carries virt-handler's node
labeller labels; each VMI a host-model CPU, machine type q35 and the canonical machine type of
the node it started on; each launcher pod the nodeSelector virt-controller renders (a drain's
target pod also the CPU model, features and vendor of the node it left, and the canonical
machine type). Which apart VMs the keeper may move is known from the start: not those whose
storage is on an unready or cordoned node, that are not live-migratable, that are annotated
`kubevirt-scheduler/keep: "false"`, or whose migration target the storage node cannot take (a
VM started on a newer CPU generation than the node serving its disk: storage on an older CPU
generation).

KubeVirt is played as the keeper reads it. A migration goes Pending; virt-controller gives it a
target pod once fewer than `parallelMigrationsPerCluster` (5) run and fewer than
`--outbound-per-node` (`parallelOutboundMigrationsPerNode`, 2) leave its VM's node, the waiting
ones by spec.priority (system-critical first, system-maintenance last), then age. The target
pod selects nodes as virt-controller builds it (`objects.migration_node_selector`: machine type,
host-model CPU, vendor, addedNodeSelector); kube-scheduler is played by a plain check of our own
(the node's labels hold every key of that nodeSelector, the node is Ready and not cordoned, not
the VM's node), not the keeper's rules. Placed: Scheduling, Scheduled, PreparingTarget,
TargetReady, Running (the VMI's migrationState), and after a delay Succeeded (the VMI on the
target node, migrationState ended, the source pod Succeeded) or, every `--fail-every`-th of
ours, Failed (the target pod Failed, the VMI stays). Not placed: the target pod stays Pending,
PodScheduled False with reason Unschedulable and the scheduler's message, until virt-controller
deletes it once it has been pending `kubevirt.io/migrationUnschedulablePodTimeoutSeconds` (the
migration's annotation, default 300; the migration fails), or until the migration is deleted
(`virtctl migrate-cancel`, the keeper): virt-controller holds it with its finalizer, deletes the
target pod, marks it Failed and lets it go. A migration of ours deleted is checked: its target
pod unschedulable for `--unplaceable` seconds first. Changes of VMIs and pods reach the watches
`--watch-lag` late, those of migrations at once (an apiserver keeps a watch cache per resource;
under load one falls behind). Someone else keeps `--foreign` migrations of VMs that are not
opted in under way. A third of the way through, the node the migration of ours just created
targets is cordoned (that migration's target pod cannot be placed: the keeper must cancel it)
and another node loses Ready: the VMs whose disks they serve may no longer be moved there.
Halfway (or once the keeper is done, if sooner), one healthy node is drained (`--drain`): the
one most movable VMs waiting to go back run on (the keeper wants its outbound slots too). It is
cordoned, and KubeVirt's evacuation controller creates a `kubevirt-evacuation-` migration
(spec.priority system-critical) for each live-migratable VMI on it without one, as many at a
time as the cluster-wide limit leaves room for (pkg/virt-controller/watch/drain/evacuation),
until no such VMI is left on it. A VM the drain moved is judged again where it lands: back on
its storage node, apart and movable, or held (its storage on the drained node, or the storage
node unable to take its new CPU requirements); the end state expects it there unless the keeper
may move it. No node a VM held by its CPU alone runs on or has its disk on is lost or drained:
only its CPU holds it, so a keeper blind to CPU models shows.

Each migration of ours is checked the moment it is created, against the cluster as the request
found it: our migrations in flight within the limit, fewer than 5 in flight cluster-wide and
fewer than `--outbound-per-node` leaving the VM's node (the keeper must leave a drain its slots),
none for a VM with one in flight or moved by us before (a failed or cancelled one backs off for
30 minutes, longer than a run), targeted at the node that serves the VM's disk, that node Ready
and not cordoned, and able to take the target pod (its labels), and only for VMs that may be
moved (a migration created within a second of what it breaks changing raced the keeper's
watch, as it would race any controller's: counted apart).
`GET /report` on the control URL answers the figures and every violation; `?final=1` adds the
end state: every movable VM back on its storage node unless its migration failed, the others
where they were (or where the drain moved them).
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import datetime
import itertools
import os
import random
import string
import sys
import uuid
from typing import Any

import kmock
from aiohttp import web

from kubefake import objects
from kubefake.apiserver import Apiserver
from kubefake.apiserver import serve as serve_api
from kubefake.objects import stamp
from webhook.kinds import EVENT, LEASE, NODE, POD, VMI, VMIM, Resource

from .emulator import Emulator, control_site, url

MANAGED_BY = "app.kubernetes.io/managed-by"
OURS = "kubevirt-colocate"
HOSTNAME = "kubernetes.io/hostname"
PARALLEL = 5  # KubeVirt's default parallelMigrationsPerCluster
OUTBOUND = 2  # KubeVirt's default parallelOutboundMigrationsPerNode
BACKOFF = datetime.timedelta(minutes=30)  # the keeper's first backoff after a failure
DRAINED = datetime.timedelta(minutes=20)  # how long ago the drain moved the apart VMs
UNSCHEDULABLE_TIMEOUT = "kubevirt.io/migrationUnschedulablePodTimeoutSeconds"
DEFAULT_UNSCHEDULABLE_TIMEOUT = 300  # virt-controller's, without the annotation
FINALIZER = "kubevirt.io/migrationJobFinalize"  # virt-controller's, on every migration it handles
EVACUATION = "kubevirt-evacuation-"
# virt-controller's priority queue (KubeVirt 1.7+): evacuations first, our system-maintenance last.
PRIORITY_RANK = {"system-critical": 0, "user-triggered": 1, None: 1, "system-maintenance": 2}
SCHEDULING = 0.02  # seconds kube-scheduler takes to give up on a pod it cannot place
EVACUATION_RESYNC = 1.0  # the evacuation controller looks again this often (and when a migration ends)

# What a VM is to the keeper. Apart VMs other than MOVABLE must never get a migration of ours.
CO_LOCATED = "co-located"
MOVABLE = "movable"
ON_CORDONED = "storage on a cordoned node"
ON_UNREADY = "storage on an unready node"
ON_OLDER_CPU = "storage on an older CPU generation"
UNMIGRATABLE = "not live-migratable"
OPTED_OUT = 'annotated keep: "false"'
NOT_OPTED_IN = "not opted in"
CORDONED_LATER = "storage node cordoned during the run"
UNREADY_LATER = "storage node not Ready during the run"
DRAINED_LATER = "storage node drained during the run"
LATER = {"cordoned": CORDONED_LATER, "not Ready": UNREADY_LATER, "drained": DRAINED_LATER}
AT_START = {"cordoned": ON_CORDONED, "not Ready": ON_UNREADY}
# Of the VMs apart, the share held back for each reason (at least one each from 8 apart).
HELD = ((ON_CORDONED, 0.15), (ON_UNREADY, 0.10), (UNMIGRATABLE, 0.025), (OPTED_OUT, 0.025), (ON_OLDER_CPU, 0.05))
FINAL = ("Succeeded", "Failed")
# A migration created this soon after its target or its VM became off limits raced the keeper's
# watch (as it would race any controller): reported, not a violation.
GRACE = datetime.timedelta(seconds=1)
# What the checks call the broken promises the figures count.
CANNOT_PLACE = "created a migration that cannot be placed"
OVER_SLOTS = "over the"  # ... per-node / cluster-wide slot limit


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
    start: str = ""  # where it ran at start (or where a migration not ours moved it)
    machine: str = ""  # status.machine.type: the canonical machine type it runs with
    selector: dict[str, str] = dataclasses.field(default_factory=dict)  # its pod's nodeSelector
    held_since: datetime.datetime | None = None  # when it stopped being movable, during the run
    ours: list[str] = dataclasses.field(default_factory=list)  # our migrations of it, oldest first
    failed_at: datetime.datetime | None = None  # when our last migration of it failed (or was cancelled)
    migrating: str | None = None  # the migration of it in flight, any origin
    evacuated: bool = False  # the drain moved it
    back_by_drain: bool = False  # the drain moved it to its storage node


@dataclasses.dataclass
class Migration:
    name: str
    namespace: str
    vm: Vm
    ours: bool
    target: str | None  # the node asked for (ours), or where the scheduler put it (the others)
    phase: str = ""
    fail: bool = False
    transitions: list[dict[str, str]] = dataclasses.field(default_factory=list)
    uid: str = ""
    created: datetime.datetime = dataclasses.field(default_factory=now)
    priority: str | None = None
    timeout: int = DEFAULT_UNSCHEDULABLE_TIMEOUT  # seconds its target pod may stay unschedulable
    evacuation: bool = False
    lose_nodes: bool = False  # nodes are lost as it starts (a third of the way)
    source: str | None = None  # the VM's node when it got its target pod
    unschedulable: datetime.datetime | None = None  # when the scheduler gave up on its target pod
    ended: datetime.datetime | None = None
    how: str = ""  # how it ended: succeeded, failed, "cancelled" (deleted), "timed out" (its target pod)
    deleted: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)

    @property
    def final(self) -> bool:
        """Over, as far as the checks count: ended (a moment before KubeVirt writes so), or deleted."""
        return self.ended is not None or self.phase in FINAL or self.deleted.is_set()


@dataclasses.dataclass
class Layout:
    healthy: list[str]
    cordoned: list[str]
    unready: list[str]
    vms: list[Vm]
    cpu: dict[str, str] = dataclasses.field(default_factory=dict)  # node -> CPU generation
    labels: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)  # node -> its labels

    @property
    def nodes(self) -> list[str]:
        return self.healthy + self.cordoned + self.unready


def placement(vm: Vm) -> dict[str, Any]:
    return objects.placement(vm.machine)


def target_selector(layout: Layout, vm: Vm, added: dict[str, str] | None = None) -> dict[str, str]:
    """The nodeSelector of the pod virt-controller would create to migrate `vm` now."""
    return objects.migration_node_selector(placement(vm), vm.selector, layout.labels[vm.node], added)


def plan(vmis: int, apart: int, nodes: int, unready: int, cordoned: int, others: int, seed: int,
         old_cpu: int = 0) -> Layout:
    """Who runs where: `vmis` opted-in VMs of which `apart` run away from their storage, and
    `others` VMs that are not opted in; every disk on its own share-manager. `old_cpu` healthy
    nodes (every fourth) are of the older CPU generation."""
    if nodes - unready - cordoned < 2:
        raise SystemExit("need at least two healthy nodes")
    if not 0 <= apart <= vmis:
        raise SystemExit("--apart must be between 0 and --vmis")
    names = [f"node-{i:03d}" for i in range(nodes)]
    healthy, cordoned_nodes, unready_nodes = (names[:nodes - unready - cordoned],
                                              names[nodes - unready - cordoned:nodes - unready], names[nodes - unready:])
    old = healthy[1::4][:old_cpu] if len(healthy) - min(old_cpu, len(healthy[1::4])) >= 2 else []
    cpu = {n: objects.OLD_CPU if n in old else objects.NEW_CPU for n in names}
    new = [n for n in healthy if n not in old]
    labels = {n: objects.node(n, cpu=cpu[n])["metadata"]["labels"] for n in names}
    rng = random.Random(seed)
    roles: list[str] = []
    for role, share in HELD:
        wanted = max(1, round(apart * share)) if apart >= 8 else 0
        if ((role == ON_CORDONED and not cordoned_nodes) or (role == ON_UNREADY and not unready_nodes)
                or (role == ON_OLDER_CPU and not old)):
            wanted = 0
        roles += [role] * wanted
    roles += [MOVABLE] * (apart - len(roles))
    roles += [CO_LOCATED] * (vmis - apart)
    rng.shuffle(roles)
    roles += [NOT_OPTED_IN] * others
    vms = []
    for i, role in enumerate(roles):
        pool = {ON_CORDONED: cordoned_nodes, ON_UNREADY: unready_nodes, ON_OLDER_CPU: old}.get(role, healthy)
        storage, node, started_on = pool[i % len(pool)], healthy[i % len(healthy)], None
        if role in (MOVABLE, UNMIGRATABLE, OPTED_OUT, ON_CORDONED, ON_UNREADY):
            # Drained off its storage node (uncordoned since, for some): to a node that could take
            # the drain's target pod, one of its own CPU generation or a newer one.
            fits = [n for n in healthy if n != storage and (cpu[storage] == objects.OLD_CPU or cpu[n] == cpu[storage])]
            node, started_on = rng.choice(fits), storage
        elif role == ON_OLDER_CPU:  # started on a newer node (one of two) than the one serving its disk now
            node = new[-1 - i % 2]
        name = f"vm-{i:04d}" if role != NOT_OPTED_IN else f"other-{i:04d}"
        uid = str(uuid.UUID(int=random.Random(f"vmi-{i}").getrandbits(128), version=4))
        vm = Vm(name, f"vms-{i % 10}", uid, role, storage, node, f"virt-launcher-{name}-abcde",
                claim=f"{name}-disk", start=node, machine=objects.machine_type(cpu[started_on or node]))
        launched = objects.launcher_node_selector(placement(vm))
        vm.selector = (launched if started_on is None else
                       objects.migration_node_selector(placement(vm), launched, labels[started_on]))
        vms.append(vm)
    return Layout(healthy, cordoned_nodes, unready_nodes, vms, cpu, labels)


def cluster_objects(layout: Layout, started: datetime.datetime) -> list[dict[str, Any]]:
    """The nodes, and each VM's disk, share-manager, VMI and launcher pod, as the API shows them."""
    found = []
    for name in layout.nodes:
        node = objects.node(name, cpu=layout.cpu[name], allocatable=objects.LARGE_ALLOCATABLE)
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
        found += [objects.pvc(vm.claim, volume, namespace=vm.namespace), objects.pv(vm.claim, volume, namespace=vm.namespace),
                  objects.share_manager(volume, vm.storage), share_manager_pod]
        moved = vm.node != vm.storage and vm.role != ON_OLDER_CPU  # by the drain before the run
        vmi = objects.vmi(vm.name, vm.node, vm.claim, namespace=vm.namespace, uid=vm.uid,
                          opted_in=vm.role != NOT_OPTED_IN, migratable=vm.role != UNMIGRATABLE,
                          keep="false" if vm.role == OPTED_OUT else None, migrated_from=vm.storage if moved else None,
                          migration_end=drained if moved else None, machine=vm.machine)
        found.append(vmi)
        if moved:  # the drain's target pod: the VM's pod since then
            found.append(objects.launcher_pod_of(vmi, vm.node, name=vm.pod, started=drained,
                                                 migration_uid=vmi["status"]["migrationState"]["migrationUid"],
                                                 node_selector=vm.selector))
        else:
            found.append(objects.launcher_pod_of(vmi, vm.node, name=vm.pod, started=long_ago,
                                                 node_selector=vm.selector))
    return found


class Tracker:
    """Every migration as it is created and as it ends; what the keeper promised, checked."""

    def __init__(self, layout: Layout, max_inflight: int, *, outbound: int = OUTBOUND, unplaceable: float = 60.0,
                 drain: bool = False):
        self.layout, self.max_inflight, self.outbound, self.unplaceable = layout, max_inflight, outbound, unplaceable
        self.began = now()
        self.vms = {(vm.namespace, vm.name): vm for vm in layout.vms}
        # Nodes a VM must not be sent to: why, and since when (None: from the start).
        self.unfit: dict[str, tuple[str, datetime.datetime | None]] = {
            **{n: ("cordoned", None) for n in layout.cordoned}, **{n: ("not Ready", None) for n in layout.unready}}
        self.raced: list[str] = []
        self.migrations: dict[tuple[str, str], Migration] = {}
        self.violations: list[str] = []
        self.cannot_place: set[str] = set()  # ours created that the scheduler could not place
        self.over_slots: set[str] = set()  # ours created over a slot limit
        self.peak_ours = self.peak_all = self.peak_running = 0
        self.peak_outbound: collections.Counter[str] = collections.Counter()  # in flight, by the node they leave
        self.created = collections.Counter()  # ours, someone else's
        self.ended = collections.Counter()  # ours: Succeeded, Failed, Cancelled
        opted_in = [vm for vm in layout.vms if vm.role != NOT_OPTED_IN]
        self.held_at_start = collections.Counter(vm.role for vm in opted_in if vm.role not in (MOVABLE, CO_LOCATED))
        self.movable_at_start = sum(1 for vm in opted_in if vm.role == MOVABLE)
        self.drain: dict[str, Any] | None = {} if drain else None  # {} until it starts

    # ----------------------------------------------------------------- the cluster as it is

    def in_flight(self, ours: bool | None = None) -> int:
        return sum(1 for m in self.migrations.values() if not m.final and (ours is None or m.ours == ours))

    def flying(self) -> list[Migration]:
        return [m for m in self.migrations.values() if not m.final]

    def lacks(self, selector: dict[str, str], node: str) -> str | None:
        """The first key of a target pod's nodeSelector the node's labels do not hold, in words."""
        labels = self.layout.labels[node]
        for key, value in sorted(selector.items()):
            if labels.get(key) != value:
                return f"node {node} lacks {key}" + ("" if value == "true" else f"={value}")
        return None

    def placeable(self, vm: Vm, selector: dict[str, str]) -> list[str]:
        """The nodes kube-scheduler could put the VM's migration target pod on now: Ready, not
        cordoned, not the VM's node (the target's anti-affinity), every selected label held."""
        return [n for n in self.layout.nodes
                if n not in self.unfit and n != vm.node and self.lacks(selector, n) is None]

    def scheduler_message(self, vm: Vm, selector: dict[str, str]) -> str:
        """Why no node takes the pod, as kube-scheduler words it (pkg/scheduler/schedule_one.go)."""
        reasons: collections.Counter[str] = collections.Counter()
        for node in self.layout.nodes:
            why = self.unfit.get(node, ("", None))[0]
            if self.lacks(selector, node) is not None:
                reasons["node(s) didn't match Pod's node affinity/selector"] += 1
            elif node == vm.node:
                reasons["node(s) didn't match pod anti-affinity rules"] += 1
            elif why == "not Ready":
                reasons["node(s) had untolerated taint {node.kubernetes.io/unreachable: }"] += 1
            elif why:
                reasons["node(s) were unschedulable"] += 1
        total = len(self.layout.nodes)
        shown = ", ".join(f"{n} {why}" for why, n in sorted(reasons.items()))
        return (f"0/{total} nodes are available: {shown}. preemption: 0/{total} nodes are available: "
                f"{total} Preemption is not helpful for scheduling.")

    def role_of(self, vm: Vm) -> str:
        """What an opted-in VM is to the keeper where it runs now (after a migration not ours)."""
        if vm.role in (NOT_OPTED_IN, UNMIGRATABLE, OPTED_OUT):
            return vm.role
        if vm.storage in self.unfit:
            why, since = self.unfit[vm.storage]
            return AT_START[why] if since is None else LATER[why]
        if vm.node == vm.storage:
            return MOVABLE if vm.role == MOVABLE else CO_LOCATED
        if self.lacks(target_selector(self.layout, vm, {HOSTNAME: vm.storage}), vm.storage) is not None:
            return ON_OLDER_CPU
        return MOVABLE

    # ----------------------------------------------------------------- our promises

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
            other = self.migrations.get((vm.namespace, vm.migrating))
            if other is not None and not other.ours and at - other.created < GRACE:
                raced.append(f"{vm.name}: {other.name} created {(at - other.created).total_seconds() * 1000:.0f} ms "
                             "earlier")
            else:
                violated(f"{vm.name} has a migration in flight already ({vm.migrating})")
        elif vm.ours and vm.failed_at is None:
            violated(f"{vm.name} is migrated a second time ({', '.join(vm.ours)} before)")
        elif vm.failed_at is not None and at - vm.failed_at < BACKOFF:
            violated(f"{vm.name} is migrated again {int((at - vm.failed_at).total_seconds())}s after a failure")
        if vm.node == vm.storage:
            violated(f"{vm.name} already runs on {vm.storage}, where its disk is served")
        selector = spec.get("addedNodeSelector") or {}
        target = next((n for n in self.layout.nodes if selector.get(HOSTNAME) == n and len(selector) == 1), None)
        if target is None:
            violated(f"not targeted at one node: addedNodeSelector {selector}")
        elif target in self.unfit:
            why, since = self.unfit[target]
            if since is None or at - since >= GRACE:
                violated(f"{CANNOT_PLACE}: targets {target}, which is {why}")
            else:
                raced.append(f"targets {target}, {why} {(at - since).total_seconds() * 1000:.0f} ms earlier")
        elif (lacking := self.lacks(target_selector(self.layout, vm, selector), target)) is not None:
            violated(f"{CANNOT_PLACE}: {lacking}, which its target pod selects")
        elif target != vm.storage:
            violated(f"targets {target}, but the disk of {vm.name} is served from {vm.storage}")
        # The slots KubeVirt has: what the keeper could see in flight (its own, and the others' created
        # GRACE ago or more).
        for flying, limit, what in (
                ([m for m in self.flying() if m.vm.node == vm.node], self.outbound,
                 f"per-node slot limit: {{}} migrations in flight from {vm.node} (KubeVirt runs {self.outbound})"),
                (self.flying(), PARALLEL, f"cluster-wide slot limit: {{}} migrations in flight (KubeVirt runs {PARALLEL})")):
            seen = [m for m in flying if m.ours or at - m.created >= GRACE]
            if len(seen) >= limit:
                violated(f"{OVER_SLOTS} " + what.format(len(seen)))
            elif len(flying) >= limit:
                raced.append(what.format(len(flying)) + f", {len(flying) - len(seen)} created within "
                             f"{GRACE.total_seconds():g} s")
        return vm, broken, raced

    def record(self, migration: str, broken: list[str], raced: list[str]) -> None:
        self.violations += [f"{migration}: {what}" for what in broken]
        self.raced += [f"{migration}: {what}" for what in raced]
        if any(what.startswith(CANNOT_PLACE) or f"must be left alone ({ON_OLDER_CPU})" in what for what in broken):
            self.cannot_place.add(migration)
        if any(what.startswith(OVER_SLOTS) for what in broken):
            self.over_slots.add(migration)

    def added(self, migration: Migration) -> None:
        self.migrations[(migration.namespace, migration.name)] = migration
        migration.vm.migrating = migration.name
        if migration.ours:
            migration.vm.ours.append(migration.name)
        self.created[migration.ours] += 1
        self.peak_ours = max(self.peak_ours, self.in_flight(ours=True))
        self.peak_all = max(self.peak_all, self.in_flight())
        node = migration.vm.node
        self.peak_outbound[node] = max(self.peak_outbound[node], sum(1 for m in self.flying() if m.vm.node == node))
        if self.drain and migration.evacuation:
            self.drain["created"] += 1

    def deleted(self, migration: Migration, at: datetime.datetime) -> None:
        """A migration deleted through the API (the keeper cancelling one of ours): only one of ours
        whose target pod the scheduler has not placed for `unplaceable` seconds (the stamps it
        reads have whole seconds: one second less will do)."""
        name = f"{migration.namespace}/{migration.name}"
        if not migration.ours:
            self.violations.append(f"{name}: deleted, and it is not ours")
        elif migration.unschedulable is None:
            self.violations.append(f"{name}: cancelled, and its target pod was not unschedulable")
        elif (waited := (at - migration.unschedulable).total_seconds()) < self.unplaceable - 1:
            self.violations.append(f"{name}: cancelled {waited:.1f} s after its target pod became unschedulable "
                                   f"(not before {self.unplaceable:g} s)")
        self.ended_now(migration, "cancelled", at)

    def ended_now(self, migration: Migration, how: str, at: datetime.datetime) -> None:
        """The migration is over (`how`: succeeded, failed, cancelled, timed out): its VM is free."""
        if migration.ended is not None:
            return
        migration.ended, migration.how = at, how
        vm = migration.vm
        if vm.migrating == migration.name:
            vm.migrating = None
        if migration.ours:
            self.ended[{"succeeded": "Succeeded", "cancelled": "Cancelled"}.get(how, "Failed")] += 1
            if how != "succeeded":
                vm.failed_at = at
        elif how == "succeeded" and vm.role != NOT_OPTED_IN:
            # Moved by someone else (the drain): expected where it is now, and judged again there.
            vm.start, vm.evacuated = vm.node, vm.evacuated or migration.evacuation
            role = self.role_of(vm)
            if role != vm.role and vm.role == MOVABLE:
                vm.held_since = at
            if migration.evacuation and vm.role == MOVABLE and vm.node == vm.storage:
                vm.back_by_drain = True
            vm.role = role
        if self.drain and migration.evacuation:
            self.drain["completed" if how == "succeeded" else "failed"] += 1

    # ----------------------------------------------------------------- nodes lost, the drain

    def kept(self) -> set[str]:
        """Nodes never lost nor drained: those VMs held by their CPU alone run on or have their disks
        on (only the CPU holds them, with the pod they started with: a keeper blind to it shows)."""
        return {n for vm in self.layout.vms if vm.role == ON_OLDER_CPU for n in (vm.storage, vm.node)}

    def nodes_to_lose(self, first: str | None) -> list[tuple[str, str]]:
        """Two healthy nodes: one to cordon (`first`, the target of the migration of ours just
        created, when it is healthy), one to lose Ready (the one serving the disks of the most
        movable VMs still apart). None when fewer than four healthy nodes are left."""
        healthy = [n for n in self.layout.healthy if n not in self.unfit and n not in self.kept()]
        if len(healthy) < 4:
            return []
        waiting = collections.Counter(vm.storage for vm in self.layout.vms
                                      if vm.role == MOVABLE and vm.node != vm.storage and vm.migrating is None)
        chosen = sorted(healthy, key=lambda n: (-waiting[n], n))
        if first in healthy:
            chosen = [first] + [n for n in chosen if n != first]
        return [(chosen[0], "cordoned"), (chosen[1], "not Ready")]

    def node_to_drain(self) -> str | None:
        """A healthy node with the most movable VMs waiting on it (the keeper wants its outbound
        slots too), then the most VMs. None when fewer than three healthy nodes are left."""
        healthy = [n for n in self.layout.healthy if n not in self.unfit and n not in self.kept()]
        if len(healthy) < 3:
            return None
        on = collections.Counter(vm.node for vm in self.layout.vms)
        waiting = collections.Counter(vm.node for vm in self.layout.vms
                                      if vm.role == MOVABLE and vm.node != vm.storage and vm.migrating is None)
        return sorted(healthy, key=lambda n: (-waiting[n], -on[n], n))[0]

    def lost(self, node: str, why: str, at: datetime.datetime) -> None:
        """From now on `node` is off limits, and the VMs waiting to go there stay where they are."""
        self.unfit[node] = (why, at)
        for vm in self.layout.vms:
            if vm.role == MOVABLE and vm.storage == node and vm.node != vm.storage and vm.migrating is None:
                vm.role, vm.held_since = LATER[why], at

    def quiet(self) -> bool:
        """Nothing of ours left to do, the drain aside."""
        return self.in_flight(ours=True) == 0 and not any(
            vm.role == MOVABLE and vm.node != vm.storage and vm.failed_at is None for vm in self.layout.vms)

    # ----------------------------------------------------------------- the figures

    def report(self, final: bool = False) -> dict[str, Any]:
        opted_in = [vm for vm in self.layout.vms if vm.role != NOT_OPTED_IN]
        movable = [vm for vm in opted_in if vm.role == MOVABLE]
        back = [vm for vm in movable if vm.node == vm.storage]
        failed = [vm for vm in movable if vm.node != vm.storage and vm.failed_at is not None]
        violations = list(self.violations)
        left = [vm for vm in movable if vm.node != vm.storage and vm.failed_at is None]
        drain_done = self.drain is None or self.drain.get("done") is not None
        if final:
            violations += [f"{vm.namespace}/{vm.name} was not brought back to {vm.storage}" for vm in left]
            violations += [f"{vm.namespace}/{vm.name} ({vm.role}) was moved from {vm.start} to {vm.node}"
                           for vm in opted_in if vm.role != MOVABLE and vm.node != vm.start]
        held = collections.Counter(vm.role for vm in opted_in if vm.role not in (MOVABLE, CO_LOCATED))
        unplaceable = [{"name": m.name, "since": (m.unschedulable - self.began).total_seconds(), "how": m.how,
                        "after": (m.ended - m.unschedulable).total_seconds() if m.ended else None}
                       for m in self.migrations.values() if m.ours and m.unschedulable is not None]
        drain = None
        if self.drain:
            drain = dict(self.drain)
            node = drain["node"]
            drain["peak_outbound"] = self.peak_outbound[node]
            drain["left_on_it"] = sum(1 for vm in self.layout.vms if vm.node == node)
            evacuated = [vm for vm in opted_in if vm.evacuated]
            drain["evacuated"] = len(evacuated)
            drain["evacuated_roles"] = dict(collections.Counter(vm.role for vm in evacuated))
            drain["back_by_drain"] = sum(1 for vm in evacuated if vm.back_by_drain)
        return {
            "vmis": len(opted_in), "not_opted_in": len(self.layout.vms) - len(opted_in),
            "nodes": {"healthy": len(self.layout.healthy), "cordoned": len(self.layout.cordoned),
                      "unready": len(self.layout.unready)},
            "cpu_nodes": dict(collections.Counter(self.layout.cpu.values())),
            "machines": dict(collections.Counter(vm.machine for vm in opted_in)),
            "apart_at_start": self.movable_at_start + sum(self.held_at_start.values()),
            "movable_at_start": self.movable_at_start, "held_at_start": dict(self.held_at_start),
            "movable": len(movable), "held": dict(held),
            "created": self.created[True], "foreign_created": self.created[False],
            "succeeded": self.ended["Succeeded"], "failed": self.ended["Failed"], "cancelled": self.ended["Cancelled"],
            "brought_back": len(back), "failed_apart": len(failed), "left_apart": len(left),
            "peak_in_flight_ours": self.peak_ours, "peak_in_flight_all": self.peak_all,
            "peak_running": self.peak_running, "peak_outbound": max(self.peak_outbound.values(), default=0),
            "in_flight_ours": self.in_flight(ours=True), "in_flight_all": self.in_flight(),
            "settled": not left and self.in_flight(ours=True) == 0 and drain_done,
            "lost_nodes": {n: why for n, (why, since) in self.unfit.items() if since is not None},
            "cannot_place": len(self.cannot_place), "over_slots": len(self.over_slots),
            "outbound_limit": self.outbound, "parallel": PARALLEL, "unplaceable_limit": self.unplaceable,
            "unplaceable": unplaceable,
            "foreign_unplaceable": sum(1 for m in self.migrations.values() if not m.ours and m.unschedulable),
            "drain": drain,
            "raced": self.raced,
            "violations": violations,
        }


class Slots:
    """virt-controller's throttle (pkg/virt-controller/watch/migration/migration.go): a pending
    migration gets its target pod once fewer than PARALLEL migrations run and fewer than
    `per_node` leave its VM's node (`outboundMigrationsOnNode`); the waiting ones by
    spec.priority, then age. A migration runs from its target pod to its end."""

    def __init__(self, per_node: int):
        self.per_node = per_node
        self.running: list[Migration] = []
        self.waiting: list[tuple[int, int, Migration, asyncio.Future[bool]]] = []
        self.order = itertools.count()

    async def acquire(self, migration: Migration) -> bool:
        """True once it may start; False when it was deleted while it waited."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.waiting.append((PRIORITY_RANK.get(migration.priority, 1), next(self.order), migration, future))
        self.dispatch()
        return await future

    def release(self, migration: Migration) -> None:
        if migration in self.running:
            self.running.remove(migration)
        self.dispatch()

    def abort(self, migration: Migration) -> None:
        for entry in [e for e in self.waiting if e[2] is migration]:
            self.waiting.remove(entry)
            if not entry[3].done():
                entry[3].set_result(False)

    def dispatch(self) -> None:
        self.waiting.sort(key=lambda e: e[:2])
        for entry in list(self.waiting):
            if len(self.running) >= PARALLEL:
                return
            migration = entry[2]
            source = migration.vm.node
            if sum(1 for m in self.running if m.vm.node == source) >= self.per_node:
                continue
            migration.source = source
            self.running.append(migration)
            self.waiting.remove(entry)
            if not entry[3].done():
                entry[3].set_result(True)


class KubeVirt:
    """virt-controller, virt-handler and the evacuation controller as far as the keeper can tell:
    each migration run through its phases under virt-controller's throttle, its target pod
    placed or left unschedulable, the VMI and its pods moved at the end; a node drained."""

    def __init__(self, api: SimulatedCluster, tracker: Tracker, *, delay: tuple[float, float], fail_every: int,
                 foreign: int, seed: int, lose_nodes_after: int = 0, drain_after: int = 0):
        self.api, self.tracker = api, tracker
        self.lose_nodes_after = lose_nodes_after  # of our migrations created; 0: never
        self.drain_after = drain_after  # of our migrations created, or once the keeper is done; 0: never
        self.delay, self.fail_every, self.foreign = delay, fail_every, foreign
        self.rng = random.Random(seed)
        self.slots = Slots(tracker.outbound)
        self.ended = asyncio.Event()  # a migration ended: the evacuation controller looks again
        self.tasks: set[asyncio.Task[None]] = set()
        self.ours_made = 0
        self.nodes_lost = False

    def start(self, manifest: dict[str, Any], vm: Vm | None) -> None:
        """Our migration was stored: run it."""
        if vm is None:
            return
        meta, spec = manifest["metadata"], manifest.get("spec") or {}
        selector = spec.get("addedNodeSelector") or {}
        self.ours_made += 1
        timeout = (meta.get("annotations") or {}).get(UNSCHEDULABLE_TIMEOUT)
        migration = Migration(meta["name"], meta["namespace"], vm, True, selector.get(HOSTNAME),
                              fail=bool(self.fail_every) and self.ours_made % self.fail_every == 0,
                              uid=meta.get("uid") or str(uuid.uuid4()), priority=spec.get("priority"),
                              timeout=int(timeout) if str(timeout or "").isdigit() else DEFAULT_UNSCHEDULABLE_TIMEOUT)
        if (self.lose_nodes_after and not self.nodes_lost and self.ours_made >= self.lose_nodes_after
                and migration.target not in self.tracker.kept()):
            migration.lose_nodes = self.nodes_lost = True
        self.tracker.added(migration)
        self._spawn(self.run(migration))

    def deleted(self, namespace: str, name: str) -> None:
        """A migration was deleted through the API: virt-controller aborts it (the run tears it down)."""
        migration = self.tracker.migrations.get((namespace, name))
        if migration is None or migration.final:
            return
        self.tracker.deleted(migration, now())
        migration.deleted.set()
        self.slots.abort(migration)

    async def lose_nodes(self, first: str | None) -> None:
        """While the keeper works: one node is cordoned (an admin starts another drain), another
        stops posting status (its kubelet is down)."""
        for node, why in self.tracker.nodes_to_lose(first):
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
        change: dict[str, Any] = {"status": {"phase": phase, "phaseTransitionTimestamps": list(migration.transitions),
                                             **status}}
        if phase == "Pending":  # virt-controller's first look: its finalizer, label and annotations
            change["metadata"] = {"finalizers": [FINALIZER], "labels": {"kubevirt.io/vmi-name": migration.vm.name},
                                  "annotations": {"kubevirt.io/latest-observed-api-version": "v1",
                                                  "kubevirt.io/storage-observed-api-version": "v1"}}
        await self.api.change(VMIM, migration.namespace, migration.name, change)

    async def _waited(self, migration: Migration, seconds: float) -> bool:
        """Sleep, unless the migration is deleted meanwhile (True then)."""
        try:
            await asyncio.wait_for(migration.deleted.wait(), max(0.0, seconds))
        except TimeoutError:
            return migration.deleted.is_set()
        return True

    async def run(self, migration: Migration) -> None:
        try:
            if migration.lose_nodes:  # an admin cordons the node this one is heading to, as it starts
                await self.lose_nodes(migration.target)
            await self.phase(migration, "Pending")
            if not await self.slots.acquire(migration):
                await self._torn_down(migration, None, False)
                return
            self.tracker.peak_running = max(self.tracker.peak_running, len(self.slots.running))
            try:
                await self._migrate(migration)
            finally:
                self.slots.release(migration)
                self.ended.set()
        except Exception as exc:  # a broken simulation must show, not hang the run
            self.tracker.violations.append(f"simulation error in {migration.name}: {type(exc).__name__}: {exc}")
            raise

    def _vmi_of(self, vm: Vm) -> dict[str, Any]:
        """What the target pod is made from (its selector aside)."""
        return {"metadata": {"uid": vm.uid, "name": vm.name, "namespace": vm.namespace,
                             "annotations": {} if vm.role == NOT_OPTED_IN else {"kubevirt-scheduler/co-schedule": "true"}},
                "spec": {"volumes": [{"name": "disk0", "persistentVolumeClaim": {"claimName": vm.claim}}]}}

    async def _migrate(self, migration: Migration) -> None:
        vm, tracker = migration.vm, self.tracker
        total = self.rng.uniform(*self.delay)
        step = total * 0.05
        source = vm.node
        selector = target_selector(tracker.layout, vm, {HOSTNAME: migration.target} if migration.ours else None)
        if migration.ours:
            target = migration.target if migration.target in tracker.placeable(vm, selector) else None
        else:
            fits = tracker.placeable(vm, selector)
            target = migration.target = self.rng.choice(fits) if fits else None
        started = stamp()
        target_pod = f"virt-launcher-{vm.name}-{migration.uid[:5]}"
        await self.phase(migration, "Scheduling")
        pod = objects.launcher_pod_of(self._vmi_of(vm), target or source, name=target_pod, started=stamp(),
                                      migration_uid=migration.uid, node_selector=selector)
        if target is None:
            await self._unschedulable(migration, pod, selector)
            return
        await self.api.add(POD, pod)
        for phase in ("Scheduled", "PreparingTarget", "TargetReady"):
            if await self._waited(migration, step):
                await self._torn_down(migration, target_pod, False)
                return
            await self.phase(migration, phase)
        state = {"migrationUid": migration.uid, "sourceNode": source, "targetNode": target, "targetPod": target_pod,
                 "startTimestamp": started, "completed": False, "failed": False, "mode": "PreCopy",
                 "endTimestamp": None}
        await self.api.change(VMI, vm.namespace, vm.name, {"status": {"migrationState": state}})
        await self.phase(migration, "Running")
        if await self._waited(migration, total - 4 * step):
            await self._torn_down(migration, target_pod, True)
            return
        ended = stamp()
        if migration.fail:
            tracker.ended_now(migration, "failed", now())
            await self.api.change(VMI, vm.namespace, vm.name, {"status": {"migrationState": {
                "failed": True, "endTimestamp": ended}}})
            await self.api.change(POD, vm.namespace, target_pod, {"status": {"phase": "Failed"}})
            await self.phase(migration, "Failed", migrationState={"endTimestamp": ended})
            return
        # virt-handler reports the end on the VMI, virt-controller moves it and finishes the migration.
        old_pod, vm.node, vm.pod, vm.selector = vm.pod, target, target_pod, selector
        tracker.ended_now(migration, "succeeded", now())
        await self.api.change(VMI, vm.namespace, vm.name, {
            "metadata": {"labels": {"kubevirt.io/nodeName": target}},
            "status": {"nodeName": target, "activePods": {pod["metadata"]["uid"]: target}, "evacuationNodeName": None,
                       "migrationState": {"completed": True, "endTimestamp": ended}}})
        await self.api.change(POD, vm.namespace, old_pod, {"status": {"phase": "Succeeded"}})
        await self.phase(migration, "Succeeded", migrationState={"endTimestamp": ended})

    async def _unschedulable(self, migration: Migration, pod: dict[str, Any], selector: dict[str, str]) -> None:
        """kube-scheduler cannot place the target pod: it stays Pending, Unschedulable, until
        virt-controller deletes it (its timeout, from the pod's creation, in whole seconds: the
        migration fails) or the migration is deleted."""
        vm, tracker = migration.vm, self.tracker
        name = pod["metadata"]["name"]
        del pod["spec"]["nodeName"]  # (its kubevirt.io/nodeName label names the source, as virt-controller's does)
        created = now()
        pod["metadata"]["creationTimestamp"] = stamp(created)
        pod["status"] = {"phase": "Pending", "qosClass": "Burstable"}
        await self.api.add(POD, pod)
        if await self._waited(migration, SCHEDULING):
            await self._torn_down(migration, name, False)
            return
        migration.unschedulable = at = now()
        await self.api.change(POD, vm.namespace, name, {"status": {"conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastProbeTime": None,
             "lastTransitionTime": stamp(at), "message": tracker.scheduler_message(vm, selector)}]}})
        deadline = created.replace(microsecond=0) + datetime.timedelta(seconds=migration.timeout)
        if await self._waited(migration, (deadline - now()).total_seconds()):
            await self._torn_down(migration, name, False)
            return
        tracker.ended_now(migration, "timed out", now())
        await self.api.remove(POD, vm.namespace, name)  # "unschedulable pod timeout period exceeded"
        await self.phase(migration, "Failed", migrationState={"endTimestamp": stamp()})

    async def _torn_down(self, migration: Migration, target_pod: str | None, handed_off: bool) -> None:
        """The migration was deleted: virt-controller deletes its target pod, aborts it on the
        VMI once handed off to virt-handler, marks it Failed and removes its finalizer."""
        vm = migration.vm
        ended = stamp()
        if target_pod is not None:
            await self.api.remove(POD, vm.namespace, target_pod)
        if handed_off:
            await self.api.change(VMI, vm.namespace, vm.name, {"status": {"migrationState": {
                "abortStatus": "Succeeded", "failed": True, "endTimestamp": ended}}})
        migration.transitions.append({"phase": "Failed", "phaseTransitionTimestamp": ended})
        await self.api.change(VMIM, migration.namespace, migration.name, {"status": {
            "phase": "Failed", "phaseTransitionTimestamps": list(migration.transitions)}})
        await self.api.remove(VMIM, migration.namespace, migration.name)

    async def someone_else(self) -> None:
        """Another controller (a descheduler, the workload updater) migrating VMs that are not opted in."""
        others = [vm for vm in self.tracker.layout.vms if vm.role == NOT_OPTED_IN]
        while others:
            vm = self.rng.choice([o for o in others if o.migrating is None] or others)
            if vm.migrating is not None or not self.tracker.placeable(vm, target_selector(self.tracker.layout, vm)):
                await asyncio.sleep(0.05)
                continue
            name, uid = f"{vm.name}-upd-{self.rng.randrange(16 ** 5):05x}", str(uuid.uuid4())
            migration = Migration(name, vm.namespace, vm, False, None, uid=uid)
            await self.api.add(VMIM, {
                "apiVersion": VMIM.api_version, "kind": VMIM.kind,
                "metadata": {"name": name, "namespace": vm.namespace, "uid": uid, "creationTimestamp": stamp(),
                             "labels": {"kubevirt.io/vmi-name": vm.name}},
                "spec": {"vmiName": vm.name}})
            self.tracker.added(migration)
            await self.run(migration)
            await asyncio.sleep(self.rng.uniform(0.0, 0.1))

    async def drain_when_due(self) -> None:
        """The drain, once `drain_after` migrations of ours were created or the keeper is done."""
        while self.ours_made < self.drain_after and not self.tracker.quiet():
            await asyncio.sleep(0.05)
        await self.drain()

    async def drain(self) -> None:
        """`kubectl drain` of one healthy node: cordoned, each VMI on it marked for evacuation
        (virt-api's eviction webhook), and KubeVirt's evacuation controller creating a migration
        for each live-migratable one without one, no more at a time than leaves the cluster-wide
        count of unfinished migrations at PARALLEL (it leaves the rest of the throttling to the
        migration controller), until none is left on the node."""
        tracker = self.tracker
        node = tracker.node_to_drain()
        if node is None:
            tracker.drain = None
            return
        began = now()
        on_it = [vm for vm in tracker.layout.vms if vm.node == node]
        tracker.drain = {"node": node, "at": (began - tracker.began).total_seconds(), "vms": len(on_it),
                         "created": 0, "completed": 0, "failed": 0, "done": None}
        await self.api.change(NODE, None, node, {"spec": {"unschedulable": True, "taints": [
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": stamp()}]}})
        tracker.lost(node, "drained", began)
        for vm in on_it:
            await self.api.change(VMI, vm.namespace, vm.name, {"status": {"evacuationNodeName": node}})
        letters = string.ascii_lowercase + string.digits
        while True:
            self.ended.clear()
            candidates = [vm for vm in tracker.layout.vms
                          if vm.node == node and vm.role != UNMIGRATABLE and vm.migrating is None]
            evacuating = [m for m in tracker.flying() if m.evacuation]
            if not candidates and not evacuating:
                break
            for vm in candidates[:max(0, PARALLEL - tracker.in_flight())]:
                name = EVACUATION + "".join(self.rng.choice(letters) for _ in range(5))
                migration = Migration(name, vm.namespace, vm, False, None, uid=str(uuid.uuid4()),
                                      priority="system-critical", evacuation=True)
                await self.api.add(VMIM, {
                    "apiVersion": VMIM.api_version, "kind": VMIM.kind,
                    "metadata": {"name": name, "namespace": vm.namespace, "uid": migration.uid,
                                 "generateName": EVACUATION, "creationTimestamp": stamp()},
                    "spec": {"vmiName": vm.name, "priority": "system-critical"}})
                tracker.added(migration)
                self._spawn(self.run(migration))
            try:
                await asyncio.wait_for(self.ended.wait(), EVACUATION_RESYNC)
            except TimeoutError:
                pass
        tracker.drain["done"] = (now() - began).total_seconds()

    def run_others(self) -> None:
        for _ in range(self.foreign):
            self._spawn(self.someone_else())
        if self.drain_after:
            self._spawn(self.drain_when_due())


class SimulatedCluster(Apiserver):
    """The apiserver with KubeVirt in it: each migration of ours checked as it is created, then
    run; a migration deleted, aborted."""

    def __init__(self) -> None:
        super().__init__()
        self.kubevirt: KubeVirt | None = None
        self.tracker: Tracker | None = None
        self.watch_lag = 0.0  # seconds VMI and pod changes take to reach the watches (reads see them at once)
        self.lagging = {self.at(VMI), self.at(POD)}
        self.late: asyncio.Queue[tuple[float, Any, dict[str, Any]]] | None = None

    async def answer(self, call: Any) -> Any:
        resource, method = call.resource, str(call.method).upper()
        if (resource is None or resource.plural != VMIM.plural or self.tracker is None or self.kubevirt is None
                or call.params.get("dryRun") == "All"):
            return await super().answer(call)
        if method == "DELETE" and call.name:
            answer = await super().answer(call)
            self.kubevirt.deleted(call.namespace, call.name)
            return answer
        if method != "POST" or not isinstance(call.data, dict):
            return await super().answer(call)
        metadata = call.data.get("metadata") or {}
        if (metadata.get("labels") or {}).get(MANAGED_BY) != OURS:
            return await super().answer(call)
        vm, broken, raced = self.tracker.check(call.data, now())
        try:
            answer = await super().answer(call)
        finally:
            self.tracker.record(f"{metadata.get('namespace')}/{metadata.get('name') or metadata.get('generateName')}",
                                broken, raced)
        self.kubevirt.start(call.data, vm)
        return answer

    @staticmethod
    def at(resource: Resource, namespace: str | None = None, name: str = "") -> tuple[Any, str | None, str]:
        return kmock.resource(resource.group, resource.version, resource.plural), namespace, name

    async def tell(self, resource: Any, event: dict[str, Any]) -> None:
        if resource in self.lagging and self.watch_lag:
            await self.lagged().put((asyncio.get_running_loop().time() + self.watch_lag, resource, event))
        else:
            await super().tell(resource, event)

    async def add(self, resource: Resource, obj: dict[str, Any]) -> None:
        """Store a new object and tell the watches, as a create through the API does."""
        async with self.lock:
            await self.insert(self.at(resource, obj["metadata"].get("namespace"), obj["metadata"]["name"]), obj)

    async def change(self, resource: Resource, namespace: str | None, name: str, patch: dict[str, Any]) -> None:
        """Merge `patch` into a stored object, a new resourceVersion, and tell the watches, as a PATCH
        through the API does. An object deleted meanwhile stays deleted."""
        key = self.at(resource, namespace, name)
        async with self.lock:
            if self.stored(key) is not None:
                version = {"resourceVersion": str(next(self.versions))}
                await self.merge(key, {**patch, "metadata": {**(patch.get("metadata") or {}), **version}})

    async def remove(self, resource: Resource, namespace: str | None, name: str) -> None:
        """Delete a stored object (its finalizers, if any, removed) and tell the watches."""
        key = self.at(resource, namespace, name)
        async with self.lock:
            if self.stored(key) is not None:
                self.objects[key].patch({"metadata": {"finalizers": [], "resourceVersion": str(next(self.versions))}})
                await self.drop(key)

    def lagged(self) -> asyncio.Queue[tuple[float, Any, dict[str, Any]]]:
        """Events that reach the watches late, in order: an apiserver whose watch cache of one
        resource falls behind the others."""
        if self.late is None:
            late = self.late = asyncio.Queue()

            async def deliver() -> None:
                loop = asyncio.get_running_loop()
                while True:
                    due, resource, event = await late.get()
                    await asyncio.sleep(max(0.0, due - loop.time()))
                    async with self.lock:
                        await self.buses[resource].put(event)

            self.delivery = asyncio.create_task(deliver())
        return self.late


async def serve(args: argparse.Namespace) -> None:
    started = now()
    layout = plan(args.vmis, args.apart, args.nodes, args.unready_nodes, args.cordoned_nodes,
                  max(4, 2 * args.foreign) if args.foreign else 0, args.seed, old_cpu=args.old_cpu_nodes)
    tracker = Tracker(layout, args.max_inflight, outbound=args.outbound_per_node, unplaceable=args.unplaceable,
                      drain=args.drain)
    api = SimulatedCluster()
    emulator = Emulator(api, paginate=False)
    for resource in (VMI, VMIM, LEASE, EVENT):
        api.resources[resource] = {}
        emulator.by_kind[(resource.api_version, resource.kind)] = resource
    for obj in cluster_objects(layout, started):
        emulator.put(obj)
    movable = tracker.movable_at_start
    lose_after = max(1, movable // 3) if args.lose_nodes else 0
    kubevirt = KubeVirt(api, tracker, delay=(args.delay_min, args.delay_max), fail_every=args.fail_every,
                        foreign=args.foreign, seed=args.seed, lose_nodes_after=lose_after,
                        drain_after=max(lose_after + 1, movable // 2) if args.drain else 0)
    api.tracker, api.kubevirt, api.watch_lag = tracker, kubevirt, args.watch_lag

    async def report(request: web.Request) -> web.Response:
        return web.json_response(tracker.report(final=request.query.get("final") == "1"))

    async def others(request: web.Request) -> web.Response:
        tracker.began = now()
        kubevirt.run_others()  # once the keeper watches: its first view is the drained cluster
        return web.json_response({"foreign": args.foreign})

    app = web.Application()
    app.router.add_get("/report", report)
    app.router.add_post("/others", others)
    server = await serve_api(api)
    control = await control_site(app)
    print(f"{url(server)} {url(control)}", flush=True)
    try:
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the parent closes stdin
    finally:
        for task in list(kubevirt.tasks):
            task.cancel()
        await control.cleanup()
        await server.cleanup()


def add_layout_flags(parser: argparse.ArgumentParser) -> None:
    """The simulated cluster's flags, shared with `python -m bench.keeper`."""
    parser.add_argument("--vmis", type=int, default=500, help="running opted-in VMIs (default 500)")
    parser.add_argument("--apart", type=int, default=200, help="of them apart from their storage at start (default 200)")
    parser.add_argument("--nodes", type=int, default=20, help="nodes (default 20)")
    parser.add_argument("--unready-nodes", type=int, default=2, help="of them not Ready (default 2)")
    parser.add_argument("--cordoned-nodes", type=int, default=2, help="of them cordoned (default 2)")
    parser.add_argument("--old-cpu-nodes", type=int, default=4,
                        help=f"healthy nodes of an older CPU generation ({objects.OLD_CPU}, an older QEMU; the "
                             f"others {objects.NEW_CPU}) (default 4)")
    parser.add_argument("--delay-min", type=float, default=0.2, help="seconds a migration takes, at least (default 0.2)")
    parser.add_argument("--delay-max", type=float, default=0.5, help="at most (default 0.5)")
    parser.add_argument("--fail-every", type=int, default=20, metavar="K",
                        help="every K-th migration of ours fails (default 20; 0: none)")
    parser.add_argument("--foreign", type=int, default=3,
                        help="migrations of VMs not opted in that someone else keeps under way (default 3)")
    parser.add_argument("--lose-nodes", action=argparse.BooleanOptionalAction, default=True,
                        help="a third of the way, cordon the node the migration of ours just created targets, "
                             "and take Ready from another (default on)")
    parser.add_argument("--drain", action=argparse.BooleanOptionalAction, default=True,
                        help="halfway (or once the keeper is done), drain a healthy node: KubeVirt evacuates its "
                             "VMs (default on)")
    parser.add_argument("--watch-lag", type=float, default=0.3, metavar="SECONDS",
                        help="changes of VMIs and pods reach the watches this late, of migrations at once "
                             "(default 0.3)")
    parser.add_argument("--max-inflight", type=int, default=2, help="the keeper's --keep-max-inflight (default 2)")
    parser.add_argument("--outbound-per-node", type=int, default=OUTBOUND,
                        help=f"KubeVirt's parallelOutboundMigrationsPerNode, and the keeper's "
                             f"--keep-max-outbound-per-node (default {OUTBOUND})")
    parser.add_argument("--unplaceable", type=float, default=60.0, metavar="SECONDS",
                        help="the keeper cancels a migration of ours whose target pod stays unschedulable this long "
                             "(its KeeperTiming.unplaceable; default 60)")
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
