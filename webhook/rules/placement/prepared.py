"""Pure: a drain's share-manager answered before it is created again, and when that answer still holds.

`kubectl drain` evicts a node's share-manager pods at once; longhorn-manager creates each again a
few seconds later, once the old pod is gone (the new one has its name). Tens of them then arrive
together, each judged with its VM's migration target on the cluster's nodes (`together`), and VM
starts wait behind that work. The old pod, terminating meanwhile, already says what the new one
asks of a node: `serve` judges it in that window (`admission.prepare`) and keeps the answer here,
for the pod created in its place.

A prepared answer is what the rule answered then, and the new pod gets it only where it still holds
(`check`): the pod asks the nodes the same (`ask_of`), the VM's pod, the migration target waiting
for it and its VMI are as the caches held them then, the VM leaves its node for the same reason and
that node's labels are the same (the migration target is kept with the answer), each node the answer
names that changed since (`View.changes_among`: a pod bound there, the node updated) still takes
both pods beside the VMs sent there (judged again, that node alone; for room alone where only pods
that take only room came or went there, such as the drain's other share-managers, and the VM's
filters read nothing else of them: `fit.judged_by_room`), and it is at most PREPARED_SECONDS old.
Otherwise the pod is judged as it arrives, as without it. Where a named node changed, the order of
the nodes by room may have too: the preferred node is then still one that takes both, not always
the one with most room.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Iterator, Mapping
from typing import Any

import orjson

from .. import fit
from ..fit.demand import Demand
from ..fit.fields import Unreadable
from .decide import Decision
from .together import Destinations

PREPARED_SECONDS = 60.0  # a drain's share-managers are created again within seconds of their eviction
AGAIN_SECONDS = 15.0  # an answer still waiting for its pod is worked out again this often
MOST = 2_000  # answers held at most: a drain of a node re-creates 110 share-managers at most

Key = tuple[str, str]  # the share-manager pod's namespace and name (the new pod has the old one's)


@dataclasses.dataclass(frozen=True, slots=True)
class Basis:
    """What an answer rested on when it was worked out: objects as the caches handed them out
    (the same object, or an equal one, is what the rules read unchanged), and the view's position."""

    ask: Hashable  # what the share-manager pod asks of a node (`ask_of`)
    vm: str  # the VMI's uid
    vm_pod: dict[str, Any]
    waiting: dict[str, Any] | None  # the VM's migration target pod not scheduled yet
    vmi: dict[str, Any] | None
    source: str  # the node the VM is leaving
    source_labels: Mapping[str, Any] | None  # its labels (what a migration target is rendered from)
    leaving: str  # why it is leaving (the node cannot take the share-manager, or the VM is migrating)
    position: int | None  # the view's position before the search (`View.nodes_changed`)


@dataclasses.dataclass(frozen=True, slots=True)
class Prepared:
    """An answer worked out for a share-manager pod before it is created."""

    decision: Decision
    basis: Basis
    made: float  # the caller's monotonic clock
    target: Any = None  # the VM's migration target pod it was judged with (`kubevirt.target.TargetPod`)
    # Its demand, where only its room can change on a node as pods that take only room come and go
    # (`fit.judged_by_room`, the share-manager judged by NodeResourcesFit alone): such a node is
    # checked again for room only. None: each node that changed is judged again in full.
    moved: Demand | None = None
    # The nodes the answer was picked from, most room first (`together.decide_together`): a named node
    # that no longer takes both is left out of it (`together.left_of`). None: judged as it arrives.
    found: Destinations | None = None


def ask_of(pod: Mapping[str, Any], namespace: str, memo: Any = None) -> Hashable | None:
    """What the node-level checks and NodeResourcesFit read of a share-manager pod (its run key
    and requests), with its namespace and name; None where that cannot be said (the pod is then
    answered as it arrives)."""
    try:
        demand = Demand.of(pod, namespace, memo)
        spec = pod["spec"]
        affinity = spec.get("affinity") or {}
        # `fit.run_key`'s fields, an empty one as none: the caches keep no empty field.
        key = orjson.dumps((spec.get("tolerations") or None, spec.get("nodeSelector") or None,
                            affinity.get("nodeAffinity") or None), option=orjson.OPT_SORT_KEYS)
    except (Unreadable, KeyError, TypeError, AttributeError, orjson.JSONEncodeError):
        return None
    name = (pod.get("metadata") or {}).get("name")
    if not isinstance(name, str) or not name:
        return None
    return namespace, name, key, tuple(sorted(demand.requests.items()))


