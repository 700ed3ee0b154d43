"""Every filter in the scheduler's order, and what a caller asks: why would the node turn the pod away?"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson

from ... import kinds
from ...kinds import KUBEVIRT_SCHEDULABLE
from .demand import Demand
from .fields import CannotTell, Unreadable, name_of
from .interpodaffinity import NONE_REFUSED, Only, inter_pod_affinity, said_by_others
from .memo import KEY_BYTES, Memo
from .nodeaffinity import pod_admits
from .podtopologyspread import pod_topology_spread
from .ports import node_ports
from .resources import node_resources_fit
from .tainttoleration import blocking_taint
from .view import INDEXED_LABELS, View
from .volumes import volumes, said_of_nodes

Filter = Callable[[Demand, Mapping[str, Any], View, str], "str | None"]  # one of kube-scheduler's filter plugins

CHECKS: tuple[Filter, ...] = (node_resources_fit, node_ports, volumes, inter_pod_affinity, pod_topology_spread)


def why_not_fit(pod: Any, namespace: str, node: Mapping[str, Any], view: View, subject: str = "the VM", *,
                demand: Demand | None = None) -> str | None:
    """Why kube-scheduler's filters turn the pod away from the node (the first failed check, "cannot tell"), or None."""
    if demand is not None:
        return why_not_pass(prefilter(demand, view), demand, node, view, subject)
    try:
        demand = Demand.of(pod, namespace, view.memo)
    except Exception as error:  # Unreadable says what; any other, a shape nobody foresaw
        detail = f": {error}" if isinstance(error, Unreadable) else f" ({type(error).__name__})"
        return cannot_tell(node, subject, f"{subject} cannot be read{detail}")
    return why_not_pass(CHECKS, demand, node, view, subject)


def why_not_pass(checks: tuple[Filter, ...], demand: Demand, node: Mapping[str, Any], view: View,
                 subject: str = "the VM") -> str | None:
    """The first of `checks` that turns the pod away from the node, as `why_not_fit` says it."""
    if not isinstance(node, dict):
        return cannot_tell(node, subject, "the node is not an object")
    for check in checks:
        try:
            reason = check(demand, node, view, subject)
        except Exception as error:  # objects of unexpected shape: "cannot tell", which counts as not fitting
            detail = str(error) if isinstance(error, (CannotTell, Unreadable)) else \
                f"the {check.__name__.replace('_', ' ')} check could not read the objects ({type(error).__name__})"
            return cannot_tell(node, subject, detail)
        if reason is not None:
            return reason
    return None


def refused_only(checks: tuple[Filter, ...], demand: Demand) -> Only | None:
    """The only nodes `checks` (`prefilter`'s: what they read is gathered) can turn the pod away from, where they can
    say (`Gathered.only`: a migration target's anti-affinity toward its own VMI's pods, all on the node it leaves)."""
    if not checks:
        return NONE_REFUSED
    if checks != (inter_pod_affinity,):
        return None
    return demand.gathered.only if demand.gathered.unsure is None else None  # type: ignore[no-any-return]


def judged_by_room(demand: Demand) -> bool:
    """Whether what the filters say of a node for the pod changes, as pods that take only room there come and go
    (`view.takes_room_only`), by NodeResourcesFit alone: no pod affinity or spread of its own, and each anti-affinity
    term selects only pods with a label a View indexes (a migration target's, toward its own VMI's pods)."""
    return not demand.affinity and not demand.spread and all(
        term.selector is None or any(key in INDEXED_LABELS and operator in ("In", "Exists")
                                     for key, operator, _ in term.selector)
        for term in demand.anti_affinity)


def prefilter(demand: Demand, view: View) -> tuple[Filter, ...]:
    """The filters with something to look at for the pod, as kube-scheduler's PreFilter skips the others (no host
    ports, no spread, no terms either way, claims whose volumes select no node): a drain's share-manager is judged on
    every node it is tried on by NodeResourcesFit alone."""
    if demand.filters is None:
        try:  # in the order of CHECKS
            needed = (True, bool(demand.host_ports), said_of_nodes(demand, view), said_by_others(demand, view),
                      bool(demand.spread))
        except Exception:  # an unexpected shape: every filter runs, and the one that cannot read it says so
            needed = (True,) * len(CHECKS)
        demand.filters = tuple(check for check, wanted in zip(CHECKS, needed) if wanted)
    return demand.filters  # type: ignore[no-any-return]


def cannot_tell(node: Any, subject: str, detail: str) -> str:
    return f"cannot tell whether node {name_of(node)} fits {subject}: {detail}"


def why_not_run(node_name: str, node: Mapping[str, Any] | None, pod: Mapping[str, Any], *,
                needs_kubevirt: bool, memo: Memo | None = None, demand: Demand | None = None) -> str | None:
    """Why `pod` cannot run on the node now (the first failed node-level check: cordon, readiness, KubeVirt's
    schedulable label, taints, the pod's own node affinity), or None; kept in `memo` for `demand`, the pod's."""
    if node is None:
        return f"node {node_name} not found"
    asked = (node_name, node, pod, needs_kubevirt)
    if memo is None or demand is None:
        return _why_not_run(asked)
    if demand.run_key is None:
        demand.run_key = run_key(demand.pod)
    # The node itself is compared by identity first (the caches hand out one object per version of a node).
    return memo.latest(_why_not_run, (why_not_run, node_name, needs_kubevirt),
                       (node, demand.run_key) if demand.run_key else None, asked)


def run_key(pod: Mapping[str, Any]) -> bytes:
    """What the node-level checks read of the pod, as JSON bounded as the memo's keys are; b"" when
    it cannot be one (too large, a value JSON cannot hold), and the pod is answered afresh."""
    spec = kinds.spec(pod)
    affinity = spec.get("affinity")
    try:
        read = orjson.dumps((spec.get("tolerations"), spec.get("nodeSelector"),
                             affinity.get("nodeAffinity") if isinstance(affinity, dict) else affinity))
    except orjson.JSONEncodeError:
        return b""
    return read if len(read) <= KEY_BYTES else b""


def node_unschedulable(node_name: str, node: Mapping[str, Any]) -> str | None:
    """NodeUnschedulable (kubernetes `nodeunschedulable/node_unschedulable.go`): a cordoned node takes no new pod."""
    return f"node {node_name} is cordoned" if (node.get("spec") or {}).get("unschedulable") else None


def _why_not_run(asked: tuple[str, Mapping[str, Any], Mapping[str, Any], bool]) -> str | None:
    node_name, node, pod, needs_kubevirt = asked
    if (reason := node_unschedulable(node_name, node)) is not None:
        return reason
    if not kinds.is_ready(node):
        return f"node {node_name} is not Ready"
    labels = kinds.labels(node)
    if needs_kubevirt and labels.get(KUBEVIRT_SCHEDULABLE) != "true":
        return f"node {node_name} lacks {KUBEVIRT_SCHEDULABLE}=true"
    if (taint := blocking_taint(node, kinds.spec(pod).get("tolerations"))) is not None:
        shown = f"{taint.get('key', '')}={taint['value']}" if taint.get("value") else taint.get("key", "")
        return f"node {node_name} has untolerated taint {shown}:{taint.get('effect')}"
    return None if pod_admits(pod, node, labels) else f"node {node_name} fails the pod's own nodeSelector/affinity"
