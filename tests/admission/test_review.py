import base64
import json

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.kube import FIXTURES, review, vm_pod

from webhook.admission.outcome import Outcome, Rule
from webhook.admission.review import AdmissionRequest, BadReview, build_response, clip, parse_review
from webhook.rules.shared.alone import Alone
from webhook.rules.placement.decide import NOT_PINNED, PINNED, PREFERRED, Decision
from webhook.rules.placement.patch import audit_annotations


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
    skipped = Outcome(Rule.VM, skipped=Alone.NOT_OPTED_IN)
    assert build_response("u", skipped) == {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                            "response": {"uid": "u", "allowed": True}}


def test_patched_carries_base64_json_patch_and_type_together():
    ops = [{"op": "add", "path": "/metadata/annotations/a", "value": "b"}]
    decision = Decision(PINNED, node="node-b", preferences=(("node-b", 100),), reason="pinned to node-b")
    outcome = Outcome(Rule.VM, decision=decision, patch=tuple(ops), warnings=("x" * 300,))
    response = build_response("u", outcome)["response"]
    assert response["uid"] == "u" and response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(response["patch"])) == ops
    assert all(len(w) < 120 for w in response["warnings"])
    assert response["auditAnnotations"] == {"decision": "pinned", "node": "node-b", "reason": "pinned to node-b"}


def test_empty_patch_is_no_patch():
    assert "patchType" not in build_response("u", Outcome(Rule.NONE, patch=()))["response"]


def test_clip_keeps_short_warnings():
    assert clip("short") == "short"
    assert len(clip("y" * 500)) == 119


def test_bare_pod_is_taken_as_a_dry_run_create():
    request = AdmissionRequest.for_pod(vm_pod(), "vms")
    assert (request.operation, request.namespace, request.kind, request.group) == ("CREATE", "vms", "Pod", "")
    assert request.object == vm_pod() and request.dry_run is True
    assert parse_review(review(vm_pod())).dry_run is False


def test_deadline_keeps_a_margin_of_at_most_a_quarter():
    from webhook.deadline import Deadline

    assert Deadline.after(10, 1).remaining() == pytest.approx(9, abs=0.05)
    assert Deadline.after(1, 5).remaining() == pytest.approx(0.75, abs=0.05)


NODE_NAMES = st.sampled_from(["node-a", "node-b"])
DECISIONS = st.none() | st.builds(
    Decision, st.sampled_from([PINNED, PREFERRED, NOT_PINNED]), node=st.none() | NODE_NAMES,
    preferences=st.lists(st.tuples(NODE_NAMES, st.integers(1, 100)), max_size=2).map(tuple), reason=st.text(max_size=30))
OUTCOMES = st.builds(
    Outcome, st.sampled_from(list(Rule)), decision=DECISIONS, skipped=st.none() | st.sampled_from(list(Alone)),
    patch=st.lists(st.fixed_dictionaries({"op": st.just("add"), "path": st.text(max_size=10),
                                          "value": st.text(max_size=5) | st.integers(-2**63, 2**63 - 1)}), max_size=3).map(tuple),
    warnings=st.lists(st.text(max_size=200), max_size=2).map(tuple))


def expected_answer(uid, outcome):
    """The AdmissionReview v1 answer for an outcome, built as a dict, field by field."""
    response = {"uid": uid, "allowed": True}
    if outcome.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(list(outcome.patch))).decode("ascii")
    if outcome.warnings:
        response["warnings"] = [clip(w) for w in outcome.warnings]
    if outcome.decision is not None:
        response["auditAnnotations"] = audit_annotations(outcome.decision)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


@settings(max_examples=500)
@given(uid=st.text(max_size=20), outcome=OUTCOMES)
def test_the_answer_the_server_sends_is_the_envelope_byte_for_byte(uid, outcome):
    assert orjson.dumps(build_response(uid, outcome)) == orjson.dumps(expected_answer(uid, outcome))
