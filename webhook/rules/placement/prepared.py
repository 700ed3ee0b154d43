"""Pure: a drain's share-manager answered while its evicted pod terminates, for the pod longhorn-manager creates in
its place, and whether that answer still holds (`check`): the pod asks the nodes the same, its VM leaves for the same
reason, every read the rule made answers the same (`lookup.recorded`), and each node it names that changed since
(`View.changes_among`) is judged again, for room alone where only pods that take only room came or went there
(`fit.judged_by_room`)."""
from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping
from typing import Any

import orjson

from .. import fit
from ..fit.demand import Demand
from ..fit.fields import Unreadable
from .decide import Decision
from .together import Destinations

PREPARED_SECONDS = 60.0  # a drain's share-managers are created again within seconds of their eviction
AGAIN_SECONDS = 15.0  # an answer still waiting for its pod is worked out again this often

Key = tuple[str, str]  # the share-manager pod's namespace and name (the new pod has the old one's)


@dataclasses.dataclass(frozen=True, slots=True)
class Prepared:
    """An answer worked out for a share-manager pod before it is created, and what it rested on: what the pod asks of
    a node (`ask_of`), why its VM leaves its node, the rule's reads (`lookup.recorded.Read`), and the view's position
    before the search."""

    decision: Decision
    ask: Hashable
    leaving: str
    reads: tuple[Any, ...]
    position: int | None
    made: float  # the caller's monotonic clock
    vm: str = ""  # the VMI's uid (its promise)
    target: Any = None  # the VM's migration target pod it was judged with (`kubevirt.target.TargetPod`)
    moved: Demand | None = None  # `DestinationSearch.demand_for_room`: None, a changed node is judged again in full
    found: Destinations | None = None  # the nodes it was picked from, most room first, for `together.left_of`


def ask_of(pod: Mapping[str, Any], namespace: str, memo: Any = None) -> Hashable | None:
    """What the node-level checks and NodeResourcesFit read of a share-manager pod (its run key and requests), with
    its namespace and name; None where that cannot be said (the pod is then answered as it arrives)."""
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


def check(prepared: Prepared, ask: Hashable | None, leaving: str, view: fit.View, now: float) -> Check:
    """Whether the prepared answer holds for the pod arriving now (`ask`, `leaving`: as for it), its
    reads aside (`lookup.recorded.changed`)."""
    if now - prepared.made > PREPARED_SECONDS:
        return Check(f"prepared {now - prepared.made:.0f} s before, more than {PREPARED_SECONDS:.0f}")
    if ask is None or ask != prepared.ask:
        return Check("the pod asks the nodes otherwise than the one it was prepared from")
    if leaving != prepared.leaving:
        return Check(f"its VM leaves its node for another reason now ({leaving})")
    changes = view.changes_among({*prepared.decision.required, *prepared.decision.nodes}, prepared.position)
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


# The answers prepared for share-manager pods not created yet, by the pod's namespace and name; each used once.
PreparedAnswers = dict[Key, Prepared]
