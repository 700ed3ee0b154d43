"""The patch safety net agrees with jsonpatch, never touches the patch (nor the object unless in
place), and catches what does not apply.

`apply` (what an admission runs) is held to jsonpatch's result on generated objects and add
patches, and on generated pods with the patches the rules make for them (and those patches broken).
"""
import copy

import jsonpatch
import jsonpointer
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.kube import vm_pod

from webhook.rules.placement import apply as patching, decide as placement, patch as affinity
from webhook.config import Settings

KEYS = st.sampled_from(["a", "b", "c/d", "e~f", "0", "1", ""])
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=12,
)
TOKENS = st.sampled_from(["a", "b", "c~1d", "e~0f", "0", "1", "2", "01", "-", "", "x", "g~2", "h~"])
PATHS = st.lists(TOKENS, min_size=0, max_size=4).map(lambda ts: "".join("/" + t for t in ts))
OPS = st.lists(st.fixed_dictionaries({"op": st.just("add"), "path": PATHS, "value": JSON}), min_size=1, max_size=4)


def reference(doc, ops):
    try:
        return ("ok", jsonpatch.apply_patch(doc, ops))
    except Exception:  # jsonpatch raises several kinds (and TypeError on odd paths)
        return ("error", None)


def agrees_with_jsonpatch(doc, ops):
    """`apply` builds what jsonpatch builds, or refuses what it refuses; it changes neither input."""
    doc_before, ops_before = copy.deepcopy(doc), copy.deepcopy(ops)
    expected = reference(copy.deepcopy(doc), copy.deepcopy(ops))
    try:
        got = ("ok", patching.apply(doc, ops))
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException):
        got = ("error", None)
    assert got == expected
    assert doc == doc_before and ops == ops_before  # neither the object nor the patch is modified
    assert in_place(copy.deepcopy(doc), ops) == expected
    assert ops == ops_before  # in place too, a later operation never changes what an earlier one added
    return got[0]


def in_place(doc, ops):
    """`apply` in place: what it returns is the object itself, patched, unless the root was replaced."""
    try:
        patched = patching.apply(doc, ops, in_place=True)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException):
        return ("error", None)
    assert patched is doc or any(op["path"] == "" for op in ops)
    return ("ok", patched)


@settings(max_examples=1000, deadline=None)
@given(doc=st.dictionaries(KEYS, JSON, max_size=4), ops=OPS)
def test_add_patches_apply_exactly_as_jsonpatch_says(doc, ops):
    agrees_with_jsonpatch(doc, ops)


# Pods shaped like (and unlike) what reaches the webhook: each field the patch goes through
# absent, of the wrong type, empty, or holding terms, some of them ours already.
NODES = st.sampled_from(["node-a", "node-b", "n/~x"])
JUNK = st.none() | st.integers(0, 2) | st.text(max_size=2) | st.lists(st.integers(0, 1), max_size=1)


def mostly(value):
    """Usually `value`, sometimes a value of the wrong type."""
    return st.one_of(value, value, value, JUNK)


def fields(**members):
    """An object with each member usually there, sometimes missing."""
    return st.fixed_dictionaries(members) | st.fixed_dictionaries({}, optional=members)


REQUIREMENT = NODES.map(affinity.node_requirement) | st.fixed_dictionaries(
    {"key": st.just("zone"), "operator": st.just("In"), "values": st.lists(st.text(max_size=2), max_size=1)})
# Terms that select something (so the pin goes into them), terms that do not, and junk.
SELECTING_TERM = st.fixed_dictionaries({"matchExpressions": st.lists(REQUIREMENT, min_size=1, max_size=2)},
                                       optional={"matchFields": mostly(st.lists(REQUIREMENT, max_size=2))}) | \
    st.fixed_dictionaries({"matchFields": st.lists(REQUIREMENT, min_size=1, max_size=2)})
TERM = st.one_of(SELECTING_TERM, SELECTING_TERM, st.fixed_dictionaries({}, optional={"matchFields": JUNK}), JUNK)
SELECTOR = mostly(fields(nodeSelectorTerms=mostly(st.lists(TERM, max_size=3))))
PREFERRED_TERM = st.builds(affinity.preferred_term, NODES, st.integers(1, 100)) | TERM
NODE_AFFINITY = mostly(fields(**{affinity.REQUIRED: SELECTOR, affinity.PREFERRED: mostly(st.lists(PREFERRED_TERM, max_size=3))}))
SPEC = mostly(fields(affinity=mostly(fields(nodeAffinity=NODE_AFFINITY, podAntiAffinity=JUNK)),
                     containers=st.just([{"name": "compute"}])))
ANNOTATIONS = mostly(st.dictionaries(st.sampled_from(["kubevirt-scheduler/decision", "kubevirt-scheduler/node", "a~/b", "x"]),
                                     st.text(max_size=2), max_size=3))
