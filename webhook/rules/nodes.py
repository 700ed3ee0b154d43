"""Pure: can this node take this pod right now? (Never pin a pod to a node it cannot run on.)

Semantics follow Kubernetes (k8s.io/api core/v1 `Toleration.ToleratesTaint`,
k8s.io/component-helpers `scheduling/corev1/nodeaffinity`): nodeSelectorTerms are ORed,
requirements inside a term ANDed, an empty term matches nothing; `matchFields` supports
`metadata.name` only; `Gt`/`Lt` compare integers. Taints with effect NoSchedule or
NoExecute block a pod that does not tolerate them; PreferNoSchedule does not.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .. import kinds
from ..kinds import KUBEVIRT_SCHEDULABLE

BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """One toleration against one taint, as the scheduler's TaintToleration plugin does."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False  # an empty effect matches every effect
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False  # an empty key (with Exists) matches every key
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def blocking_taint(node: Mapping[str, Any], tolerations: Sequence[Any]) -> Mapping[str, Any] | None:
    """The first NoSchedule/NoExecute taint of the node that no toleration tolerates."""
    taints = (node.get("spec") or {}).get("taints")
    if not taints:
        return None
    usable = [t for t in tolerations if isinstance(t, dict)]
    for taint in taints:
        if not isinstance(taint, dict) or taint.get("effect") not in BLOCKING_EFFECTS:
            continue
        if not any(tolerates(t, taint) for t in usable):
            return taint
    return None


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


def term_matches(term: Any, node: Mapping[str, Any]) -> bool:
    """A NodeSelectorTerm: every requirement must hold; an empty term matches nothing."""
    return _term_matches(term, kinds.labels(node), node)


def _term_matches(term: Any, labels: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    if not isinstance(term, dict):
        return False
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not isinstance(expressions, list) or not isinstance(fields, list):
        return False  # not a term the apiserver would have stored
    if not expressions and not fields:
        return False
    name = (node.get("metadata") or {}).get("name")
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


def pod_admits(pod: Mapping[str, Any], node: Mapping[str, Any], labels: Mapping[str, Any] | None = None) -> bool:
    """The pod's own nodeSelector and required node affinity accept the node (whose labels
    the caller may have read already)."""
    spec = kinds.spec(pod)
    if labels is None:
        labels = kinds.labels(node)
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
        return True
    for term in terms:
        if _term_matches(term, labels, node):
            return True
    return False


def is_ready(node: Mapping[str, Any]) -> bool:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def why_not(node_name: str, node: Mapping[str, Any] | None, pod: Mapping[str, Any], *, needs_kubevirt: bool) -> str | None:
    """Why `pod` cannot run on the node now (the first failed check), or None when it can."""
    if node is None:
        return f"node {node_name} not found"
    if (node.get("spec") or {}).get("unschedulable"):
        return f"node {node_name} is cordoned"
    if not is_ready(node):
        return f"node {node_name} is not Ready"
    labels = kinds.labels(node)
    if needs_kubevirt and labels.get(KUBEVIRT_SCHEDULABLE) != "true":
        return f"node {node_name} lacks {KUBEVIRT_SCHEDULABLE}=true"
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    taint = blocking_taint(node, tolerations if isinstance(tolerations, list) else [])
    if taint is not None:
        shown = taint.get("key", "")
        if taint.get("value"):
            shown += f"={taint['value']}"
        return f"node {node_name} has untolerated taint {shown}:{taint.get('effect')}"
    if not pod_admits(pod, node, labels):
        return f"node {node_name} fails the pod's own nodeSelector/affinity"
    return None
