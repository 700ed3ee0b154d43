"""PodTopologySpread with DoNotSchedule (kubernetes `podtopologyspread/filtering.go`, `common.go`)."""
from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ... import kinds
from .fields import Unreadable, as_list, as_mapping, name_of, namespace_of
from .framework import never_raises
from .nodeaffinity import pod_admits
from .selectors import Selector, parse_selector, selects, with_label_keys
from .tainttoleration import blocking_taint

if TYPE_CHECKING:
    from .demand import Demand
    from .view import View

DO_NOT_SCHEDULE = "DoNotSchedule"
HONOR, IGNORE = "Honor", "Ignore"


@dataclasses.dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """A topologySpreadConstraint with DoNotSchedule, with the scheduler's defaults filled in
    (podtopologyspread/common.go `filterTopologySpreadConstraints`)."""

    max_skew: int
    topology_key: str
    selector: Selector
    min_domains: int
    node_affinity_policy: str
    node_taints_policy: str


def _int(value: Any, what: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise Unreadable(f"{what} {value!r} is not an integer >= {minimum}")
    return value


def spread_constraints(pod: Any) -> list[SpreadConstraint]:
    labels = kinds.labels(pod)
    constraints = []
    for raw in as_list(kinds.spec(pod).get("topologySpreadConstraints"), "topologySpreadConstraints"):
        raw = as_mapping(raw, "topologySpreadConstraint")
        if raw.get("whenUnsatisfiable") != DO_NOT_SCHEDULE:
            continue  # ScheduleAnyway only scores
        key = raw.get("topologyKey")
        if not isinstance(key, str) or not key:
            raise Unreadable("topologySpreadConstraint without topologyKey")
        selector = with_label_keys(parse_selector(raw.get("labelSelector"), "topologySpreadConstraint labelSelector"),
                                   labels, as_list(raw.get("matchLabelKeys"), "matchLabelKeys"), ())
        min_domains = raw.get("minDomains")
        policies = []
        for field in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
            policy = raw.get(field)
            if policy is not None and policy not in (HONOR, IGNORE):
                raise Unreadable(f"{field} {policy!r}")
            policies.append(policy)
        constraints.append(SpreadConstraint(
            max_skew=_int(raw.get("maxSkew"), "maxSkew", 1),
            topology_key=key,
            selector=selector,
            min_domains=1 if min_domains is None else _int(min_domains, "minDomains", 1),
            node_affinity_policy=policies[0] or HONOR,
            node_taints_policy=policies[1] or IGNORE,
        ))
    return constraints


def _counted_for_spread(pod: Any, namespace: str, selector: Selector) -> bool:
    """podtopologyspread/common.go `countPodsMatchSelector`: same namespace, not terminating; a
    selector without requirements counts nothing."""
    return (bool(selector) and namespace_of(pod) == namespace and not kinds.terminating(pod)
            and selects(selector, kinds.labels(pod)))


@never_raises
def pod_topology_spread(demand: Demand, node: Mapping[str, Any], view: View, subject: str = "the VM") -> str | None:
    """PodTopologySpread with DoNotSchedule (podtopologyspread/filtering.go): placing the pod
    must keep matching pods in its domain within maxSkew of the emptiest eligible domain.
    Eligible nodes carry every constraint's key and pass the inclusion policies (by default
    the pod's nodeSelector/required node affinity, not its taints); fewer domains than
    minDomains make the minimum 0."""
    if not demand.spread:
        return None
    name = name_of(node)
    labels = kinds.labels(node)
    for constraint in demand.spread:
        if constraint.topology_key not in labels:
            return f"node {name} has no {constraint.topology_key} label, which {subject}'s topology spread needs"
    tolerations = kinds.spec(demand.pod).get("tolerations") or []
    tolerations = tolerations if isinstance(tolerations, list) else []
    counts: list[Counter[Any]] = [Counter() for _ in demand.spread]
    for other in view.nodes():
        other_labels = kinds.labels(other)
        if any(c.topology_key not in other_labels for c in demand.spread):
            continue
        pods = None
        admits = taint_free = None
        for i, constraint in enumerate(demand.spread):
            if constraint.node_affinity_policy == HONOR:
                if admits is None:
                    admits = pod_admits(demand.pod, other)
                if not admits:
                    continue
            if constraint.node_taints_policy == HONOR:
                if taint_free is None:
                    taint_free = blocking_taint(other, tolerations) is None
                if not taint_free:
                    continue
            if pods is None:
                pods = list(view.pods_on(name_of(other)))
            value = other_labels[constraint.topology_key]
            counts[i][value] += sum(1 for p in pods if _counted_for_spread(p, demand.namespace, constraint.selector))
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

