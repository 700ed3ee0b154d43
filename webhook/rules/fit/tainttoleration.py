"""TaintToleration (kubernetes `tainttoleration/taint_toleration.go`, k8s.io/api core/v1 `Toleration.ToleratesTaint`):
taints with effect NoSchedule or NoExecute block a pod that does not tolerate them; PreferNoSchedule does not."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """One toleration against one taint, as the scheduler's TaintToleration plugin does."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False  # an empty effect matches every effect
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False  # an empty key (with Exists) matches every key
    operator = toleration.get("operator") or "Equal"
    return operator == "Exists" or operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def blocking_taint(node: Mapping[str, Any], tolerations: Any) -> Mapping[str, Any] | None:
    """The first NoSchedule/NoExecute taint of the node that no toleration (a pod's `spec.tolerations`) tolerates."""
    taints = (node.get("spec") or {}).get("taints")
    if not taints:
        return None
    usable = [t for t in tolerations if isinstance(t, dict)] if isinstance(tolerations, (list, tuple)) else []
    for taint in taints:
        if not isinstance(taint, dict) or taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(tolerates(t, taint) for t in usable):
            return taint
    return None
