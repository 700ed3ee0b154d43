"""What a pod asks of a node's resources, as NodeResourcesFit counts it (component-helpers/resource
`PodRequests`): the containers' requests, sidecars and init containers, pod-level resources,
overhead, and in-place resizes of running pods."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ... import kinds
from ..shared.quantity import CPU, nanos, units
from .fields import Unreadable, as_list, as_mapping, pod_spec


def counted(resource: str) -> bool:
    """Resources NodeResourcesFit compares: cpu, memory, ephemeral-storage and the scalar ones (extended like
    devices.kubevirt.io/kvm, hugepages-*, kubernetes.io/-prefixed, attachable volumes); anything else the scheduler
    ignores (framework/types.go `Resource.Add`, scheduler/util `IsScalarResourceName`)."""
    if resource in (CPU, "memory", "ephemeral-storage"):
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
    found = {}
    for name, amount in as_mapping(value, what).items():
        try:
            found[name] = nanos(amount)
        except ValueError:
            raise Unreadable(f"{what} {name} {amount!r} is not a quantity") from None
    return found


def _container_requests(container: Any, statuses: Mapping[Any, Mapping[str, Any]], infeasible: bool,
                        what: str) -> dict[str, int]:
    """A container's requests in nano-units (`what`: which, for a complaint): a limit alone is its request, as the
    apiserver defaults it (pkg/apis/core/v1/defaults.go `SetDefaults_Pod`); after an in-place resize `statuses` report,
    the largest of spec, actuated and allocated (component-helpers/resource `determineEffectiveRequests`)."""
    try:
        if not isinstance(container, dict):
            raise Unreadable("is not an object")
        resources = container.get("resources")
        requests = {}
        if resources:
            resources = as_mapping(resources, "resources")
            requests = _resource_list(resources.get("requests"), "request")
            for name, amount in _resource_list(resources.get("limits") or None, "limit").items():
                requests.setdefault(name, amount)
        status = statuses.get(container.get("name")) if statuses else None
        if not status:
            return requests
        effective = {} if infeasible else requests
        _raise_to(effective, _resource_list(as_mapping(status.get("resources"), "status").get("requests"), "actuated"))
        _raise_to(effective, _resource_list(status.get("allocatedResources"), "allocated"))
        return effective
    except Unreadable as error:
        raise Unreadable(f"{what} {error}") from None


def _resize_statuses(pod: Any) -> tuple[dict[Any, Mapping[str, Any]], bool]:
    """Container statuses that report resources, by name, and whether a resize is infeasible."""
    status = kinds.status(pod)
    statuses = {}
    for key in ("containerStatuses", "initContainerStatuses"):
        for entry in as_list(status.get(key), f"status.{key}"):
            if isinstance(entry, dict) and entry.get("resources") is not None:
                statuses[entry.get("name")] = entry
    for condition in as_list(status.get("conditions"), "status.conditions"):
        if isinstance(condition, dict) and condition.get("type") == "PodResizePending":
            return statuses, condition.get("reason") == "Infeasible"
    return statuses, False


def _add_init_containers(total: dict[str, int], init_containers: list[Any],
                         statuses: Mapping[Any, Mapping[str, Any]], infeasible: bool) -> None:
    """component-helpers/resource `AggregateContainerRequests`: sidecars (restartable init
    containers) run with the containers; each plain init container runs with the sidecars
    started before it; the pod needs the larger of the two phases."""
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for i, container in enumerate(init_containers):
        sidecar = isinstance(container, dict) and container.get("restartPolicy") == "Always"
        requests = _container_requests(container, statuses if sidecar else {}, infeasible, f"init container {i}")
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
    return resource in (CPU, "memory") or resource.startswith("hugepages-")


def _apply_pod_level(total: dict[str, int], resources: Mapping[str, Any]) -> None:
    """Pod-level requests (PodLevelResources) replace the containers' sum for cpu, memory and hugepages, a
    limit alone defaulting them as the apiserver does (pkg/apis/core/v1/defaults.go `defaultPodRequests`)."""
    requests = _resource_list(resources.get("requests"), "pod request")
    limits = _resource_list(resources.get("limits"), "pod limit")
    for name, amount in requests.items():
        if _pod_level(name):
            total[name] = amount
    for name, amount in limits.items():
        if _pod_level(name) and name not in requests and (name.startswith("hugepages-") or name not in total):
            total[name] = amount


def pod_requests(pod: Any, *, running: bool = False) -> dict[str, int]:
    """What the scheduler counts for the pod, in its units (component-helpers/resource `PodRequests`);
    `running` reads in-place resizes, as it does for bound pods. Raises Unreadable (a ValueError)."""
    spec = pod_spec(pod)
    statuses, infeasible = _resize_statuses(pod) if running else ({}, False)
    total: dict[str, int] = {}
    for i, container in enumerate(as_list(spec.get("containers"), "containers")):
        _add(total, _container_requests(container, statuses, infeasible, f"container {i}"))
    init_containers = spec.get("initContainers")
    if init_containers:
        _add_init_containers(total, as_list(init_containers, "initContainers"), statuses, infeasible)
    if spec.get("resources"):
        _apply_pod_level(total, as_mapping(spec.get("resources"), "pod resources"))
    if spec.get("overhead"):
        _add(total, _resource_list(spec.get("overhead"), "overhead"))
    return {name: units(name, amount) for name, amount in total.items() if type(name) is str and counted(name)}