@dataclasses.dataclass(frozen=True, slots=True)
class Check:
    """Whether a prepared answer holds for the pod arriving now: `why` not, or the nodes it names
    that changed since, to be judged again before it does: in full (`again`: a node updated, a pod
    bound there), or for room alone (`room`: only pods that take only room came or went there)."""

    why: str | None = None
    again: frozenset[str] = frozenset()
    room: frozenset[str] = frozenset()


def check(prepared: Prepared, now_basis: Basis, view: fit.View, now: float,
          seconds: float = PREPARED_SECONDS) -> Check:
    """Whether the prepared answer holds for the pod arriving now (`now_basis`: the same look-ups
    made for it)."""
    then = prepared.basis
    if now - prepared.made > seconds:
        return Check(f"prepared {now - prepared.made:.0f} s before, more than {seconds:.0f}")
    if now_basis.ask is None or now_basis.ask != then.ask:
        return Check("the pod asks the nodes otherwise than the one it was prepared from")
    if now_basis.vm != then.vm or now_basis.source != then.source:
        return Check("another VM uses its volume now")
    if now_basis.source_labels != then.source_labels:
        return Check(f"the labels of node {then.source} changed since")
    if now_basis.leaving != then.leaving:
        return Check(f"its VM leaves its node for another reason now ({now_basis.leaving})")
    for what, seen, was in (("VM's pod", now_basis.vm_pod, then.vm_pod), ("VMI", now_basis.vmi, then.vmi),
                            ("migration target pod", now_basis.waiting, then.waiting)):
        if seen is not was and seen != was:  # the same version, or decoded again unchanged
            return Check(f"its {what} changed since")
    changes = view.changes_among({*prepared.decision.required, *prepared.decision.nodes}, then.position)
    if changes is None:
        return Check("the caches cannot say which nodes changed since")
    changed, beyond_room = changes
    if prepared.moved is None:
        return Check(again=frozenset(changed))
    return Check(again=frozenset(beyond_room), room=frozenset(changed).difference(beyond_room))


def as_answer(prepared: Prepared, now: float) -> Decision:
    """The decision for the pod arriving now, its reason saying when it was worked out."""
    decision = prepared.decision
    ago = max(now - prepared.made, 0.0)
    return dataclasses.replace(decision, reason=f"{decision.reason} (worked out {ago:.1f} s before the pod was "
                                                f"created, from the one it replaces)")


class PreparedAnswers:
    """The answers prepared for share-manager pods not created yet, by the pod's namespace and name."""

    __slots__ = ("most", "_held")

    def __init__(self, most: int = MOST) -> None:
        self.most = most
        self._held: dict[Key, Prepared] = {}

    def keep(self, key: Key, prepared: Prepared) -> bool:
        """Hold the answer for the pod `key` (replacing an older one); False when too many are held."""
        if key not in self._held and len(self._held) >= self.most:
            return False
        self._held[key] = prepared
        return True

    def take(self, key: Key) -> Prepared | None:
        """The answer for the pod arriving now, no longer held: each is used once."""
        return self._held.pop(key, None)

    def held(self, key: Key) -> Prepared | None:
        return self._held.get(key)

    def expire(self, now: float, seconds: float = PREPARED_SECONDS) -> list[tuple[Key, Prepared]]:
        """Let go of the answers older than `seconds`; those let go, by pod."""
        old = [key for key, prepared in self._held.items() if now - prepared.made > seconds]
        return [(key, self._held.pop(key)) for key in old]

    def __contains__(self, key: object) -> bool:
        return key in self._held

    def __iter__(self) -> Iterator[Key]:
        return iter(list(self._held))

    def __len__(self) -> int:
        return len(self._held)
