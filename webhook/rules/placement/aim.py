"""Pure: where a drain's evacuation migration of an opted-in VM is aimed (`serve --aim-evacuations on`).

KubeVirt 1.9's evacuation controller creates every migration of a drained node at once, with no
`spec.addedNodeSelector` (pkg/virt-controller/watch/drain/evacuation/evacuation.go,
`GenerateNewMigration`): kube-scheduler then picks each target knowing nothing of the VM's NFS server,
and the keeper moves the VM a second time. Added at CREATE, the selector is kept (virt-api's create
validator does not check it, KubeVirt's mutator replaces only /metadata, the priority check reads the
request's user) and merged into the target pod's nodeSelector under the VM's own keys
(pkg/virt-controller/watch/migration/migration.go, `createTargetPod`). So each evacuation is aimed,
before any target pod exists, at the node where the VM's storage is, or will be when its share-manager
leaves the drained node too: then one node per volume, which the volume's other VMs and its re-created
share-manager follow (the aimed migrations in the caches are the record). The node must take KubeVirt's
target pod (the never-strand checks, `rules.fit`, on the pod `rules.kubevirt.target` renders), counting
what is already aimed at it and not landed. Where none does, or an aimed evacuation of this VM failed
since the drain began, the migration is left as KubeVirt made it.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ... import kinds
from ..fit import View, why_not_fit, why_not_run
from ..fit.demand import Demand
from ..fit.fields import Unreadable, name_of
from ..fit.resources import allocatable_of
from ..fit.usage import PodUsage, Usage
from ..kubevirt.target import TargetPod, lacking
from ..shared.alone import Alone
from ..shared.facts import Fact
from .decide import AIMED, Decision

FINISHED = ("Succeeded", "Failed")
ROOMY = ("cpu", "memory")  # what a node's room for the VM is measured in


@dataclasses.dataclass(frozen=True, slots=True)
class Evacuation:
    """What the rule reads of a migration."""

    name: str
    namespace: str
    vmi: str
    source: str  # the node it leaves (the evacuation annotation's value)
    aimed: str | None  # the kubernetes.io/hostname of its addedNodeSelector, if any
    phase: str
    created: str
    uid: str

    @property
    def finished(self) -> bool:
        return self.phase in FINISHED


def read_evacuation(migration: Any, namespace: str = "") -> Evacuation:
    """The migration as the rule reads it (`namespace`: the request's, when the object has none)."""
    metadata, spec = kinds.meta(migration), kinds.spec(migration)
    added = spec.get(kinds.ADDED_NODE_SELECTOR)
    aimed = added.get(kinds.HOSTNAME_LABEL) if isinstance(added, dict) else None
    text = (lambda value: value if isinstance(value, str) else "")
    return Evacuation(name=text(metadata.get("name")) or text(metadata.get("generateName")),
                      namespace=text(metadata.get("namespace")) or namespace, vmi=text(spec.get("vmiName")),
                      source=text(kinds.annotations(migration).get(kinds.EVACUATION_ANNOTATION)),
                      aimed=aimed if isinstance(aimed, str) and aimed else None,
                      phase=text(kinds.status(migration).get("phase")), created=text(metadata.get("creationTimestamp")),
                      uid=text(metadata.get("uid")))


def exemption(migration: Any, user: str) -> Alone | None:
    """Why the created migration is no drain's evacuation by virt-controller that we may aim, or None.
    Never a user's, the keeper's, the descheduler's (system-maintenance) or a workload update's."""
    if not isinstance(migration, dict) or not isinstance(migration.get("spec", {}), dict):
        return Alone.NOT_EVACUATION
    metadata = kinds.meta(migration)
    name = metadata.get("generateName") or metadata.get("name") or ""
    if not kinds.annotations(migration).get(kinds.EVACUATION_ANNOTATION) or not str(name).startswith(
            kinds.EVACUATION_PREFIX) or kinds.labels(migration).get(kinds.MANAGED_BY_LABEL) == kinds.COMPONENT:
        return Alone.NOT_EVACUATION
    account = user.rpartition(":")
    if not user.startswith("system:serviceaccount:") or account[2] != kinds.VIRT_CONTROLLER_ACCOUNT:
        return Alone.NOT_VIRT_CONTROLLER
    priority = kinds.spec(migration).get("priority")
    if priority == kinds.DESCHEDULER_PRIORITY:
        return Alone.DESCHEDULER_EVACUATION
    if priority != kinds.DRAIN_PRIORITY:
        return Alone.NOT_EVACUATION
    if kinds.spec(migration).get(kinds.ADDED_NODE_SELECTOR):
        return Alone.ALREADY_AIMED
    return None


def failed_aim(evacuation: Evacuation, earlier: Iterable[Evacuation], since: str | None) -> Alone | None:
    """Whether an aimed evacuation of this VM off the same node failed since the drain began (after
    `since`, the end of the VM's last completed migration: an earlier drain's are no concern):
    AIMED_FAILED when the newest earlier one is it, AIMED_FAILED_EARLIER for an older one."""
    mine = sorted((e for e in earlier if e.vmi == evacuation.vmi and e.namespace == evacuation.namespace
                   and e.source == evacuation.source and e.name != evacuation.name and (not since or e.created > since)),
                  key=lambda e: (e.created, e.name))
    failed = [e for e in mine if e.aimed and e.phase == "Failed"]
    if not failed:
        return None
    return Alone.AIMED_FAILED if mine[-1] is failed[-1] else Alone.AIMED_FAILED_EARLIER


def unfinished_aims(migrations: Iterable[Evacuation], but: str = "") -> list[Evacuation]:
    """The aimed evacuations still under way (but the one named `but`), oldest first."""
    return sorted((m for m in migrations if m.aimed and m.source and not m.finished and m.name != but),
                  key=lambda m: (m.created, m.namespace, m.name))


@dataclasses.dataclass(frozen=True, slots=True)
class Storage:
    """Where the VM's storage is, or will be: `node` where its NFS servers stay off the drained node;
    else the volumes that leave it with the VM (`moving`)."""

    node: str | None = None
    moving: tuple[Fact, ...] = ()
    why: str = ""


def storage_of(facts: Sequence[Fact], drained: str) -> Storage | Alone:
    """The VM's Longhorn disks, the drained node's share-managers counted as leaving with it."""
    longhorn = [f for f in facts if f.volume]
    if not longhorn:
        return Alone.NO_STORAGE
    staying = sorted({f.node for f in longhorn if f.node and f.node != drained})
    if len(staying) > 1:
        return Alone.SPLIT_STORAGE
    if staying:
        disks = ", ".join(f.subject for f in longhorn if f.node == staying[0])
        return Storage(node=staying[0], why=f"where the NFS server of disk {disks} runs")
    return Storage(moving=tuple(longhorn))


class Reserved:
    """A checks' view in which what is aimed at a node and has not landed there takes its room too."""

    def __init__(self, view: View, reserved: Mapping[str, Sequence[PodUsage]]):
        self._view, self._reserved = view, reserved
        self.memo = view.memo

    def __getattr__(self, name: str) -> Any:
        return getattr(self._view, name)

    def usage(self, node_name: str) -> Usage:
        usage = self._view.usage(node_name)
        extra = self._reserved.get(node_name)
        if not extra:
            return usage
        taken = Usage()
        taken.requested, taken.pods, taken.unreadable = dict(usage.requested), usage.pods, usage.unreadable
        taken.ports, taken.any_ip_ports = usage.ports.copy(), usage.any_ip_ports.copy()
        for pod in extra:
            taken.add(pod)
        return taken


def why_not_target(target: TargetPod, namespace: str, name: str, node: Mapping[str, Any] | None,
                   view: View) -> str | None:
    """Why KubeVirt's target pod would not be admitted and fit on the node, or None."""
    if node is None:
        return f"node {name} not found"
    if not kinds.labels(node).get(kinds.HOSTNAME_LABEL):
        return f"node {name} has no {kinds.HOSTNAME_LABEL} label"
    return (why_not_run(name, node, target.pod, needs_kubevirt=True) or lacking(target, name, node)
            or why_not_fit(target.pod, namespace, node, view, "the VM"))


def room(target: TargetPod, namespace: str, node: Mapping[str, Any], view: View) -> float:
    """The share of cpu and memory the node has left once the VM is there (the smaller; 0: unknown)."""
    try:
        asked = Demand.of(target.pod, namespace, view.memo).requests
    except Unreadable:
        return 0.0
    name = name_of(node)
    allocatable = allocatable_of(name, node, view) if isinstance(name, str) else "unnamed"
    if isinstance(allocatable, str):
        return 0.0
    used = view.usage(name).requested
    shares = [(allocatable[r] - used.get(r, 0) - asked.get(r, 0)) / allocatable[r] for r in ROOMY if allocatable.get(r)]
    return min(shares) if shares else 0.0


@dataclasses.dataclass(frozen=True, slots=True)
class Candidates:
    """The nodes the aim may take, best first, and what makes them the choice (for the reason)."""

    nodes: tuple[str, ...]
    why: str
    ranked: bool = False  # several: the one with most room is taken


def choose(target: TargetPod, namespace: str, candidates: Candidates, view: View) -> tuple[str, str] | str:
    """(node, its hostname) of the first candidate (of the most room, when ranked) that takes the VM's
    target pod, or why none does."""
    refused: dict[str, str] = {}
    taking: list[tuple[float, str]] = []
    for name in candidates.nodes:
        node = view.node(name)
        why = why_not_target(target, namespace, name, node, view)
        if why is not None:
            refused[name] = why
            continue
        taking.append((-room(target, namespace, node, view) if candidates.ranked else 0.0, name))
        if not candidates.ranked:
            break
    if not taking:
        shown = "; ".join(refused[n] for n in sorted(refused)[:5]) or "no nodes"
        return f"no node takes its migration target ({candidates.why}): {shown}"
    name = min(taking)[1]
    return name, kinds.labels(view.node(name))[kinds.HOSTNAME_LABEL]


def aimed(node: str, hostname: str, evacuation: Evacuation, why: str) -> Decision:
    """The decision: the evacuation sent to `node`."""
    shown = node if hostname == node else f"{node} ({kinds.HOSTNAME_LABEL}={hostname})"
    return Decision(AIMED, node=node, preferences=((node, 100),),
                    reason=f"evacuation of VM {evacuation.namespace}/{evacuation.vmi} off {evacuation.source} "
                           f"aimed at {shown}, {why}")


def aim_patch(migration: Any, hostname: str) -> list[dict[str, Any]]:
    """The add-only JSON patch that aims the migration (its spec added whole when it has none)."""
    selector = {kinds.HOSTNAME_LABEL: hostname}
    if not isinstance(migration, dict) or not isinstance(migration.get("spec"), dict):
        return [{"op": "add", "path": "/spec", "value": {kinds.ADDED_NODE_SELECTOR: selector}}]
    return [{"op": "add", "path": f"/spec/{kinds.ADDED_NODE_SELECTOR}", "value": selector}]


def follows(aims: Iterable[Evacuation], vmis: set[tuple[str, str]]) -> Evacuation | None:
    """The aimed evacuation a share-manager follows: the oldest unfinished one of its VMs ((namespace, VMI))."""
    return next((a for a in unfinished_aims(aims) if (a.namespace, a.vmi) in vmis), None)


def by_hostname(nodes: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Node names by their kubernetes.io/hostname label (what an addedNodeSelector names)."""
    found: dict[str, str] = {}
    for node in nodes:
        name, hostname = name_of(node), kinds.labels(node).get(kinds.HOSTNAME_LABEL)
        if isinstance(name, str) and isinstance(hostname, str) and hostname:
            found.setdefault(hostname, name)
    return found
