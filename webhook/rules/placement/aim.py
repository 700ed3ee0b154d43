"""Pure: where a drain's evacuation migration of an opted-in VM is aimed (`serve --aim-evacuations on`).

KubeVirt 1.9's evacuation controller creates every migration of a drained node at once, with no
`spec.addedNodeSelector` (pkg/virt-controller/watch/drain/evacuation/evacuation.go, `GenerateNewMigration`):
their admissions run at the same moment, none seeing another's. Added at CREATE, the selector is kept
(virt-api validates nor strips it) and merged into the target pod's nodeSelector under the VM's own keys
(pkg/virt-controller/watch/migration/migration.go, `createTargetPod`). So each admission plans the whole
drain (`plan`: every opted-in VM virt-controller marked, status.evacuationNodeName) and answers this VM's
place in it: its storage's node, or, its share-manager leaving too, a node the volume's other VMs and
re-created share-manager follow. Each node must take KubeVirt's target pod (`rules.fit` on the pod
`rules.kubevirt.target` renders) beside what the plan and the aims not landed send there
(`promised.Promises`). Where none does, or an aimed evacuation of this VM failed in this drain, the
migration is left as KubeVirt made it.
"""
from __future__ import annotations

import collections
import dataclasses
import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ... import kinds
from ..fit import View, why_not_fit, why_not_run
from ..fit.demand import Demand
from ..fit.fields import Unreadable, name_of
from ..fit.resources import allocatable_of, least_allocated, node_resources_fit
from ..fit.usage import PodUsage
from ..kubevirt.target import TargetPod, lacking
from ..shared.alone import Alone
from ..shared.facts import Fact
from .decide import AIMED, Decision
from .patch import record
from .promised import Promises, Taken
from .rooms import rooms_for

# The share of a node's cpu and memory a plan leaves free where it can (a VM goes into it only where no
# node has room without): the target pod is created minutes later, when a slot frees, and what lands
# there meanwhile is counted by no plan — the drain's other evicted pods, the targets of VMs not aimed.
HEADROOM = 0.1
# kubevirt.io/migrationUnschedulablePodTimeoutSeconds on an aimed evacuation (read since KubeVirt v0.48.0,
# migration.go `handlePendingPodTimeout`, from the target pod's creation; 300 s without it): a miss gives
# its slots back after this, and KubeVirt's next evacuation, not aimed, goes where kube-scheduler puts it.
# kube-scheduler tries a pod as it is created, then after 1 s and 2 s backoffs: an aim that fitted when
# made misses where the node changed since (cordoned, filled), which seconds do not undo.
UNSCHEDULABLE_SECONDS = 5


@dataclasses.dataclass(frozen=True, slots=True)
class Evacuation:
    """What the rule reads of a migration."""

    name: str
    namespace: str
    vmi: str
    source: str  # the node it leaves (the evacuation annotation's value)
    aimed: str | None = None  # the kubernetes.io/hostname of its addedNodeSelector, if any
    phase: str = ""
    created: str = ""
    uid: str = ""

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


def read_evacuation(migration: Any, namespace: str = "") -> Evacuation:
    """The migration as the rule reads it (`namespace`: the request's, when the object has none)."""
    metadata, spec, text = kinds.meta(migration), kinds.spec(migration), (lambda v: v if isinstance(v, str) else "")
    added = spec.get(kinds.ADDED_NODE_SELECTOR)
    aimed = text(added.get(kinds.HOSTNAME_LABEL)) if isinstance(added, dict) else ""
    return Evacuation(name=text(metadata.get("name")) or text(metadata.get("generateName")),
                      namespace=text(metadata.get("namespace")) or namespace, vmi=text(spec.get("vmiName")),
                      source=text(kinds.annotations(migration).get(kinds.EVACUATION_ANNOTATION)), aimed=aimed or None,
                      phase=text(kinds.status(migration).get("phase")),
                      created=text(metadata.get("creationTimestamp")), uid=text(metadata.get("uid")))


