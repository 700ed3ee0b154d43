"""A `fieldSelector` as the apiserver reads it, for the kinds kubefake selects on: core/v1 Events.

k8s.io/apimachinery `pkg/fields/selector.go` (`ParseSelector`): terms split on unescaped commas,
ANDed; each `field!=value`, `field==value` or `field=value` (`\\` escapes `\\`, `,` and `=` in a
value). The apiserver converts each field label before listing or watching
(`apiserver/pkg/endpoints/handlers/get.go`, `ListResource`: `ConvertFieldLabel`) and answers 400
BadRequest "field label not supported: <field>" for one the kind has not (core/v1 Events:
`pkg/apis/core/v1/conversion.go`); it then matches the object's selectable fields
(`pkg/registry/core/event/strategy.go`, `ToSelectableFields`: `source` is `source.component`, or
`reportingComponent` without one). Other kinds' selectors are not judged here: every object passes.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import kmock

Fields = Callable[[dict[str, Any]], dict[str, str]]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def event_fields(event: dict[str, Any]) -> dict[str, str]:
    """`ToSelectableFields` of a core/v1 Event."""
    meta = event.get("metadata") if isinstance(event.get("metadata"), dict) else {}
    involved = event.get("involvedObject") if isinstance(event.get("involvedObject"), dict) else {}
    source = event.get("source") if isinstance(event.get("source"), dict) else {}
    found = {f"involvedObject.{key}": _text(involved.get(key))
             for key in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")}
    return {**found, "reason": _text(event.get("reason")), "type": _text(event.get("type")),
            "reportingComponent": _text(event.get("reportingComponent")),
            "source": _text(source.get("component")) or _text(event.get("reportingComponent")),
            "metadata.name": _text(meta.get("name")), "metadata.namespace": _text(meta.get("namespace"))}


# The kinds (by group and plural) whose fields kubefake selects on.
SELECTABLE: dict[tuple[str, str], Fields] = {("", "events"): event_fields}


def _terms(text: str) -> list[str]:
    """The selector's terms: split on commas a backslash does not escape."""
    return [term for term in re.split(r"(?<!\\),", text) if term]


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", r"\1", value)


def _bad(message: str) -> kmock.KubernetesError:
    return kmock.KubernetesError(400, "BadRequest", message)


def field_selector(call: Any) -> Callable[[dict[str, Any]], bool]:
    """The call's `fieldSelector` as a test of an object; a 400 as the apiserver's for a field its
    kind cannot be selected on, or a term without an operator."""
    text = (getattr(call, "params", None) or {}).get("fieldSelector") or ""
    resource = getattr(call, "resource", None)
    fields_of = SELECTABLE.get((getattr(resource, "group", None), getattr(resource, "plural", None)))
    if fields_of is None or not text:
        return lambda obj: True
    tests: list[tuple[str, str, bool]] = []
    for term in _terms(text):
        found = re.fullmatch(r"((?:[^\\=!]|\\.)*?)(!=|==|=)(.*)", term)
        if found is None:
            raise _bad(f"invalid selector: '{text}'; can't understand '{term}'")
        field, op, value = found[1], found[2], _unescape(found[3])
        if field not in fields_of({}):
            raise _bad(f"field label not supported: {field}")
        tests.append((field, value, op != "!="))

    def selects(obj: dict[str, Any]) -> bool:
        have = fields_of(obj)
        return all((have.get(field) == value) is equal for field, value, equal in tests)

    return selects
