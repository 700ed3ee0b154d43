"""A strategic merge patch, applied as the apiserver applies one to a built-in kind.

`kubectl apply` and Helm's upgrades (client-side) send `application/strategic-merge-patch+json`:
a merge patch whose lists of objects with a merge key (containers, env, the webhooks of a
MutatingWebhookConfiguration, their matchConditions) are merged element by element, with a
`$setElementOrder/<list>` directive giving the list's order by that key. The apiserver knows each
list's merge key from the Go types; here it is read from that directive, which names it. Lists
without one are replaced whole, as atomic lists are. Directives read: `$setElementOrder`,
`$patch: delete|replace|merge`, `$retainKeys`, `$deleteFromPrimitiveList`; `null` removes a key.
"""
from __future__ import annotations

import copy
from typing import Any

CONTENT_TYPE = "application/strategic-merge-patch+json"
ORDER, DELETE_PRIMITIVES = "$setElementOrder/", "$deleteFromPrimitiveList/"


def apply(current: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """`current` with `patch` applied (a new object; neither argument is changed)."""
    return _merge(copy.deepcopy(current), copy.deepcopy(patch))


def _merge(current: Any, patch: Any) -> Any:
    if not isinstance(patch, dict) or not isinstance(current, dict):
        return _plain(patch)
    directive = patch.pop("$patch", "merge")
    if directive == "replace":
        return _plain(patch)
    orders = {name[len(ORDER):]: patch.pop(name) for name in list(patch) if name.startswith(ORDER)}
    removals = {name[len(DELETE_PRIMITIVES):]: patch.pop(name) for name in list(patch) if name.startswith(DELETE_PRIMITIVES)}
    retain = patch.pop("$retainKeys", None)
    for name, value in patch.items():
        if value is None:
            current.pop(name, None)
        elif isinstance(value, list) and name in orders:
            current[name] = _merge_list(current.get(name) or [], value, orders[name])
        elif isinstance(value, dict) and isinstance(current.get(name), dict):
            current[name] = _merge(current[name], value)
        else:
            current[name] = _plain(value)
    for name, order in orders.items():
        if name not in patch and isinstance(current.get(name), list):
            current[name] = _sorted(current[name], order, _merge_key(order))
    for name, gone in removals.items():
        current[name] = [item for item in current.get(name) or [] if item not in gone]
    if retain is not None:
        current = {name: value for name, value in current.items() if name in retain}
    return current


def _plain(value: Any) -> Any:
    """A value put in whole: without directives (a `$patch` left in a nested object is dropped)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _merge_key(order: list[Any]) -> str | None:
    """The merge key that `$setElementOrder` names: the one key of its entries (None for primitives)."""
    keys = {key for entry in order if isinstance(entry, dict) for key in entry}
    if len(keys) > 1:
        raise ValueError(f"$setElementOrder entries name more than one key: {sorted(keys)}")
    return next(iter(keys), None)


def _merge_list(current: list[Any], patch: list[Any], order: list[Any]) -> list[Any]:
    key = _merge_key(order)
    if key is None:  # a list of primitives merged as a set
        return _sorted(current + [item for item in patch if item not in current], order, None)
    merged = list(current)
    for item in patch:
        found = next((i for i, old in enumerate(merged) if isinstance(old, dict) and old.get(key) == item.get(key)), None)
        if item.get("$patch") == "delete":
            if found is not None:
                del merged[found]
        elif found is None:
            merged.append(_plain(item))
        else:
            merged[found] = _merge(merged[found], item)
    return _sorted(merged, order, key)


def _sorted(items: list[Any], order: list[Any], key: str | None) -> list[Any]:
    """`items` in the order of `order`; items it does not name keep their place after those it names."""
    wanted = [entry.get(key) if key else entry for entry in order]
    position = {value: i for i, value in enumerate(wanted)}
    return sorted(items, key=lambda item: position.get(item.get(key) if key else item, len(wanted)))
