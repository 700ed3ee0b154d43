"""InterPodAffinity (kubernetes `interpodaffinity/filtering.go`): required pod affinity and
anti-affinity, the pod's own and that of the pods already placed."""
from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from ... import kinds
from .demand import Demand
from .fields import name_of, namespace_of, pod_key
from .framework import CannotTell
from .terms import EVERY_NAMESPACE, existing_anti_terms
from .view import View, bound_node


def _domain_nodes(view: View, node: Mapping[str, Any], key: str, value: Any) -> Iterable[Mapping[str, Any]]:
    """The nodes in the same topology domain; for the hostname key, the node itself."""
    if key == kinds.HOSTNAME_LABEL:
        return (node,)
    return [n for n in view.nodes() if kinds.labels(n).get(key) == value]


def _selected(view: View, term: Any) -> list[Mapping[str, Any]] | None:
    """The pods the term may select, anywhere (perhaps more): found by the label its selector
    requires first where the view indexes that label (kube-scheduler's PreFilter gathers them so,
    once per pod); None when the view cannot say, and every pod of a domain's nodes is looked at."""
    first = next((req for req in term.selector or () if req[1] == "In"), None)
    if first is None:
        return None
    found: list[Mapping[str, Any]] = []
    for label_value in sorted(first[2]):
        pods = view.pods_labelled(first[0], label_value)
        if pods is None:
            return None
        found.extend(pods)
    return found


def _in_domain(view: View, node: Mapping[str, Any], term: Any, value: Any,
               selected: list[Mapping[str, Any]] | None) -> Iterable[Mapping[str, Any]]:
    """The pods the term may select in the node's topology domain (perhaps more), from those
    `_selected` found, else every pod of the domain's nodes."""
    if selected is not None:
        if term.topology_key == kinds.HOSTNAME_LABEL:
            name = name_of(node)
            return [pod for pod in selected if bound_node(pod) == name]
        return [pod for pod in selected
                if kinds.labels(view.node(bound_node(pod) or "") or {}).get(term.topology_key) == value]
    return [pod for other in _domain_nodes(view, node, term.topology_key, value) for pod in view.pods_on(name_of(other))]


@dataclasses.dataclass(slots=True)
class Gathered:
    """What the filter reads of the cluster for one pod whatever the node, read on the first node
    judged and kept in its `Demand` for the others, as kube-scheduler's PreFilter gathers it once
    per scheduling cycle: the pods each of its anti-affinity terms may select, and the placed
    pods whose anti-affinity may select it, with their terms (or why those cannot be read) and
    their nodes' labels."""

    selected: list[list[Mapping[str, Any]] | None]
    placed: list[tuple[Mapping[str, Any], list[Any] | str, Mapping[str, Any]]]


def _gather(demand: Demand, view: View) -> Gathered:
    placed = []
    for pod in view.pods_with_anti_affinity_toward(demand.labels):
        terms = view.memo.of(existing_anti_terms, pod, (kinds.labels(pod), kinds.spec(pod).get("affinity")))
        bound = kinds.spec(pod).get("nodeName")
        placed.append((pod, terms, kinds.labels((view.node(bound) if isinstance(bound, str) else None) or {})))
    return Gathered([_selected(view, term) for term in demand.anti_affinity], placed)


def inter_pod_affinity(demand: Demand, node: Mapping[str, Any], view: View, subject: str = "the VM") -> str | None:
    """InterPodAffinity (interpodaffinity/filtering.go): the pod's required affinity, its
    required anti-affinity, then the required anti-affinity of pods already placed."""
    gathered = demand.gathered
    if gathered is None:
        gathered = demand.gathered = _gather(demand, view)
    if not (demand.affinity or demand.anti_affinity or gathered.placed):
        return None  # most pods, most clusters: nothing for this filter to look at
    name = name_of(node)
    labels = kinds.labels(node)
    for term in demand.affinity + demand.anti_affinity:
        if term.namespace_selector not in (None, EVERY_NAMESPACE):
            raise CannotTell(f"{subject}'s pod affinity selects namespaces by label")
    if demand.affinity:
        reason = _affinity_reason(demand, node, view, subject)
        if reason:
            return reason
    for term, selected in zip(demand.anti_affinity, gathered.selected):
        if term.topology_key not in labels:
            continue  # no domain here, so nothing in it to avoid
        value = labels[term.topology_key]
        for pod in _in_domain(view, node, term, value, selected):
            if term.matches(namespace_of(pod), kinds.labels(pod)):
                return (f"node {name} fails {subject}'s pod anti-affinity: pod {pod_key(pod)} "
                        f"runs in {term.topology_key}={value}")
    for pod, terms, other in gathered.placed:
        if isinstance(terms, str):
            raise CannotTell(f"the pod anti-affinity of pod {pod_key(pod)} cannot be read: {terms}")
        for term in terms:
            if term.topology_key not in labels:
                continue
            value = other.get(term.topology_key)
            if value is None or value != labels[term.topology_key]:
                continue
            match = term.matches(demand.namespace, demand.labels)
            if match is None:
                raise CannotTell(f"the pod anti-affinity of pod {pod_key(pod)} selects namespaces by label")
            if match:
                return (f"node {name} fails the pod anti-affinity of pod {pod_key(pod)} "
                        f"in {term.topology_key}={value}")
    return None


def _affinity_reason(demand: Demand, node: Mapping[str, Any], view: View, subject: str) -> str | None:
    """A pod counts for the pod's affinity when it matches every term; each term needs such a
    pod in the node's domain. The first pod of a group whose terms select itself may go
    anywhere while no pod matches (filtering.go `satisfyPodAffinity`)."""
    name = name_of(node)
    labels = kinds.labels(node)
    for term in demand.affinity:
        if term.topology_key not in labels:
            return f"node {name} has no {term.topology_key} label, which {subject}'s pod affinity needs"
    counts: Counter[tuple[str, Any]] = Counter()
    for other in view.nodes():
        other_labels = kinds.labels(other)
        keys = [t.topology_key for t in demand.affinity if t.topology_key in other_labels]
        if not keys:
            continue
        for pod in view.pods_on(name_of(other)):
            namespace, pod_labels = namespace_of(pod), kinds.labels(pod)
            if all(t.matches(namespace, pod_labels) for t in demand.affinity):
                for key in keys:
                    counts[(key, other_labels[key])] += 1
    missing = next((t for t in demand.affinity if counts[(t.topology_key, labels[t.topology_key])] <= 0), None)
    if missing is None:
        return None
    if not +counts and all(t.matches(demand.namespace, demand.labels) for t in demand.affinity):
        return None
    return (f"node {name} fails {subject}'s pod affinity: no matching pod in "
            f"{missing.topology_key}={labels[missing.topology_key]}")
