"""Reading the objects the checks judge: a mapping, a list, a name, or Unreadable saying what is wrong
(CannotTell: readable, but not enough to decide)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ... import kinds


class Unreadable(ValueError):
    """An object whose shape the scheduler would not have accepted, or that we cannot read."""


class CannotTell(Exception):
    """The objects do not let us decide (a claim not in the cache, a selector over Namespace labels)."""


def as_mapping(value: Any, what: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Unreadable(f"{what} is not an object")
    return value


def as_list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise Unreadable(f"{what} is not a list")
    return value


def pod_spec(pod: Any) -> Mapping[str, Any]:
    if not isinstance(pod, dict):
        raise Unreadable("the pod is not an object")
    return as_mapping(pod.get("spec"), "pod spec")


def name_of(node: Any) -> str:
    name = kinds.meta(node).get("name")
    return name if isinstance(name, str) else "?"


def pod_key(pod: Any) -> str:
    meta = kinds.meta(pod)
    return f"{meta.get('namespace')}/{meta.get('name')}"


def namespace_of(pod: Any) -> str:
    return kinds.meta(pod).get("namespace") or ""
