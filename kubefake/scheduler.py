"""kube-scheduler as far as a simulated cluster needs it: where a pod goes among the nodes, over
plain objects, with the filters and scores that decide it for the pods of VMs and of Longhorn's
share-managers (kubernetes `pkg/scheduler/framework/plugins/`, the default profile).

Filters, in kube-scheduler's order, the first a node fails being its reason:
NodeUnschedulable (`spec.unschedulable` without a toleration of
`node.kubernetes.io/unschedulable:NoSchedule`), TaintToleration (NoSchedule and NoExecute taints),
NodeAffinity (`nodeSelector`; required `nodeSelectorTerms`, ORed, each term's `matchExpressions`
on labels and `matchFields` on `metadata.name` ANDed, an empty term matching nothing),
NodeResourcesFit (the pod's requests — containers summed, restartable init containers added, the
largest init container if larger, `spec.overhead` — against allocatable less the requests of the
pods on the node; one pod slot; a resource the node does not list does not fit) and
InterPodAffinity (the pod's required anti-affinity, and existing pods' required anti-affinity
against it, by topology domain).

Scores among the nodes left, with the default profile's weights: NodeAffinity (the weights of the
preferred terms a node matches, normalized to 0–100 over the nodes) × 2, and NodeResourcesFit's
LeastAllocated (cpu and memory free after the pod, 0–100, requests of 0 counted as 100m and
200 MB) × 1; the other scores do not tell the nodes of a simulated cluster apart and are left out.
The highest total wins, a tie is broken at random (kube-scheduler's selectHost), by the
scheduler's own seeded generator.

Independent of the webhook's own checks (`webhook/rules/fit/`): a benchmark judges the webhook's
patches with it.
"""
from __future__ import annotations

import collections
import dataclasses
import random
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["Placed", "Scheduler", "quantity", "requests"]

AFFINITY_WEIGHT = 2  # the default profile's NodeAffinity score weight
FIT_WEIGHT = 1  # NodeResourcesFit's
DEFAULT_CPU = 0.1  # cores a container without a cpu request counts for in scores (DefaultMilliCPURequest)
DEFAULT_MEMORY = 200 * 1024 * 1024  # bytes (DefaultMemoryRequest)
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
HOSTNAME = "kubernetes.io/hostname"

