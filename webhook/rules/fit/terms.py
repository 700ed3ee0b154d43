"""What the filters match of a pod, parsed from its spec once: its host ports (NodePorts), its required pod
(anti-)affinity terms (InterPodAffinity), its DoNotSchedule spread constraints (PodTopologySpread)."""
from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping
from typing import Any

from ... import kinds
from .fields import Unreadable, as_list, as_mapping, namespace_of, pod_spec
from .selectors import Selector, parse_selector, selects, with_label_keys

WILDCARD_IP = "0.0.0.0"

HostPort = tuple[str, str, int]  # (hostIP, protocol, port)


def host_ports(pod: Any) -> tuple[HostPort, ...]:
    """Host ports of the containers and sidecars (scheduler/util `GetHostPorts`), with the
    defaults the scheduler applies: protocol TCP, hostIP 0.0.0.0 meaning every address; with
    hostNetwork a containerPort is also the hostPort (apiserver `defaultHostNetworkPorts`)."""
    spec = pod_spec(pod)
    host_network = spec.get("hostNetwork") is True
    found: list[HostPort] = []
    containers = [c for c in as_list(spec.get("initContainers"), "initContainers")
                  if isinstance(c, dict) and c.get("restartPolicy") == "Always"] if spec.get("initContainers") is not None else []
    containers += as_list(spec.get("containers"), "containers")
    for container in containers:
        ports = container.get("ports") if type(container) is dict else as_mapping(container, "container").get("ports")
        if ports is None:
            continue  # most containers declare none
        for port in as_list(ports, "ports"):
            port = as_mapping(port, "port")
            number = port.get("hostPort") or (port.get("containerPort") if host_network else None)
            if number is None:
                continue
            if isinstance(number, bool) or not isinstance(number, int):
                raise Unreadable(f"hostPort {number!r} is not a number")
            if number > 0:
                ip, protocol = port.get("hostIP") or WILDCARD_IP, port.get("protocol") or "TCP"
                if not isinstance(ip, str) or not isinstance(protocol, str):
                    raise Unreadable(f"hostPort {number} has a malformed hostIP or protocol")
                found.append((ip, protocol, number))
    return tuple(found)


@dataclasses.dataclass(frozen=True, slots=True)
class AffinityTerm:
    """A required pod (anti-)affinity term (kube-scheduler framework `AffinityTerm`)."""

    selector: Selector
    namespaces: frozenset[str]
    # None: no selector; () (`{}`): every namespace; otherwise a selector over Namespace labels,
    # which we cannot evaluate without Namespace objects.
    namespace_selector: Selector
    topology_key: str

    def matches(self, namespace: str, labels: Mapping[str, Any]) -> bool | None:
        """Whether the term selects a pod there; None when only namespace labels could say."""
        if namespace in self.namespaces or self.namespace_selector == ():
            return selects(self.selector, labels)
        if self.namespace_selector is not None:
            return None if selects(self.selector, labels) else False
        return False


def affinity_terms(pod: Any, namespace: str, kind: str, *, incoming: bool) -> list[AffinityTerm]:
    """The pod's required podAffinity or podAntiAffinity terms (`kind`)."""
    affinity = as_mapping(kinds.spec(pod).get("affinity"), "affinity")
    raw_terms = as_list(as_mapping(affinity.get(kind), kind).get("requiredDuringSchedulingIgnoredDuringExecution"),
                        f"required {kind}")
    labels = kinds.labels(pod)
    terms = []
    for raw in raw_terms:
        raw = as_mapping(raw, f"{kind} term")
        key = raw.get("topologyKey")
        if not isinstance(key, str) or not key:
            raise Unreadable(f"{kind} term without topologyKey")
        selector = parse_selector(raw.get("labelSelector"), f"{kind} labelSelector")
        if incoming:
            selector = with_label_keys(selector, labels, as_list(raw.get("matchLabelKeys"), "matchLabelKeys"),
                                       as_list(raw.get("mismatchLabelKeys"), "mismatchLabelKeys"))
        listed = [n for n in as_list(raw.get("namespaces"), f"{kind} namespaces") if isinstance(n, str)]
        raw_ns_selector = raw.get("namespaceSelector")
        ns_selector = parse_selector(raw_ns_selector, f"{kind} namespaceSelector")
        # An empty list and no selector mean the pod's own namespace (framework
        # `getNamespacesFromPodAffinityTerm`).
        namespaces = frozenset(listed) if listed or raw_ns_selector is not None else frozenset((namespace,))
        terms.append(AffinityTerm(selector=selector, namespaces=namespaces, namespace_selector=ns_selector,
                                  topology_key=key))
    return terms


def existing_anti_terms(pod: Any) -> list[AffinityTerm] | str:
    """A bound pod's required anti-affinity terms, or why they cannot be read."""
    try:
        return affinity_terms(pod, namespace_of(pod), "podAntiAffinity", incoming=False)
    except (Unreadable, TypeError, AttributeError) as error:
        return str(error) or "unexpected shape"


ANY_POD = "any pod"  # the index key of an anti-affinity term that may select a pod whatever its labels


def anti_affinity_keys(pod: Any) -> list[Hashable]:
    """Where a placed pod's required anti-affinity is indexed (`View.pods_with_anti_affinity_toward`): by term, the
    label pairs of its selector's first `In` requirement, one of which every pod it selects has; ANY_POD for a term
    without one or that cannot be read."""
    terms = existing_anti_terms(pod)
    if isinstance(terms, str):
        return [ANY_POD]
    keys: dict[Hashable, None] = {}
    for term in terms:
        if term.selector is None:
            continue
        first = next((req for req in term.selector if req[1] == "In"), None)
        keys.update(dict.fromkeys([ANY_POD] if first is None else [(first[0], v) for v in sorted(first[2])]))
    return list(keys)


def keys_toward(labels: Mapping[str, Any]) -> list[Hashable]:
    """The keys under which the terms that may select a pod with `labels` are found."""
    return [ANY_POD, *((key, value) for key, value in labels.items() if isinstance(value, str))]


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
        if raw.get("whenUnsatisfiable") != "DoNotSchedule":
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
