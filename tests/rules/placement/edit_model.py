"""The rules' edit of a pod, as a model the patch is held to: a copy of what the rules own of
the pod (its node affinity and the decision's annotations), placed on the nodes and carrying the
annotations. The patch (`rules/placement/patch`) writes the same edit as `add`s; applied to the
pod, it must give the pod with these parts (tests/rules/placement/test_patch.py)."""
from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from typing import Any

from webhook.kinds import PREFERRED_TERMS, REQUIRED
from webhook.rules.placement.patch import _new_terms, pinned_by_name, node_requirement


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


def edited(pod: dict[str, Any], required: tuple[str, ...], preferences: Sequence[tuple[str, int]],
           annotations: dict[str, str]) -> dict[str, Any]:
    """A copy of what the rules own of `pod` (`owned`), placed on the nodes and carrying the
    annotations. `owned` builds the objects that lead to the node affinity and the annotations
    anew, so only the node affinity, the one value below them that is changed, is copied first:
    the pod is never changed."""
    after = owned(pod, annotations)
    spec = after.get("spec")
    if isinstance(spec, dict):
        _place(spec, required, [{"weight": weight, "preference": {"matchFields": [node_requirement(node)]}}
                                for node, weight in preferences])
    if annotations:
        _record(after, annotations)
    return after


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


def _require(node_affinity: dict[str, Any], nodes: tuple[str, ...]) -> None:
    """The required terms edited as `patch._require` says (its docstring)."""
    selector = node_affinity.get(REQUIRED)
    terms = selector.get("nodeSelectorTerms") if isinstance(selector, dict) else None
    if not isinstance(terms, list) or not terms:
        _member(node_affinity, REQUIRED)["nodeSelectorTerms"] = _new_terms(nodes)
        return
    # An empty term matches nothing; filling it would widen placement.
    live = [term for term in terms
            if isinstance(term, dict) and (term.get("matchExpressions") or term.get("matchFields"))]
    if all(pinned_by_name(term) for term in live):
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