def exemption(migration: Any, user: str, kubevirt_namespace: str) -> Alone | None:
    """Why the created migration is no drain's evacuation by virt-controller (the account of KubeVirt's
    namespace) that we may aim, or None. Never a user's, the keeper's, the descheduler's
    (system-maintenance) or a workload update's."""
    metadata, spec = kinds.meta(migration), kinds.spec(migration)
    name = str(metadata.get("generateName") or metadata.get("name") or "")
    if not isinstance(migration, dict) or not isinstance(migration.get("spec", {}), dict) or \
            not kinds.annotations(migration).get(kinds.EVACUATION_ANNOTATION) or not name.startswith(
            kinds.EVACUATION_PREFIX) or kinds.labels(migration).get(kinds.MANAGED_BY_LABEL) == kinds.COMPONENT:
        return Alone.NOT_EVACUATION
    if user != f"system:serviceaccount:{kubevirt_namespace}:{kinds.VIRT_CONTROLLER_ACCOUNT}":
        return Alone.NOT_VIRT_CONTROLLER
    if spec.get("priority") != kinds.DRAIN_PRIORITY:
        return Alone.DESCHEDULER_EVACUATION if spec.get("priority") == kinds.DESCHEDULER_PRIORITY else Alone.NOT_EVACUATION
    return Alone.ALREADY_AIMED if spec.get(kinds.ADDED_NODE_SELECTOR) else None


def failed_aim(evacuation: Evacuation, earlier: Iterable[Evacuation], since: str | None) -> Alone | None:
    """Whether an aimed evacuation of this VM off the same node failed since the drain began (after
    `since`, the end of the VM's last completed migration: an earlier drain's are no concern):
    AIMED_FAILED when the newest earlier one is it, AIMED_FAILED_EARLIER for an older one."""
    mine = sorted((e for e in earlier if e.vmi == evacuation.vmi and e.namespace == evacuation.namespace
                   and e.source == evacuation.source and e.name != evacuation.name and (not since or e.created > since)),
                  key=lambda e: (e.created, e.name))
    failed = [e for e in mine if e.aimed and e.phase == "Failed"]
    return None if not failed else Alone.AIMED_FAILED if mine[-1] is failed[-1] else Alone.AIMED_FAILED_EARLIER


def unfinished_aims(migrations: Iterable[Evacuation]) -> list[Evacuation]:
    return sorted((m for m in migrations if m.aimed and m.source and not m.finished),
                  key=lambda m: (m.created, m.namespace, m.name))


def storage_of(facts: Sequence[Fact], drained: str) -> Candidates | tuple[Fact, ...] | Alone:
    """Where the VM's Longhorn disks are served from, off the drained node; else those that leave it with
    the VM (the drained node's share-managers go too)."""
    longhorn = [f for f in facts if f.volume]
    staying = sorted({f.node for f in longhorn if f.node and f.node != drained})
    if not longhorn or len(staying) > 1:
        return Alone.SPLIT_STORAGE if longhorn else Alone.NO_STORAGE
    disks = ", ".join(f.subject for f in longhorn if staying and f.node == staying[0])
    return Candidates((staying[0],), f"where the NFS server of disk {disks} runs") if staying else tuple(longhorn)


def why_not_target(target: TargetPod, namespace: str, name: str, node: Mapping[str, Any] | None,
                   view: View) -> str | None:
    """Why KubeVirt's target pod would not be admitted and fit on the node, or could preempt there (it
    outranks a pod of the node: kube-scheduler evicts those for a pod that does not fit), or None."""
    if node is None or not kinds.labels(node).get(kinds.HOSTNAME_LABEL):
        return f"node {name} not found" if node is None else f"node {name} has no {kinds.HOSTNAME_LABEL} label"
    priority = kinds.spec(target.pod).get("priority")
    if isinstance(priority, int) and priority > 0 and any((kinds.spec(p).get("priority") or 0) < priority
                                                          for p in view.pods_on(name)):
        return f"node {name} runs pods the VM outranks, which a miss there would preempt"
    return (why_not_run(name, node, target.pod, needs_kubevirt=True) or lacking(target, name, node)
            or why_not_fit(target.pod, namespace, node, view, "the VM"))


