"""Pure: where a share-manager and its VM can land together, when the VM is leaving its node.

Left to go anywhere, a drain's share-manager may land where the VM can never follow (a node of an older
CPU or QEMU refuses its migration target pod): it is required among the nodes where both pass the
never-strand checks, those with most room for the VM, one preferred as their room says (`spread_over`).
"""
from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import Any, NamedTuple

from .. import fit
from .decide import AMONG, PIN_WEIGHT, PREFERRED, Decision
from .patch import live_terms
from ..fit.demand import Demand
from ..fit.fields import CannotTell, Unreadable
from ..fit.resources import least_allocated, node_resources_fit
from ..kubevirt.target import TargetPod, lacking
from .promised import NOTHING, Promises, Taken
from .rooms import Rooms, Scored, rooms_for

PREFERENCE_WEIGHTS = (PIN_WEIGHT, PIN_WEIGHT // 2, PIN_WEIGHT // 4)  # a preferred term each, the picked node first
# Required among at most this many nodes, those with most room for the VM: the patch adds a term per
# node for each of the pod's own terms (a node field selector takes one value), and 8 nodes that
# take both pods leave kube-scheduler room enough while the pod stays small (and a prepared answer few to judge again).
AMONG_NODES = 8
AMONG_TERMS = 64  # the terms an among-pin may write in all (the pod's own terms × the nodes)
# Nodes that take both but not beside the VMs already sent there (`promised`) judged at most this many
# times AMONG_NODES before the search stops: a large drain's later share-managers look further, not forever.
CROWDED_SEARCH = 4
SHOWN = 5  # nodes named in a reason before "and N more"


class Destination(NamedTuple):
    """A node that takes both pods now, and the room it leaves the VM (NodeResourcesFit's score, 0–1)."""

    node: str
    room: float


@dataclasses.dataclass(frozen=True, slots=True)
class Destinations:
    """Where both land, most room first; and why each other node does not (for the reason).
    `crowded`: every node found takes both now, but none beside the VMs already sent to it."""

    nodes: tuple[Destination, ...]
    refused: Mapping[str, str]
    crowded: bool = False


class DestinationSearch:
    """The nodes of the view but the VM's own (`source`), judged for both pods one at a time: iterating judges the
    next and yields its name, so that a caller can give the loop back and stop at a deadline; `found` is what they say."""

    def __init__(self, share_manager: Mapping[str, Any], share_manager_namespace: str, target: TargetPod,
                 vm_namespace: str, source: str, view: fit.View, promises: Promises | None = None,
                 vm: str = "") -> None:
        self.share_manager, self.share_manager_namespace = share_manager, share_manager_namespace
        self.target, self.vm_namespace, self.source, self.view = target, vm_namespace, source, view
        self.promises, self.vm = Promises() if promises is None else promises, vm
        self.refused: dict[str, str] = {}
        self.taking: list[Destination] = []
        self.crowded: list[str] = []  # nodes without room for the VM beside the VMs already sent there
        self.beside_none = False  # every node found is crowded: judged again without the VMs sent there
        self.rooms: Rooms | None = None
        self.nodes: tuple[Scored, ...] = ()  # (room, node name), most room first
        self.rides = False  # the share-manager fits wherever the VM does (`rides_along`)
        self.own: tuple[Any, ...] | None = None  # the VM's filters besides NodeResourcesFit (`fit.prefilter`)
        self.only: Any = None  # the only nodes they can turn it away from, if they can say (`fit.refused_only`)
        try:
            self.shared = Demand.of(share_manager, share_manager_namespace, view.memo)
            self.moved = Demand.of(target.pod, vm_namespace, view.memo)
        except Unreadable as error:
            self.refused = {"*": f"a pod cannot be read: {error}"}
            return
        self.rooms = rooms_for(self.moved, view)
        self.nodes = self.rooms.order  # as of its last update
        self.rides = rides_along(self.shared, self.moved, view)

    def __iter__(self) -> Iterator[str]:
        if self.rooms is None:
            return
        yield from self.rooms.update(self.moved, self.view)  # the nodes that changed since, scored again
        self.nodes = self.rooms.order  # a tuple of its own: the caches may change while the loop has the turn
        taking, crowded, promised = self.taking, self.crowded, self.promises.nodes()
        later: list[Scored] = []  # nodes with VMs already sent to them: after those without
        for room, name in self.nodes:
            if len(taking) >= AMONG_NODES:
                break
            if name in promised:
                later.append((room, name))
                continue
            self._judge(name, room, NOTHING)
            yield name
        for room, name in later:
            if len(taking) >= AMONG_NODES or len(crowded) >= AMONG_NODES * CROWDED_SEARCH:
                break
            self._judge(name, room, self.promises.to(name, but=self.vm))
            yield name
        if not taking and crowded:  # none beside the VMs already sent: where both land now
            self.beside_none = True
            for name in list(crowded):
                self._judge(name, None, NOTHING)
                yield name

    def judge_again(self, names: Iterable[str]) -> dict[str, str] | str:
        """Why each of `names` (the nodes of a prepared answer that changed since) does not take both pods beside
        the VMs sent there; a string where the pods cannot be read, so that no node can be told."""
        if self.rooms is None:
            return next(iter(self.refused.values()))
        refused: dict[str, str] = {}
        for name in sorted(names):
            self._judge(name, None, self.promises.to(name, but=self.vm))
            if self.view.node(name) is None:
                refused[name] = f"node {name} is gone"
            elif name in self.refused:
                refused[name] = self.refused[name]
        return refused

    def demand_for_room(self) -> Demand | None:
        """The VM's demand, its requests alone (not what it read of the cluster), where a node judged
        here stays so but for its room while pods that take only room come and go there: the
        share-manager judged by NodeResourcesFit alone, the VM `fit.judged_by_room`; else None."""
        if self.rooms is None or not self.rides or not fit.judged_by_room(self.moved):
            return None
        return dataclasses.replace(self.moved, gathered=None, mounts=None, filters=None)

    def _judge(self, name: str, room: float | None, sent: Taken) -> None:
        """Whether both land on the node beside what the VMs counted as sent there take (`sent`):
        into `taking` with the room the VM has there, `crowded`, or `refused` (a node gone since: none)."""
        node = self.view.node(name)
        if node is None:
            return
        if name == self.source:
            self.refused[name] = f"node {name} is where the VM runs now"
            return
        try:  # a node whose room cannot be read: as it was judged without the VMs sent there
            crowded = sent.vms and node_resources_fit(self.moved, node, self.view, beside=sent.requests,
                                                      beside_pods=sent.vms) is not None
        except CannotTell:
            crowded = False
        if crowded:
            self.refused[name] = _crowded(name, sent)
            self.crowded.append(name)
            return
        why = self._said_alike(name, node)
        if why is None:
            if self.own is None:
                self.own = tuple(check for check in fit.prefilter(self.moved, self.view)
                                 if check is not fit.node_resources_fit)
                self.only = fit.refused_only(self.own, self.moved)
            if self.only is None or fit.may_refuse(self.only, name, node):
                why = fit.why_not_pass(self.own, self.moved, node, self.view, "the VM")
        if why is not None:
            self.refused[name] = why
            return
        if sent.vms or room is None:
            room = least_allocated(self.moved, node, self.view, sent.requests)
        self.taking.append(Destination(name, room if room is not None else 0.0))

    def _said_alike(self, name: str, node: Mapping[str, Any]) -> str | None:
        """What the node says to every pair of this shape, in the order kube-scheduler would: both
        pods' node-level checks, KubeVirt's labels, NodeResourcesFit for the VM."""
        pod, view = self.target.pod, self.view
        return (fit.why_not_run(name, node, self.share_manager, needs_kubevirt=False, memo=view.memo, demand=self.shared)
               or (None if self.rides else fit.why_not_fit(self.share_manager, self.share_manager_namespace, node, view,
                                                           "the share-manager", demand=self.shared))
               or lacking(self.target, name, node)
               or fit.why_not_run(name, node, pod, needs_kubevirt=True, memo=view.memo, demand=self.moved)
                or fit.why_not_pass((fit.node_resources_fit,), self.moved, node, view, "the VM"))

    @property
    def found(self) -> Destinations:
        """Where both land beside the VMs already sent; where none does, where both land now."""
        return Destinations(tuple(sorted(self.taking, key=lambda found: (-found.room, found.node))), self.refused,
                            self.beside_none and bool(self.taking))


def room_again(moved: Demand, names: Iterable[str], view: fit.View, promises: Promises, vm: str) -> dict[str, str]:
    """Why each of `names` that has no room now for the VM (`moved`, its demand) beside the VMs sent there but `vm`
    has none."""
    refused: dict[str, str] = {}
    for name in sorted(names):
        node = view.node(name)
        if node is None:
            refused[name] = f"node {name} is gone"
            continue
        sent = promises.to(name, but=vm)
        try:
            why = node_resources_fit(moved, node, view, beside=sent.requests, beside_pods=sent.vms)
        except CannotTell as error:
            refused[name] = f"cannot tell whether node {name} has room for the VM: {error}"
            continue
        if why is not None:
            refused[name] = why if not sent.vms else _crowded(name, sent)
    return refused


def _crowded(name: str, sent: Taken) -> str:
    return f"node {name} has no room for the VM beside the {sent.vms} VM(s) already sent to follow their share-managers " \
        "there"


def left_of(found: Destinations, decision: Decision, refused: Collection[str]) -> Destinations | None:
    """The nodes of an answer worked out from `found` once those `refused` since are left out: the nodes it named (no
    other was judged again), most room first."""
    named_nodes = {*decision.required, *decision.nodes}
    if found.crowded or not decision.preferences or decision.preferences[0][0] in refused:
        return None
    left = tuple(destination for destination in found.nodes
                 if destination.node in named_nodes and destination.node not in refused)
    return Destinations(left, {}) if left else None


def rides_along(shared: Demand, moved: Demand, view: fit.View) -> bool:
    """Whether the share-manager fits wherever the VM's target pod does: NodeResourcesFit is the only filter with
    anything to look at for it, and it asks for nothing the VM does not ask as much of (a pod slot each)."""
    return fit.prefilter(shared, view) == (fit.node_resources_fit,) and all(
        asked <= 0 or moved.requests.get(resource, 0) >= asked for resource, asked in shared.requests.items())


def named(items: list[str] | tuple[str, ...], separator: str = ", ") -> str:
    """A list for a reason: the first few, then how many more."""
    shown = separator.join(items[:SHOWN])
    return shown if len(items) <= SHOWN else f"{shown} and {len(items) - SHOWN} more"


def among_at_most(share_manager: Mapping[str, Any]) -> int:
    """How many nodes the share-manager may be required among: AMONG_TERMS over its own required
    terms (Longhorn writes one at most)."""
    return max(1, min(AMONG_NODES, AMONG_TERMS // max(len(live_terms(share_manager)), 1)))


def decide_together(found: Destinations, vm: str, leaving: str, *, required: bool, most: int = AMONG_NODES,
                    spread: str = "", prefer: str = "") -> Decision | None:
    """Pinned among the nodes where both land with most room for the VM (or only preferred, with
    `required` False), one of them preferred, picked by `spread` (`spread_over`), or the node
    `prefer` where it is among them; None when no node takes both."""
    if not found.nodes:
        return None
    candidates = found.nodes[:most]
    kept = [index for index, destination in enumerate(candidates) if destination.node == prefer]
    first = kept[0] if kept else spread_over(candidates, spread)
    best = candidates[first:] + candidates[:first]
    preferences = tuple((destination.node, weight) for destination, weight in zip(best, PREFERENCE_WEIGHTS))
    among = tuple(sorted(destination.node for destination in candidates))
    nodes = named(among) + (f" (the {len(among)} with most room for the VM)" if len(among) == most else "")
    where = f"where this share-manager and the migration of {vm} can both land ({leaving})"
    if found.crowded:
        where += ", though none with room beside the VMs already sent to follow their share-managers there"
    first_node, *fallbacks = [node for node, _ in preferences]
    preferred = (f"preferred {first_node}" + (f", then {named(fallbacks)}" if fallbacks else "")
                 + " (the first picked by its volume, each node in proportion to the room it leaves the VM)")
    if not required:
        reason = f"{preferred}, among {nodes}, {where} (pins are preferences only: --pin preferred)"
        return Decision(PREFERRED, preferences=preferences, reason=reason)
    return Decision(AMONG, preferences=preferences, reason=f"pinned among {nodes}, {where}; {preferred}",
                    among=among)


def spread_over(candidates: tuple[Destination, ...], key: str) -> int:
    """Which of the nodes (most room first) `key` prefers: the same for the same key, and over many keys each node in
    proportion to the room it leaves the VM: given one first preference, a drain's share-managers would all land on one
    node, and their VMs could not all follow."""
    total = sum(max(destination.room, 0.0) for destination in candidates)
    fraction = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big") / 2 ** 64
    if total <= 0:  # no room left anywhere: alike
        return int(fraction * len(candidates))
    point, reached = fraction * total, 0.0
    for index, destination in enumerate(candidates):
        reached += max(destination.room, 0.0)
        if point < reached:
            return index
    return len(candidates) - 1


def nowhere(found: Destinations, vm: str) -> str:
    """Why no node takes both pods, for the reason of the decision made without them."""
    reasons = [why for _, why in sorted(found.refused.items())]
    return f"no node takes both this share-manager and the migration of {vm}: {named(reasons, '; ') or 'no nodes'}"
