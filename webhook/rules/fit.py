"""Pure: would kube-scheduler's filters pass this pod on this node? (A pin must never strand a VM.)

The checks follow the scheduler's filter plugins (kubernetes `pkg/scheduler/framework/plugins/`):
NodeResourcesFit (`noderesources/fit.go`), NodePorts (`nodeports/node_ports.go`),
VolumeBinding for bound claims (`volumebinding/binder.go`) with VolumeZone
(`volumezone/volume_zone.go`), InterPodAffinity (`interpodaffinity/filtering.go`) and
PodTopologySpread with DoNotSchedule (`podtopologyspread/filtering.go`, `common.go`).
Readiness, cordon, taints and the pod's own node affinity live in `nodes.py`.

Each check answers None (passes) or a short reason. Where the objects do not let us decide
(a quantity that does not parse, a claim not in the cache, a namespaceSelector that would need
Namespace objects) the answer is "cannot tell", which counts as does-not-fit: a pin is only
safe when we know. No check raises.
"""
from __future__ import annotations

import dataclasses
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import orjson

from .. import kinds
from . import nodes as node_rules
from .quantity import CPU, ceil_div, nanos_of, scheduler_value, show, unit

MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"
WILDCARD_IP = "0.0.0.0"
DO_NOT_SCHEDULE = "DoNotSchedule"
HONOR, IGNORE = "Honor", "Ignore"


class Unreadable(ValueError):
    """An object whose shape the scheduler would not have accepted, or that we cannot read."""


# --------------------------------------------------------------------------- reading


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Unreadable(f"{what} is not an object")
    return value


