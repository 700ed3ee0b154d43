"""Removing what is left empty in nested objects, so that a pod without what we added reads as
it did before (Kubernetes never serialises an empty affinity or list of terms)."""
from __future__ import annotations

from typing import Any


def dict_or_none(value: Any) -> dict[str, Any] | None:
    """`value` when it is an object, else None (where absent and present-but-empty differ; kinds' readers give {})."""
    return value if isinstance(value, dict) else None


def keep_or_drop(mapping: dict[str, Any], key: str, items: list[Any]) -> None:
    """`items` under `key`, or no `key` at all when none are left: an empty list of terms is
    not what the pod had before ours were added."""
    if items:
        mapping[key] = items
    else:
        mapping.pop(key, None)


def drop_empty(root: dict[str, Any], *keys: str) -> None:
    """Remove the objects along `keys` below `root` that are left empty, innermost first."""
    parents = [root]
    for key in keys[:-1]:
        child = parents[-1].get(key)
        if not isinstance(child, dict):
            return
        parents.append(child)
    for parent, key in zip(reversed(parents), reversed(keys)):
        if parent.get(key) != {}:
            return
        del parent[key]