# A launcher pod as KubeVirt makes them: required node affinity terms, maybe preferred terms.
WITH_TERMS = st.fixed_dictionaries({
    "metadata": st.fixed_dictionaries({"name": st.just("p"), "annotations": ANNOTATIONS}),
    "spec": st.fixed_dictionaries({"affinity": st.fixed_dictionaries({"nodeAffinity": st.fixed_dictionaries(
        {affinity.REQUIRED: st.fixed_dictionaries({"nodeSelectorTerms": st.lists(TERM, min_size=1, max_size=3)})},
        optional={affinity.PREFERRED: mostly(st.lists(PREFERRED_TERM, max_size=3))})})})})
POD = WITH_TERMS | fields(metadata=mostly(fields(annotations=ANNOTATIONS)), spec=SPEC)
DECISION = st.one_of(
    NODES.map(lambda n: placement.Decision(placement.PINNED, node=n, preferences=((n, 100),), reason="r")),
    st.lists(st.tuples(NODES, st.integers(1, 100)), min_size=1, max_size=3, unique_by=lambda p: p[0]).map(
        lambda prefs: placement.Decision(placement.PREFERRED, preferences=tuple(prefs), reason="spread")),
    st.just(placement.Decision(placement.NOT_PINNED, reason="why")),
)


@settings(max_examples=1000, deadline=None)
@given(pod=POD, decision=DECISION)
def test_the_rules_patches_of_generated_pods_apply_as_jsonpatch_says(pod, decision):
    assert agrees_with_jsonpatch(pod, affinity.patch_for(pod, decision, Settings())) == "ok"


def _broken(ops, i, how):
    """One operation of a patch moved somewhere it may not apply."""
    op = dict(ops[i % len(ops)])
    tokens = op["path"].split("/")
    if how == "deeper":
        op["path"] += "/x/y"
    elif how == "index":
        op["path"] = "/".join(tokens[:-1] + ["7"])
    elif how == "parent":
        op["path"] = "/".join(tokens[:-2] + ["missing", tokens[-1]])
    else:
        op = {"op": how, "path": op["path"], "value": 1}
    return [*ops[:i % len(ops)], op, *ops[i % len(ops) + 1:]]


@settings(max_examples=1000, deadline=None)
@given(pod=POD, decision=DECISION, i=st.integers(0, 5),
       how=st.sampled_from(["deeper", "index", "parent", "replace", "test", "remove"]))
def test_broken_patches_of_generated_pods_are_refused_as_jsonpatch_refuses_them(pod, decision, i, how):
    agrees_with_jsonpatch(pod, _broken(affinity.patch_for(pod, decision, Settings()), i, how))


@pytest.mark.parametrize("in_place", [False, True])
def test_a_later_add_into_an_added_value_leaves_the_patch_alone(in_place):
    ops = [{"op": "add", "path": "/metadata/annotations", "value": {"a": {"x": {}, "w": {}}}},
           {"op": "add", "path": "/metadata/annotations/b", "value": "2"},
           {"op": "add", "path": "/metadata/annotations/a/x/y", "value": "3"},
           {"op": "add", "path": "/metadata/annotations/a/z", "value": "4"},
           {"op": "add", "path": "/metadata/annotations/a/w/v", "value": "5"}]
    result = patching.apply({"metadata": {}}, ops, in_place=in_place)
    assert result == {"metadata": {"annotations": {"a": {"x": {"y": "3"}, "w": {"v": "5"}, "z": "4"}, "b": "2"}}}
    assert ops[0]["value"] == {"a": {"x": {}, "w": {}}}


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


@pytest.mark.parametrize("path", ["/spec/missing/x", "/spec/volumes/99/name", "/spec/volumes/-/name",
                                  "/metadata/name/x", "spec", "/spec/volumes/01", "/spec/volumes/9"])
def test_a_patch_with_one_operation_that_does_not_apply_is_refused(path):
    with pytest.raises(jsonpatch.JsonPatchException):
        patching.apply(vm_pod(), [{"op": "add", "path": "/metadata/annotations/a", "value": "1"},
                                  {"op": "add", "path": path, "value": 1}])


@pytest.mark.parametrize("ops", [
    [{"op": "add", "path": "/metadata/annotations", "value": {}}, {"op": "add", "path": "/metadata/annotations/b", "value": 2}],
    [{"op": "add", "path": "/spec/volumes/0", "value": {}}, {"op": "add", "path": "/spec/volumes/5", "value": {}}],
    [{"op": "add", "path": "", "value": {"a": []}}, {"op": "add", "path": "/a/0", "value": 1}],
], ids=["into-what-was-added", "insert-moves-indexes", "whole-document"])
def test_operations_that_build_on_earlier_ones_apply_as_jsonpatch_applies_them(ops):
    # Each of these applies only after the operation before it.
    assert patching.apply(vm_pod(), ops) == jsonpatch.apply_patch(vm_pod(), ops)
