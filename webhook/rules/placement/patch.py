"""Pure: a pod and a Decision → a JSON patch (AND-merged, idempotent), and its inverse `as_created` (the pod as
created: what `explain` and the migration target are rendered from).

NodeSelector terms are ORed, a term's requirements ANDed: a pin is added to every non-empty term, and "one of several
nodes" is a copy of each term per node. The patch only adds, each where the pod has the parent: a patch that does not
apply would fail pod creation even with failurePolicy Ignore.
"""
from __future__ import annotations

import copy
from collections.abc import Collection, Sequence
from typing import Any

import orjson
from jsonpointer import escape

from ... import kinds
from ...config import Settings
from ...kinds import PREFERRED_TERMS, REQUIRED, clip_reason
from ..shared.prune import dict_or_none, drop_empty, keep_or_drop
from .decide import Decision

AFFINITY = "/spec/affinity"
REQUIRED_PATH = f"{AFFINITY}/nodeAffinity/{REQUIRED}"
TERMS_PATH = f"{REQUIRED_PATH}/nodeSelectorTerms"
PREFERRED_PATH = f"{AFFINITY}/nodeAffinity/{PREFERRED_TERMS}"


def node_requirement(node: str) -> dict[str, Any]:
    """Select a node by name, as the DaemonSet controller does (the hostname label may differ).
    One value: the apiserver refuses a node field selector with several."""
    return {"key": "metadata.name", "operator": "In", "values": [node]}


def _live(term: Any) -> bool:
    """A term that is not empty: an empty one matches nothing, and filling it would widen placement."""
    return isinstance(term, dict) and bool(term.get("matchExpressions") or term.get("matchFields"))


def live_terms(pod: Any) -> list[dict[str, Any]]:
    affinity = kinds.spec(pod).get("affinity")
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    selector = node_affinity.get(REQUIRED) if isinstance(node_affinity, dict) else None
    terms = selector.get("nodeSelectorTerms") if isinstance(selector, dict) else None
    return [t for t in terms if _live(t)] if isinstance(terms, list) else []


def patch_for(pod: dict[str, Any], decision: Decision, settings: Settings) -> list[dict[str, Any]]:
    """The RFC 6902 `add` operations that place `pod` as decided and record the decision, affinity first (a list as
    the answer carries it: jsonpatch's JsonPatch parses every path again, 10 µs an answer)."""
    ops: list[dict[str, Any]] = []
    spec = pod.get("spec")
    if isinstance(spec, dict) and (decision.required or decision.preferences):
        wanted = [{"weight": weight, "preference": {"matchFields": [node_requirement(node)]}}
                  for node, weight in decision.preferences]
        _place(ops, spec, decision.required, wanted)
    record(ops, pod, decision_annotations(decision, settings))
    return ops


def _add(path: str, value: Any) -> dict[str, Any]:
    return {"op": "add", "path": path, "value": value}


def _place(ops: list[dict[str, Any]], spec: dict[str, Any], required: tuple[str, ...],
           wanted: list[dict[str, Any]]) -> None:
    """AND "one of the `required` nodes" into the node affinity of `spec`; add the preferred terms it lacks."""
    affinity = spec.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    if not isinstance(node_affinity, dict):
        whole = ({REQUIRED: {"nodeSelectorTerms": _new_terms(required)}} if required else {}) \
            | ({PREFERRED_TERMS: wanted} if wanted else {})
        ops.append(_add(f"{AFFINITY}/nodeAffinity", whole) if isinstance(affinity, dict)
                   else _add(AFFINITY, {"nodeAffinity": whole}))
        return
    if required:
        _require(ops, node_affinity, required)
    if wanted:
        existing = node_affinity.get(PREFERRED_TERMS)
        if not isinstance(existing, list):
            ops.append(_add(PREFERRED_PATH, wanted))
            return
        have = [t.get("preference") for t in existing if isinstance(t, dict)]
        ops += [_add(f"{PREFERRED_PATH}/-", term) for term in wanted if term["preference"] not in have]


