"""A cluster after a drain, with KubeVirt played on the emulator, for the keeper's benchmark.

Runs in a process of its own (`python -m bench.kubevirt`, started by `python -m bench.keeper`):
kubefake's apiserver serving nodes (some unready, some cordoned; `--old-cpu-nodes` of an older
CPU generation, Broadwell-IBRS among Skylake-Client-IBRS, with an older QEMU), a Longhorn RWX disk per VM (PVC,
PV, ShareManager, share-manager pod) and running opted-in VMIs with their launcher pods, some of
them apart from their storage as a drain leaves them. Each node carries virt-handler's node
labeller labels; each VMI a host-model CPU, machine type q35 and the canonical machine type of
the node it started on; each launcher pod the nodeSelector virt-controller renders (a drain's
target pod also the CPU model, features and vendor of the node it left, and the canonical
machine type). Which apart VMs the keeper may move, at the start and whenever the cluster changes,
is the keeper's own decision (`rules.keeping.keep.decide_keep`, over the simulation's state, in a
pass where no wait or limit holds anything: `Tracker.role_of`): not those whose
storage is on an unready or cordoned node, that are not live-migratable, that are annotated
`kubevirt-scheduler/keep: "false"`, or whose migration target the storage node cannot take (a
VM started on a newer CPU generation than the node serving its disk: storage on an older CPU
generation).

KubeVirt is played as the keeper reads it. A migration goes Pending; virt-controller gives it a
target pod once fewer than `parallelMigrationsPerCluster` (5) run and fewer than
`--outbound-per-node` (`parallelOutboundMigrationsPerNode`, 2) leave its VM's node, the waiting
ones by spec.priority (system-critical first, system-maintenance last), then age. The target
pod is built as virt-controller builds it (`objects.migration_node_selector`: machine type,
host-model CPU, vendor, addedNodeSelector; its required anti-affinity to the VMI's own pods),
goes through the webhook as the apiserver admits it (`Admission`: `webhook.admission.admit.admit`
in this process, over the cluster as it is at that moment, its patch applied) and is placed by a
simulated kube-scheduler (`kubefake.scheduler`: taints and cordons, nodeSelector, required node
affinity, room, anti-affinity; the preferred terms by weight, then the node with most room;
independent of the webhook's own checks). Placed: Scheduling, Scheduled, PreparingTarget,
TargetReady, Running (the VMI's migrationState), and after a delay Succeeded (the VMI on the
target node, migrationState ended, the source pod Succeeded) or, every `--fail-every`-th of
ours, Failed (the target pod Failed, the VMI stays). Not placed: the target pod stays Pending,
PodScheduled False with reason Unschedulable and the scheduler's message, until virt-controller
deletes it once it has been pending `kubevirt.io/migrationUnschedulablePodTimeoutSeconds` (the
migration's annotation, default 300; the migration fails), or until the migration is deleted
(`virtctl migrate-cancel`, the keeper): virt-controller holds it with its finalizer, deletes the
target pod, marks it Failed and lets it go. A migration of ours deleted is checked: its target
pod unschedulable for `--unplaceable` seconds first. Every target pod goes through the webhook,
which must leave it untouched. Changes of VMIs and pods reach the
watches `--watch-lag` late, those of migrations at once (an apiserver keeps a watch cache per
resource; under load one falls behind). Someone else keeps `--foreign` migrations of VMs that
are not opted in under way. A third of the way through, the node the migration of ours just
created targets is cordoned (that migration's target pod cannot be placed: the keeper must
cancel it) and another node loses Ready: the VMs whose disks they serve may no longer be moved
there.

Halfway (or once the keeper is done, if sooner), one healthy node is drained (`--drain`) as
`kubectl drain` and KubeVirt drain it: the node of the newer CPU generation most movable VMs
waiting to go back run on (the keeper wants its outbound slots too), with at least `BUSY` (8)
opted-in VMs on it in the default layout, so that most of them wait their turn. It is cordoned
and tainted `kubevirt.io/drain`; every share-manager pod on it is evicted at once (its
ShareManager in error), and longhorn-manager creates each again, unbound, `--share-manager-delay`
seconds later (3–10, drawn per volume): the webhook's share-manager rule answers it over the
cluster as it is then, and kube-scheduler places it as the patch says; the ShareManager then runs
there, and the keeper and the rules see the new storage node. KubeVirt's evacuation controller
(pkg/virt-controller/watch/drain/evacuation) creates a `kubevirt-evacuation-` migration
(annotation `kubevirt.io/evacuationMigration`, spec.priority system-critical, no
addedNodeSelector) for each live-migratable VMI on the node without an unfinished one, all at
once, until none is left on it; virt-controller's queue runs them (`--evacuation-delay` seconds
each: long enough against the share-managers' return that most VMs of a busy node still wait
when theirs is back, as with real migrations of tens of seconds to minutes). A VM is judged again
whenever it lands or its share-manager comes back: with its storage, apart and movable, or held
(its storage node unable to take its migration target, or Ready no more); the end state expects
it there unless the keeper may move it. The drain's VMs (those on the node when it began, and
any a migration under way brings there) are followed from the drain's start: where each
share-manager came back and while its VM was where, the seconds each VM spends apart from its
storage, the keeper's migrations of them, and which no migration can bring next to their
storage. No node a VM held by its CPU alone runs on or has its disk on is lost or drained: only
its CPU holds it, so a keeper blind to CPU models shows.

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
where they were (or where the drain moved them). The keeper runs in `bench.keeper`.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import copy
import dataclasses
import datetime
import itertools
import os
import random
import string
import sys
import uuid
from typing import Any

import jsonpatch
import kmock
from aiohttp import web

from kubefake import objects
from kubefake.apiserver import Apiserver
from kubefake.apiserver import serve as serve_api
from kubefake.objects import stamp
from kubefake.scheduler import Scheduler
from webhook.admission.admit import Shared, admit
from webhook.admission.outcome import Outcome
from webhook.admission.review import AdmissionRequest
from webhook import kinds
from webhook.kinds import labels_match
from webhook.stores.store import Store, volume_handle
from webhook.config import KeepMode, Settings
from webhook.deadline import Deadline
from webhook.kinds import CONFIGMAP, EVENT, LEASE, NODE, POD, PV, PVC, SHARE_MANAGER, VIRT_LAUNCHER, VMI, VMIM, Resource
from webhook.rules import fit
from webhook.rules.keeping.apart import VmState, locality
from webhook.rules.shared.alone import Alone
from webhook.rules.keeping.keep import decide_keep, Limits, PassFacts, VmFacts
from webhook.rules.keeping.running import VmiView
from webhook.rules.shared.facts import claims_of, Fact
from webhook.rules.fit.memo import Memo

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
EVACUATION_ANNOTATION = "kubevirt.io/evacuationMigration"  # on each evacuation: the node drained
DRAIN_TAINT = "kubevirt.io/drain"  # the KubeVirt CR's nodeDrainTaintKey
BUSY = 8  # opted-in VMs the drained node holds at least: a busy node, most of whose VMs wait their turn
# virt-controller's priority queue (KubeVirt 1.7+): evacuations first, our system-maintenance last.
PRIORITY_RANK = {"system-critical": 0, "user-triggered": 1, None: 1, "system-maintenance": 2}
SCHEDULING = 0.02  # seconds kube-scheduler takes to place a pod, or to give up on one it cannot place
RESCHEDULE = 1.0  # kube-scheduler tries a pod it could not place again this often
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
SETTLING = "share-manager being re-created"  # evicted by the drain, not back yet
# Where a share-manager the drain evicted came back, against its VM.
WITH_VM = "with its VM"
CAN_FOLLOW = "where its VM can follow"
CANNOT_FOLLOW = "where its VM's migration cannot go"
LATER = {"cordoned": CORDONED_LATER, "not Ready": UNREADY_LATER, "drained": DRAINED_LATER}
AT_START = {"cordoned": ON_CORDONED, "not Ready": ON_UNREADY}
# Of the VMs apart, the share held back for each reason (at least one each from 8 apart).
HELD = ((ON_CORDONED, 0.15), (ON_UNREADY, 0.10), (UNMIGRATABLE, 0.025), (OPTED_OUT, 0.025), (ON_OLDER_CPU, 0.05))
FINAL = ("Succeeded", "Failed")
# A migration created this soon after its target or its VM became off limits raced the keeper's
# watch (as it would race any controller): reported, not a violation.
GRACE = datetime.timedelta(seconds=1)
# An apart VM's hold, when it holds it whatever the time and the in-flight migrations (the others
# are named by the simulation: its storage node off limits, `Tracker.role_of`).
ROLES = {Alone.NOT_OPTED_IN: NOT_OPTED_IN, Alone.OPTED_OUT: OPTED_OUT, Alone.NOT_MIGRATABLE: UNMIGRATABLE,
         Alone.TARGET_UNFIT: ON_OLDER_CPU, Alone.SETTLING: SETTLING}


def open_pass() -> PassFacts:
    """A pass now that nothing of the pass holds a VM in: no wait, no limit, targeted migration
    available, migrating. What still holds a VM in it holds it until the cluster changes."""
    unbounded = 10 ** 6
    return PassFacts(now(), Limits(after=datetime.timedelta(0), after_descheduled=datetime.timedelta(0),
                                   max_inflight=unbounded, max_cluster_inflight=unbounded, max_per_day=unbounded,
                                   max_outbound_per_node=unbounded), KeepMode.MIGRATE, targeted=True)


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
    storage: str  # the node serving its disk (the last one, while its share-manager is re-created)
    node: str  # where it runs now
    pod: str  # its launcher pod now
    claim: str = ""
    volume: str = ""  # the Longhorn volume of its disk: its ShareManager, and share-manager-<volume>
    migratable: bool = True  # its VMI is LiveMigratable
    opted_in: bool = True  # its VMI carries the opt-in annotation
    may_move: bool = True  # False: annotated kubevirt-scheduler/keep: "false"
    start: str = ""  # where it ran at start (or where a migration not ours moved it)
    machine: str = ""  # status.machine.type: the canonical machine type it runs with
    selector: dict[str, str] = dataclasses.field(default_factory=dict)  # its pod's nodeSelector
    held_since: datetime.datetime | None = None  # when it stopped being movable, during the run
    ours: list[str] = dataclasses.field(default_factory=list)  # our migrations of it, oldest first
    failed_at: datetime.datetime | None = None  # when our last migration of it failed (or was cancelled)
    migrating: str | None = None  # the migration of it in flight, any origin
    evacuated: bool = False  # the drain moved it
    back_by_drain: bool = False  # the drain moved it to its storage node
    settling: bool = False  # its share-manager was evicted and is not back yet
    storage_since: datetime.datetime | None = None  # when its share-manager last came back, during the run

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name


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
        claim = f"{name}-disk"
        vm = Vm(name, f"vms-{i % 10}", uid, role, storage, node, f"virt-launcher-{name}-abcde", claim=claim,
                volume=f"pvc-{uuid.UUID(int=random.Random(claim).getrandbits(128), version=4)}",
                migratable=role != UNMIGRATABLE, opted_in=role != NOT_OPTED_IN, may_move=role != OPTED_OUT, start=node,
                machine=objects.machine_type(cpu[started_on or node]))
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
        volume = vm.volume
        share_manager_pod = objects.share_manager_pod(volume, vm.storage)
        share_manager_pod["metadata"]["creationTimestamp"] = long_ago
        share_manager_pod["status"]["startTime"] = long_ago
        found += [objects.pvc(vm.claim, volume, namespace=vm.namespace), objects.pv(vm.claim, volume, namespace=vm.namespace),
                  objects.share_manager(volume, vm.storage), share_manager_pod]
        moved = vm.node != vm.storage and vm.role != ON_OLDER_CPU  # by the drain before the run
        vmi = objects.vmi(vm.name, vm.node, vm.claim, namespace=vm.namespace, uid=vm.uid,
                          opted_in=vm.opted_in, migratable=vm.migratable, keep=None if vm.may_move else "false",
                          migrated_from=vm.storage if moved else None,
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
        for vm in layout.vms:  # what the plan meant each VM to be, as the keeper's rules judge it
            vm.role = self.role_of(vm)
        opted_in = [vm for vm in layout.vms if vm.role != NOT_OPTED_IN]
        self.held_at_start = collections.Counter(vm.role for vm in opted_in if vm.role not in (MOVABLE, CO_LOCATED))
        self.movable_at_start = sum(1 for vm in opted_in if vm.role == MOVABLE)
        self.drain: dict[str, Any] | None = {} if drain else None  # {} until it starts
        self.drained: dict[tuple[str, str], Vm] = {}  # the opted-in VMs on the drained node when it began
        self.drain_began: datetime.datetime | None = None
        self.drain_ended: datetime.datetime | None = None  # its last evacuation ended, its share-managers back
        # Each drained VM's stretches apart from its storage since the drain began: [from, to or None].
        self.spans: dict[tuple[str, str], list[list[datetime.datetime | None]]] = {}
        self.share_managers: list[dict[str, Any]] = []  # each one the drain evicted, as it came back
        self.running_from: collections.Counter[str] = collections.Counter()  # most running at once, by source
        self.waiting_peak = 0  # most evacuations at once waiting for their turn (no target pod yet)
        self.targets: list[dict[str, Any]] = []  # each migration target pod, as the webhook answered it

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

    def unfit_for(self, vm: Vm) -> str | None:
        """Why the VM's storage node cannot take its migration target pod (as the simulation
        knows the cluster: off limits, or a label the target selects that it lacks), or None."""
        if vm.storage in self.unfit:
            return f"node {vm.storage} is {self.unfit[vm.storage][0]}"
        return self.lacks(target_selector(self.layout, vm, {HOSTNAME: vm.storage}), vm.storage)

    def facts(self, vm: Vm) -> VmFacts:
        """The VM as the keeper's decision reads it, from the simulation's own state: running on its
        node, its one disk served from its storage node (from nowhere while its share-manager is
        away), with what its storage node says to its migration target pod."""
        view = VmiView(vm.namespace, vm.name, vm.uid, "Running", vm.node, opted_in=vm.opted_in, may_move=vm.may_move,
                       live_migratable=vm.migratable, not_migratable="" if vm.migratable else "not live-migratable",
                       migration=None)
        disk = Fact(vm.claim, None if vm.settling else vm.storage,
                    SETTLING if vm.settling else f"served from {vm.storage}", vm.volume)
        return VmFacts(view, locality(vm.node, [disk]), target_unfit=self.unfit_for(vm))

    def role_of(self, vm: Vm) -> str:
        """What a VM is to the keeper where it runs now (after a migration not ours, or once its
        share-manager is back): the keeper's own decision (`decide_keep`) over what holds it for
        good, in a pass that nothing else holds (`open_pass`); named by its hold."""
        decision = decide_keep(self.facts(vm), open_pass())
        if decision.act:
            return MOVABLE
        if decision.hold is Alone.NOT_APART:
            return CO_LOCATED if decision.state is VmState.CO_LOCATED else SETTLING
        if decision.hold is Alone.TARGET_UNFIT and vm.storage in self.unfit:
            why, since = self.unfit[vm.storage]
            return AT_START[why] if since is None else LATER[why]
        return ROLES[decision.hold]

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

        def moved_storage(what: str) -> None:
            """Broken, unless the VM's share-manager came back elsewhere a moment ago (a race)."""
            if vm.storage_since is not None and at - vm.storage_since < GRACE:
                raced.append(f"{what}; its share-manager came back to {vm.storage} "
                             f"{(at - vm.storage_since).total_seconds() * 1000:.0f} ms earlier")
            else:
                violated(what)

        ours = self.in_flight(ours=True) + 1
        if ours > self.max_inflight:
            violated(f"{ours} of our migrations in flight (limit {self.max_inflight})")
        if vm.role != MOVABLE:
            if vm.held_since is not None and at - vm.held_since < GRACE:
                raced.append(f"{vm.name}: {vm.role} {(at - vm.held_since).total_seconds() * 1000:.0f} ms earlier")
            else:
                moved_storage(f"{vm.name} must be left alone ({vm.role})")
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
            moved_storage(f"{vm.name} already runs on {vm.storage}, where its disk is served")
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
            moved_storage(f"targets {target}, but the disk of {vm.name} is served from {vm.storage}")
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
            # Moved by someone else (the drain): expected where it is now, and judged again there. A
            # migration of ours after this one (ours that landed on the drained node, evacuated with
            # the others) brings it back from where the drain put it: a first, not a second.
            vm.start, vm.evacuated = vm.node, vm.evacuated or migration.evacuation
            vm.ours.clear()
            if migration.evacuation and not vm.settling and vm.node == vm.storage:
                vm.back_by_drain = True
            self.judge(vm, at)
        if how == "succeeded":
            if (self.drain and vm.node == self.drain.get("node") and self.drain_ended is None
                    and vm.role != NOT_OPTED_IN and vm.key not in self.drained):
                # A migration under way as the drain began landed on the node: it is one of the drain's VMs.
                self.drained[vm.key] = vm
                self.spans[vm.key] = []
                self.drain["arrived"] = self.drain.get("arrived", 0) + 1
            self.track(vm, at)
        if self.drain and migration.evacuation:
            self.drain["completed" if how == "succeeded" else "failed"] += 1

    def judge(self, vm: Vm, at: datetime.datetime) -> None:
        """The VM's role again, where it runs and where its disk is served now (after a change not
        of our making: a VM with its storage now is co-located, not brought back)."""
        role = self.role_of(vm)
        if role == MOVABLE and vm.node == vm.storage:
            role = CO_LOCATED
        if role != vm.role and vm.role == MOVABLE:
            vm.held_since = at
        vm.role = role

    def track(self, vm: Vm, at: datetime.datetime) -> None:
        """Where a drained VM runs or where its disk is served changed: a stretch apart begins or ends
        (not while its share-manager is away: its disk is served from nowhere then)."""
        spans = self.spans.get(vm.key)
        if spans is None:
            return
        apart = not vm.settling and vm.node != vm.storage
        if apart and (not spans or spans[-1][1] is not None):
            spans.append([at, None])
        elif not apart and spans and spans[-1][1] is None:
            spans[-1][1] = at

    def evicted(self, vm: Vm, at: datetime.datetime) -> None:
        """The VM's share-manager pod was evicted: its disk is served from nowhere until it is back."""
        vm.settling = True
        self.judge(vm, at)
        self.track(vm, at)

    def served(self, vm: Vm, node: str, at: datetime.datetime) -> None:
        """The VM's share-manager runs again, on `node`."""
        vm.settling, vm.storage, vm.storage_since = False, node, at
        self.judge(vm, at)
        self.track(vm, at)

    def admitted_target(self, migration: Migration, before: dict[str, Any], after: dict[str, Any],
                        outcome: Outcome) -> None:
        """A migration target pod as the webhook answered it: recorded, and checked: every one is
        left untouched."""
        vm = migration.vm
        kind = "evacuation" if migration.evacuation else ("ours" if migration.ours else "others'")
        patched = bool(outcome.patch) or before != after
        self.targets.append({"kind": kind, "patched": patched})
        if patched:
            self.violations.append(f"{migration.namespace}/{migration.name}: the webhook changed the target pod of "
                                   f"{kind} migration of {vm.name}")

    def can_follow(self, vm: Vm, node: str) -> str | None:
        """Why the VM's migration target pod can never go to `node` (a label it selects that the
        node lacks), or None when it can."""
        if vm.node == node:
            return None
        return self.lacks(target_selector(self.layout, vm, {HOSTNAME: node}), node)

    # ----------------------------------------------------------------- nodes lost, the drain

    def spared(self) -> set[str]:
        """Nodes never lost nor drained: those VMs held by their CPU alone run on or have their disks
        on (only the CPU holds them, with the pod they started with: a keeper blind to it shows)."""
        return {n for vm in self.layout.vms if vm.role == ON_OLDER_CPU for n in (vm.storage, vm.node)}

    def nodes_to_lose(self, first: str | None) -> list[tuple[str, str]]:
        """Two healthy nodes: one to cordon (`first`, the target of the migration of ours just
        created, when it is healthy), one to lose Ready (the one serving the disks of the most
        movable VMs still apart). None when fewer than four healthy nodes are left."""
        healthy = [n for n in self.layout.healthy if n not in self.unfit and n not in self.spared()]
        if len(healthy) < 4:
            return []
        waiting = collections.Counter(vm.storage for vm in self.layout.vms
                                      if vm.role == MOVABLE and vm.node != vm.storage and vm.migrating is None)
        chosen = sorted(healthy, key=lambda n: (-waiting[n], n))
        if first in healthy:
            chosen = [first] + [n for n in chosen if n != first]
        return [(chosen[0], "cordoned"), (chosen[1], "not Ready")]

    def node_to_drain(self) -> str | None:
        """A healthy node of the newer CPU generation (its VMs' migrations cannot go to an older
        one) holding at least BUSY opted-in VMs, with the most movable VMs waiting on it (the
        keeper wants its outbound slots too), then the most VMs. None when fewer than three
        healthy nodes are left."""
        healthy = [n for n in self.layout.healthy if n not in self.unfit and n not in self.spared()]
        if len(healthy) < 3:
            return None
        on = collections.Counter(vm.node for vm in self.layout.vms if vm.role != NOT_OPTED_IN)
        waiting = collections.Counter(vm.node for vm in self.layout.vms
                                      if vm.role == MOVABLE and vm.node != vm.storage and vm.migrating is None)
        return sorted(healthy, key=lambda n: (self.layout.cpu[n] != objects.NEW_CPU, on[n] < BUSY, -waiting[n], -on[n],
                                              n))[0]

    def lost(self, node: str, why: str, at: datetime.datetime) -> None:
        """From now on `node` is off limits, and the VMs waiting to go there stay where they are."""
        self.unfit[node] = (why, at)
        for vm in self.layout.vms:
            if vm.role == MOVABLE and vm.storage == node and vm.node != vm.storage and vm.migrating is None:
                vm.role, vm.held_since = self.role_of(vm), at  # its storage node unfit: LATER[why]

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
        drain = self.drain_figures(now()) if self.drain else None
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
            "targets": self.target_figures(),
            "raced": self.raced,
            "violations": violations,
        }


    def drain_figures(self, at: datetime.datetime) -> dict[str, Any]:
        """The drain: its evacuations, its share-managers evicted and back, and its VMs: where they
        ended, which no migration can bring back to their storage, the keeper's migrations of them,
        and their seconds apart from their storage since it began (until `at`)."""
        drain = dict(self.drain or {})
        node, began = drain["node"], self.drain_began or at
        drained = list(self.drained.values())
        drain["peak_running"] = self.running_from[node]
        drain["peak_waiting"] = self.waiting_peak
        drain["left_on_it"] = sum(1 for vm in self.layout.vms if vm.node == node)
        evacuated = [vm for vm in drained if vm.evacuated]
        drain["evacuated"] = len(evacuated)
        drain["back_by_drain"] = sum(1 for vm in evacuated if vm.back_by_drain)
        records = self.share_managers
        opted = [r for r in records if r["opted_in"]]
        delays = [r["delay"] for r in records]
        drain["share_managers"] = {
            "evicted": len(records), "opted_in": len(opted), "back": sum(1 for r in records if r["node"]),
            "stuck": [r["volume"] for r in records if r["node"] is None and r["admitted"]],
            "delay": [min(delays), max(delays)] if delays else None,
            "while": dict(collections.Counter(r["while"] for r in opted)),
            "decisions": dict(collections.Counter(r["decision"] for r in opted)),
            "examples": {r["decision"]: r["reason"] for r in reversed(opted)},
            "landed": dict(collections.Counter(r["landed"] for r in opted if r["landed"])),
            "unreachable_nodes": dict(collections.Counter(r["node"] for r in opted if r["landed"] == CANNOT_FOLLOW)),
        }
        apart = [vm for vm in drained if not vm.settling and vm.node != vm.storage]
        drain["apart"] = [{"vm": f"{vm.namespace}/{vm.name}", "node": vm.node, "storage": vm.storage, "role": vm.role,
                           "never": self.can_follow(vm, vm.storage), "failed": vm.failed_at is not None}
                          for vm in apart]
        drain["never"] = sum(1 for a in drain["apart"] if a["never"])
        ours = collections.Counter(m.vm.key for m in self.migrations.values()
                                   if m.ours and m.vm.key in self.drained and m.created >= began)
        drain["keeper_migrations"] = sum(ours.values())
        drain["keeper_moved"] = len(ours)
        drain["keeper_most"] = max(ours.values(), default=0)
        drain["drained_vms"] = len(drained)
        ended = self.drain_ended or at
        forever = {vm.key for vm in apart if self.can_follow(vm, vm.storage)}
        drain["vm_seconds"] = {"total": self.apart_seconds(began, at), "during": self.apart_seconds(began, ended),
                               "forever": self.apart_seconds(began, at, forever), "span": (at - began).total_seconds()}
        return drain

    def apart_seconds(self, since: datetime.datetime, until: datetime.datetime,
                      only: set[tuple[str, str]] | None = None) -> float:
        """The seconds the drained VMs (`only` these) spent apart from their storage within [since, until]."""
        total = 0.0
        for key, spans in self.spans.items():
            if only is not None and key not in only:
                continue
            for start, end in spans:
                low, high = max(start, since), min(end or until, until)
                total += max(0.0, (high - low).total_seconds())
        return total

    def target_figures(self) -> dict[str, Any]:
        """The migration target pods as the webhook answered them: patched or not, by whose migration."""
        counted: collections.Counter[str] = collections.Counter()
        for target in self.targets:
            counted[f"{target['kind']} {'patched' if target['patched'] else 'untouched'}"] += 1
        return dict(counted)