def _items(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise Unreadable(f"{what} is not a list")
    return value


def _in_part(what: str, error: Unreadable) -> Unreadable:
    """The same complaint, saying where (messages are built only when something is wrong)."""
    return Unreadable(f"{what} {error}")


def _pod_spec(pod: Any) -> Mapping[str, Any]:
    if not isinstance(pod, dict):
        raise Unreadable("the pod is not an object")
    return _mapping(pod.get("spec"), "pod spec")


def _node_name(node: Any) -> str:
    name = kinds.meta(node).get("name")
    return name if isinstance(name, str) else "?"


def _pod_key(pod: Any) -> str:
    meta = kinds.meta(pod)
    return f"{meta.get('namespace')}/{meta.get('name')}"


def _per_object(read: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Remember what `read` makes of an object while that very object is in use: caches replace
    an object when it changes, so identity is enough. One entry per object name, holding the
    object last read under it: an object read afresh (a direct GET, a listing) replaces its
    entry, so no more objects are held than there are (and at most 4096)."""
    remembered: OrderedDict[Any, tuple[Any, Any]] = OrderedDict()

    def cached(obj: Any) -> Any:
        meta = obj.get("metadata") if type(obj) is dict else None
        name = meta.get("name") if type(meta) is dict else None
        key = (meta.get("namespace"), name) if type(name) is str else id(obj)  # type: ignore[union-attr]
        hit = remembered.get(key)
        if hit is not None and hit[0] is obj:
            return hit[1]
        result = read(obj)
        remembered[key] = (obj, result)
        if hit is None and len(remembered) > 4096:
            remembered.popitem(last=False)
        return result

    cached.__doc__ = read.__doc__
    cached.remembered = remembered  # type: ignore[attr-defined]
    return cached


# --------------------------------------------------------------------------- requests


def counted(resource: str) -> bool:
    """Resources NodeResourcesFit compares: cpu, memory, ephemeral-storage and the scalar ones
    (extended like devices.kubevirt.io/kvm, hugepages-*, kubernetes.io/-prefixed, attachable
    volumes); anything else the scheduler ignores (framework/types.go `Resource.Add`,
    scheduler/util `IsScalarResourceName`)."""
    if resource in (CPU, MEMORY, EPHEMERAL_STORAGE):
        return True
    if resource.startswith(("hugepages-", "attachable-volumes-")) or "kubernetes.io/" in resource:
        return True
    return "/" in resource and not resource.startswith("requests.")


def _add(total: dict[str, int], more: Mapping[str, int]) -> None:
    for name, amount in more.items():
        total[name] = total.get(name, 0) + amount


def _raise_to(total: dict[str, int], other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        if name not in total or amount > total[name]:
            total[name] = amount


def _resource_list(value: Any, what: str) -> dict[str, int]:
    """A ResourceList in nano-units."""
    if not value:
        if value is None or isinstance(value, dict):
            return {}
    if not isinstance(value, dict):
        raise Unreadable(f"{what} is not an object")
    try:
        return nanos_of(value)
    except ValueError as error:
        raise Unreadable(f"{what} {error} is not a quantity") from None


def _container_requests(container: Any) -> dict[str, int]:
    """Requests in nano-units; a resource with only a limit requests its limit, as the apiserver
    defaults it (pkg/apis/core/v1/defaults.go `SetDefaults_Pod`)."""
    if not isinstance(container, dict):
        raise Unreadable("is not an object")
    resources = container.get("resources")
    if not resources:
        return {}
    if type(resources) is not dict:
        resources = _mapping(resources, "resources")
    requests = _resource_list(resources.get("requests"), "request")
    limits = resources.get("limits")
    if limits:
        for name, amount in _resource_list(limits, "limit").items():
            requests.setdefault(name, amount)
    return requests


def _resized_requests(spec_requests: dict[str, int], status: Mapping[str, Any], infeasible: bool) -> dict[str, int]:
    """A running container's requests after an in-place resize (component-helpers/resource
    `determineEffectiveRequests`): the largest of spec, actuated and allocated."""
    actuated = _resource_list(_mapping(status.get("resources"), "status").get("requests"), "actuated")
    allocated = _resource_list(status.get("allocatedResources"), "allocated")
    effective = {} if infeasible else dict(spec_requests)
    _raise_to(effective, actuated)
    _raise_to(effective, allocated)
    return effective


def _resize_statuses(pod: Any) -> tuple[dict[Any, Mapping[str, Any]], bool]:
    """Container statuses that report resources, by name, and whether a resize is infeasible."""
    status = kinds.status(pod)
    statuses = {}
    for key in ("containerStatuses", "initContainerStatuses"):
        for entry in _items(status.get(key), f"status.{key}"):
            if isinstance(entry, dict) and entry.get("resources") is not None:
                statuses[entry.get("name")] = entry
    for condition in _items(status.get("conditions"), "status.conditions"):
        if isinstance(condition, dict) and condition.get("type") == "PodResizePending":
            return statuses, condition.get("reason") == "Infeasible"
    return statuses, False


def _nano_requests(pod: Any, *, running: bool) -> dict[str, int]:
    spec = _pod_spec(pod)
    statuses, infeasible = _resize_statuses(pod) if running else ({}, False)
    total: dict[str, int] = {}
    for i, container in enumerate(_items(spec.get("containers"), "containers")):
        try:
            requests = _container_requests(container)
            found = statuses.get(container.get("name")) if statuses else None
            if found:
                requests = _resized_requests(requests, found, infeasible)
        except Unreadable as error:
            raise _in_part(f"container {i}", error) from None
        for name, amount in requests.items():
            total[name] = total.get(name, 0) + amount
    init_containers = spec.get("initContainers")
    if init_containers:
        _add_init_containers(total, _items(init_containers, "initContainers"), statuses, infeasible)
    if spec.get("resources"):
        _apply_pod_level(total, _mapping(spec.get("resources"), "pod resources"))
    if spec.get("overhead"):
        _add(total, _resource_list(spec.get("overhead"), "overhead"))
    return total


def _add_init_containers(total: dict[str, int], init_containers: list[Any],
                         statuses: Mapping[Any, Mapping[str, Any]], infeasible: bool) -> None:
    """component-helpers/resource `AggregateContainerRequests`: sidecars (restartable init
    containers) run with the containers; each plain init container runs with the sidecars
    started before it; the pod needs the larger of the two phases."""
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for i, container in enumerate(init_containers):
        sidecar = isinstance(container, dict) and container.get("restartPolicy") == "Always"
        try:
            requests = _container_requests(container)
            found = statuses.get(container.get("name")) if sidecar and statuses else None
            if found:
                requests = _resized_requests(requests, found, infeasible)
        except Unreadable as error:
            raise _in_part(f"init container {i}", error) from None
        if sidecar:
            _add(total, requests)
            _add(sidecars, requests)
            phase = sidecars
        else:
            phase = dict(sidecars)
            _add(phase, requests)
        _raise_to(init_peak, phase)
    _raise_to(total, init_peak)


def _pod_level(resource: str) -> bool:
    return resource in (CPU, MEMORY) or resource.startswith("hugepages-")


def _apply_pod_level(total: dict[str, int], resources: Mapping[str, Any]) -> None:
    """Pod-level requests (PodLevelResources) replace the containers' sum for cpu, memory and
    hugepages. A pod-level limit without a request defaults the request to the containers' sum
    where they request the resource, else to the limit (pkg/apis/core/v1/defaults.go
    `defaultPodRequests`; hugepages cannot be overcommitted, so they take the limit)."""
    if not resources:
        return
    requests = _resource_list(resources.get("requests"), "pod request")
    limits = _resource_list(resources.get("limits"), "pod limit")
    for name, amount in requests.items():
        if _pod_level(name):
            total[name] = amount
    for name, amount in limits.items():
        if _pod_level(name) and name not in requests and (name.startswith("hugepages-") or name not in total):
            total[name] = amount


def pod_requests(pod: Any, *, running: bool = False) -> dict[str, int]:
    """What the scheduler counts for the pod (component-helpers/resource `PodRequests`): cpu in
    millicores, other resources in whole units, for every resource NodeResourcesFit compares.
    `running` reads in-place resizes from the status, as the scheduler does for bound pods.
    Raises Unreadable (a ValueError) on objects of unexpected shape."""
    if not isinstance(pod, dict):
        raise Unreadable("the pod is not an object")
    found = {}
    for name, amount in _nano_requests(pod, running=running).items():
        size = _UNITS.get(name) if type(name) is str else 0
        if size is None:
            size = unit(name) if counted(name) else 0
            if len(_UNITS) < 1024:
                _UNITS[name] = size
        if size:
            found[name] = ceil_div(amount, size)
    return found


# What a pod requests and the host ports it takes depend on its containers' resources and ports
# alone, and pods of VMs of one size have the same: worked out once per distinct set (read-only,
# as Demand's are).
_REQUESTS: dict[bytes, tuple[Mapping[str, int], tuple[HostPort, ...]]] = {}


def _requests_and_ports(pod: Any) -> tuple[Mapping[str, int], tuple[HostPort, ...]]:
    """(`pod_requests(pod)`, `host_ports(pod)`) for a pod being admitted, kept by what they
    read: each container's resources and ports (and an init container's restartPolicy), the
    pod's resources, overhead and hostNetwork, as JSON (pods are read from JSON, so no two
    different values write the same text)."""
    spec = pod.get("spec") if type(pod) is dict else None
    if type(spec) is dict:
        containers, init = spec.get("containers"), spec.get("initContainers")
        if type(containers) is list and (init is None or type(init) is list):
            try:
                key = orjson.dumps((
                    [(c.get("resources"), c.get("ports")) for c in containers],
                    [(c.get("resources"), c.get("restartPolicy"), c.get("ports")) for c in init or ()],
                    spec.get("resources"), spec.get("overhead"), spec.get("hostNetwork")))
            except (AttributeError, orjson.JSONEncodeError):  # an item that is no object, a value JSON cannot hold
                return pod_requests(pod), host_ports(pod)
            found = _REQUESTS.get(key)
            if found is None:
                found = pod_requests(pod), host_ports(pod)
                if len(_REQUESTS) < 1024:
                    _REQUESTS[key] = found
            return found
    return pod_requests(pod), host_ports(pod)  # a shape to read the long way (which says what is wrong with it)


# Per resource name: its scheduler unit in nano-units (`quantity.unit`), 0 when NodeResourcesFit
# ignores it (`counted`). A cluster has few resource names, and every pod asks for each of its own.
_UNITS: dict[str, int] = {}


HostPort = tuple[str, str, int]  # (hostIP, protocol, port)


def host_ports(pod: Any) -> tuple[HostPort, ...]:
    """Host ports of the containers and sidecars (scheduler/util `GetHostPorts`), with the
    defaults the scheduler applies: protocol TCP, hostIP 0.0.0.0 meaning every address; with
    hostNetwork a containerPort is also the hostPort (apiserver `defaultHostNetworkPorts`)."""
    spec = _pod_spec(pod)
    host_network = spec.get("hostNetwork") is True
    found: list[HostPort] = []
    containers = [c for c in _items(spec.get("initContainers"), "initContainers")
                  if isinstance(c, dict) and c.get("restartPolicy") == "Always"] if spec.get("initContainers") is not None else []
    containers += _items(spec.get("containers"), "containers")
    for container in containers:
        ports = container.get("ports") if type(container) is dict else _mapping(container, "container").get("ports")
        if ports is None:
            continue  # most containers declare none
        for port in _items(ports, "ports"):
            port = _mapping(port, "port")
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


# --------------------------------------------------------------------------- usage


@dataclasses.dataclass(frozen=True, slots=True)
class PodUsage:
    """What one bound pod takes from its node; keep it to remove exactly what was added."""

    requests: Mapping[str, int]
    host_ports: tuple[HostPort, ...] = ()
    readable: bool = True

    @classmethod
    def of(cls, pod: Any) -> "PodUsage":
        """A pod we cannot read still takes its slot, and makes its node's room unknown."""
        try:
            return cls(pod_requests(pod, running=True), host_ports(pod))
        except (ValueError, TypeError, AttributeError):
            return cls({}, (), readable=False)


