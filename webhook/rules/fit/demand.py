"""The pod under judgement, read once for every check and every node tried."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import orjson

from ... import kinds
from .memo import KEY_BYTES, Memo
from .fields import Unreadable, pod_spec
from .requests import pod_requests
from .terms import AffinityTerm, HostPort, SpreadConstraint, affinity_terms, host_ports, spread_constraints


def _requests_and_ports(pod: Any, memo: Memo | None) -> tuple[Mapping[str, int], tuple[HostPort, ...]]:
    """(`pod_requests(pod)`, `host_ports(pod)`), which pods of VMs of one size share: kept in the
    memo by the JSON of what they read, which no two different values write alike."""
    spec = pod.get("spec") if memo is not None and type(pod) is dict else None
    if type(spec) is dict:
        containers, init = spec.get("containers"), spec.get("initContainers")
        if type(containers) is list and (init is None or type(init) is list):
            try:
                content = orjson.dumps((
                    [(c.get("resources"), c.get("ports")) for c in containers],
                    [(c.get("resources"), c.get("restartPolicy"), c.get("ports")) for c in init or ()],
                    spec.get("resources"), spec.get("overhead"), spec.get("hostNetwork")))
            except (AttributeError, orjson.JSONEncodeError):  # an item that is no object, a value JSON cannot hold
                return _read_requests_and_ports(pod)
            held = True if len(content) <= KEY_BYTES else None  # larger than any real pod's: read each time
            return memo.latest(_read_requests_and_ports, content, held, pod)  # type: ignore[union-attr]
    return _read_requests_and_ports(pod)  # a shape to read the long way (which says what is wrong with it)


def _read_requests_and_ports(pod: Any) -> tuple[Mapping[str, int], tuple[HostPort, ...]]:
    return pod_requests(pod), host_ports(pod)


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
    # What the filters read of the cluster for this pod whatever the node, read on the first node
    # judged and kept for the others, as kube-scheduler's PreFilter does once per scheduling cycle.
    gathered: Any = None  # what its pod (anti-)affinity concerns, node by node (interpodaffinity.Gathered)
    mounts: Any = None  # its claims and their PVs, and what ends them (volumes._mounts)
    filters: Any = None  # the filters that may turn it away from a node (checks.prefilter)
    run_key: Any = None  # what `checks.why_not_run` reads of it, as the memo's key (b"": none)

    @classmethod
    def of(cls, pod: Any, namespace: str, memo: Memo | None = None) -> "Demand":
        """Raises Unreadable (a ValueError) when the pod cannot be read."""
        try:
            spec = pod_spec(pod)
            affinity = spec.get("affinity")
            with_pod_affinity = isinstance(affinity, dict) and (affinity.get("podAffinity") or affinity.get("podAntiAffinity"))
            requests, ports = _requests_and_ports(pod, memo)
            return cls(
                pod=pod,
                namespace=namespace,
                labels=kinds.labels(pod),
                requests=requests,
                host_ports=ports,
                affinity=affinity_terms(pod, namespace, "podAffinity", incoming=True) if with_pod_affinity else [],
                anti_affinity=affinity_terms(pod, namespace, "podAntiAffinity", incoming=True) if with_pod_affinity else [],
                spread=spread_constraints(pod) if spec.get("topologySpreadConstraints") else [],
            )
        except (TypeError, AttributeError):
            raise Unreadable("unexpected shape") from None
