"""InterPodAffinity (kubernetes `interpodaffinity/filtering.go`): required pod affinity and
anti-affinity, the pod's own and that of the pods already placed."""
from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping
from typing import Any

from ... import kinds
from .demand import Demand
from .fields import CannotTell, name_of, namespace_of, pod_key
from .terms import existing_anti_terms
from .view import View, bound_node


def _walked(view: View, node: Mapping[str, Any], term: Any, value: Any) -> Mapping[str, Any] | None:
    """The first pod of the node's topology domain the term selects, every pod of it looked at."""
    key = term.topology_key
    domain = (node,) if key == kinds.HOSTNAME_LABEL else [n for n in view.nodes() if kinds.labels(n).get(key) == value]
    for other in domain:
        for pod in view.pods_on(name_of(other)):
            if term.matches(namespace_of(pod), kinds.labels(pod)):
                return pod
    return None


def _domains(view: View, term: Any) -> dict[Any, Mapping[str, Any]] | None:
    """The first pod the term selects by domain (a node's name for the hostname key, else the key's value on its node),
    found by the label its selector requires first where the view indexes it; None where it cannot say (`_walked`)."""
    first = next((req for req in term.selector or () if req[1] == "In"), None)
    if first is None:
        return None
    found: dict[Any, Mapping[str, Any]] = {}
    key = term.topology_key
    for label_value in sorted(first[2]):
        pods = view.pods_labelled(first[0], label_value)
        if pods is None:
            return None
        for pod in pods:
            bound = bound_node(pod)
            if bound is None:
                continue
            value = bound if key == kinds.HOSTNAME_LABEL else kinds.labels(view.node(bound) or {}).get(key)
            if value is not None and value not in found and term.matches(namespace_of(pod), kinds.labels(pod)):
                found[value] = pod
    return found


Avoiding = tuple["str | None", Any, Mapping[str, Any], "str | None"]  # (topology key, value, pod, cannot tell why)


def _avoiding(demand: Demand, view: View) -> list[Avoiding]:
    """The placed pods whose required anti-affinity selects the pod: each term's topology key and
    its value on their node (the domain kept from the pod), or why that cannot be told (key None)."""
    found: list[Avoiding] = []
    for pod in view.pods_with_anti_affinity_toward(demand.labels):
        terms = view.memo.of(existing_anti_terms, pod, (kinds.labels(pod), kinds.spec(pod).get("affinity")))
        if isinstance(terms, str):
            found.append((None, None, pod, f"the pod anti-affinity of pod {pod_key(pod)} cannot be read: {terms}"))
            continue
        bound = kinds.spec(pod).get("nodeName")
        other = kinds.labels((view.node(bound) if isinstance(bound, str) else None) or {})
        for term in terms:
            value = other.get(term.topology_key)
            match = term.matches(demand.namespace, demand.labels) if value is not None else False
            if match is None:
                found.append((term.topology_key, value, pod,
                              f"the pod anti-affinity of pod {pod_key(pod)} selects namespaces by label"))
            elif match:
                found.append((term.topology_key, value, pod, None))
    return found


def _counts(demand: Demand, view: View) -> Counter[tuple[str, Any]]:
    """For the pod's own affinity: how many pods that every term selects run in each domain."""
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
    return counts


Only = tuple[frozenset[Any], frozenset[Any]]  # nodes by name, and by hostname label (`Gathered.only`)
NONE_REFUSED: Only = (frozenset(), frozenset())


@dataclasses.dataclass(slots=True)
class Gathered:
    """What the filter reads of the cluster for one pod whatever the node, kept in its `Demand` (as
    kube-scheduler's PreFilter does): each node is then a few lookups."""

    unsure: str | None  # why its own terms cannot be told
    domains: list[dict[Any, Mapping[str, Any]] | None]  # by anti-affinity term: `_domains`
    avoiding: list[Avoiding]
    counts: Counter[tuple[str, Any]] | None  # pods its affinity selects, by domain; None: no affinity of its own
    # When every term either way is per node (the hostname key) and known: the only nodes the filter
    # can turn the pod away from, by name (its own terms) and by hostname label (placed pods' terms). A
    # migration target pod avoids its own VMI's pods, all on the node it leaves: every other node passes.
    only: Only | None = None


