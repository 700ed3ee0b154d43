"""Pure: a pod larger than any VM's or Longhorn's pod is not read further.

The rules' work grows with what a pod carries (claims, terms, expressions, constraints,
containers), and a tenant shapes much of a launcher pod through its VM (affinity, volumes,
resources), while any pod in the cluster can send a review straight to the webhook's port. A pod
beyond these bounds is judged "cannot tell" before anything is read: allowed, no pin, the reason
said. The bounds are what KubeVirt and Longhorn generate, with a wide margin (docs/operations.md,
Limits): a launcher pod has a volume per disk and about ten of its own, one container per
container disk or hook sidecar beside `compute`, one required node-affinity term of KubeVirt's
and the VM's own; a share-manager pod has two volumes and one container.
"""
from __future__ import annotations

from collections.abc import Iterator
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
    """Why the pod is beyond what the rules read, or None."""
    spec = kinds.spec(pod)
    for what, count, bound in _counts(spec):
        if count > bound:
            return f"the pod has {count} {what}, more than a VM's or Longhorn's pod carries ({bound})"
    return None


def _length(value: Any) -> int:
    return len(value) if isinstance(value, (list, dict)) else 0


def _counts(spec: dict[str, Any]) -> Iterator[tuple[str, int, int]]:
    volumes = spec.get("volumes") if isinstance(spec.get("volumes"), list) else []
    yield "volumes", len(volumes), VOLUMES
    yield "claims", sum(1 for v in volumes if isinstance(v, dict) and ("persistentVolumeClaim" in v or "dataVolume" in v)), \
        CLAIMS
    yield "containers", _length(spec.get("containers")) + _length(spec.get("initContainers")), CONTAINERS
    yield "tolerations", _length(spec.get("tolerations")), TOLERATIONS
    yield "topology spread constraints", _length(spec.get("topologySpreadConstraints")), SPREAD
    affinity = spec.get("affinity") if isinstance(spec.get("affinity"), dict) else {}
    node = affinity.get("nodeAffinity") if isinstance(affinity.get("nodeAffinity"), dict) else {}
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution")
    terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
    terms = terms if isinstance(terms, list) else []
    yield "required node-affinity terms", len(terms), TERMS
    yield "preferred node-affinity terms", _length(node.get("preferredDuringSchedulingIgnoredDuringExecution")), PREFERRED
    for term in terms:
        if isinstance(term, dict):
            yield "requirements in a node-affinity term", \
                _length(term.get("matchExpressions")) + _length(term.get("matchFields")), EXPRESSIONS
    for kind in ("podAffinity", "podAntiAffinity"):
        pod_terms = affinity.get(kind).get("requiredDuringSchedulingIgnoredDuringExecution") \
            if isinstance(affinity.get(kind), dict) else None
        pod_terms = pod_terms if isinstance(pod_terms, list) else []
        yield f"required {kind} terms", len(pod_terms), POD_TERMS
        for term in pod_terms:
            selector = term.get("labelSelector") if isinstance(term, dict) else None
            if isinstance(selector, dict):
                yield f"requirements in a {kind} selector", \
                    _length(selector.get("matchExpressions")) + _length(selector.get("matchLabels")), EXPRESSIONS
