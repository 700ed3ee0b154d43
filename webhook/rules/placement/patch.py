"""Pure: a pod and a Decision → JSON patch operations (add only, AND-merged, idempotent),
and the inverse: the pod as created, without what we added (`as_created`, for `explain`).

Kubernetes semantics (k8s.io/api core/v1 NodeSelector): nodeSelectorTerms are ORed, the
requirements inside one term are ANDed, and an empty term matches nothing. So a pin is
added to *every* non-empty term; a new term is created only when there is none. "One of
several nodes" cannot be one requirement: the apiserver allows a single value for a node field
selector (`metadata.name In [a, b]` is refused), so it is ORed terms, one node each, each
carrying what the pod's own terms require: every existing term gets the first node, and a copy
of it is appended for each other node (terms × nodes, add-only).
A patch that decodes but does not apply fails pod creation even with failurePolicy
Ignore: missing parents are added whole, never a child under a missing parent.
"""
from __future__ import annotations

import copy
from typing import Any

from ... import kinds
from ...config import Settings
from ...kinds import MAX_REASON, REQUIRED, clip_reason
from ..shared.prune import dict_or_none, drop_empty, keep_or_drop
from .decide import Decision

PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def escape(key: str) -> str:
    """JSON pointer escaping (RFC 6901): '~' → '~0', '/' → '~1'."""
    return key.replace("~", "~0").replace("/", "~1")


def _annotation_path(key: str) -> str:
    """Where an annotation goes."""
    return f"/metadata/annotations/{escape(key)}"


def node_requirement(node: str) -> dict[str, Any]:
    """Select a node by name, as the DaemonSet controller does (the hostname label may differ).
    One value: the apiserver refuses a node field selector with several."""
    return {"key": "metadata.name", "operator": "In", "values": [node]}


def preferred_term(node: str, weight: int) -> dict[str, Any]:
    return {"weight": weight, "preference": {"matchFields": [node_requirement(node)]}}


def affinity_ops(
    spec: dict[str, Any], required: tuple[str, ...], preferences: tuple[tuple[str, int], ...], base: str = "/spec"
) -> list[dict[str, Any]]:
    """Operations that AND "one of the `required` nodes" into the node affinity and add the
    preferred terms."""
    wanted_preferred = [preferred_term(node, weight) for node, weight in preferences]
    if not required and not wanted_preferred:
        return []
    affinity = spec.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    if not isinstance(node_affinity, dict):
        value: dict[str, Any] = {}
        if required:
            value[REQUIRED] = {"nodeSelectorTerms": _new_terms(required)}
        if wanted_preferred:
            value[PREFERRED] = wanted_preferred
        if not isinstance(affinity, dict):
            return [{"op": "add", "path": f"{base}/affinity", "value": {"nodeAffinity": value}}]
        return [{"op": "add", "path": f"{base}/affinity/nodeAffinity", "value": value}]
    path = f"{base}/affinity/nodeAffinity"
    ops = _required_ops(node_affinity, required, path) if required else []
    return ops + (_preferred_ops(node_affinity, wanted_preferred, path) if wanted_preferred else [])


def _new_terms(nodes: tuple[str, ...]) -> list[dict[str, Any]]:
    """One term per node, for a pod with no required terms of its own."""
    return [{"matchFields": [node_requirement(node)]} for node in nodes]


def _pinned_by_name(term: dict[str, Any]) -> bool:
    """The term already selects one node by name (ours, from an earlier review of the same pod)."""
    fields = term.get("matchFields")
    return isinstance(fields, list) and any(
        isinstance(f, dict) and f.get("key") == "metadata.name" and f.get("operator") == "In" for f in fields)


def _required_ops(node_affinity: dict[str, Any], nodes: tuple[str, ...], path: str) -> list[dict[str, Any]]:
    """AND "one of `nodes`" into the required terms: the first node into every non-empty term,
    a copy of each such term with each other node appended; or one term per node when there are
    none. A pod whose every non-empty term already names a node was answered before (a
    reinvocation): nothing is added, so a second answer never ANDs a second node in."""
    selector = node_affinity.get(REQUIRED)
    selector = selector if isinstance(selector, dict) else None
    terms = selector.get("nodeSelectorTerms") if selector else None
    if not isinstance(terms, list) or not terms:
        if selector is not None:
            return [{"op": "add", "path": f"{path}/{REQUIRED}/nodeSelectorTerms", "value": _new_terms(nodes)}]
        return [{"op": "add", "path": f"{path}/{REQUIRED}", "value": {"nodeSelectorTerms": _new_terms(nodes)}}]
    # An empty term matches nothing; filling it would widen placement.
    live = [(i, term) for i, term in enumerate(terms)
            if isinstance(term, dict) and (term.get("matchExpressions") or term.get("matchFields"))]
    if all(_pinned_by_name(term) for _, term in live):
        return []
    first, *others = nodes
    ops: list[dict[str, Any]] = []
    for i, term in live:
        fields = term.get("matchFields")
        term_path = f"{path}/{REQUIRED}/nodeSelectorTerms/{i}/matchFields"
        if not isinstance(fields, list):
            ops.append({"op": "add", "path": term_path, "value": [node_requirement(first)]})
        else:
            ops.append({"op": "add", "path": f"{term_path}/-", "value": node_requirement(first)})
    for node in others:
        for _, term in live:
            fields = term.get("matchFields")
            copied = {**term, "matchFields": [*(fields if isinstance(fields, list) else []), node_requirement(node)]}
            ops.append({"op": "add", "path": f"{path}/{REQUIRED}/nodeSelectorTerms/-", "value": copy.deepcopy(copied)})
    return ops