class Slots:
    """virt-controller's throttle (pkg/virt-controller/watch/migration/migration.go): a pending
    migration gets its target pod once fewer than PARALLEL migrations run and fewer than
    `per_node` leave its VM's node (`outboundMigrationsOnNode`); the waiting ones by
    spec.priority, then age. A migration runs from its target pod to its end."""

    def __init__(self, per_node: int, tracker: Tracker | None = None):
        self.per_node, self.tracker = per_node, tracker
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
        self._dispatch()
        if self.tracker is not None:  # the figures: most running from one node, most evacuations waiting
            tracker = self.tracker
            for migration in self.running:
                source = migration.source or ""
                tracker.running_from[source] = max(tracker.running_from[source],
                                                   sum(1 for m in self.running if m.source == source))
            tracker.waiting_peak = max(tracker.waiting_peak, sum(1 for e in self.waiting if e[2].evacuation))

    def _dispatch(self) -> None:
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


class LiveStore(Store):
    """The Store the webhook's rules read in the simulation: the simulated cluster's own objects as
    they are at that moment, every answer from memory, every kind (VMIs and migrations too, for a
    rule that builds a migration's target pod): what the caches of `serve` hold, without their
    lag. Objects are handed out as copies; the checks' view reads them in place (the rules are
    pure) with a memo of its own, as a cache's does."""

    def __init__(self, api: SimulatedCluster):
        self.api, self.memo = api, Memo()
        self._view: tuple[tuple[int, ...], fit.View] | None = None  # the checks' view, until one of its kinds changes

    def peek(self, resource: Resource, namespace: str | None, name: str) -> tuple[bool, dict[str, Any] | None]:
        obj = self.api.stored(self.api.at(resource, namespace if resource.namespaced else None, name))
        return True, (copy.deepcopy(obj.raw) if obj is not None else None)

    async def get(self, resource: Resource, namespace: str | None, name: str, *,
                  timeout: float | None = None) -> dict[str, Any] | None:
        return self.peek(resource, namespace, name)[1]

    async def pvs_by_volume_handle(self, handle: str, *, timeout: float | None = None) -> list[dict[str, Any]]:
        return [copy.deepcopy(pv) for pv in self.api.live(PV) if volume_handle(pv) == handle]

    async def pods_by_claim(self, namespace: str, claim: str, *, timeout: float | None = None) -> list[dict[str, Any]]:
        launcher = dict([VIRT_LAUNCHER])
        return [copy.deepcopy(pod) for pod in self.api.live(POD, namespace)
                if labels_match(pod, launcher) and claim in claims_of(pod)]

    async def fit_view(self, namespace: str, *, timeout: float | None = None) -> fit.View | None:
        seen = tuple(self.api.changes[self.api.at(kind)[0]] for kind in (NODE, POD, PVC, PV))
        if self._view is None or self._view[0] != seen:
            self._view = seen, fit.StaticView(self.api.live(NODE), self.api.live(POD), self.api.live(PVC),
                                              self.api.live(PV), memo=self.memo)
        return self._view[1]

    async def close(self) -> None:
        return None