def _gather(demand: Demand, view: View) -> Gathered:
    avoiding = _avoiding(demand, view)
    unsure = next(("pod affinity selects namespaces by label" for term in demand.affinity + demand.anti_affinity
                   if term.namespace_selector not in (None, ())), None)
    if unsure is not None:
        return Gathered(unsure=unsure, domains=[], avoiding=avoiding, counts=None)
    domains = [_domains(view, term) for term in demand.anti_affinity]
    hostname, only = kinds.HOSTNAME_LABEL, None
    if not demand.affinity and (demand.anti_affinity or avoiding) and None not in domains \
            and all(term.topology_key == hostname for term in demand.anti_affinity) \
            and all(key == hostname and unsure is None for key, _, _, unsure in avoiding):
        only = (frozenset(name for found in domains for name in found or ()),
                frozenset(value for _, value, _, _ in avoiding))
    return Gathered(unsure=None, domains=domains, avoiding=avoiding,
                    counts=_counts(demand, view) if demand.affinity else None, only=only)


def may_refuse(only: Only, name: str, node: Mapping[str, Any]) -> bool:
    """Whether a node (its name, the node) is one of `only`: named, or its hostname label one of
    them (a label that is no string is looked at the long way)."""
    if name in only[0]:
        return True
    if not only[1]:
        return False
    host = kinds.labels(node).get(kinds.HOSTNAME_LABEL)
    return host is not None and (not isinstance(host, str) or host in only[1])


def said_by_others(demand: Demand, view: View) -> bool:
    """Whether the filter has anything to look at: own terms, or placed pods' anti-affinity toward it (read once)."""
    if demand.gathered is None:
        demand.gathered = _gather(demand, view)
    return bool(demand.affinity or demand.anti_affinity or demand.gathered.avoiding)


def inter_pod_affinity(demand: Demand, node: Mapping[str, Any], view: View, subject: str = "the VM") -> str | None:
    """InterPodAffinity (interpodaffinity/filtering.go): the pod's required (anti-)affinity, then placed pods'."""
    if not said_by_others(demand, view):
        return None  # most pods, most clusters: nothing for this filter to look at
    gathered: Gathered = demand.gathered
    if gathered.unsure is not None:
        raise CannotTell(f"{subject}'s {gathered.unsure}")
    name = name_of(node)
    if gathered.only is not None and not may_refuse(gathered.only, name, node):
        return None
    labels = kinds.labels(node)
    if demand.affinity:
        reason = _affinity_reason(demand, gathered.counts, name, labels, subject)
        if reason:
            return reason
    for term, domains in zip(demand.anti_affinity, gathered.domains):
        if term.topology_key not in labels:
            continue  # no domain here, so nothing in it to avoid
        value = labels[term.topology_key]
        if domains is None:
            pod = _walked(view, node, term, value)
        else:
            pod = domains.get(name if term.topology_key == kinds.HOSTNAME_LABEL else value)
        if pod is not None:
            return (f"node {name} fails {subject}'s pod anti-affinity: pod {pod_key(pod)} "
                    f"runs in {term.topology_key}={value}")
    for key, value, pod, unsure in gathered.avoiding:
        if key is not None and labels.get(key) != value:
            continue
        if unsure is not None:
            raise CannotTell(unsure)
        return f"node {name} fails the pod anti-affinity of pod {pod_key(pod)} in {key}={value}"
    return None


def _affinity_reason(demand: Demand, counts: Counter[tuple[str, Any]], name: str, labels: Mapping[str, Any],
                     subject: str) -> str | None:
    """Each term needs a pod matching every term (`counts`) in the node's domain; the first pod of a
    group whose terms select itself may go anywhere (filtering.go `satisfyPodAffinity`)."""
    for term in demand.affinity:
        if term.topology_key not in labels:
            return f"node {name} has no {term.topology_key} label, which {subject}'s pod affinity needs"
    missing = next((t for t in demand.affinity if counts[(t.topology_key, labels[t.topology_key])] <= 0), None)
    if missing is None:
        return None
    if not +counts and all(t.matches(demand.namespace, demand.labels) for t in demand.affinity):
        return None
    return (f"node {name} fails {subject}'s pod affinity: no matching pod in "
            f"{missing.topology_key}={labels[missing.topology_key]}")
