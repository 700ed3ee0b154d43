"""NodeAffinity (kubernetes `nodeaffinity/node_affinity.go`, k8s.io/component-helpers
`scheduling/corev1/nodeaffinity`): the pod's nodeSelector and required node affinity. Terms are
ORed, a term's requirements ANDed; `matchFields` supports `metadata.name` only."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ... import kinds


def _requirement_matches(requirement: Mapping[str, Any], value: str | None) -> bool:
    operator = requirement.get("operator")
    values = requirement.get("values") or []
    if not isinstance(values, list):
        return False  # not a requirement the apiserver would have stored
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt"):
        if value is None or len(values) != 1:
            return False
        try:
            have, bound = int(value), int(values[0])
        except (TypeError, ValueError):
            return False
        return have > bound if operator == "Gt" else have < bound
    return False  # unknown operators never match (the apiserver rejects them anyway)


def term_matches(term: Any, labels: Mapping[str, Any], name: Any) -> bool:
    """A NodeSelectorTerm on a node's labels and name: every requirement must hold; an empty term matches nothing."""
    if not isinstance(term, dict):
        return False
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not isinstance(expressions, list) or not isinstance(fields, list):
        return False  # not a term the apiserver would have stored
    if not expressions and not fields:
        return False
    for requirement in expressions:
        if not isinstance(requirement, dict) or not isinstance(key := requirement.get("key"), str):
            return False
        if not _requirement_matches(requirement, labels.get(key)):
            return False
    for requirement in fields:
        if not isinstance(requirement, dict) or requirement.get("key") != "metadata.name":
            return False
        if not _requirement_matches(requirement, name):
            return False
    return True


def pod_admits(pod: Mapping[str, Any], node: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    """The pod's own nodeSelector and required node affinity accept the node (`labels`: its labels)."""
    spec = kinds.spec(pod)
    selector = spec.get("nodeSelector") or {}
    if isinstance(selector, dict):
        for key, value in selector.items():  # loops, not any(...): this runs on every pin
            if labels.get(key) != value:
                return False
    affinity = spec.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(node_affinity, dict) else None
    if not isinstance(required, dict):
        return True
    terms = required.get("nodeSelectorTerms")
    if not isinstance(terms, list) or not terms:
        # A required node selector without terms matches no node (kube-scheduler), and the
        # apiserver refuses the pod: left for it to judge, never made valid by a pin of ours.
        return False
    name = (node.get("metadata") or {}).get("name")
    return any(term_matches(term, labels, name) for term in terms)