class Admission:
    """The webhook's mutating admission, as the apiserver calls it for each pod created: the rules
    (`webhook.admission.admit.admit`) run in this process over the cluster as it is at that moment
    (`LiveStore`); the patch they answer is applied to the pod (jsonpatch) before it is stored. A
    rule that fails is a violation: the pod is admitted untouched, as the webhook would."""

    def __init__(self, settings: Settings, store: Any = None):
        self.settings, self.store = settings, store
        self.answered: collections.Counter[str] = collections.Counter()
        self.seconds: collections.Counter[str] = collections.Counter()  # spent in the rules, by rule
        self.failed: list[str] = []
        self.shared = Shared()  # as `serve` keeps it (one replica): the drain's VMs sent to each node

    async def __call__(self, pod: dict[str, Any], namespace: str) -> tuple[dict[str, Any], Outcome]:
        """The pod as stored, and what the rules made of it."""
        assert self.store is not None, "no store to read"
        sent = copy.deepcopy(pod)
        if sent["metadata"].get("generateName"):
            sent["metadata"].pop("name", None)  # named by the apiserver after admission
        loop = asyncio.get_running_loop()
        began = loop.time()
        outcome = await admit(AdmissionRequest.for_pod(sent, namespace, uid=str(uuid.uuid4())), self.store,
                              self.settings, Deadline.after(10.0, 1.0),  # the apiserver's default timeout
                              self.shared)
        self.seconds[str(outcome.rule)] += loop.time() - began
        self.answered[str(outcome.rule)] += 1
        if outcome.skipped is Alone.INTERNAL_ERROR:
            self.failed.append(f"the webhook's rules failed on pod {namespace}/{kinds.pod_name(pod)}: {outcome.detail}")
        return (jsonpatch.apply_patch(pod, list(outcome.patch)) if outcome.patch else pod), outcome


