"""Label selectors as the scheduler reads them (apimachinery `metav1.LabelSelectorAsSelector`)."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .fields import Unreadable, as_list, as_mapping

# A parsed LabelSelector: a tuple of (key, operator, values); () selects everything, None
# (a missing selector) nothing.
Selector = tuple[tuple[str, str, frozenset[str]], ...] | None


def parse_selector(raw: Any, what: str) -> Selector:
    if raw is None:
        return None
    raw = as_mapping(raw, what)
    match_labels = as_mapping(raw.get("matchLabels"), f"{what} matchLabels")
    if not all(isinstance(key, str) and isinstance(value, str) for key, value in match_labels.items()):
        raise Unreadable(f"{what} matchLabels holds a value that is no string")  # a label is one
    requirements = [(key, "In", frozenset((value,))) for key, value in match_labels.items()]
    for expression in as_list(raw.get("matchExpressions"), f"{what} matchExpressions"):
        expression = as_mapping(expression, f"{what} expression")
        key, operator = expression.get("key"), expression.get("operator")
        values = as_list(expression.get("values"), f"{what} values")
        if not isinstance(key, str) or not all(isinstance(v, str) for v in values):
            raise Unreadable(f"{what} has a malformed expression")
        if operator in ("In", "NotIn") and not values or operator in ("Exists", "DoesNotExist") and values:
            raise Unreadable(f"{what}: {operator} on {key} with {len(values)} values")
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise Unreadable(f"{what}: unknown operator {operator!r}")
        requirements.append((key, operator, frozenset(values)))
    return tuple(requirements)


def selects(selector: Selector, labels: Mapping[str, Any]) -> bool:
    if selector is None:
        return False
    for key, operator, values in selector:
        if operator == "In":
            if labels.get(key) not in values:
                return False
        elif operator == "NotIn":
            if key in labels and labels[key] in values:
                return False
        elif operator == "Exists":
            if key not in labels:
                return False
        elif key in labels:  # DoesNotExist
            return False
    return True


def with_label_keys(selector: Selector, labels: Mapping[str, Any], match: Iterable[Any], mismatch: Iterable[Any]) -> Selector:
    """matchLabelKeys / mismatchLabelKeys, merged into the selector from the pod's own labels as
    the apiserver does when it stores a pod (pkg/registry/core/pod/strategy.go) — a pod under
    admission is not merged yet; merging a stored pod again changes nothing."""
    if selector is None:
        return None
    extra = [(k, "In", frozenset((labels[k],))) for k in match if isinstance(k, str) and k in labels]
    extra += [(k, "NotIn", frozenset((labels[k],))) for k in mismatch if isinstance(k, str) and k in labels]
    return selector + tuple(extra) if extra else selector
