import base64
import json

import pytest
from kube import FIXTURES, review, vm_pod

from webhook.admission import (AdmissionResponse, BadReview, allowed, clip, parse_go_duration, parse_review,
                               patched, review_for_pod)


def test_fixture_review_parses_with_request_namespace():
    body = json.loads((FIXTURES / "admission-review.json").read_text())
    request = parse_review(body)
    assert request.uid == "0f5c6a47-3d2e-4a11-b8a4-6c1e2d3f4a5b"
    assert (request.kind, request.operation, request.namespace, request.name) == ("Pod", "CREATE", "default", "")


@pytest.mark.parametrize("body, message", [
    ([], "JSON object"),
    ({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}}, "expected apiVersion"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "no request"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"kind": {"kind": "Pod"}, "operation": "CREATE"}}, "uid"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u", "operation": "CREATE"}}, "request.kind"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u", "kind": {"kind": "Pod"}}}, "operation"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u", "kind": {"kind": "Pod"}, "operation": "CREATE", "namespace": 3}}, "namespace"),
])
def test_malformed_reviews_are_rejected_with_the_reason(body, message):
    with pytest.raises(BadReview, match=message):
        parse_review(body)


def test_allowed_has_no_patch_type():
    assert allowed("u").envelope() == {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                       "response": {"uid": "u", "allowed": True}}


def test_patched_carries_base64_json_patch_and_type_together():
    ops = [{"op": "add", "path": "/metadata/annotations/a", "value": "b"}]
    response = patched("u", ops, ["x" * 300]).envelope()["response"]
    assert response["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(response["patch"])) == ops
    assert all(len(w) < 120 for w in response["warnings"])


def test_empty_patch_is_no_patch():
    assert "patchType" not in AdmissionResponse("u", patch=[]).envelope()["response"]


def test_clip_keeps_short_warnings():
    assert clip("short") == "short"
    assert len(clip("y" * 500)) == 119


@pytest.mark.parametrize("text, seconds", [("10s", 10), ("30s", 30), ("1m30s", 90), ("500ms", 0.5), ("2", 2), ("1.5s", 1.5)])
def test_go_durations(text, seconds):
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "s", "10x", "abc"])
def test_bad_go_durations(text):
    with pytest.raises(ValueError):
        parse_go_duration(text)


def test_bare_pod_is_wrapped_as_a_create_review():
    request = parse_review(review_for_pod(vm_pod(), "vms"))
    assert (request.operation, request.namespace, request.kind) == ("CREATE", "vms", "Pod")
    assert request.object == vm_pod()
    assert parse_review(review(vm_pod())).dry_run is False


def test_deadline_keeps_a_margin_of_at_most_a_quarter():
    from webhook.deadline import Deadline

    assert Deadline.after(10, 1).remaining() == pytest.approx(9, abs=0.05)
    assert Deadline.after(1, 5).remaining() == pytest.approx(0.75, abs=0.05)