def decided(outcome: Outcome) -> tuple[str, str]:
    """What the rules decided for a pod, in a word, and why."""
    if outcome.decision is not None:
        return str(outcome.decision.outcome), outcome.decision.reason
    return f"left alone ({outcome.skipped})", outcome.detail or ""


class KubeVirt:
    """virt-controller, virt-handler and the evacuation controller as far as the keeper can tell:
    each migration run through its phases under virt-controller's throttle, its target pod
    admitted by the webhook and placed by kube-scheduler or left unschedulable, the VMI and its
    pods moved at the end; a node drained, its share-managers evicted and re-created by
    longhorn-manager."""

    def __init__(self, api: SimulatedCluster, tracker: Tracker, *, delay: tuple[float, float], fail_every: int,
                 foreign: int, seed: int, lose_nodes_after: int = 0, drain_after: int = 0,
                 evacuation_delay: tuple[float, float] = (2.0, 5.0),
                 share_manager_delay: tuple[float, float] = (3.0, 10.0), admission: Admission | None = None):
        self.api, self.tracker = api, tracker
        self.lose_nodes_after = lose_nodes_after  # of our migrations created; 0: never
        self.drain_after = drain_after  # of our migrations created, or once the keeper is done; 0: never
        self.delay, self.fail_every, self.foreign = delay, fail_every, foreign
        self.evacuation_delay, self.share_manager_delay = evacuation_delay, share_manager_delay
        self.admission = admission or Admission(Settings(), LiveStore(api))
        self.rng = random.Random(seed)
        self.share_manager_rng = random.Random(f"share-managers-{seed}")  # their delays, whatever else happens
        self.scheduler = Scheduler(random.Random(f"kube-scheduler-{seed}"))
        self.share_managers_tried: list[asyncio.Event] = []  # one per share-manager evicted: admitted, placement tried
        self.slots = Slots(tracker.outbound, tracker)
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
                and migration.target not in self.tracker.spared()):
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
        total = self.rng.uniform(*(self.evacuation_delay if migration.evacuation else self.delay))
        step = total * 0.05
        source = vm.node
        selector = target_selector(tracker.layout, vm, {HOSTNAME: migration.target} if migration.ours else None)
        started = stamp()
        target_pod = f"virt-launcher-{vm.name}-{migration.uid[:5]}"
        await self.phase(migration, "Scheduling")
        # The target pod as virt-controller creates it (generateName; its kubevirt.io/nodeName label
        # names the source), through the webhook as the apiserver admits it, then kube-scheduler's.
        pod = objects.launcher_pod_of(self._vmi_of(vm), source, name=target_pod, started=started,
                                      migration_uid=migration.uid, migration_name=migration.name,
                                      node_selector=selector)
        pod["metadata"]["generateName"] = f"virt-launcher-{vm.name}-"
        del pod["spec"]["nodeName"]
        pod["status"] = {"phase": "Pending", "qosClass": "Burstable"}
        created = now()
        admitted, outcome = await self.admission(pod, vm.namespace)
        tracker.admitted_target(migration, pod, admitted, outcome)
        await self.api.add(POD, admitted)
        if await self._waited(migration, SCHEDULING):
            await self._torn_down(migration, target_pod, False)
            return
        placed = self.scheduler.place(admitted, self.api.live(NODE), self.api.live(POD))
        target = placed.node
        if not migration.ours:
            migration.target = target
        if target is None:
            await self._unschedulable(migration, target_pod, placed.message, created)
            return
        await self.api.change(POD, vm.namespace, target_pod, {
            "metadata": {"labels": {"kubevirt.io/nodeName": target}}, "spec": {"nodeName": target},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
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
            "status": {"nodeName": target, "activePods": {admitted["metadata"]["uid"]: target},
                       "evacuationNodeName": None,
                       "migrationState": {"completed": True, "endTimestamp": ended}}})
        await self.api.change(POD, vm.namespace, old_pod, {"status": {"phase": "Succeeded"}})
        await self.phase(migration, "Succeeded", migrationState={"endTimestamp": ended})

    async def _unschedulable(self, migration: Migration, name: str, message: str, created: datetime.datetime) -> None:
        """kube-scheduler cannot place the target pod (created at `created`): it stays Pending,
        Unschedulable, until virt-controller deletes it (its timeout, from the pod's creation, in
        whole seconds: the migration fails) or the migration is deleted."""
        vm, tracker = migration.vm, self.tracker
        migration.unschedulable = at = now()
        await self.api.change(POD, vm.namespace, name, {"status": {"conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastProbeTime": None,
             "lastTransitionTime": stamp(at), "message": message}]}})
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
            # Claimed before the create's await: the other `--foreign` controllers pick from the same VMs, and
            # virt-api refuses a second migration of a VMI while one is in flight.
            vm.migrating = name
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
        """`kubectl drain` of one healthy node: cordoned (and tainted with KubeVirt's drain taint),
        its share-manager pods evicted at once (longhorn-manager re-creates each a few seconds
        later: `share_manager_back`), each VMI on it marked for evacuation (virt-api's eviction
        webhook), and KubeVirt's evacuation controller creating a migration for each
        live-migratable one without an unfinished one, all at once (virt-controller's queue runs
        them PARALLEL at a time, `--outbound-per-node` from one node), until none is left on the
        node. Done once the last evacuation ended and every share-manager is back."""
        tracker = self.tracker
        node = tracker.node_to_drain()
        if node is None:
            tracker.drain = None
            return
        began = tracker.drain_began = now()
        on_it = [vm for vm in tracker.layout.vms if vm.node == node]
        tracker.drained = {vm.key: vm for vm in on_it if vm.role != NOT_OPTED_IN}
        tracker.spans = {key: [] for key in tracker.drained}
        for vm in tracker.drained.values():
            tracker.track(vm, began)
        tracker.drain = {"node": node, "cpu": tracker.layout.cpu[node], "at": (began - tracker.began).total_seconds(),
                         "vms": len(tracker.drained), "others": len(on_it) - len(tracker.drained),
                         "created": 0, "completed": 0, "failed": 0, "evacuated_in": None, "done": None}
        await self.api.change(NODE, None, node, {"spec": {"unschedulable": True, "taints": [
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": stamp()},
            {"key": DRAIN_TAINT, "effect": "NoSchedule", "timeAdded": stamp()}]}})
        tracker.lost(node, "drained", began)
        await self.evict_share_managers(node, began)
        for vm in on_it:
            await self.api.change(VMI, vm.namespace, vm.name, {"status": {"evacuationNodeName": node}})
        letters = string.ascii_lowercase + string.digits
        while True:
            self.ended.clear()
            candidates = [vm for vm in tracker.layout.vms if vm.node == node and vm.migratable and vm.migrating is None]
            evacuating = [m for m in tracker.flying() if m.evacuation]
            if not candidates and not evacuating:
                break
            for vm in candidates:
                if vm.migrating is not None:  # someone else's, created while this loop awaited
                    continue
                name = EVACUATION + "".join(self.rng.choice(letters) for _ in range(5))
                vm.migrating = name  # claimed before the create's await, as in `someone_else`
                migration = Migration(name, vm.namespace, vm, False, None, uid=str(uuid.uuid4()),
                                      priority="system-critical", evacuation=True)
                await self.api.add(VMIM, {
                    "apiVersion": VMIM.api_version, "kind": VMIM.kind,
                    "metadata": {"name": name, "namespace": vm.namespace, "uid": migration.uid,
                                 "generateName": EVACUATION, "creationTimestamp": stamp(),
                                 "annotations": {EVACUATION_ANNOTATION: node}},
                    "spec": {"vmiName": vm.name, "priority": "system-critical"}})
                tracker.added(migration)
                self._spawn(self.run(migration))
            try:
                await asyncio.wait_for(self.ended.wait(), EVACUATION_RESYNC)
            except TimeoutError:
                pass
        tracker.drain["evacuated_in"] = (now() - began).total_seconds()
        for tried in self.share_managers_tried:
            await tried.wait()
        tracker.drain_ended = now()
        tracker.drain["done"] = (tracker.drain_ended - began).total_seconds()
        tracker.drain["apart_when_done"] = dict(collections.Counter(
            vm.role for vm in tracker.drained.values() if not vm.settling and vm.node != vm.storage))

    async def evict_share_managers(self, node: str, began: datetime.datetime) -> None:
        """`kubectl drain` evicts every share-manager pod on the node at once: the ShareManager goes
        to error (its pod gone), and longhorn-manager creates the pod again, unbound, a few seconds
        later (`--share-manager-delay`, drawn per volume)."""
        for vm in [v for v in self.tracker.layout.vms if v.storage == node and not v.settling]:
            await self.api.remove(POD, objects.LONGHORN_NS, f"share-manager-{vm.volume}")
            await self.api.change(SHARE_MANAGER, objects.LONGHORN_NS, vm.volume, {"status": {"state": "error"}})
            self.tracker.evicted(vm, began)
            delay = self.share_manager_rng.uniform(*self.share_manager_delay)
            record = {"volume": vm.volume, "vm": f"{vm.namespace}/{vm.name}", "opted_in": vm.role != NOT_OPTED_IN,
                      "delay": delay, "while": "", "decision": "", "reason": "", "admitted": False, "node": None,
                      "landed": ""}
            self.tracker.share_managers.append(record)
            tried = asyncio.Event()
            self.share_managers_tried.append(tried)
            self._spawn(self.share_manager_back(vm, record, began + datetime.timedelta(seconds=delay), node, tried))

    def situation(self, vm: Vm, drained: str) -> str:
        """Where the VM is in the drain as its share-manager comes back."""
        if vm.role == NOT_OPTED_IN:
            return NOT_OPTED_IN
        if vm.node == drained:
            flying = self.tracker.migrations.get((vm.namespace, vm.migrating or ""))
            if flying is not None and flying.source is not None:
                return "migrating off the drained node"
            return "waiting its turn on the drained node"
        if vm.key in self.tracker.drained:
            return "evacuated already"
        return "running on another node"

    def going(self, vm: Vm) -> str | None:
        """Where the VM's migration in flight goes, once its target pod is placed."""
        flying = self.tracker.migrations.get((vm.namespace, vm.migrating or ""))
        return flying.target if flying is not None and flying.source is not None else None

    async def share_manager_back(self, vm: Vm, record: dict[str, Any], due: datetime.datetime, drained: str,
                                 tried: asyncio.Event) -> None:
        """longhorn-manager creates the share-manager pod again, unbound (createPodManifest): the
        webhook's share-manager rule answers it as the apiserver admits it, over the cluster as it
        is now; kube-scheduler places it as the patch says (tried again every RESCHEDULE seconds
        while no node takes it); once it runs, the ShareManager runs there, owned by that node."""
        tracker = self.tracker
        try:
            await asyncio.sleep(max(0.0, (due - now()).total_seconds()))
            name = f"share-manager-{vm.volume}"
            pod = objects.share_manager_pod(vm.volume)
            pod["metadata"].update(uid=str(uuid.uuid4()), creationTimestamp=stamp())
            pod["status"] = {"phase": "Pending"}
            await self.api.change(SHARE_MANAGER, objects.LONGHORN_NS, vm.volume, {"status": {"state": "starting"}})
            record["while"] = self.situation(vm, drained)
            pod, outcome = await self.admission(pod, objects.LONGHORN_NS)
            record["decision"], record["reason"] = decided(outcome)
            record["admitted"] = True
            await self.api.add(POD, pod)
            unschedulable = False
            while True:
                await asyncio.sleep(SCHEDULING)
                placed = self.scheduler.place(pod, self.api.live(NODE), self.api.live(POD))
                if placed.node is not None:
                    break
                if not unschedulable:
                    unschedulable = True
                    await self.api.change(POD, objects.LONGHORN_NS, name, {"status": {"conditions": [
                        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastProbeTime": None,
                         "lastTransitionTime": stamp(), "message": placed.message}]}})
                    record["unschedulable"] = placed.message
                    tried.set()
                await asyncio.sleep(RESCHEDULE)
            node, started = placed.node, stamp()
            await self.api.change(POD, objects.LONGHORN_NS, name, {
                "spec": {"nodeName": node},
                "status": {"phase": "Running", "startTime": started, "podIP": "10.42.0.10",
                           "conditions": [{"type": "PodScheduled", "status": "True"},
                                          {"type": "Ready", "status": "True"}]}})
            await self.api.change(SHARE_MANAGER, objects.LONGHORN_NS, vm.volume, {"status": {
                "state": "running", "ownerID": node, "endpoint": f"nfs://10.43.0.1/{vm.volume}"}})
            at = now()
            record["node"], record["at"] = node, (at - (tracker.drain_began or at)).total_seconds()
            if vm.role != NOT_OPTED_IN:
                record["landed"] = (WITH_VM if node in (vm.node, self.going(vm)) else
                                    CANNOT_FOLLOW if tracker.can_follow(vm, node) else CAN_FOLLOW)
            tracker.served(vm, node, at)
        except Exception as exc:  # a broken simulation must show, not hang the run
            tracker.violations.append(f"simulation error re-creating the share-manager of {vm.name}: "
                                      f"{type(exc).__name__}: {exc}")
            raise
        finally:
            tried.set()

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
        self.changes: collections.Counter[Any] = collections.Counter()  # changes told, by resource
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

    def live(self, resource: Resource, namespace: str | None = None) -> list[dict[str, Any]]:
        """Every stored object of a resource (in `namespace`), as it is now (what informers hold)."""
        wanted = self.at(resource)[0]
        return [obj.raw for (kind, space, _), obj in self.objects.items()
                if kind == wanted and not obj.deleted and (namespace is None or space == namespace)]

    async def tell(self, resource: Any, event: dict[str, Any]) -> None:
        self.changes[resource] += 1
        if resource in self.lagging and self.watch_lag:
            await self.lagged().put((asyncio.get_running_loop().time() + self.watch_lag, resource, event))
        else:
            await super().tell(resource, event)

    async def add(self, resource: Resource, obj: dict[str, Any]) -> None:
        """Store a new object and tell the watches, as a create through the API does."""
        obj["metadata"]["resourceVersion"] = str(next(self.versions))
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
    for resource in (VMI, VMIM, LEASE, EVENT, CONFIGMAP):  # CONFIGMAP: the keeper's state
        api.resources[resource] = {}
        emulator.by_kind[(resource.api_version, resource.kind)] = resource
    for obj in cluster_objects(layout, started):
        emulator.put(obj)
    movable = tracker.movable_at_start
    lose_after = max(1, movable // 3) if args.lose_nodes else 0
    admission = Admission(Settings(), LiveStore(api))
    kubevirt = KubeVirt(api, tracker, delay=(args.delay_min, args.delay_max), fail_every=args.fail_every,
                        foreign=args.foreign, seed=args.seed, lose_nodes_after=lose_after,
                        drain_after=max(lose_after + 1, movable // 2) if args.drain else 0,
                        evacuation_delay=(args.evacuation_delay_min, args.evacuation_delay_max),
                        share_manager_delay=(args.share_manager_delay_min, args.share_manager_delay_max),
                        admission=admission)
    api.tracker, api.kubevirt, api.watch_lag = tracker, kubevirt, args.watch_lag

    async def report(request: web.Request) -> web.Response:
        found = tracker.report(final=request.query.get("final") == "1")
        found["admissions"] = {"answered": dict(admission.answered), "seconds": dict(admission.seconds)}
        found["violations"] += admission.failed
        return web.json_response(found)

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
    parser.add_argument("--evacuation-delay-min", type=float, default=1.0,
                        help="seconds a migration of the drain takes, at least (default 1; see --share-manager-delay)")
    parser.add_argument("--evacuation-delay-max", type=float, default=3.0, help="at most (default 3)")
    parser.add_argument("--share-manager-delay-min", type=float, default=3.0,
                        help="seconds after the drain's start longhorn-manager creates an evicted share-manager pod "
                             "again, at least (default 3; drawn per volume)")
    parser.add_argument("--share-manager-delay-max", type=float, default=10.0, help="at most (default 10)")
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