@dataclasses.dataclass(frozen=True, slots=True)
class Candidates:
    """The nodes the aim may take, best first, and what makes them the choice (for the reason)."""

    nodes: tuple[str, ...] | None  # None: every node
    why: str
    ranked: bool = False  # several: the plan spreads the drain's VMs among them


@dataclasses.dataclass(frozen=True, slots=True)
class Member:
    """A VM of a drain's plan: opted in, KubeVirt evacuating it, not aimed yet."""

    namespace: str
    vmi: str
    uid: str  # the VMI's, as its pods carry it
    target: TargetPod  # the pod KubeVirt will create for it
    claims: frozenset[str]
    candidates: Candidates


def plan(members: Iterable[Member], source: str, promises: Promises, view: View) -> dict[tuple[str, str], tuple[str, str] | str]:
    """By (namespace, VMI): where each VM of the drain off `source` goes ((node, hostname)), or why
    none takes it. Worked out from the cluster alone, so every admission of the drain, on any replica,
    in any order, makes the same plan: the VMs with one node to go to first, then those of disks shared
    by most VMs, then by name; the VMs of a disk go to one node that takes them all (its share-manager
    follows them); each node counts what the plan and the aims not landed send there (`promises`)."""
    placed: dict[tuple[str, str], str] = {}  # (namespace, claim) -> node
    planned: collections.Counter[str] = collections.Counter()
    chosen: dict[tuple[str, str], tuple[str, str] | str] = {}
    orders: dict[Any, list[str]] = {}  # the nodes most room first, by size of pod: the view stays as it is
    members = list(members)
    sharing = {(m.namespace, m.vmi): sum(1 for o in members if o.namespace == m.namespace and o.claims & m.claims)
               for m in members}
    members.sort(key=lambda m: (m.candidates.ranked, -sharing[m.namespace, m.vmi], m.namespace, m.vmi))
    for member in members:
        candidates, mates = member.candidates, Taken(0, {})
        shared = next(((c, placed[member.namespace, c]) for c in sorted(member.claims) if (member.namespace, c) in placed),
                      None)
        if shared is not None and candidates.ranked:
            candidates = Candidates((shared[1],), f"where the VMs of disk {shared[0]} go, its NFS server following them")
        elif candidates.ranked:  # the first of its disks' VMs: a node for them all
            for mate in (m for m in members if m is not member and m.namespace == member.namespace
                         and m.claims & member.claims):
                mates = mates.plus(Taken(1, PodUsage.of(mate.target.pod).requests))
        found = chosen[member.namespace, member.vmi] = _choose(member.target, member.namespace, candidates, view,
                                                               promises, planned, mates, orders)
        if isinstance(found, tuple):
            planned[found[0]] += 1
            placed.update(((member.namespace, claim), found[0]) for claim in member.claims)
            promises.make(member.uid, source, found[0], ("", ""), PodUsage.of(member.target.pod), 0.0)
    return chosen


