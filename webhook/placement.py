"""Pure placement rules: which pods we act on, and pin / prefer / skip from resolved facts."""
from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence
from typing import Any

from .config import Settings

PINNED = "pinned"
PREFERRED = "preferred"
NOT_PINNED = "not-pinned"
PIN_WEIGHT = 100

VIRT_LAUNCHER = ("kubevirt.io", "virt-launcher")
MIGRATION_JOB_LABEL = "kubevirt.io/migrationJobUID"
EPHEMERAL_PROVISIONING = "kubevirt.io/ephemeral-provisioning"


@dataclasses.dataclass(frozen=True)
class Fact:
    """One thing a pod follows (a disk's share-manager, a consuming VM): its node, or why none."""

    subject: str  # what the fact is about: a PVC name, or a VM pod
    node: str | None
    reason: str
    volume: str | None = None


@dataclasses.dataclass(frozen=True)
class Decision:
    outcome: str  # PINNED | PREFERRED | NOT_PINNED
    node: str | None = None  # the required node when pinned
    preferences: tuple[tuple[str, int], ...] = ()  # (node, weight) preferred terms
    reason: str = ""
    warnings: tuple[str, ...] = ()

    @property
    def nodes(self) -> list[str]:
        return [node for node, _ in self.preferences]


def meta(obj: dict[str, Any]) -> dict[str, Any]:
    value = obj.get("metadata")
    return value if isinstance(value, dict) else {}


def str_map(obj: dict[str, Any], key: str) -> dict[str, Any]:
    value = meta(obj).get(key)
    return value if isinstance(value, dict) else {}


def is_vm_pod(pod: dict[str, Any]) -> bool:
    return str_map(pod, "labels").get(VIRT_LAUNCHER[0]) == VIRT_LAUNCHER[1]


SHARE_MANAGER_COMPONENT = ("longhorn.io/component", "share-manager")
SHARE_MANAGER_VOLUME_LABEL = "longhorn.io/share-manager"


def is_share_manager_pod(pod: dict[str, Any], namespace: str, settings: Settings) -> bool:
    labels = str_map(pod, "labels")
    return namespace == settings.longhorn_namespace and labels.get(SHARE_MANAGER_COMPONENT[0]) == SHARE_MANAGER_COMPONENT[1]


def opted_in_vm(pod: dict[str, Any], settings: Settings) -> str | None:
    """Why the pod is not an opted-in VM's own launcher pod, or None when it is.

    Migration targets are built from the VMI and carry the opt-in too; they are not where the
    VM runs yet, and pinning one next to the source's share-manager would fight its
    anti-affinity and make migration impossible.
    """
    labels, annotations = str_map(pod, "labels"), str_map(pod, "annotations")
    if labels.get(VIRT_LAUNCHER[0]) != VIRT_LAUNCHER[1]:
        return "not a virt-launcher pod"
    if annotations.get(settings.opt_in_annotation) != "true":
        return "not opted in"
    if MIGRATION_JOB_LABEL in labels:
        return "migration target"
    return None


def consumer_exemption(pod: dict[str, Any], settings: Settings) -> str | None:
    """Why a virt-launcher pod does not count as a running consumer of a volume, or None."""
    if (why := opted_in_vm(pod, settings)) is not None:
        return why
    if meta(pod).get("deletionTimestamp"):
        return "terminating"
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return "finished"
    if not (pod.get("spec") or {}).get("nodeName"):
        return "not scheduled yet"
    return None


def vm_exemption(pod: dict[str, Any], settings: Settings) -> str | None:
    """Why this pod is left untouched by the VM rule, or None when we act on it."""
    if (why := opted_in_vm(pod, settings)) is not None:
        return why
    if str_map(pod, "annotations").get(EPHEMERAL_PROVISIONING) == "true":
        return "ephemeral provisioning pod"
    if (pod.get("spec") or {}).get("nodeName"):
        return "already bound to a node"
    return None


DISKS = ("disk", "pinned to {node}, where the share-manager of {served} runs")
CONSUMERS = ("consumer", "pinned to {node}, where {served} runs")


def decide(facts: Sequence[Fact], blocked: str | None = None, subject: tuple[str, str] = DISKS) -> Decision:
    """All known nodes equal → pin (if the node can take the pod); differ → prefer each; none → skip.

    `blocked` says why the single candidate node cannot take the pod now; then the
    preference stays and the requirement goes, so a pod is never stranded.
    """
    what, pinned = subject
    problems = tuple(f.reason for f in facts if f.node is None)
    counts = collections.Counter(f.node for f in facts if f.node is not None)
    if not facts:
        return Decision(NOT_PINNED, reason=f"no {what}s to follow", warnings=(f"not pinned: no {what}s to follow",))
    if not counts:
        reason = "; ".join(problems)
        return Decision(NOT_PINNED, reason=reason, warnings=tuple(f"not pinned: {p}" for p in problems))
    if len(counts) == 1:
        (node,) = counts
        if blocked is None:
            return Decision(
                PINNED,
                node=node,
                preferences=((node, PIN_WEIGHT),),
                reason=pinned.format(node=node, served=_served(facts)),
                warnings=tuple(f"ignored: {p}" for p in problems),
            )
        reason = f"preferred {node}, not pinned: {blocked}"
        return Decision(PREFERRED, preferences=((node, PIN_WEIGHT),), reason=reason, warnings=(reason, *problems))
    total = sum(counts.values())
    preferences = tuple(
        (node, max(1, min(100, round(100 * n / total)))) for node, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    )
    spread = ", ".join(f"{node} ({counts[node]})" for node, _ in preferences)
    reason = f"{what}s on different nodes, preferred {spread}"
    return Decision(PREFERRED, preferences=preferences, reason=reason, warnings=(f"not pinned: {reason}", *problems))


def _served(facts: Sequence[Fact]) -> str:
    return ", ".join(f.subject for f in facts if f.node is not None)
