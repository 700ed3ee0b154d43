"""Pure: the VMs of a drain already sent to a node, not there yet: the one model of room promised to pods on their way
that `fit`'s checks count (`to`: NodeResourcesFit's `beside`). A drain's aimed evacuations fill one from the caches
for each plan (`aim.plan`); `serve` keeps one for the VMs sent to follow their share-managers."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Container, Mapping
from typing import Any

from ... import kinds
from ...kinds import POD
from ..fit.usage import PodUsage, Usage
from ..fit.view import View, bound_node

PROMISE_SECONDS = 900.0  # a drain's VMs all migrate within this (KubeVirt runs 2 a node, 5 a cluster)
RECHECK_SECONDS = 2.0  # a node's promises are looked at again at most this often: not within a drain's burst
MOST = 10_000  # promises kept at most, the oldest dropped first


@dataclasses.dataclass(frozen=True, slots=True)
class Taken:
    """What the VMs promised to a node will take there, in all."""

    vms: int
    requests: Mapping[str, int]

    def plus(self, other: "Taken") -> "Taken":
        if not other.vms:
            return self
        added = dict(self.requests)
        for resource, amount in other.requests.items():
            added[resource] = added.get(resource, 0) + amount
        return Taken(self.vms + other.vms, added)


NOTHING = Taken(0, {})


@dataclasses.dataclass(frozen=True, slots=True)
class Promise:
    vm: str  # the VMI's uid, as its pods carry it (kubevirt.io/created-by)
    source: str  # the node the VM is leaving
    node: str  # where its share-manager was sent first, or where it was bound since
    share_manager: tuple[str, str]  # its pod's namespace and name
    usage: PodUsage  # what the VM's migration target pod will take there
    made: float


class Promises:
    """The promises of one process, by VM and by node; times are the caller's monotonic clock."""

    __slots__ = ("_by_vm", "_by_node", "_taken", "_checked")

    def __init__(self) -> None:
        self._by_vm: dict[str, Promise] = {}  # oldest first
        self._by_node: dict[str, dict[str, Promise]] = {}
        self._taken: dict[str, Usage] = {}  # by node: what its promises take, added up
        self._checked: dict[str, float] = {}  # by node: when its promises were last looked at

    def make(self, vm: str, source: str, node: str, share_manager: tuple[str, str], usage: PodUsage,
             now: float) -> None:
        """The VM is to come to `node`, following its share-manager: its newer promise replaces an older one."""
        if not vm or not usage.readable:
            return
        self._drop(vm)
        while len(self._by_vm) >= MOST:
            self._drop(next(iter(self._by_vm)))
        self._keep(Promise(vm=vm, source=source, node=node, share_manager=share_manager, usage=usage, made=now))

    def _keep(self, promise: Promise) -> None:
        self._by_vm[promise.vm] = promise
        if promise.node not in self._by_node:
            self._checked.setdefault(promise.node, promise.made)
        self._by_node.setdefault(promise.node, {})[promise.vm] = promise
        self._taken.setdefault(promise.node, Usage()).add(promise.usage)

    def to(self, node: str, *, but: str = "") -> Taken:
        """What the VMs promised to `node` will take there, VM `but` aside (the one being placed again)."""
        kept = self._by_node.get(node)
        if not kept:
            return NOTHING
        taken = self._taken[node]
        if but in kept:  # rare: the VM's share-manager placed again
            taken = Usage()
            for promise in kept.values():
                if promise.vm != but:
                    taken.add(promise.usage)
        return Taken(taken.pods, dict(taken.requested)) if taken.pods else NOTHING

    def end(self, vm: str, *, made: float | None = None) -> None:
        """End the VM's promise; with `made`, only the one made then (a newer one stays)."""
        promise = self._by_vm.get(vm)
        if promise is not None and (made is None or promise.made == made):
            self._drop(vm)

    def review(self, now: float, view: View, peek: Callable[..., tuple[bool, Any]],
               ahead: Container[tuple[str, str]] = ()) -> None:
        """End the promises that no longer hold, of each node not looked at for RECHECK_SECONDS; move those whose
        share-manager was bound elsewhere, as the caches say now: `view`, the VM's pods (where it indexes them),
        `peek`, the share-manager pod (one unknown, or answered `ahead` of its creation, is there)."""
        for node, checked in list(self._checked.items()):
            if now - checked < RECHECK_SECONDS or node not in self._by_node:
                continue
            self._checked[node] = now
            for promise in list(self._by_node[node].values()):
                known, pod = peek(POD, *promise.share_manager)
                gone = pod is None or kinds.terminating(pod)
                pods = view.pods_labelled(kinds.CREATED_BY_LABEL, promise.vm)
                on = None if pods is None else {n for n in (bound_node(p) for p in pods if p is not None) if n}
                if now >= promise.made + PROMISE_SECONDS or (known and gone and promise.share_manager not in ahead) \
                        or (on is not None and on != {promise.source}):
                    self._drop(promise.vm)
                elif not gone and (bound := bound_node(pod)) is not None and bound != promise.node:
                    self._drop(promise.vm)
                    self._keep(dataclasses.replace(promise, node=bound))

    def _drop(self, vm: str) -> None:
        promise = self._by_vm.pop(vm, None)
        if promise is not None:
            kept = self._by_node.get(promise.node)
            if kept is not None:
                kept.pop(vm, None)
                self._taken[promise.node].remove(promise.usage)
                if not kept:
                    del self._by_node[promise.node], self._taken[promise.node], self._checked[promise.node]

    def nodes(self) -> Container[str]:
        """The nodes any VM was promised to (a live view)."""
        return self._by_node.keys()