def _choose(target: TargetPod, namespace: str, candidates: Candidates, view: View, promises: Promises,
            planned: Mapping[str, int], mates: Taken, orders: dict[Any, list[str]]) -> tuple[str, str] | str:
    """(node, its hostname) of the candidate that takes the VM's target pod beside what is promised
    there (and its `mates`, the VMs of its disks), leaving HEADROOM first, then with fewest of the
    drain's VMs planned, then most room; or why none does."""
    try:
        demand = Demand.of(target.pod, namespace, view.memo)
    except Unreadable as error:
        return f"its migration target cannot be read: {error}"
    refused: dict[str, str] = {}
    taking: list[tuple[bool, int, float, str]] = []
    put_off: dict[str, None] = {}  # nodes the plan sends VMs to: judged only if no untouched node takes it
    for name in itertools.chain(_in_order(demand, candidates, view, orders), put_off):
        if candidates.ranked and planned.get(name) and name not in put_off:
            put_off[name] = None
            continue
        node = view.node(name)
        sent = promises.to(name)
        why = why_not_target(target, namespace, name, node, view) or _beside(demand, node, view, sent.plus(mates))
        if why is not None:
            refused[name] = why
            continue
        tight = _beside(demand, node, view, sent.plus(mates), headroom=True) is not None
        taking.append((tight, planned.get(name, 0), -(least_allocated(demand, node, view, sent.plus(mates).requests)
                                                      or 0.0), name))
        if not (tight or planned.get(name) or sent.vms):
            break  # untouched by the plan, the most room of those left: none after it does better
    if not taking:
        shown = "; ".join(refused[n] for n in sorted(refused)[:5]) or "no nodes"
        return f"no node takes its migration target ({candidates.why}): {shown}"
    name = min(taking)[3]
    return name, kinds.labels(view.node(name))[kinds.HOSTNAME_LABEL]


def _in_order(demand: Demand, candidates: Candidates, view: View, orders: dict[Any, list[str]]) -> list[str]:
    """The candidates, most room first (`rooms`, kept up to date per size of pod; `orders`: those found,
    by size): at a thousand nodes, a plan judges a few of them for each VM, not all."""
    size = tuple(sorted(demand.requests.items()))
    if size not in orders:
        rooms = rooms_for(demand, view)
        for _ in rooms.update(demand, view):
            pass
        orders[size] = [name for _, name in rooms.order]
    if candidates.nodes is None:
        return orders[size]
    wanted = set(candidates.nodes)
    return [name for name in orders[size] if name in wanted] + sorted(wanted.difference(orders[size]))


def _beside(demand: Demand, node: Any, view: View, sent: Taken, *, headroom: bool = False) -> str | None:
    """NodeResourcesFit with the VMs promised to the node there too (and HEADROOM of its cpu and memory)."""
    if not sent.vms and not headroom:
        return None
    beside, allocatable = dict(sent.requests), allocatable_of(name_of(node), node, view) if headroom else {}
    for resource in ("cpu", "memory") if isinstance(allocatable, dict) else ():
        beside[resource] = beside.get(resource, 0) + int(HEADROOM * allocatable.get(resource, 0))
    return node_resources_fit(demand, node, view, beside=beside, beside_pods=sent.vms)


def aimed(node: str, hostname: str, evacuation: Evacuation, why: str) -> Decision:
    shown = node if hostname == node else f"{node} ({kinds.HOSTNAME_LABEL}={hostname})"
    return Decision(AIMED, node=node, preferences=((node, 100),),
                    reason=f"evacuation of VM {evacuation.namespace}/{evacuation.vmi} off {evacuation.source} "
                           f"aimed at {shown}, {why}")


def aim_patch(migration: Any, hostname: str) -> list[dict[str, Any]]:
    """The add-only JSON patch that aims the migration, a miss failing after UNSCHEDULABLE_SECONDS (its spec is never
    empty: `exemption` reads its priority there)."""
    ops = [{"op": "add", "path": f"/spec/{kinds.ADDED_NODE_SELECTOR}", "value": {kinds.HOSTNAME_LABEL: hostname}}]
    record(ops, migration, {kinds.UNSCHEDULABLE_TIMEOUT_ANNOTATION: str(UNSCHEDULABLE_SECONDS)})
    return ops


def node_of(view: View, hostname: str | None) -> str | None:
    """The node whose kubernetes.io/hostname label is `hostname` (what an addedNodeSelector names): the
    node of that name, as a rule; else the first found among all."""
    node = view.node(hostname) if hostname else None
    if node is None or kinds.labels(node).get(kinds.HOSTNAME_LABEL) != hostname:
        node = next((n for n in (view.nodes() if hostname else ()) if kinds.labels(n).get(kinds.HOSTNAME_LABEL) == hostname),
                    None)
    return None if node is None else name_of(node)