def _require(ops: list[dict[str, Any]], node_affinity: dict[str, Any], nodes: tuple[str, ...]) -> None:
    """AND "one of `nodes`" into the required terms. A pod whose every non-empty term already names
    a node was answered before (a reinvocation): nothing is added, never a second node ANDed in."""
    selector = node_affinity.get(REQUIRED)
    terms = selector.get("nodeSelectorTerms") if isinstance(selector, dict) else None
    if not isinstance(terms, list) or not terms:
        new = _new_terms(nodes)
        if not isinstance(selector, dict):
            ops.append(_add(REQUIRED_PATH, {"nodeSelectorTerms": new}))
        elif isinstance(terms, list):  # an empty list: the terms appended to it
            ops += [_add(f"{TERMS_PATH}/-", term) for term in new]
        else:
            ops.append(_add(TERMS_PATH, new))
        return
    live = [i for i, term in enumerate(terms) if _live(term)]
    if all(pinned_by_name(terms[i]) for i in live):
        return
    first, *others = nodes
    own = {i: fields if isinstance(fields := terms[i].get("matchFields"), list) else None for i in live}
    ops += [_add(f"{TERMS_PATH}/{i}/matchFields/-", node_requirement(first)) if fields is not None
            else _add(f"{TERMS_PATH}/{i}/matchFields", [node_requirement(first)]) for i, fields in own.items()]
    # Each copy an object of its own, not sharing the pod's values.
    ops += [_add(f"{TERMS_PATH}/-",
                 copy.deepcopy({**terms[i], "matchFields": [*(fields or ()), node_requirement(node)]}))
            for node in others for i, fields in own.items()]


def record(ops: list[dict[str, Any]], pod: dict[str, Any], annotations: dict[str, str]) -> None:
    """Add the `annotations` the object lacks or holds otherwise."""
    metadata = pod.get("metadata")
    present = metadata.get("annotations") if isinstance(metadata, dict) else None
    if not isinstance(present, dict):
        ops.append(_add("/metadata/annotations", dict(annotations)) if isinstance(metadata, dict)
                   else _add("/metadata", {"annotations": dict(annotations)}))
        return
    ops += [_add(f"/metadata/annotations/{escape(key)}", value)
            for key, value in annotations.items() if key not in present or present[key] != value]


def _new_terms(nodes: Sequence[str]) -> list[dict[str, Any]]:
    """One term per node (for a pod with no required terms of its own; our preferences')."""
    return [{"matchFields": [node_requirement(node)]} for node in nodes]


def pinned_by_name(term: dict[str, Any], nodes: Collection[str] | None = None) -> bool:
    """The term already selects one node by name (ours, from an earlier review of the same pod; one of `nodes`)."""
    fields = term.get("matchFields")
    return isinstance(fields, list) and any(
        isinstance(f, dict) and f.get("key") == "metadata.name" and f.get("operator") == "In"
        and (nodes is None or f.get("values") in ([node] for node in nodes)) for f in fields)


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
    return {kinds.DECISION: decision.outcome, kinds.NODE_KEY: clip_reason(",".join(decision.required or decision.nodes)),
            kinds.REASON: clip_reason(decision.reason)}


def _without_copies(terms: list[Any], added: list[dict[str, Any]]) -> list[Any]:
    """The terms less the copies `_require` appended, one per own term for each node after
    the first: of the c terms that name one of our m nodes, the last c·(m−1)/m."""
    ours = [i for i, t in enumerate(terms) if isinstance(t, dict) and isinstance(t.get("matchFields"), list)
            and any(f in added for f in t["matchFields"])]
    m = len(added)
    if m < 2 or not ours or len(ours) % m:
        return terms
    copies = set(ours[len(ours) // m:])
    return [t for i, t in enumerate(terms) if i not in copies]


def _copy(pod: dict[str, Any]) -> dict[str, Any]:
    """A deep copy through JSON: a quarter of `copy.deepcopy`'s time on a launcher pod (a drain's
    share-manager renders its VM's migration target from one)."""
    try:
        return orjson.loads(orjson.dumps(pod))
    except orjson.JSONEncodeError:
        return copy.deepcopy(pod)


def as_created(pod: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """The launcher pod as KubeVirt would create it again: unbound, without what our annotations
    say `patch_for` added (the user's own terms stay; what that leaves empty goes too)."""
    pod = _copy(pod)
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
                keep_or_drop(term, "matchFields", [f for f in term["matchFields"] if f not in added])
                if "matchFields" not in term and not term.get("matchExpressions"):
                    continue  # a term we created: dropping it restores "no required affinity"
            kept.append(term)
        keep_or_drop(selector, "nodeSelectorTerms", kept)
        drop_empty(node_affinity, REQUIRED)
    preferred = node_affinity.get(PREFERRED_TERMS)
    if isinstance(preferred, list):
        ours_preferred = _new_terms(ours)
        keep_or_drop(node_affinity, PREFERRED_TERMS,
                     [t for t in preferred if not (isinstance(t, dict) and t.get("preference") in ours_preferred)])
    drop_empty(spec, "affinity", "nodeAffinity")
    return pod
