"""PodTopologySpread with DoNotSchedule (kubernetes `podtopologyspread/filtering.go`, `common.go`)."""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from ... import kinds
from .demand import Demand
from .fields import name_of, namespace_of
from .nodeaffinity import pod_admits
from .selectors import Selector, selects
from .tainttoleration import blocking_taint
from .terms import HONOR
from .view import View


def _counted_for_spread(pod: Any, namespace: str, selector: Selector) -> bool:
    """podtopologyspread/common.go `countPodsMatchSelector`: same namespace, not terminating; a
    selector without requirements counts nothing."""
    return (bool(selector) and namespace_of(pod) == namespace and not kinds.terminating(pod)
            and selects(selector, kinds.labels(pod)))


def pod_topology_spread(demand: Demand, node: Mapping[str, Any], view: View, subject: str = "the VM") -> str | None:
    """Placing the pod must keep matching pods in its domain within maxSkew of the emptiest eligible
    domain: nodes with every constraint's key that pass the inclusion policies (by default the
    pod's node affinity, not its taints); fewer domains than minDomains make the minimum 0."""
    if not demand.spread:
        return None
    name = name_of(node)
    labels = kinds.labels(node)
    for constraint in demand.spread:
        if constraint.topology_key not in labels:
            return f"node {name} has no {constraint.topology_key} label, which {subject}'s topology spread needs"
    tolerations = kinds.spec(demand.pod).get("tolerations")
    counts: list[Counter[Any]] = [Counter() for _ in demand.spread]
    by_affinity = any(c.node_affinity_policy == HONOR for c in demand.spread)
    by_taints = any(c.node_taints_policy == HONOR for c in demand.spread)
    for other in view.nodes():
        other_labels = kinds.labels(other)
        if any(c.topology_key not in other_labels for c in demand.spread):
            continue
        fits = not by_affinity or pod_admits(demand.pod, other, other_labels)
        free = not by_taints or blocking_taint(other, tolerations) is None
        pods = list(view.pods_on(name_of(other)))
        for constraint, domains in zip(demand.spread, counts):
            if (fits or constraint.node_affinity_policy != HONOR) and (free or constraint.node_taints_policy != HONOR):
                domains[other_labels[constraint.topology_key]] += sum(
                    1 for p in pods if _counted_for_spread(p, demand.namespace, constraint.selector))
    for constraint, domains in zip(demand.spread, counts):
        fewest = min(domains.values()) if len(domains) >= constraint.min_domains and domains else 0
        value = labels[constraint.topology_key]
        itself = 1 if selects(constraint.selector, demand.labels) else 0
        here = domains.get(value, 0)
        if here + itself - fewest > constraint.max_skew:
            return (f"node {name} fails {subject}'s topology spread on {constraint.topology_key}: "
                    f"{here + itself} matching pods in {value} against {fewest} in the emptiest domain, "
                    f"maxSkew {constraint.max_skew}")
    return None