_BINARY = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60}
_DECIMAL = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_QUANTITY = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))(?:[eE]([+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?")


def quantity(value: Any) -> float:
    """A resource.Quantity (`500m`, `2Gi`, `1e3`, `1k`) in its base unit."""
    if isinstance(value, (int, float)):
        return float(value)
    found = _QUANTITY.fullmatch(str(value).strip())
    if found is None:
        raise ValueError(f"not a quantity: {value!r}")
    number, exponent, suffix = found.groups()
    if exponent is not None:
        return float(number) * 10 ** int(exponent)
    return float(number) * (_BINARY.get(suffix or "") or _DECIMAL[suffix or ""])


def _container_requests(container: Mapping[str, Any]) -> dict[str, float]:
    asked = ((container.get("resources") or {}).get("requests")) or {}
    return {name: quantity(value) for name, value in asked.items()}


def requests(pod: Mapping[str, Any], *, defaults: bool = False) -> dict[str, float]:
    """What the pod asks of a node (`k8s.io/component-helpers/resource.PodRequests`); with
    `defaults`, a container without a cpu or memory request counts for 100m and 200 MB (scores)."""
    spec = pod.get("spec") or {}
    total: collections.Counter[str] = collections.Counter()
    for container in spec.get("containers") or []:
        asked = _container_requests(container)
        if defaults:
            asked.setdefault("cpu", DEFAULT_CPU)
            asked.setdefault("memory", DEFAULT_MEMORY)
        total.update(asked)
    largest_init: dict[str, float] = {}
    for container in spec.get("initContainers") or []:
        asked = _container_requests(container)
        if container.get("restartPolicy") == "Always":  # a sidecar runs beside the containers
            total.update(asked)
            continue
        for name, value in asked.items():
            largest_init[name] = max(largest_init.get(name, 0.0), value)
    found = dict(total)
    for name, value in largest_init.items():
        found[name] = max(found.get(name, 0.0), value)
    for name, value in (spec.get("overhead") or {}).items():
        found[name] = found.get(name, 0.0) + quantity(value)
    return found


# --------------------------------------------------------------------------- selectors


def _requirement(requirement: Mapping[str, Any], have: Mapping[str, str]) -> bool:
    key, operator = requirement.get("key"), requirement.get("operator")
    values = [str(v) for v in requirement.get("values") or []]
    if operator == "In":
        return key in have and have[key] in values
    if operator == "NotIn":
        return key not in have or have[key] not in values
    if operator == "Exists":
        return key in have
    if operator == "DoesNotExist":
        return key not in have
    if operator in ("Gt", "Lt") and key in have and len(values) == 1:
        try:
            mine, theirs = int(have[key]), int(values[0])
        except ValueError:
            return False
        return mine > theirs if operator == "Gt" else mine < theirs
    return False


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _name(obj: Mapping[str, Any]) -> str:
    return (obj.get("metadata") or {}).get("name") or ""


def term_matches(term: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """One NodeSelectorTerm: its expressions on the labels and its fields on the name, ANDed; an
    empty term matches nothing."""
    expressions, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not expressions and not fields:
        return False
    labels, names = _labels(node), {"metadata.name": _name(node)}
    return all(_requirement(r, labels) for r in expressions) and all(_requirement(r, names) for r in fields)


def _node_affinity(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}


def selects(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """The pod's nodeSelector and required node affinity (terms ORed) both hold on the node."""
    labels = _labels(node)
    if any(labels.get(k) != v for k, v in ((pod.get("spec") or {}).get("nodeSelector") or {}).items()):
        return False
    required = _node_affinity(pod).get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return True
    return any(term_matches(term, node) for term in required.get("nodeSelectorTerms") or [])


def preference(pod: Mapping[str, Any], node: Mapping[str, Any]) -> int:
    """The sum of the weights of the preferred node-affinity terms the node matches."""
    terms = _node_affinity(pod).get("preferredDuringSchedulingIgnoredDuringExecution") or []
    return sum(int(t.get("weight") or 0) for t in terms if term_matches(t.get("preference") or {}, node))


def _label_selector(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    if selector is None:
        return False  # a nil selector matches nothing
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    return all(_requirement(r, labels) for r in selector.get("matchExpressions") or [])


def _anti_affinity(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    anti = ((pod.get("spec") or {}).get("affinity") or {}).get("podAntiAffinity") or {}
    return anti.get("requiredDuringSchedulingIgnoredDuringExecution") or []


def _term_selects(term: Mapping[str, Any], owner: Mapping[str, Any], other: Mapping[str, Any]) -> bool:
    """An anti-affinity term of pod `owner` selects pod `other` (namespaces: the term's, or the owner's)."""
    namespaces = term.get("namespaces") or [(owner.get("metadata") or {}).get("namespace")]
    return ((other.get("metadata") or {}).get("namespace") in namespaces
            and _label_selector(term.get("labelSelector"), _labels(other)))


def _tolerates(pod: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    for toleration in (pod.get("spec") or {}).get("tolerations") or []:
        effect = toleration.get("effect")
        if effect and effect != taint.get("effect"):
            continue
        key, operator = toleration.get("key"), toleration.get("operator") or "Equal"
        if not key and operator == "Exists":
            return True
        if key != taint.get("key"):
            continue
        if operator == "Exists" or toleration.get("value", "") == taint.get("value", ""):
            return True
    return False


# --------------------------------------------------------------------------- the scheduler


@dataclasses.dataclass(frozen=True)
class Placed:
    """Where the pod goes, or None and the scheduler's message (pkg/scheduler/schedule_one.go)."""

    node: str | None
    message: str = ""


class Scheduler:
    """One kube-scheduler: `place` a pod among `nodes`, the `pods` assigned to them (terminal ones
    are skipped, as the scheduler's informer drops them) counting for room and anti-affinity."""

    def __init__(self, rng: random.Random | None = None):
        self.rng = rng or random.Random(0)

    def place(self, pod: Mapping[str, Any], nodes: Iterable[Mapping[str, Any]],
              pods: Iterable[Mapping[str, Any]]) -> Placed:
        nodes = list(nodes)
        assigned: dict[str, list[Mapping[str, Any]]] = collections.defaultdict(list)
        for other in pods:
            node = (other.get("spec") or {}).get("nodeName")
            phase = (other.get("status") or {}).get("phase")
            if node and phase not in ("Succeeded", "Failed") and not (other.get("metadata") or {}).get("deletionTimestamp"):
                assigned[node].append(other)
        wanted = requests(pod)
        domains = self._forbidden_domains(pod, nodes, assigned)
        reasons: collections.Counter[str] = collections.Counter()
        feasible = []
        for node in nodes:
            why = self._why_not(pod, node, wanted, assigned[_name(node)], domains)
            if why is None:
                feasible.append(node)
            else:
                reasons[why] += 1
        if not feasible:
            total = len(nodes)
            shown = ", ".join(f"{n} {why}" for why, n in sorted(reasons.items()))
            return Placed(None, f"0/{total} nodes are available: {shown}. preemption: 0/{total} nodes are available: "
                                f"{total} Preemption is not helpful for scheduling.")
        liked = {_name(n): preference(pod, n) for n in feasible}
        most = max(liked.values())
        scored = {}
        for node in feasible:
            name = _name(node)
            affinity = liked[name] * 100 / most if most > 0 else 0.0
            scored[name] = AFFINITY_WEIGHT * affinity + FIT_WEIGHT * self._least_allocated(pod, node, assigned[name])
        best = max(scored.values())
        return Placed(self.rng.choice(sorted(n for n, s in scored.items() if s >= best - 1e-9)))

    @staticmethod
    def _forbidden_domains(pod: Mapping[str, Any], nodes: list[Mapping[str, Any]],
                           assigned: Mapping[str, list[Mapping[str, Any]]]) -> set[tuple[str, str]]:
        """(topology key, value) pairs the pod may not go to: where a pod its required anti-affinity
        selects runs, and where a pod whose required anti-affinity selects it runs."""
        labels_of = {_name(n): _labels(n) for n in nodes}
        forbidden = set()
        for node, there in assigned.items():
            node_labels = labels_of.get(node, {})
            for other in there:
                for term in _anti_affinity(pod):
                    key = term.get("topologyKey") or HOSTNAME
                    if key in node_labels and _term_selects(term, pod, other):
                        forbidden.add((key, node_labels[key]))
                for term in _anti_affinity(other):
                    key = term.get("topologyKey") or HOSTNAME
                    if key in node_labels and _term_selects(term, other, pod):
                        forbidden.add((key, node_labels[key]))
        return forbidden

    @staticmethod
    def _why_not(pod: Mapping[str, Any], node: Mapping[str, Any], wanted: Mapping[str, float],
                 there: list[Mapping[str, Any]], domains: set[tuple[str, str]]) -> str | None:
        spec = node.get("spec") or {}
        unschedulable = {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}
        if spec.get("unschedulable") and not _tolerates(pod, unschedulable):
            return "node(s) were unschedulable"
        for taint in spec.get("taints") or []:
            if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(pod, taint):
                value = taint.get("value") or ""
                return f"node(s) had untolerated taint {{{taint.get('key')}: {value}}}"
        if not selects(pod, node):
            return "node(s) didn't match Pod's node affinity/selector"
        allocatable = {k: quantity(v) for k, v in ((node.get("status") or {}).get("allocatable") or {}).items()}
        if len(there) + 1 > allocatable.get("pods", 110):
            return "Too many pods"
        used: collections.Counter[str] = collections.Counter()
        for other in there:
            used.update(requests(other))
        for name, value in sorted(wanted.items()):
            if value > 0 and used[name] + value > allocatable.get(name, 0.0):
                return f"Insufficient {name}"
        labels = _labels(node)
        if any(labels.get(key) == value for key, value in domains):
            return "node(s) didn't match pod anti-affinity rules"
        return None

    @staticmethod
    def _least_allocated(pod: Mapping[str, Any], node: Mapping[str, Any], there: list[Mapping[str, Any]]) -> float:
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        used: collections.Counter[str] = collections.Counter(requests(pod, defaults=True))
        for other in there:
            used.update(requests(other, defaults=True))
        scores = []
        for name in ("cpu", "memory"):
            capacity = quantity(allocatable.get(name, 0))
            scores.append(max(0.0, (capacity - used[name]) * 100 / capacity) if capacity > 0 else 0.0)
        return sum(scores) / len(scores)
