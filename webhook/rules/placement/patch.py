"""Pure: a pod and a Decision → a JSON patch (AND-merged, idempotent), and the inverse: the pod
as created, without what we added (`as_created`: what `explain` and the migration target are rendered from).

Kubernetes semantics (k8s.io/api core/v1 NodeSelector): nodeSelectorTerms are ORed, the
requirements inside one term are ANDed, and an empty term matches nothing. So a pin is
added to *every* non-empty term; a new term is created only when there is none. "One of
several nodes" cannot be one requirement: the apiserver allows a single value for a node field
selector (`metadata.name In [a, b]` is refused), so it is ORed terms, one node each, each
carrying what the pod's own terms require: every existing term gets the first node, and a copy
of it is appended for each other node (terms × nodes, nothing removed).

The rule edits a copy of the parts of the pod it owns (its node affinity and the decision's
annotations, `owned`) and the patch is what turns those parts into the edited copy: the edit only
adds members and list items and sets values, so it is a few `add`s, each where the pod has the
parent (a missing parent added whole). Applied to the pod it was made for, it gives the edited pod,
by construction (a patch that decodes but does not apply would fail pod creation even with
failurePolicy Ignore), and it carries what the rules add, not the pod's own values around it.
jsonpatch's general diff finds the same operations at about 170 µs an admission, more than the
rest of it together (docs/performance.md).
"""
from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from typing import Any

import orjson

from ... import kinds
from ...config import Settings
from ...kinds import MAX_REASON, PREFERRED_TERMS, REQUIRED, clip_reason
from ..shared.prune import dict_or_none, drop_empty, keep_or_drop
from .decide import Decision


def node_requirement(node: str) -> dict[str, Any]:
    """Select a node by name, as the DaemonSet controller does (the hostname label may differ).
    One value: the apiserver refuses a node field selector with several."""
    return {"key": "metadata.name", "operator": "In", "values": [node]}


def preferred_term(node: str, weight: int) -> dict[str, Any]:
    return {"weight": weight, "preference": {"matchFields": [node_requirement(node)]}}


def owned(pod: dict[str, Any], annotations: Iterable[str] = ()) -> dict[str, Any]:
    """The parts of `pod` the rules change, in the pod's shape and sharing its values: its node
    affinity and the `annotations` named, with the objects that lead to them. Each object in it
    holds a subset of the members the pod's object there holds, and the rest is the pod's own
    value; so an `add` that sets a member of it applies to the pod too, with the same effect."""
    return _project(pod, {"spec": {"affinity": {"nodeAffinity": None}},
                          "metadata": {"annotations": dict.fromkeys(annotations)}})


def _project(value: Any, shape: dict[str, Any] | None) -> Any:
    """`value` cut down to the members `shape` names (None: the value whole); a value that is no
    object, where `shape` names members, is kept whole."""
    if shape is None or not isinstance(value, dict):
        return value
    return {key: _project(value[key], below) for key, below in shape.items() if key in value}


def patch_for(pod: dict[str, Any], decision: Decision, settings: Settings) -> list[dict[str, Any]]:
    """The whole patch for one pod: affinity first, then the recorded decision."""
    return _patch(pod, decision.required, decision.preferences, decision_annotations(decision, settings))


def affinity_ops(spec: dict[str, Any], required: tuple[str, ...],
                 preferences: Sequence[tuple[str, int]]) -> list[dict[str, Any]]:
    """The patch that places a pod with this `spec`, recording nothing (paths from the pod's root)."""
    return _patch({"spec": spec}, required, preferences, {})


def edited(pod: dict[str, Any], required: tuple[str, ...], preferences: Sequence[tuple[str, int]],
           annotations: dict[str, str]) -> dict[str, Any]:
    """A copy of what the rules own of `pod` (`owned`), placed on the nodes and carrying the
    annotations. `owned` builds the objects that lead to the node affinity and the annotations
    anew, so only the node affinity, the one value below them that is changed, is copied first:
    the pod is never changed."""
    after = owned(pod, annotations)
    spec = after.get("spec")
    if isinstance(spec, dict):
        _place(spec, required, [preferred_term(node, weight) for node, weight in preferences])
    if annotations:
        _record(after, annotations)
    return after


