"""What kube-apiserver refuses that the tests' objects and writes could run into, refused the same
way by the emulator (`apiserver.Apiserver`): the same code (422), reason (`Invalid`) and, where the
apiserver words it so, the same message as kube-apiserver 1.36 (k8s.io/kubernetes
`pkg/apis/core/validation`, k8s.io/apimachinery `pkg/api/validate/content`, `pkg/api/validation` and
`pkg/util/validation`, k8s.io/apiserver `pkg/endpoints/handlers/patch.go`).

Each refusal here has a twin on the real apiserver (tests/real/test_refusals.py beside
tests/test_refusals.py, listed in docs/testing.md): when a real test finds a new refusal, it is
added here in the same change.
"""
from __future__ import annotations

import copy
import json
import re
from typing import Any

import jsonpatch
import kmock

LABEL_VALUE = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
LABEL_NAME = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
LABEL_KEY_MESSAGE = ("must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                     "alphanumeric character")
LABEL_VALUE_MESSAGE = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or " \
                      "'.', and must start and end with an alphanumeric character"
DNS_SUBDOMAIN_MESSAGE = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
                         "'.', and must start and end with an alphanumeric character")
NODE_FIELDS = ("metadata.name",)
# What a pod update may change (ValidatePodUpdate); anything else of the spec is refused whole.
POD_UPDATE = ("pod updates may not change fields other than `spec.containers[*].image`,"
              "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to "
              "existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was "
              "previously negative)")
PATCH_REFUSED = "the server rejected our request due to an error in our request"


def invalid(obj: dict[str, Any], errors: list[str]) -> kmock.KubernetesError:
    """The apiserver's 422 for an object: `Kind "name" is invalid: error` (several in brackets)."""
    meta = obj.get("metadata") or {}
    name = meta.get("name") or meta.get("generateName") or ""
    said = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
    return kmock.KubernetesError(422, "Invalid", f'{obj.get("kind", "Object")} "{name}" is invalid: {said}',
                                 {"name": name, "kind": obj.get("kind"),
                                  "causes": [{"reason": "FieldValueInvalid", "message": e} for e in errors]})


def _regex_error(message: str, regex: str, *examples: str) -> str:
    """content.RegexError's words: the message, its examples, the regex."""
    shown = "".join(f"{' or ' if i else ''}'{example}', " for i, example in enumerate(examples))
    return f"{message} ({'e.g. ' + shown if examples else ''}regex used for validation is '{regex}')"


def _too_long(value: str, most: int) -> bool:
    """Go's len(): bytes, not characters."""
    return len(value.encode()) > most


