"""What kube-apiserver refuses, as requests: each case is run unchanged on the emulator
(tests/test_refusals.py, in CI) and on the real apiserver (tests/real/test_refusals.py, where
KUBEBUILDER_ASSETS names one), so that the emulator is held to the apiserver's word. Each case that
is refused has one beside it that is accepted, so that a refusal cannot come from something else
of the request. docs/testing.md lists them; a test holds the list to this table.
"""
from __future__ import annotations

import copy
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

NAMESPACE = "refusals"
JSON_PATCH, MERGE_PATCH = "application/json-patch+json", "application/merge-patch+json"
# (method, url, body, content type) -> (status code, answer)
Request = Callable[[str, str, Any, str], Awaitable[tuple[int, Any]]]


def pod(name: str, **changes: Any) -> dict[str, Any]:
    """A minimal pod as a controller creates it, with `changes` merged into its spec and metadata."""
    made: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": "vm1"}},
        "spec": {"containers": [{"name": "compute", "image": "registry.k8s.io/pause:3.10"}]},
    }
    for part, value in changes.items():
        made["metadata" if part in ("labels", "annotations") else "spec"][part] = value
    return made


def fields_term(*names: str) -> dict[str, Any]:
    """A required node affinity of one term: `matchFields` on metadata.name, In these names."""
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": list(names)}]}]}}}


@dataclasses.dataclass(frozen=True)
class Case:
    """A pod created (`created`), then, if given, a patch sent to it (`patch`, `content_type`).
    `refused`: the words the apiserver says, or None where the request is accepted."""
    id: str
    created: dict[str, Any]
    refused: str | None
    patch: Any = None
    content_type: str = MERGE_PATCH


CASES = [
    Case("matchFields-two-values", pod("two-values", affinity=fields_term("node-a", "node-b")),
         "must be only one value when `operator` is 'In' or 'NotIn' for node field selector"),
    Case("matchFields-one-value", pod("one-value", affinity=fields_term("node-a")), None),
    Case("label-value-over-63", pod("long-label", labels={"app": "v" * 64}), "must be no more than 63 bytes"),
    Case("label-value-bad-character", pod("bad-label", labels={"app": "vm 1"}),
         "a valid label must be an empty string or consist of alphanumeric characters"),
    Case("label-value-63", pod("label-63", labels={"app": "v" * 63}), None),
    Case("json-patch-add-under-missing-parent", pod("no-annotations"), "",
         [{"op": "add", "path": "/metadata/annotations/example.com~1keep", "value": "false"}], JSON_PATCH),
    Case("json-patch-add-with-its-parent", pod("annotations"), None,
         [{"op": "add", "path": "/metadata/annotations", "value": {"example.com/keep": "false"}}], JSON_PATCH),
    Case("json-patch-test-fails", pod("test-fails"), "",
         [{"op": "test", "path": "/metadata/labels/app", "value": "vm2"},
          {"op": "replace", "path": "/metadata/labels/app", "value": "vm3"}], JSON_PATCH),
    Case("json-patch-test-holds", pod("test-holds"), None,
         [{"op": "test", "path": "/metadata/labels/app", "value": "vm1"},
          {"op": "replace", "path": "/metadata/labels/app", "value": "vm3"}], JSON_PATCH),
    Case("pod-update-changes-node-selector", pod("node-selector"), "pod updates may not change fields other than",
         {"spec": {"nodeSelector": {"kubernetes.io/hostname": "node-a"}}}),
    Case("pod-update-changes-image", pod("image"), None,
         [{"op": "replace", "path": "/spec/containers/0/image", "value": "registry.k8s.io/pause:3.9"}], JSON_PATCH),
]
REFUSED = [case for case in CASES if case.refused is not None]
ACCEPTED = [case for case in CASES if case.refused is None]


def message(answer: Any) -> str:
    """Everything a Status says: its message and its causes' messages."""
    if not isinstance(answer, dict):
        return str(answer)
    causes = ((answer.get("details") or {}).get("causes")) or []
    return " ".join([str(answer.get("message", ""))] + [str(c.get("message", "")) for c in causes])


async def run(case: Case, request: Request, base: str) -> tuple[int, Any, dict[str, Any] | None]:
    """The case's requests against an apiserver at `base`: the last answer's code and body, and the
    pod as stored afterwards (None if there is none)."""
    pods = f"{base}/api/v1/namespaces/{NAMESPACE}/pods"
    url = f"{pods}/{case.created['metadata']['name']}"
    code, answer = await request("POST", pods, copy.deepcopy(case.created), "application/json")
    if case.patch is not None:
        assert code in (200, 201), (case.id, code, answer)
        code, answer = await request("PATCH", url, copy.deepcopy(case.patch), case.content_type)
    got_code, stored = await request("GET", url, None, "application/json")
    return code, answer, stored if got_code == 200 else None


def spec_and_meta(obj: dict[str, Any] | None) -> Any:
    if obj is None:
        return None
    meta = obj.get("metadata") or {}
    return {"labels": meta.get("labels"), "annotations": meta.get("annotations"),
            "nodeSelector": (obj.get("spec") or {}).get("nodeSelector"),
            "images": [c.get("image") for c in (obj.get("spec") or {}).get("containers") or []]}


async def refused(case: Case, request: Request, base: str) -> None:
    """Refused: 422 Invalid in the apiserver's words; nothing created, or the pod as it was."""
    code, answer, stored = await run(case, request, base)
    assert (code, answer.get("reason")) == (422, "Invalid"), (case.id, code, answer)
    assert case.refused in message(answer), (case.id, answer)
    if case.patch is None:
        assert stored is None, case.id
    else:
        assert spec_and_meta(stored) == spec_and_meta(case.created), case.id


async def accepted(case: Case, request: Request, base: str) -> None:
    """Accepted: created, or patched as asked."""
    code, answer, stored = await run(case, request, base)
    assert code in (200, 201), (case.id, code, answer)
    assert stored is not None
    if case.patch is not None:
        assert spec_and_meta(stored) != spec_and_meta(case.created), case.id