def _patch(pod: dict[str, Any], required: tuple[str, ...], preferences: Sequence[tuple[str, int]],
           annotations: dict[str, str]) -> list[dict[str, Any]]:
    """RFC 6902 `add` operations from `pod` to the pod with its owned parts edited: the diff walks
    only the members of the edited copy, so the pod's other members are never looked at."""
    return _changed(pod, edited(pod, required, preferences, annotations), "")


def _changed(before: dict[str, Any], after: dict[str, Any], path: str) -> list[dict[str, Any]]:
    """`add`s that turn the members of object `before` that `after` names into `after`'s, where
    the edit only adds members and list items and sets values: a member that differs is followed
    into where both are objects, or lists that `after` extends (their new items appended);
    anything else is written whole. So the patch carries what the rules add, not the pod's own
    values around it."""
    ops: list[dict[str, Any]] = []
    for key, value in after.items():
        if key in before:
            old = before[key]
            if old is value or old == value:
                continue
            if isinstance(old, dict) and isinstance(value, dict):
                ops += _changed(old, value, f"{path}/{escape(key)}")
                continue
            if isinstance(old, list) and isinstance(value, list) and len(old) <= len(value):
                ops += _extended(old, value, f"{path}/{escape(key)}")
                continue
        ops.append({"op": "add", "path": f"{path}/{escape(key)}", "value": value})
    return ops


def _extended(before: list[Any], after: list[Any], path: str) -> list[dict[str, Any]]:
    """`add`s that turn list `before` into the longer or equal `after`: the items that differ
    followed where both are objects (else the list written whole), then the new ones appended."""
    ops: list[dict[str, Any]] = []
    for i, (old, value) in enumerate(zip(before, after)):
        if old == value:
            continue
        if not (isinstance(old, dict) and isinstance(value, dict)):
            return [{"op": "add", "path": path, "value": after}]
        ops += _changed(old, value, f"{path}/{i}")
    return ops + [{"op": "add", "path": f"{path}/-", "value": value} for value in after[len(before):]]


def escape(key: str) -> str:
    """JSON pointer escaping (RFC 6901): '~' → '~0', '/' → '~1'."""
    return key.replace("~", "~0").replace("/", "~1")


def _member(parent: dict[str, Any], key: str) -> dict[str, Any]:
    """`parent[key]`, made an empty object when it is missing or is no object."""
    value = parent.get(key)
    if not isinstance(value, dict):
        value = parent[key] = {}
    return value


def _place(spec: dict[str, Any], required: tuple[str, ...], wanted: list[dict[str, Any]]) -> None:
    """AND "one of the `required` nodes" into the node affinity of `spec`, and add the preferred
    terms it does not have yet."""
    if not required and not wanted:
        return
    affinity = _member(spec, "affinity")
    node_affinity = affinity.get("nodeAffinity")
    node_affinity = affinity["nodeAffinity"] = _editable(node_affinity) if isinstance(node_affinity, dict) else {}
    if required:
        _require(node_affinity, required)
    if wanted:
        existing = node_affinity.get(PREFERRED_TERMS)
        if not isinstance(existing, list):
            node_affinity[PREFERRED_TERMS] = wanted
        else:
            have = [t.get("preference") for t in existing if isinstance(t, dict)]
            node_affinity[PREFERRED_TERMS] = existing + [term for term in wanted if term["preference"] not in have]