def label_key_errors(key: str) -> list[str]:
    """A label key's errors as kube-apiserver 1.36 words them (k8s.io/apimachinery
    `pkg/api/validate/content/kube.go`, `IsLabelKey`): an optional DNS-subdomain prefix and '/', then
    a name of at most 63 bytes."""
    parts = key.split("/")
    if len(parts) > 2:
        return ["a valid label key " + _regex_error(LABEL_KEY_MESSAGE, LABEL_NAME, "MyName", "my.name", "123-abc")
                + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    errors, name = [], parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            if _too_long(prefix, 253):
                errors.append("prefix part must be no more than 253 bytes")
            if not re.fullmatch(DNS_SUBDOMAIN, prefix):
                errors.append("prefix part " + _regex_error(DNS_SUBDOMAIN_MESSAGE, DNS_SUBDOMAIN, "example.com"))
    if not name:
        errors.append("name part must be non-empty")
    elif _too_long(name, 63):
        errors.append("name part must be no more than 63 bytes")
    if not re.fullmatch(LABEL_NAME, name):
        errors.append("name part " + _regex_error(LABEL_KEY_MESSAGE, LABEL_NAME, "MyName", "my.name", "123-abc"))
    return errors


def label_value_errors(value: str) -> list[str]:
    """A label value's errors as kube-apiserver 1.36 words them (`content.IsLabelValue`): at most 63
    bytes (`content.MaxLenError`: "must be no more than 63 bytes"), empty or a name."""
    errors = []
    if _too_long(value, 63):
        errors.append("must be no more than 63 bytes")
    if not re.fullmatch(LABEL_VALUE, value):
        errors.append(_regex_error(LABEL_VALUE_MESSAGE, LABEL_VALUE, "MyValue", "my_value", "12345"))
    return errors


def label_errors(labels: Any, path: str = "metadata.labels") -> list[str]:
    """A label map's errors, each as field.Invalid words it (`metadata.labels: Invalid value: "v": ...`,
    k8s.io/apimachinery `pkg/apis/meta/v1/validation`, `ValidateLabels`)."""
    errors = []
    for key, value in (labels or {}).items():
        value = "" if value is None else str(value)
        errors += [f"{path}: Invalid value: {_quoted(key)}: {e}" for e in label_key_errors(key)]
        errors += [f"{path}: Invalid value: {_quoted(value)}: {e}" for e in label_value_errors(value)]
    return errors


def _quoted(value: str) -> str:
    """Go's %q of a plain string."""
    return json.dumps(value, ensure_ascii=False)


def field_requirement_errors(requirements: Any, path: str) -> list[str]:
    """`matchFields`: a known field (metadata.name), In or NotIn, exactly one value."""
    errors = []
    for i, req in enumerate(requirements or []):
        at = f"{path}[{i}]"
        if req.get("operator") in ("In", "NotIn"):
            if len(req.get("values") or []) != 1:
                errors.append(f"{at}.values: Required value: must be only one value when `operator` is 'In' or "
                              "'NotIn' for node field selector")
        else:
            errors.append(f'{at}.operator: Unsupported value: "{req.get("operator")}": not a valid selector operator')
        if req.get("key") not in NODE_FIELDS:
            errors.append(f'{at}.key: Invalid value: "{req.get("key")}": not a valid field selector key')
    return errors


def node_affinity_errors(pod: dict[str, Any]) -> list[str]:
    """The node-field terms of a pod's required and preferred node affinity."""
    path = "spec.affinity.nodeAffinity"
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    required = (affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    errors = []
    for i, term in enumerate(required):
        errors += field_requirement_errors(
            term.get("matchFields"),
            f"{path}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}].matchFields")
    for i, weighted in enumerate(affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []):
        errors += field_requirement_errors(
            (weighted.get("preference") or {}).get("matchFields"),
            f"{path}.preferredDuringSchedulingIgnoredDuringExecution[{i}].preference.matchFields")
    return errors


def _as_old(spec: dict[str, Any], old: dict[str, Any], field: str) -> None:
    if field in old:
        spec[field] = copy.deepcopy(old[field])
    else:
        spec.pop(field, None)


def _mutable_masked(spec: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """A pod spec with what an update may change set back to the old spec's."""
    spec = copy.deepcopy(spec)
    for field in ("containers", "initContainers"):
        for mine, theirs in zip(spec.get(field) or [], old.get(field) or []):
            mine["image"] = theirs.get("image")
    for field in ("activeDeadlineSeconds", "terminationGracePeriodSeconds"):
        _as_old(spec, old, field)
    kept = old.get("tolerations") or []
    if (spec.get("tolerations") or [])[:len(kept)] == kept:  # additions only
        _as_old(spec, old, "tolerations")
    gates = old.get("schedulingGates") or []
    if all(gate in gates for gate in spec.get("schedulingGates") or []):  # removals only
        _as_old(spec, old, "schedulingGates")
    if not old.get("nodeName"):  # bound by the scheduler (the binding subresource)
        _as_old(spec, old, "nodeName")
    return spec


def pod_update_errors(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    if _mutable_masked(new.get("spec") or {}, old.get("spec") or {}) != (old.get("spec") or {}):
        return [f"spec: Forbidden: {POD_UPDATE}"]
    return []


def refusal(kind: str | None, new: dict[str, Any], old: dict[str, Any] | None = None) -> kmock.KubernetesError | None:
    """Why the apiserver refuses to store `new` (created, or `old` updated), or None."""
    errors = label_errors((new.get("metadata") or {}).get("labels"))
    if kind == "Pod":
        errors += node_affinity_errors(new)
        if old is not None:
            errors += pod_update_errors(old, new)
    return invalid({"kind": kind, **new}, errors) if errors else None


def patched(obj: dict[str, Any], changes: Any) -> dict[str, Any]:
    """`obj` with a JSON patch (a list) or a JSON merge patch (a map) applied; a JSON patch that does
    not apply (a `test` that fails, a path under a missing parent) refused as the apiserver refuses it."""
    if isinstance(changes, list):
        try:
            return jsonpatch.apply_patch(obj, changes)
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
            # errors.NewGenericServerResponse(422, ...): its own words, no causes (the patch's error is dropped).
            raise kmock.KubernetesError(422, "Invalid", PATCH_REFUSED, {}) from None
    return merged(obj, changes)


def merged(obj: Any, changes: Any) -> Any:
    """RFC 7386: maps merged key by key, null removes, anything else replaces."""
    if not isinstance(changes, dict):
        return changes
    result = dict(obj) if isinstance(obj, dict) else {}
    for key, value in changes.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merged(result.get(key), value)
    return result