class Usage:
    """What the pods bound to one node take: requests, pod slots, host ports (a cache keeps one
    per node, adding each bound pod that has not finished and removing it when it goes)."""

    __slots__ = ("requested", "pods", "ports", "any_ip_ports", "unreadable")

    def __init__(self) -> None:
        self.requested: dict[str, int] = {}
        self.pods = 0
        self.ports: Counter[HostPort] = Counter()
        self.any_ip_ports: Counter[tuple[str, int]] = Counter()  # (protocol, port) on any address
        self.unreadable = 0

    @classmethod
    def of_pods(cls, pods: Iterable[Any]) -> "Usage":
        usage = cls()
        for pod in pods:
            if not kinds.finished(pod):
                usage.add(PodUsage.of(pod))
        return usage

    def add(self, pod: PodUsage) -> None:
        self._change(pod, 1)

    def remove(self, pod: PodUsage) -> None:
        self._change(pod, -1)

    def _change(self, pod: PodUsage, sign: int) -> None:
        self.pods += sign
        for name, amount in pod.requests.items():
            left = self.requested.get(name, 0) + sign * amount
            if left:
                self.requested[name] = left
            else:
                self.requested.pop(name, None)
        for ip, protocol, port in pod.host_ports:
            self.ports[(ip, protocol, port)] += sign
            self.any_ip_ports[(protocol, port)] += sign
        if sign < 0 and pod.host_ports:
            self.ports = +self.ports  # drop what fell to zero
            self.any_ip_ports = +self.any_ip_ports
        if not pod.readable:
            self.unreadable += sign

    def __repr__(self) -> str:
        return f"Usage(pods={self.pods}, requested={self.requested}, ports={dict(self.ports)}, unreadable={self.unreadable})"


# --------------------------------------------------------------------------- the cluster