def _preferred_ops(node_affinity: dict[str, Any], wanted: list[dict[str, Any]], path: str) -> list[dict[str, Any]]:
    """Add the preferred terms the pod does not have yet."""
    existing = node_affinity.get(PREFERRED)
    if not isinstance(existing, list):
        return [{"op": "add", "path": f"{path}/{PREFERRED}", "value": wanted}]
    have = [t.get("preference") for t in existing if isinstance(t, dict)]
    return [{"op": "add", "path": f"{path}/{PREFERRED}/-", "value": term}
            for term in wanted if term["preference"] not in have]


def annotation_ops(obj: dict[str, Any], annotations: dict[str, str]) -> list[dict[str, Any]]:
    """Set annotations, adding only what differs (add replaces an existing member)."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        return [{"op": "add", "path": "/metadata", "value": {"annotations": dict(annotations)}}]
    current = metadata.get("annotations")
    if not isinstance(current, dict):
        return [{"op": "add", "path": "/metadata/annotations", "value": dict(annotations)}]
    ops = []
    for key, value in annotations.items():
        if current.get(key) != value:
            ops.append({"op": "add", "path": _annotation_path(key), "value": value})
    return ops


def decision_annotations(decision: Decision, settings: Settings) -> dict[str, str]:
    """decision / node / reason: always all three, so a re-review never leaves a stale one."""
    recorded = audit_annotations(decision)
    return {
        settings.decision_annotation: recorded[kinds.DECISION],
        settings.node_annotation: recorded[kinds.NODE_KEY],
        settings.reason_annotation: recorded[kinds.REASON],
    }


def audit_annotations(decision: Decision) -> dict[str, str]:
    """The same, for the audit log (the apiserver prefixes the keys with the webhook's name)."""
    node = ",".join(decision.required or [n for n, _ in decision.preferences])
    reason = decision.reason
    return {kinds.DECISION: decision.outcome,
            kinds.NODE_KEY: node if len(node) <= MAX_REASON else clip_reason(node),
            kinds.REASON: reason if len(reason) <= MAX_REASON else clip_reason(reason)}


def patch_for(obj: dict[str, Any], decision: Decision, settings: Settings) -> list[dict[str, Any]]:
    """The whole patch for one pod: affinity first, then the recorded decision."""
    spec = obj.get("spec")
    annotations = annotation_ops(obj, decision_annotations(decision, settings))  # affinity first, in the patch
    if not isinstance(spec, dict):
        return annotations
    return affinity_ops(spec, decision.required, decision.preferences) + annotations


def _without_copies(terms: list[Any], added: list[dict[str, Any]]) -> list[Any]:
    """The terms less the copies `_required_ops` appended, one per own term for each node after
    the first: of the c terms that name one of our m nodes, the last c·(m−1)/m."""
    ours = [i for i, t in enumerate(terms) if isinstance(t, dict) and isinstance(t.get("matchFields"), list)
            and any(f in added for f in t["matchFields"])]
    m = len(added)
    if m < 2 or not ours or len(ours) % m:
        return terms
    copies = set(ours[len(ours) // m:])
    return [t for i, t in enumerate(terms) if i not in copies]


def as_created(pod: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """The launcher pod as KubeVirt would create it again: unbound, without what we added to it.

    The inverse of `patch_for`: only what our annotations say we added is removed (the
    user's own terms stay), and a container left empty by that removal goes too, since
    `patch_for` added it whole (Kubernetes never serialises an empty affinity or list).
    """
    pod = copy.deepcopy(pod)
    spec = pod.setdefault("spec", {})
    spec.pop("nodeName", None)
    metadata = kinds.meta(pod)
    annotations = kinds.annotations(pod)
    ours = [n for n in str(annotations.get(settings.node_annotation) or "").split(",") if n]
    for key in (settings.decision_annotation, settings.node_annotation, settings.reason_annotation):
        annotations.pop(key, None)
    if "annotations" in metadata and not annotations:
        del metadata["annotations"]
    affinity = dict_or_none(spec.get("affinity"))
    node_affinity = dict_or_none(affinity.get("nodeAffinity")) if affinity else None
    if not ours or node_affinity is None:
        return pod
    added = [node_requirement(node) for node in ours]
    selector = dict_or_none(node_affinity.get(REQUIRED))
    terms = selector.get("nodeSelectorTerms") if selector else None
    if selector is not None and isinstance(terms, list):
        terms = _without_copies(terms, added)
        kept: list[Any] = []
        for term in terms:
            if isinstance(term, dict) and isinstance(term.get("matchFields"), list):
                term["matchFields"] = [f for f in term["matchFields"] if f not in added]
                if not term["matchFields"]:
                    del term["matchFields"]
                    if not term.get("matchExpressions"):
                        continue  # a term we created: dropping it restores "no required affinity"
            kept.append(term)
        if kept:
            selector["nodeSelectorTerms"] = kept
        else:
            del node_affinity[REQUIRED]
    preferred = node_affinity.get(PREFERRED)
    if isinstance(preferred, list):
        ours_preferred = [{"matchFields": [node_requirement(node)]} for node in ours]
        keep_or_drop(node_affinity, PREFERRED,
                     [t for t in preferred if not (isinstance(t, dict) and t.get("preference") in ours_preferred)])
    drop_empty(spec, "affinity", "nodeAffinity")
    return pod
