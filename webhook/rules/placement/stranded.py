"""The safety net under the pin: a pod we pinned that kube-scheduler still cannot place."""
from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from ... import kinds
from ...config import Settings
from .patch import live_terms, pinned_by_name
from ..shared.times import parse_time

GRACE = datetime.timedelta(minutes=2)  # the scheduler retries unschedulable pods; give it this long


@dataclasses.dataclass(frozen=True)
class Stranded:
    namespace: str
    pod: str
    vm: str | None
    node: str  # where we pinned it
    since: datetime.datetime  # when the pod was created
    message: str  # the scheduler's

    def describe(self, now: datetime.datetime) -> str:
        minutes = int((now - self.since).total_seconds() // 60)
        return f"pinned to {self.node}, unschedulable for {minutes} min: {self.message}"


def unschedulable(pod: Any) -> dict[str, Any] | None:
    """The PodScheduled condition of a pod the scheduler has given up on for now, else None."""
    if kinds.spec(pod).get("nodeName") or kinds.terminating(pod) or kinds.finished(pod):
        return None
    for condition in kinds.status(pod).get("conditions") or ():
        if isinstance(condition, dict) and condition.get("type") == "PodScheduled":
            given_up = condition.get("status") == "False" and condition.get("reason") == "Unschedulable"
            return condition if given_up else None
    return None


def _message(condition: dict[str, Any]) -> str:
    return str(condition.get("message") or "no message from the scheduler")


def unschedulable_since(pod: Any) -> tuple[datetime.datetime, str] | None:
    """Since when (PodScheduled's lastTransitionTime, else the pod's creation: a new leader agrees)
    the scheduler has been unable to place a pod, and its message; None for a pod placed or going."""
    condition = unschedulable(pod)
    if condition is None:
        return None
    since = parse_time(condition.get("lastTransitionTime")) or parse_time(kinds.meta(pod).get("creationTimestamp"))
    return (since, _message(condition)) if since is not None else None


def pinned_by_us(pod: Any, settings: Settings) -> bool:
    """The pod carries the pin its decision annotation says we added (a tenant can write the
    annotation): every non-empty required term names one of the annotated nodes by name."""
    annotations = kinds.annotations(pod)
    if annotations.get(settings.decision_annotation) not in kinds.REQUIRING_DECISIONS:
        return False
    nodes = set(str(annotations.get(settings.node_annotation) or "").split(",")) - {""}
    live = live_terms(pod)
    return bool(live) and all(pinned_by_name(term, nodes) for term in live)


def stranded(pod: Any, namespace: str, settings: Settings, now: datetime.datetime) -> Stranded | None:
    """The pod when we pinned it and it has been unschedulable for longer than GRACE."""
    condition = unschedulable(pod) if pinned_by_us(pod, settings) else None
    created = parse_time(kinds.meta(pod).get("creationTimestamp"))
    if condition is None or created is None or now - created < GRACE:
        return None
    return Stranded(namespace=namespace, pod=str(kinds.meta(pod).get("name") or "?"), vm=kinds.vm_name(pod),
                    node=str(kinds.annotations(pod).get(settings.node_annotation) or "?"), since=created,
                    message=_message(condition))
