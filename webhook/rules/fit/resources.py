"""NodeResourcesFit (kubernetes `noderesources/fit.go`): a pod slot and every request against
what the node has left."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ... import kinds
from ..shared.quantity import nanos, show, units
from .fields import CannotTell, name_of
from .demand import Demand
from .view import View


def allocatable_of(name: str, node: Mapping[str, Any], view: View) -> dict[str, int] | str:
    """The node's `status.allocatable` in the scheduler's units, or why it cannot be read: kept in
    the store's memo while it stays the same, as every admission asks about the same few nodes."""
    return view.memo.latest(_allocatable, (_allocatable, name), kinds.status(node).get("allocatable"), node)


def _allocatable(node: Any) -> dict[str, int] | str:
    allocatable = kinds.status(node).get("allocatable")
    if not isinstance(allocatable, dict) or not allocatable:
        return "it has no status.allocatable"
    amounts = {}
    for resource, value in allocatable.items():
        try:
            amounts[resource] = units(resource, nanos(value))
        except ValueError:
            return f"allocatable {resource} {value!r} is not a quantity"
    return amounts


def node_resources_fit(demand: Demand, node: Mapping[str, Any], view: View, subject: str = "the VM", *,
                       beside: Mapping[str, int] | None = None, beside_pods: int = 0) -> str | None:
    """NodeResourcesFit: one pod slot and every request against allocatable minus what the node's pods request
    (noderesources/fit.go `fitsRequest`), and `beside_pods` more pods asking `beside` in all when given."""
    name = name_of(node)
    usage = view.usage(name)
    if usage.unreadable:
        raise CannotTell(f"{usage.unreadable} pod(s) on it have requests that do not parse")
    allocatable = allocatable_of(name, node, view)
    if isinstance(allocatable, str):
        raise CannotTell(allocatable)
    slots = allocatable.get("pods", 0)
    if slots <= 0:
        return f"node {name} offers no pod slots"
    pods = usage.pods + beside_pods
    if pods + 1 > slots:
        return f"node {name} has no room: {pods} of {slots} pods"
    room_reason = None
    for resource, asked in demand.requests.items():
        if asked <= 0:
            continue
        has = allocatable.get(resource, 0)
        if has <= 0:
            return f"node {name} offers no {resource}"
        if asked > has:
            return (f"node {name} is too small: {subject} asks {resource} {show(resource, asked)}, "
                    f"the node has {show(resource, has)} in all")
        used = usage.requested.get(resource, 0) + (beside or {}).get(resource, 0)
        if room_reason is None and asked > has - used:
            room_reason = (f"node {name} has no room: {resource} {show(resource, used)} of {show(resource, has)} "
                           f"requested, {subject} asks {show(resource, asked)}")
    return room_reason


def least_allocated(demand: Demand, node: Mapping[str, Any], view: View,
                    beside: Mapping[str, int] | None = None) -> float | None:
    """NodeResourcesFit's default score (noderesources/least_allocated.go), 0 to 1: the share of the node's cpu and
    memory left free once the pod is placed (beside pods asking `beside` in all); None when its room cannot be read."""
    name = name_of(node)
    usage = view.usage(name)
    allocatable = allocatable_of(name, node, view)
    if usage.unreadable or isinstance(allocatable, str):
        return None
    shares = []
    for resource in ("cpu", "memory"):  # NodeResourcesFit's default scoring resources, weight 1 each
        has = allocatable.get(resource, 0)
        if has <= 0:
            return None
        taken = usage.requested.get(resource, 0) + demand.requests.get(resource, 0) + (beside or {}).get(resource, 0)
        shares.append(max(0.0, (has - taken) / has))
    return sum(shares) / len(shares)