def _editable(node_affinity: dict[str, Any]) -> dict[str, Any]:
    """A copy of the pod's node affinity that `_require` may edit: new objects down to each
    required term (it sets a term's `matchFields` and appends terms), the pod's own values below
    them shared, never changed. (A deep copy of it all was a tenth of an admission.)"""
    node_affinity = dict(node_affinity)
    selector = node_affinity.get(REQUIRED)
    if isinstance(selector, dict):
        selector = node_affinity[REQUIRED] = dict(selector)
        terms = selector.get("nodeSelectorTerms")
        if isinstance(terms, list):
            selector["nodeSelectorTerms"] = [dict(term) if isinstance(term, dict) else term for term in terms]
    return node_affinity


def _new_terms(nodes: tuple[str, ...]) -> list[dict[str, Any]]:
    """One term per node, for a pod with no required terms of its own."""
    return [{"matchFields": [node_requirement(node)]} for node in nodes]


def _pinned_by_name(term: dict[str, Any]) -> bool:
    """The term already selects one node by name (ours, from an earlier review of the same pod)."""
    fields = term.get("matchFields")
    return isinstance(fields, list) and any(
        isinstance(f, dict) and f.get("key") == "metadata.name" and f.get("operator") == "In" for f in fields)


def _require(node_affinity: dict[str, Any], nodes: tuple[str, ...]) -> None:
    """AND "one of `nodes`" into the required terms: the first node into every non-empty term,
    a copy of each such term with each other node appended; or one term per node when there are
    none. A pod whose every non-empty term already names a node was answered before (a
    reinvocation): nothing is added, so a second answer never ANDs a second node in."""
    selector = node_affinity.get(REQUIRED)
    terms = selector.get("nodeSelectorTerms") if isinstance(selector, dict) else None
    if not isinstance(terms, list) or not terms:
        _member(node_affinity, REQUIRED)["nodeSelectorTerms"] = _new_terms(nodes)
        return
    # An empty term matches nothing; filling it would widen placement.
    live = [term for term in terms
            if isinstance(term, dict) and (term.get("matchExpressions") or term.get("matchFields"))]
    if all(_pinned_by_name(term) for term in live):
        return
    first, *others = nodes
    own = [fields if isinstance(fields := term.get("matchFields"), list) else [] for term in live]
    copies = [{**term, "matchFields": [*fields, node_requirement(node)]}
              for node in others for term, fields in zip(live, own)]
    for term, fields in zip(live, own):
        term["matchFields"] = [*fields, node_requirement(first)]
    if copies:
        terms.extend(copy.deepcopy(copies))  # each term an object of its own, as in the pod


def _record(view: dict[str, Any], annotations: dict[str, str]) -> None:
    """Set the annotations (a `metadata` that is no object is replaced whole)."""
    metadata = view.get("metadata")
    if not isinstance(metadata, dict):
        view["metadata"] = {"annotations": dict(annotations)}
        return
    _member(metadata, "annotations").update(annotations)


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
    """A deep copy of a pod read from JSON, through JSON: a quarter of `copy.deepcopy`'s time on a
    launcher pod (a drain's share-manager renders its VM's migration target from one). A value
    JSON cannot hold is copied the long way."""
    try:
        return orjson.loads(orjson.dumps(pod))
    except orjson.JSONEncodeError:
        return copy.deepcopy(pod)


def as_created(pod: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """The launcher pod as KubeVirt would create it again: unbound, without what we added to it.

    The inverse of `patch_for`: only what our annotations say we added is removed (the
    user's own terms stay), and a container left empty by that removal goes too, since
    `patch_for` added it whole (Kubernetes never serialises an empty affinity or list).
    """
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
    preferred = node_affinity.get(PREFERRED_TERMS)
    if isinstance(preferred, list):
        ours_preferred = [{"matchFields": [node_requirement(node)]} for node in ours]
        keep_or_drop(node_affinity, PREFERRED_TERMS,
                     [t for t in preferred if not (isinstance(t, dict) and t.get("preference") in ours_preferred)])
    drop_empty(spec, "affinity", "nodeAffinity")
    return pod
