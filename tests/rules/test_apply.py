"""The patch safety net agrees with jsonpatch, never touches its inputs, and catches what does not apply."""
import copy

import jsonpatch
import jsonpointer
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kube import vm_pod

from webhook.rules import apply as patching, decide as placement, patch as affinity
from webhook.config import Settings

KEYS = st.sampled_from(["a", "b", "c/d", "e~f", "0", "1", ""])
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=12,
)
TOKENS = st.sampled_from(["a", "b", "c~1d", "e~0f", "0", "1", "2", "01", "-", "", "x"])
PATHS = st.lists(TOKENS, min_size=0, max_size=4).map(lambda ts: "".join("/" + t for t in ts))
OPS = st.lists(st.fixed_dictionaries({"op": st.just("add"), "path": PATHS, "value": JSON}), min_size=1, max_size=4)


def reference(doc, ops):
    try:
        return ("ok", jsonpatch.apply_patch(doc, ops))
    except Exception:  # jsonpatch raises several kinds (and TypeError on odd paths)
        return ("error", None)


@settings(max_examples=400, deadline=None)
@given(doc=st.dictionaries(KEYS, JSON, max_size=4), ops=OPS)
def test_add_patches_apply_exactly_as_jsonpatch_says(doc, ops):
    doc_before, ops_before = copy.deepcopy(doc), copy.deepcopy(ops)
    expected = reference(copy.deepcopy(doc), copy.deepcopy(ops))
    try:
        got = ("ok", patching.apply(doc, ops))
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException):
        got = ("error", None)
    assert got == expected
    assert doc == doc_before and ops == ops_before  # neither the object nor the patch is modified


def test_a_later_add_into_an_added_value_leaves_the_patch_alone():
    ops = [{"op": "add", "path": "/metadata/annotations", "value": {"a": "1"}},
           {"op": "add", "path": "/metadata/annotations/b", "value": "2"}]
    result = patching.apply({"metadata": {}}, ops)
    assert result == {"metadata": {"annotations": {"a": "1", "b": "2"}}}
    assert ops[0]["value"] == {"a": "1"}


@pytest.mark.parametrize("path", ["/spec/missing/x", "/spec/volumes/99/name", "/spec/volumes/-/name",
                                  "/metadata/name/x", "spec"])
def test_patches_that_do_not_apply_are_refused(path):
    with pytest.raises(jsonpatch.JsonPatchException):
        patching.apply(vm_pod(), [{"op": "add", "path": path, "value": 1}])


def test_the_rules_patch_of_the_fixture_pod_equals_jsonpatch():
    pod = vm_pod()
    decision = placement.Decision(placement.PINNED, node="node-b", preferences=(("node-b", 100),), reason="r")
    ops = affinity.patch_for(pod, decision, Settings())
    assert patching.apply(pod, ops) == jsonpatch.apply_patch(pod, ops)
    assert pod == vm_pod()
