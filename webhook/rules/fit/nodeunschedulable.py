"""NodeUnschedulable (kubernetes `nodeunschedulable/node_unschedulable.go`): a cordoned node
(`spec.unschedulable`) takes no new pod of ours."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def node_unschedulable(node_name: str, node: Mapping[str, Any]) -> str | None:
    """Why the node takes no new pods (it is cordoned), or None."""
    if (node.get("spec") or {}).get("unschedulable"):
        return f"node {node_name} is cordoned"
    return None
