"""Every filter in the scheduler's order, and what a caller asks: why would the node turn the pod away?"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .demand import Demand
from .fields import Unreadable
from .framework import Check, cannot_tell, failed
from .interpodaffinity import inter_pod_affinity
from .podtopologyspread import pod_topology_spread
from .ports import node_ports
from .resources import node_resources_fit
from .view import View
from .volumes import volumes

CHECKS: tuple[Check, ...] = (node_resources_fit, node_ports, volumes, inter_pod_affinity, pod_topology_spread)


def why_not_fit(pod: Any, namespace: str, node: Mapping[str, Any], view: View, subject: str = "the VM", *,
                demand: Demand | None = None) -> str | None:
    """Why kube-scheduler's filters would turn the pod away from the node (the first failed
    check, or "cannot tell ..."), or None when they would pass it. Pass `demand` (from
    `Demand.of`) to read the pod once for several nodes."""
    if demand is None:
        try:
            demand = Demand.of(pod, namespace, view.memo)
        except Unreadable as error:
            return cannot_tell(node, subject, f"{subject} cannot be read: {error}")
        except Exception as error:
            return cannot_tell(node, subject, f"{subject} cannot be read ({type(error).__name__})")
    if not isinstance(node, dict):
        return cannot_tell(node, subject, "the node is not an object")
    for check in CHECKS:  # guarded here as `never_raises` guards each: one call less per check
        try:
            reason = check.unguarded(demand, node, view, subject)  # type: ignore[attr-defined]
        except Exception as error:
            return failed(check, node, subject, error)
        if reason is not None:
            return reason
    return None
