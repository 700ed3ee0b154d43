"""Pure: a pod larger than any VM's or Longhorn's pod is not read further."""
from __future__ import annotations

from typing import Any

from ... import kinds

VOLUMES = 512
CLAIMS = 256
CONTAINERS = 64
TERMS = 32  # required node-affinity terms (each is read once, against one node)
# Required pod (anti-)affinity terms of each kind, and topology spread constraints: each is a walk over
# the pods of a topology domain (a zone: thousands), about 4 ms per term at 6,000 pods; a VM has one or
# two, KubeVirt's migration target one of its own.
POD_TERMS = 8
PREFERRED = 64  # preferred node-affinity terms (ours are added to them)
EXPRESSIONS = 64  # requirements of one term or selector
SPREAD = 8  # topology spread constraints (see POD_TERMS)
TOLERATIONS = 128


def too_large(pod: dict[str, Any]) -> str | None:
    """Why the pod is beyond what the rules read, or None (plain checks: every admission asks)."""
    spec = kinds.spec(pod)
    volumes = spec.get("volumes")
    volumes = volumes if type(volumes) is list else []
    if len(volumes) > VOLUMES:  # said before the claims are counted: a pod of 20,000 is not walked
        return _over("volumes", len(volumes), VOLUMES)
    claims = sum(1 for volume in volumes
                 if type(volume) is dict and ("persistentVolumeClaim" in volume or "dataVolume" in volume))
    found = (_over("claims", claims, CLAIMS)
             or _over("containers", _length(spec.get("containers")) + _length(spec.get("initContainers")), CONTAINERS)
             or _over("tolerations", _length(spec.get("tolerations")), TOLERATIONS)
             or _over("topology spread constraints", _length(spec.get("topologySpreadConstraints")), SPREAD))
    affinity = spec.get("affinity")
    return found or (_affinity(affinity) if type(affinity) is dict else None)


def _over(what: str, count: int, bound: int) -> str | None:
    return f"the pod has {count} {what}, more than a VM's or Longhorn's pod carries ({bound})" if count > bound else None


def _length(value: Any) -> int:
    return len(value) if isinstance(value, (list, dict)) else 0


def _affinity(affinity: dict[str, Any]) -> str | None:
    node = affinity.get("nodeAffinity") if isinstance(affinity.get("nodeAffinity"), dict) else {}
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution")
    terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
    terms = terms if isinstance(terms, list) else []
    found = (_over("required node-affinity terms", len(terms), TERMS)
             or _over("preferred node-affinity terms", _length(node.get("preferredDuringSchedulingIgnoredDuringExecution")),
                      PREFERRED))
    for term in terms:
        if found is None and isinstance(term, dict):
            found = _over("requirements in a node-affinity term",
                          _length(term.get("matchExpressions")) + _length(term.get("matchFields")), EXPRESSIONS)
    for kind in ("podAffinity", "podAntiAffinity"):
        pod_terms = affinity.get(kind).get("requiredDuringSchedulingIgnoredDuringExecution") \
            if isinstance(affinity.get(kind), dict) else None
        pod_terms = pod_terms if isinstance(pod_terms, list) else []
        found = found or _over(f"required {kind} terms", len(pod_terms), POD_TERMS)
        for term in pod_terms:
            selector = term.get("labelSelector") if isinstance(term, dict) else None
            if found is None and isinstance(selector, dict):
                found = _over(f"requirements in a {kind} selector",
                              _length(selector.get("matchExpressions")) + _length(selector.get("matchLabels")),
                              EXPRESSIONS)
    return found