class View(Protocol):
    """What the checks read from the cluster: nodes, the pods bound to them (not finished),
    and claims and volumes. The admission cache and a snapshot both provide it."""

    def node(self, name: str) -> Mapping[str, Any] | None: ...
    def nodes(self) -> Iterable[Mapping[str, Any]]: ...
    def usage(self, node_name: str) -> Usage: ...
    def pods_on(self, node_name: str) -> Iterable[Mapping[str, Any]]: ...
    def pods_with_required_anti_affinity(self) -> Iterable[Mapping[str, Any]]: ...
    def pvc(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...
    def pv(self, name: str) -> Mapping[str, Any] | None: ...


def bound_node(pod: Any) -> str | None:
    """The node a pod counts on in a View: its `spec.nodeName`, until the pod finishes."""
    node = kinds.spec(pod).get("nodeName")
    return node if isinstance(node, str) and node and not kinds.finished(pod) else None


def has_required_anti_affinity(pod: Any) -> bool:
    """Whether a bound pod belongs in `View.pods_with_required_anti_affinity`."""
    affinity = kinds.spec(pod).get("affinity")
    anti = affinity.get("podAntiAffinity") if isinstance(affinity, dict) else None
    return isinstance(anti, dict) and bool(anti.get("requiredDuringSchedulingIgnoredDuringExecution"))


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


class StaticView:
    """A View over plain lists of objects (a snapshot, a test), meaning what the cache means:
    pods count on their `spec.nodeName` until they finish."""

    def __init__(self, nodes: Iterable[Any] = (), pods: Iterable[Any] = (), claims: Iterable[Any] = (),
                 volumes: Iterable[Any] = ()) -> None:
        self._nodes = {_node_name(n): n for n in nodes}
        self._pods: dict[str, list[Any]] = {}
        for pod in pods:
            node_name = bound_node(pod)
            if node_name is not None:
                self._pods.setdefault(node_name, []).append(pod)
        self._usage = {name: Usage.of_pods(pods) for name, pods in self._pods.items()}
        self._anti = [p for pods in self._pods.values() for p in pods if has_required_anti_affinity(p)]
        self._claims = {(_text(kinds.meta(c).get("namespace")), _text(kinds.meta(c).get("name"))): c for c in claims}
        self._volumes = {_text(kinds.meta(v).get("name")): v for v in volumes}

    def node(self, name: str) -> Mapping[str, Any] | None:
        return self._nodes.get(name)

    def nodes(self) -> Iterable[Mapping[str, Any]]:
        return self._nodes.values()

    def usage(self, node_name: str) -> Usage:
        return self._usage.get(node_name) or Usage()

    def pods_on(self, node_name: str) -> Iterable[Mapping[str, Any]]:
        return self._pods.get(node_name, ())

    def pods_with_required_anti_affinity(self) -> Iterable[Mapping[str, Any]]:
        return self._anti

    def pvc(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self._claims.get((namespace, name))

    def pv(self, name: str) -> Mapping[str, Any] | None:
        return self._volumes.get(name)


# --------------------------------------------------------------------------- label selectors

# A parsed LabelSelector: a tuple of (key, operator, values); () selects everything, None
# (a missing selector) nothing (apimachinery `metav1.LabelSelectorAsSelector`).
Selector = tuple[tuple[str, str, frozenset[str]], ...] | None


def _selector(raw: Any, what: str) -> Selector:
    if raw is None:
        return None
    raw = _mapping(raw, what)
    requirements = [(key, "In", frozenset((value,)))
                    for key, value in _mapping(raw.get("matchLabels"), f"{what} matchLabels").items()]
    for expression in _items(raw.get("matchExpressions"), f"{what} matchExpressions"):
        expression = _mapping(expression, f"{what} expression")
        key, operator = expression.get("key"), expression.get("operator")
        values = _items(expression.get("values"), f"{what} values")
        if not isinstance(key, str) or not all(isinstance(v, str) for v in values):
            raise Unreadable(f"{what} has a malformed expression")
        if operator in ("In", "NotIn") and not values or operator in ("Exists", "DoesNotExist") and values:
            raise Unreadable(f"{what}: {operator} on {key} with {len(values)} values")
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise Unreadable(f"{what}: unknown operator {operator!r}")
        requirements.append((key, operator, frozenset(values)))
    return tuple(requirements)


def selects(selector: Selector, labels: Mapping[str, Any]) -> bool:
    if selector is None:
        return False
    for key, operator, values in selector:
        if operator == "In":
            if labels.get(key) not in values:
                return False
        elif operator == "NotIn":
            if key in labels and labels[key] in values:
                return False
        elif operator == "Exists":
            if key not in labels:
                return False
        elif key in labels:  # DoesNotExist
            return False
    return True


def _with_label_keys(selector: Selector, labels: Mapping[str, Any], match: Iterable[Any], mismatch: Iterable[Any]) -> Selector:
    """matchLabelKeys / mismatchLabelKeys, merged into the selector from the pod's own labels as
    the apiserver does when it stores a pod (pkg/registry/core/pod/strategy.go) — a pod under
    admission is not merged yet; merging a stored pod again changes nothing."""
    if selector is None:
        return None
    extra = [(k, "In", frozenset((labels[k],))) for k in match if isinstance(k, str) and k in labels]
    extra += [(k, "NotIn", frozenset((labels[k],))) for k in mismatch if isinstance(k, str) and k in labels]
    return selector + tuple(extra) if extra else selector


# --------------------------------------------------------------------------- pod affinity terms

EVERY_NAMESPACE = "every"


@dataclasses.dataclass(frozen=True, slots=True)
class AffinityTerm:
    """A required pod (anti-)affinity term (kube-scheduler framework `AffinityTerm`)."""

    selector: Selector
    namespaces: frozenset[str]
    # None: no selector; EVERY_NAMESPACE: `{}`; otherwise a selector over Namespace labels,
    # which we cannot evaluate without Namespace objects.
    namespace_selector: Selector | str
    topology_key: str

    def matches(self, namespace: str, labels: Mapping[str, Any]) -> bool | None:
        """Whether the term selects a pod there; None when only namespace labels could say."""
        if namespace in self.namespaces or self.namespace_selector == EVERY_NAMESPACE:
            return selects(self.selector, labels)
        if self.namespace_selector is not None:
            return None if selects(self.selector, labels) else False
        return False


def _terms(pod: Any, namespace: str, kind: str, *, incoming: bool) -> list[AffinityTerm]:
    """The pod's required podAffinity or podAntiAffinity terms (`kind`)."""
    affinity = _mapping(kinds.spec(pod).get("affinity"), "affinity")
    raw_terms = _items(_mapping(affinity.get(kind), kind).get("requiredDuringSchedulingIgnoredDuringExecution"),
                       f"required {kind}")
    labels = kinds.labels(pod)
    terms = []
    for raw in raw_terms:
        raw = _mapping(raw, f"{kind} term")
        key = raw.get("topologyKey")
        if not isinstance(key, str) or not key:
            raise Unreadable(f"{kind} term without topologyKey")
        selector = _selector(raw.get("labelSelector"), f"{kind} labelSelector")
        if incoming:
            selector = _with_label_keys(selector, labels, _items(raw.get("matchLabelKeys"), "matchLabelKeys"),
                                        _items(raw.get("mismatchLabelKeys"), "mismatchLabelKeys"))
        listed = [n for n in _items(raw.get("namespaces"), f"{kind} namespaces") if isinstance(n, str)]
        raw_ns_selector = raw.get("namespaceSelector")
        ns_selector = _selector(raw_ns_selector, f"{kind} namespaceSelector")
        if ns_selector == ():
            ns_selector = EVERY_NAMESPACE
        # An empty list and no selector mean the pod's own namespace (framework
        # `getNamespacesFromPodAffinityTerm`).
        namespaces = frozenset(listed) if listed or raw_ns_selector is not None else frozenset((namespace,))
        terms.append(AffinityTerm(selector, namespaces, ns_selector, key))
    return terms


@_per_object
def _existing_anti_terms(pod: Any) -> list[AffinityTerm] | str:
    """A bound pod's required anti-affinity terms, or why they cannot be read."""
    try:
        namespace = kinds.meta(pod).get("namespace") or ""
        return _terms(pod, namespace, "podAntiAffinity", incoming=False)
    except (Unreadable, TypeError, AttributeError) as error:
        return str(error) or "unexpected shape"


# --------------------------------------------------------------------------- spread constraints


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


def _spread_constraints(pod: Any) -> list[SpreadConstraint]:
    labels = kinds.labels(pod)
    constraints = []
    for raw in _items(kinds.spec(pod).get("topologySpreadConstraints"), "topologySpreadConstraints"):
        raw = _mapping(raw, "topologySpreadConstraint")
        if raw.get("whenUnsatisfiable") != DO_NOT_SCHEDULE:
            continue  # ScheduleAnyway only scores
        key = raw.get("topologyKey")
        if not isinstance(key, str) or not key:
            raise Unreadable("topologySpreadConstraint without topologyKey")
        selector = _with_label_keys(_selector(raw.get("labelSelector"), "topologySpreadConstraint labelSelector"),
                                    labels, _items(raw.get("matchLabelKeys"), "matchLabelKeys"), ())
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


# --------------------------------------------------------------------------- the pod, read once


@dataclasses.dataclass(slots=True)
class Demand:
    """Everything the checks need from the pod, read once (the keeper tries several nodes)."""

    pod: Mapping[str, Any]
    namespace: str
    labels: Mapping[str, Any]
    requests: Mapping[str, int]
    host_ports: tuple[HostPort, ...]
    affinity: list[AffinityTerm]
    anti_affinity: list[AffinityTerm]
    spread: list[SpreadConstraint]

    @classmethod
    def of(cls, pod: Any, namespace: str) -> "Demand":
        """Raises Unreadable (a ValueError) when the pod cannot be read."""
        if not isinstance(pod, dict):
            raise Unreadable("the pod is not an object")
        try:
            spec = _pod_spec(pod)
            affinity = spec.get("affinity")
            with_pod_affinity = isinstance(affinity, dict) and (affinity.get("podAffinity") or affinity.get("podAntiAffinity"))
            requests, ports = _requests_and_ports(pod)
            return cls(
                pod=pod,
                namespace=namespace,
                labels=kinds.labels(pod),
                requests=requests,
                host_ports=ports,
                affinity=_terms(pod, namespace, "podAffinity", incoming=True) if with_pod_affinity else [],
                anti_affinity=_terms(pod, namespace, "podAntiAffinity", incoming=True) if with_pod_affinity else [],
                spread=_spread_constraints(pod) if spec.get("topologySpreadConstraints") else [],
            )
        except (TypeError, AttributeError):
            raise Unreadable("unexpected shape") from None


# --------------------------------------------------------------------------- the checks

Check = Callable[[Demand, Mapping[str, Any], View, str], "str | None"]


class _CannotTell(Exception):
    pass


def _cannot_tell(node: Any, subject: str, detail: str) -> str:
    return f"cannot tell whether node {_node_name(node)} fits {subject}: {detail}"


def _never_raises(check: Check) -> Check:
    """Objects of unexpected shape mean "cannot tell", which counts as not fitting."""

    def guarded(demand: Demand, node: Mapping[str, Any], view: View, subject: str = "the VM") -> str | None:
        try:
            return check(demand, node, view, subject)
        except Exception as error:
            return _failed(check, node, subject, error)

    guarded.__name__ = check.__name__
    guarded.__doc__ = check.__doc__
    guarded.unguarded = check  # type: ignore[attr-defined]  # why_not_fit guards the checks itself
    return guarded


def _failed(check: Check, node: Any, subject: str, error: Exception) -> str:
    """The answer of a check that raised: "cannot tell", saying why."""
    if isinstance(error, (_CannotTell, Unreadable)):
        return _cannot_tell(node, subject, str(error))
    # A shape nobody foresaw: still an answer, never a crash.
    return _cannot_tell(node, subject, f"the {check.__name__.replace('_', ' ')} check could not read "
                                       f"the objects ({type(error).__name__})")


@_per_object
def _allocatable(node: Any) -> dict[str, int] | str:
    """The node's `status.allocatable` in the scheduler's units, or why it cannot be read."""
    allocatable = kinds.status(node).get("allocatable")
    if not isinstance(allocatable, dict) or not allocatable:
        return "it has no status.allocatable"
    amounts = {}
    for resource, value in allocatable.items():
        try:
            amounts[resource] = scheduler_value(resource, value)
        except ValueError:
            return f"allocatable {resource} {value!r} is not a quantity"
    return amounts


@_never_raises
def node_resources_fit(demand: Demand, node: Mapping[str, Any], view: View, subject: str = "the VM") -> str | None:
    """NodeResourcesFit: one pod slot and every request against allocatable minus what the
    node's pods request (noderesources/fit.go `fitsRequest`). A resource the node does not list
    has 0 allocatable; a request of 0 is not checked."""
    name = _node_name(node)
    usage = view.usage(name)
    if usage.unreadable:
        raise _CannotTell(f"{usage.unreadable} pod(s) on it have requests that do not parse")
    allocatable = _allocatable(node)
    if isinstance(allocatable, str):
        raise _CannotTell(allocatable)
    slots = allocatable.get(PODS, 0)
    if slots <= 0:
        return f"node {name} offers no pod slots"
    if usage.pods + 1 > slots:
        return f"node {name} has no room: {usage.pods} of {slots} pods"
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
        used = usage.requested.get(resource, 0)
        if room_reason is None and asked > has - used:
            room_reason = (f"node {name} has no room: {resource} {show(resource, used)} of {show(resource, has)} "
                           f"requested, {subject} asks {show(resource, asked)}")
    return room_reason


@_never_raises
def node_ports(demand: Demand, node: Mapping[str, Any], view: View, subject: str = "the VM") -> str | None:
    """NodePorts: a host port is taken when the node's pods hold it on the same address, or
    either side binds every address (0.0.0.0) (kube-scheduler framework `HostPortInfo.CheckConflict`)."""
    if not demand.host_ports:
        return None
    name = _node_name(node)
    usage = view.usage(name)
    for ip, protocol, port in demand.host_ports:
        if ip == WILDCARD_IP:
            taken = usage.any_ip_ports.get((protocol, port), 0) > 0
        else:
            taken = usage.ports.get((WILDCARD_IP, protocol, port), 0) > 0 or usage.ports.get((ip, protocol, port), 0) > 0
        if taken:
            where = "" if ip == WILDCARD_IP else f" on {ip}"
            return f"node {name} has host port {port}/{protocol}{where} in use, which {subject} needs"
    return None


# volumezone/volume_zone.go: zone and region labels on a PV, beta keys matched against the GA
# ones on the node; a PV label may list several zones joined by "__".
_VOLUME_ZONE_KEYS = {
    "failure-domain.beta.kubernetes.io/zone": "topology.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region": "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone": "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region": "topology.kubernetes.io/region",
}


@_per_object
def _claim_state(claim: Any) -> tuple[bool, bool, Any]:
    """(being deleted, lost its volume, spec.volumeName) of a claim, read once per object."""
    return kinds.terminating(claim), kinds.status(claim).get("phase") == "Lost", kinds.spec(claim).get("volumeName")


ZoneLabel = tuple[str, str, str, frozenset[str]]  # (PV label, the node's GA key, its value, its zones)


@_per_object
def _volume_placement(pv: Any) -> tuple[list[Any] | None, tuple[ZoneLabel, ...]] | str:
    """Where a PV can be mounted, read once per object: its `spec.nodeAffinity.required` terms
    (None without), and the zone and region labels VolumeZone compares (a label the scheduler
    cannot parse is left out, as it ignores it); or why it cannot be read."""
    try:
        required = _mapping(kinds.spec(pv).get("nodeAffinity"), "PV nodeAffinity").get("required")
        terms = None
        if required is not None:
            terms = _items(_mapping(required, "PV nodeAffinity.required").get("nodeSelectorTerms"), "nodeSelectorTerms")
    except Unreadable as error:
        return str(error)
    zones = []
    pv_labels = kinds.labels(pv)
    for key, ga_key in (_VOLUME_ZONE_KEYS.items() if pv_labels else ()):
        value = pv_labels.get(key)
        if not isinstance(value, str):
            continue
        listed = frozenset(zone.strip() for zone in value.split("__"))
        if "" not in listed:
            zones.append((key, ga_key, value, listed))
    return terms, tuple(zones)


def _outside_volume_zone(zones: tuple[ZoneLabel, ...], node_labels: Mapping[str, Any]) -> str | None:
    """The PV's zone/region label the node's labels do not match (VolumeZone), if any. A node
    without any zone or region label passes (single-zone clusters)."""
    if not zones or not any(key in node_labels for key in _VOLUME_ZONE_KEYS):
        return None
    for key, ga_key, value, listed in zones:
        have = node_labels[key] if key in node_labels else node_labels.get(ga_key)
        if have not in listed:
            return f"{key}={value}"
    return None


@_never_raises
def volumes(demand: Demand, node: Mapping[str, Any], view: View, subject: str = "the VM") -> str | None:
    """VolumeBinding and VolumeZone for bound claims: each PV's `spec.nodeAffinity.required`
    must select the node (volumebinding/binder.go `checkBoundClaims`) and its zone labels must
    match the node's. A claim with `spec.volumeName` counts as bound (the PV controller's
    bind-completed annotation follows within moments). Unbound claims and generic ephemeral
    volumes are decided by provisioning, which we do not model: cannot tell."""
    pod_volumes = _items(_pod_spec(demand.pod).get("volumes"), "volumes")
    if not pod_volumes:
        return None
    labels_only = None
    for volume in pod_volumes:
        if type(volume) is not dict:
            volume = _mapping(volume, "volume")
        source = volume.get("persistentVolumeClaim")
        if source is None:
            if volume.get("ephemeral") is not None:
                raise _CannotTell(f"ephemeral volume {volume.get('name')} gets its claim only after the pod exists")
            continue
        claim_name = (source if type(source) is dict else _mapping(source, "persistentVolumeClaim")).get("claimName")
        claim = view.pvc(demand.namespace, claim_name)
        if claim is None:
            raise _CannotTell(f"claim {claim_name} is not known")
        terminating, lost, pv_name = _claim_state(claim)
        if terminating:
            return f"claim {claim_name} is being deleted"
        if lost:
            return f"claim {claim_name} has lost its volume"
        if not pv_name:
            raise _CannotTell(f"claim {claim_name} is not bound yet")
        pv = view.pv(pv_name)
        if pv is None:
            raise _CannotTell(f"volume {pv_name} of claim {claim_name} is not known")
        placement = _volume_placement(pv)
        if isinstance(placement, str):
            raise Unreadable(placement)
        terms, zones = placement
        if terms is not None:
            # component-helpers/storage/volume `CheckNodeAffinity` matches a node built from the
            # labels alone, so a matchFields term on metadata.name never matches there.
            labels_only = labels_only or {"metadata": {"labels": dict(kinds.labels(node))}}
            if not any(node_rules.term_matches(term, labels_only) for term in terms):
                return f"node {_node_name(node)} is outside the node affinity of volume {pv_name} (claim {claim_name})"
        zone = _outside_volume_zone(zones, kinds.labels(node)) if zones else None
        if zone:
            return f"node {_node_name(node)} is outside the zone of volume {pv_name} (claim {claim_name}): {zone}"
    return None


def _domain_nodes(view: View, node: Mapping[str, Any], key: str, value: Any) -> Iterable[Mapping[str, Any]]:
    """The nodes in the same topology domain; for the hostname key, the node itself."""
    if key == kinds.HOSTNAME_LABEL:
        return (node,)
    return [n for n in view.nodes() if kinds.labels(n).get(key) == value]


def _pod_namespace(pod: Any) -> str:
    return kinds.meta(pod).get("namespace") or ""


@_never_raises
def inter_pod_affinity(demand: Demand, node: Mapping[str, Any], view: View, subject: str = "the VM") -> str | None:
    """InterPodAffinity (interpodaffinity/filtering.go): the pod's required affinity, its
    required anti-affinity, then the required anti-affinity of pods already placed."""
    placed = view.pods_with_required_anti_affinity()
    if not (demand.affinity or demand.anti_affinity or placed):
        return None  # most pods, most clusters: nothing for this filter to look at
    name = _node_name(node)
    labels = kinds.labels(node)
    for term in demand.affinity + demand.anti_affinity:
        if term.namespace_selector not in (None, EVERY_NAMESPACE):
            raise _CannotTell(f"{subject}'s pod affinity selects namespaces by label")
    if demand.affinity:
        reason = _affinity_reason(demand, node, view, subject)
        if reason:
            return reason
    for term in demand.anti_affinity:
        if term.topology_key not in labels:
            continue  # no domain here, so nothing in it to avoid
        value = labels[term.topology_key]
        for other in _domain_nodes(view, node, term.topology_key, value):
            for pod in view.pods_on(_node_name(other)):
                if term.matches(_pod_namespace(pod), kinds.labels(pod)):
                    return (f"node {name} fails {subject}'s pod anti-affinity: pod {_pod_key(pod)} "
                            f"runs in {term.topology_key}={value}")
    for pod in placed:
        terms = _existing_anti_terms(pod)
        if isinstance(terms, str):
            raise _CannotTell(f"the pod anti-affinity of pod {_pod_key(pod)} cannot be read: {terms}")
        other = None
        for term in terms:
            if term.topology_key not in labels:
                continue
            if other is None:
                other = view.node(kinds.spec(pod).get("nodeName")) or {}
            value = kinds.labels(other).get(term.topology_key)
            if value is None or value != labels[term.topology_key]:
                continue
            match = term.matches(demand.namespace, demand.labels)
            if match is None:
                raise _CannotTell(f"the pod anti-affinity of pod {_pod_key(pod)} selects namespaces by label")
            if match:
                return (f"node {name} fails the pod anti-affinity of pod {_pod_key(pod)} "
                        f"in {term.topology_key}={value}")
    return None


def _affinity_reason(demand: Demand, node: Mapping[str, Any], view: View, subject: str) -> str | None:
    """A pod counts for the pod's affinity when it matches every term; each term needs such a
    pod in the node's domain. The first pod of a group whose terms select itself may go
    anywhere while no pod matches (filtering.go `satisfyPodAffinity`)."""
    name = _node_name(node)
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
        for pod in view.pods_on(_node_name(other)):
            namespace, pod_labels = _pod_namespace(pod), kinds.labels(pod)
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


def _counted_for_spread(pod: Any, namespace: str, selector: Selector) -> bool:
    """podtopologyspread/common.go `countPodsMatchSelector`: same namespace, not terminating; a
    selector without requirements counts nothing."""
    return (bool(selector) and _pod_namespace(pod) == namespace and not kinds.terminating(pod)
            and selects(selector, kinds.labels(pod)))


@_never_raises
def pod_topology_spread(demand: Demand, node: Mapping[str, Any], view: View, subject: str = "the VM") -> str | None:
    """PodTopologySpread with DoNotSchedule (podtopologyspread/filtering.go): placing the pod
    must keep matching pods in its domain within maxSkew of the emptiest eligible domain.
    Eligible nodes carry every constraint's key and pass the inclusion policies (by default
    the pod's nodeSelector/required node affinity, not its taints); fewer domains than
    minDomains make the minimum 0."""
    if not demand.spread:
        return None
    name = _node_name(node)
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
                    admits = node_rules.pod_admits(demand.pod, other)
                if not admits:
                    continue
            if constraint.node_taints_policy == HONOR:
                if taint_free is None:
                    taint_free = node_rules.blocking_taint(other, tolerations) is None
                if not taint_free:
                    continue
            if pods is None:
                pods = list(view.pods_on(_node_name(other)))
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


CHECKS: tuple[Check, ...] = (node_resources_fit, node_ports, volumes, inter_pod_affinity, pod_topology_spread)


def why_not_fit(pod: Any, namespace: str, node: Mapping[str, Any], view: View, subject: str = "the VM", *,
                demand: Demand | None = None) -> str | None:
    """Why kube-scheduler's filters would turn the pod away from the node (the first failed
    check, or "cannot tell ..."), or None when they would pass it. Pass `demand` (from
    `Demand.of`) to read the pod once for several nodes."""
    if demand is None:
        try:
            demand = Demand.of(pod, namespace)
        except Unreadable as error:
            return _cannot_tell(node, subject, f"{subject} cannot be read: {error}")
        except Exception as error:
            return _cannot_tell(node, subject, f"{subject} cannot be read ({type(error).__name__})")
    if not isinstance(node, dict):
        return _cannot_tell(node, subject, "the node is not an object")
    for check in CHECKS:  # guarded here as `_never_raises` guards each: one call less per check
        try:
            reason = check.unguarded(demand, node, view, subject)  # type: ignore[attr-defined]
        except Exception as error:
            return _failed(check, node, subject, error)
        if reason is not None:
            return reason
    return None


def for_checks(pod: Any) -> Any:
    """A pod reduced to what the node checks (rules/nodes.py) and these checks read, for a
    caller that keeps it a while (the keeper, one per VM apart): a launcher pod's environment,
    mounts and probes are most of its bytes and none of this."""
    if not isinstance(pod, dict):
        return pod
    meta, spec = kinds.meta(pod), kinds.spec(pod)
    kept_spec = {key: spec[key] for key in ("nodeName", "nodeSelector", "affinity", "tolerations", "overhead",
                                            "resources", "hostNetwork", "topologySpreadConstraints") if key in spec}
    for key, fields in (("containers", ("name", "resources", "ports", "restartPolicy")),
                        ("initContainers", ("name", "resources", "ports", "restartPolicy")),
                        ("volumes", ("name", "persistentVolumeClaim", "ephemeral"))):
        if key not in spec:
            continue
        items = spec[key]  # anything of another shape is kept as it is, for the checks to judge
        kept_spec[key] = [{k: c[k] for k in fields if k in c} if isinstance(c, dict) else c for c in items] \
            if isinstance(items, list) else items
    kept_meta = {key: meta[key] for key in ("name", "namespace", "labels") if key in meta}
    return {"metadata": kept_meta, "spec": kept_spec}
