import copy

import jsonpatch
import pytest
from tests.support.kube import annotations, apply_valid, pin_of, preferred_terms, required_terms, vm_pod
from tests.rules.placement.edit_model import edited

from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.kinds import REQUIRED
from webhook.kinds import PREFERRED_TERMS as PREFERRED_KEY
from webhook.rules.placement.patch import as_created, decision_annotations, patch_for
from webhook.config import Settings
from webhook.rules.placement.decide import AMONG, NOT_PINNED, PINNED, PREFERRED, Decision

SETTINGS = Settings()
PIN_B = Decision(PINNED, node="node-b", preferences=(("node-b", 100),), reason="pinned to node-b")
PREFER_AB = Decision(PREFERRED, preferences=(("node-a", 67), ("node-b", 33)), reason="spread")
SKIP = Decision(NOT_PINNED, reason="PVC default/x is not ReadWriteMany")
AMONG_BC = Decision(AMONG, preferences=(("node-c", 100), ("node-b", 40)), reason="among", among=("node-b", "node-c"))

OBSOLETE = {"key": "node-labeller.kubevirt.io/obsolete-host-model", "operator": "DoesNotExist"}
ZONE_A = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}
ZONE_B = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-b"]}
ANTI = {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}]}
EXISTING_PREF = {"weight": 5, "preference": {"matchExpressions": [ZONE_A]}}


def required(*terms):
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


@pytest.mark.parametrize(
    "affinity, expected_terms",
    [
        pytest.param("fixture", [{"matchExpressions": [OBSOLETE], "matchFields": [pin_of("node-b")]}], id="kubevirt-default-term"),
        pytest.param(None, [{"matchFields": [pin_of("node-b")]}], id="no-affinity"),
        pytest.param({"podAntiAffinity": ANTI}, [{"matchFields": [pin_of("node-b")]}], id="only-pod-anti-affinity"),
        pytest.param(
            required({"matchExpressions": [ZONE_A]}, {"matchExpressions": [ZONE_B]}),
            [{"matchExpressions": [ZONE_A], "matchFields": [pin_of("node-b")]},
             {"matchExpressions": [ZONE_B], "matchFields": [pin_of("node-b")]}],
            id="or-terms-each-get-the-pin",
        ),
        pytest.param(
            required({"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["node-c"]}]}),
            [{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["node-c"]}, pin_of("node-b")]}],
            id="existing-match-fields-appended",
        ),
        pytest.param(
            required({}, {"matchExpressions": [ZONE_B]}),
            [{}, {"matchExpressions": [ZONE_B], "matchFields": [pin_of("node-b")]}],
            id="empty-term-left-empty",
        ),
        pytest.param(
            {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}},
            [{"matchFields": [pin_of("node-b")]}],
            id="empty-term-list",
        ),
        pytest.param({"nodeAffinity": {}}, [{"matchFields": [pin_of("node-b")]}], id="empty-node-affinity"),
        pytest.param({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [EXISTING_PREF]}},
                     [{"matchFields": [pin_of("node-b")]}], id="only-preferred"),
    ],
)
def test_pin_is_anded_into_every_term(affinity, expected_terms):
    pod = vm_pod()
    if affinity != "fixture":
        pod["spec"]["affinity"] = copy.deepcopy(affinity)
    result = apply_valid(pod, patch_for(pod, PIN_B, SETTINGS))
    assert required_terms(result) == expected_terms
    assert {"weight": 100, "preference": {"matchFields": [pin_of("node-b")]}} in preferred_terms(result)
    assert annotations(result)["kubevirt-scheduler/decision"] == "pinned"
    assert annotations(result)["kubevirt-scheduler/node"] == "node-b"


def test_everything_else_in_affinity_is_kept():
    pod = vm_pod()
    pod["spec"]["affinity"]["podAntiAffinity"] = copy.deepcopy(ANTI)
    pod["spec"]["affinity"]["podAffinity"] = copy.deepcopy(ANTI)
    pod["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = [EXISTING_PREF]
    result = apply_valid(pod, patch_for(pod, PIN_B, SETTINGS))
    assert result["spec"]["affinity"]["podAntiAffinity"] == ANTI
    assert result["spec"]["affinity"]["podAffinity"] == ANTI
    assert preferred_terms(result)[0] == EXISTING_PREF
    assert len(preferred_terms(result)) == 2
    assert result["spec"]["nodeSelector"] == pod["spec"]["nodeSelector"]


def test_affinity_null_is_replaced_whole():
    pod = vm_pod(affinity=None)
    pod["spec"]["affinity"] = None
    ops = patch_for(pod, PIN_B, SETTINGS)
    assert ops[0]["path"] == "/spec/affinity"
    assert required_terms(apply_valid(pod, ops)) == [{"matchFields": [pin_of("node-b")]}]


def test_prefer_adds_no_requirement_and_weights_each_node():
    pod = vm_pod()
    result = apply_valid(pod, patch_for(pod, PREFER_AB, SETTINGS))
    assert required_terms(result) == required_terms(pod)  # untouched
    assert preferred_terms(result) == [
        {"weight": 67, "preference": {"matchFields": [pin_of("node-a")]}},
        {"weight": 33, "preference": {"matchFields": [pin_of("node-b")]}},
    ]
    assert annotations(result)["kubevirt-scheduler/decision"] == "preferred"
    assert annotations(result)["kubevirt-scheduler/node"] == "node-a,node-b"


def test_skip_only_records_why():
    pod = vm_pod()
    result = apply_valid(pod, patch_for(pod, SKIP, SETTINGS))
    assert result["spec"] == pod["spec"]
    assert annotations(result)["kubevirt-scheduler/decision"] == "not-pinned"
    assert annotations(result)["kubevirt-scheduler/reason"] == "PVC default/x is not ReadWriteMany"


@pytest.mark.parametrize("decision", [PIN_B, PREFER_AB, SKIP, AMONG_BC], ids=["pin", "prefer", "skip", "among"])
@pytest.mark.parametrize("affinity", ["fixture", None, required({"matchExpressions": [ZONE_A]}, {"matchExpressions": [ZONE_B]})],
                         ids=["kubevirt", "none", "or-terms"])
def test_reviewing_a_mutated_pod_adds_nothing(decision, affinity):
    pod = vm_pod()
    if affinity != "fixture":
        pod["spec"]["affinity"] = copy.deepcopy(affinity)
    once = apply_valid(pod, patch_for(pod, decision, SETTINGS))
    assert patch_for(once, decision, SETTINGS) == []


def test_pinned_among_ors_one_term_per_node_each_with_the_pods_own_requirements():
    """The apiserver takes one value per node field selector: "node-b or node-c" is two terms,
    each with KubeVirt's own requirement."""
    pod = vm_pod()
    result = apply_valid(pod, patch_for(pod, AMONG_BC, SETTINGS))
    assert required_terms(result) == [{"matchExpressions": [OBSOLETE], "matchFields": [pin_of("node-b")]},
                                      {"matchExpressions": [OBSOLETE], "matchFields": [pin_of("node-c")]}]
    assert [t["weight"] for t in preferred_terms(result)] == [100, 40]
    assert annotations(result)["kubevirt-scheduler/decision"] == "pinned-among"
    assert annotations(result)["kubevirt-scheduler/node"] == "node-b,node-c"


def test_pinned_among_is_every_own_term_with_every_node():
    """Two terms of the pod's own (ORed) and three nodes: six terms, each one own term and one node."""
    pod = vm_pod()
    pod["spec"]["affinity"] = required({"matchExpressions": [ZONE_A]}, {"matchExpressions": [ZONE_B]})
    three = Decision(AMONG, reason="among", among=("node-a", "node-b", "node-c"))
    result = apply_valid(pod, patch_for(pod, three, SETTINGS))
    got = [(t["matchExpressions"][0]["values"][0], t["matchFields"][0]["values"]) for t in required_terms(result)]
    assert sorted(got) == sorted((zone, [node]) for zone in ("zone-a", "zone-b") for node in ("node-a", "node-b", "node-c"))
    assert all(len(t["matchFields"]) == 1 for t in required_terms(result))


def test_pinned_among_without_terms_of_its_own_is_one_term_per_node():
    pod = vm_pod()
    pod["spec"].pop("affinity")
    result = apply_valid(pod, patch_for(pod, AMONG_BC, SETTINGS))
    assert required_terms(result) == [{"matchFields": [pin_of("node-b")]}, {"matchFields": [pin_of("node-c")]}]


def test_keys_are_escaped_in_paths():
    pod = vm_pod()
    ops = patch_for(pod, SKIP, SETTINGS)
    assert {"op": "add", "path": "/metadata/annotations/kubevirt-scheduler~1decision", "value": "not-pinned"} in ops
    assert jsonpatch.apply_patch(pod, ops)["metadata"]["annotations"]["kubevirt-scheduler/decision"] == "not-pinned"


def test_missing_annotations_are_added_whole():
    pod = vm_pod()
    del pod["metadata"]["annotations"]
    result = apply_valid(pod, patch_for(pod, PIN_B, SETTINGS))
    assert set(annotations(result)) == {"kubevirt-scheduler/decision", "kubevirt-scheduler/node", "kubevirt-scheduler/reason"}


# --------------------------------------------------------------------------- the inverse


USER_NODES = st.sampled_from(["user-1", "user-2"])  # names the user pins to; ours are node-*
OUR_NODES = st.sampled_from(["node-a", "node-b", "node-c"])
EXPRESSION = st.sampled_from([OBSOLETE, ZONE_A, ZONE_B])


def _term():
    fields = st.lists(USER_NODES.map(pin_of), min_size=1, max_size=2, unique_by=lambda r: r["values"][0])
    expressions = st.lists(EXPRESSION, min_size=1, max_size=2, unique_by=lambda e: e["key"] + e.get("operator", ""))
    return st.one_of(
        st.builds(lambda e: {"matchExpressions": e}, expressions),
        st.builds(lambda f: {"matchFields": f}, fields),
        st.builds(lambda e, f: {"matchExpressions": e, "matchFields": f}, expressions, fields),
    )


def _preferred():
    return st.builds(lambda w, n: {"weight": w, "preference": {"matchFields": [pin_of(n)]}},
                     st.integers(1, 100), USER_NODES) | st.just(EXISTING_PREF)


def _node_affinity():
    required_part = st.lists(_term(), min_size=1, max_size=3).map(lambda ts: {REQUIRED: {"nodeSelectorTerms": ts}})
    preferred_part = st.lists(_preferred(), min_size=1, max_size=2).map(lambda ps: {PREFERRED_KEY: ps})
    return st.one_of(required_part, preferred_part,
                     st.builds(lambda r, p: {**r, **p}, required_part, preferred_part))


# Affinity as Kubernetes serialises it: absent, or with no empty container (Go's omitempty).
AFFINITIES = st.one_of(
    st.none(),
    st.builds(lambda n: {"nodeAffinity": n}, _node_affinity()),
    st.just({"podAntiAffinity": ANTI}),
    st.builds(lambda n: {"nodeAffinity": n, "podAntiAffinity": ANTI}, _node_affinity()),
)


def _decision():
    pinned = OUR_NODES.map(lambda n: Decision(PINNED, node=n, preferences=((n, 100),), reason=f"pinned to {n}"))
    preferred = st.lists(OUR_NODES, min_size=1, max_size=3, unique=True).map(
        lambda ns: Decision(PREFERRED, preferences=tuple((n, 100 // len(ns)) for n in ns), reason="spread"))
    skipped = st.just(SKIP)
    among = st.lists(OUR_NODES, min_size=2, max_size=3, unique=True).map(
        lambda ns: Decision(AMONG, preferences=((ns[0], 100),), reason="among", among=tuple(sorted(ns))))
    return st.one_of(pinned, preferred, skipped, among)


@settings(max_examples=300, deadline=None)
@given(affinity=AFFINITIES, decision=_decision(), bare_annotations=st.booleans())
def test_stripping_what_we_added_gives_back_the_pod_as_created(affinity, decision, bare_annotations):
    """as_created(apply(pod, patch_for(pod))) == pod: explain judges the pod KubeVirt made, not ours."""
    pod = vm_pod()
    if affinity is None:
        pod["spec"].pop("affinity", None)
    else:
        pod["spec"]["affinity"] = copy.deepcopy(affinity)
    if bare_annotations:
        pod["metadata"].pop("annotations", None)
    created = copy.deepcopy(pod)
    ops = patch_for(pod, decision, SETTINGS)
    mutated = jsonpatch.apply_patch(pod, ops)
    assert as_created(mutated, SETTINGS) == created
    # And again after a second review (KubeVirt's reinvocation): still the same pod.
    again = jsonpatch.apply_patch(mutated, patch_for(mutated, decision, SETTINGS))
    assert as_created(again, SETTINGS) == created


# --------------------------------------------------------------------------- applies by construction


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


REQUIREMENT = NODES.map(pin_of) | st.fixed_dictionaries(
    {"key": st.just("zone"), "operator": st.just("In"), "values": st.lists(st.text(max_size=2), max_size=1)})
# Terms that select something (so the pin goes into them), terms that do not, and junk.
SELECTING_TERM = st.fixed_dictionaries({"matchExpressions": st.lists(REQUIREMENT, min_size=1, max_size=2)},
                                       optional={"matchFields": mostly(st.lists(REQUIREMENT, max_size=2))}) | \
    st.fixed_dictionaries({"matchFields": st.lists(REQUIREMENT, min_size=1, max_size=2)})
TERM = st.one_of(SELECTING_TERM, SELECTING_TERM, st.fixed_dictionaries({}, optional={"matchFields": JUNK}), JUNK)
SELECTOR = mostly(fields(nodeSelectorTerms=mostly(st.lists(TERM, max_size=3))))
PREFERRED_TERM = st.builds(lambda n, w: {"weight": w, "preference": {"matchFields": [pin_of(n)]}},
                           NODES, st.integers(1, 100)) | TERM
NODE_AFFINITY = mostly(fields(**{REQUIRED: SELECTOR, PREFERRED_KEY: mostly(st.lists(PREFERRED_TERM, max_size=3))}))
SPEC = mostly(fields(affinity=mostly(fields(nodeAffinity=NODE_AFFINITY, podAntiAffinity=JUNK)),
                     containers=st.just([{"name": "compute"}])))
ANNOTATIONS = mostly(st.dictionaries(st.sampled_from(["kubevirt-scheduler/decision", "kubevirt-scheduler/node", "a~/b", "x"]),
                                     st.text(max_size=2), max_size=3))
# A launcher pod as KubeVirt makes them: required node affinity terms, maybe preferred terms.
WITH_TERMS = st.fixed_dictionaries({
    "metadata": st.fixed_dictionaries({"name": st.just("p"), "annotations": ANNOTATIONS}),
    "spec": st.fixed_dictionaries({"affinity": st.fixed_dictionaries({"nodeAffinity": st.fixed_dictionaries(
        {REQUIRED: st.fixed_dictionaries({"nodeSelectorTerms": st.lists(TERM, min_size=1, max_size=3)})},
        optional={PREFERRED_KEY: mostly(st.lists(PREFERRED_TERM, max_size=3))})})})})
POD = WITH_TERMS | fields(metadata=mostly(fields(annotations=ANNOTATIONS)), spec=SPEC)
DECISION = st.one_of(
    NODES.map(lambda n: Decision(PINNED, node=n, preferences=((n, 100),), reason="r")),
    st.lists(st.tuples(NODES, st.integers(1, 100)), min_size=1, max_size=3, unique_by=lambda p: p[0]).map(
        lambda prefs: Decision(PREFERRED, preferences=tuple(prefs), reason="spread")),
    st.lists(NODES, min_size=2, max_size=3, unique=True).map(
        lambda ns: Decision(AMONG, preferences=((ns[0], 100),), reason="among", among=tuple(ns))),
    st.just(SKIP),
)


def with_parts(pod, parts):
    """`pod` with `parts` in place of its own: objects merged member by member, anything else replaced."""
    if not isinstance(pod, dict) or not isinstance(parts, dict):
        return parts
    return {**pod, **{key: with_parts(pod.get(key), value) for key, value in parts.items()}}


LISTS = ("/nodeSelectorTerms", "/matchFields", f"/{PREFERRED_KEY}")  # the lists the rules append to


def pointed(document, path):
    """The value at a JSON pointer, None where there is none."""
    for token in path.split("/")[1:]:
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(document, dict):
            document = document.get(token)
        elif isinstance(document, list) and token.isdigit() and int(token) < len(document):
            document = document[int(token)]
        else:
            return None
    return document


@settings(max_examples=1000, deadline=None)
@given(pod=POD, decision=DECISION)
def test_the_patch_applies_to_the_pod_and_gives_the_edited_pod(pod, decision):
    """The patch, applied to the whole pod by jsonpatch, gives exactly the pod with the parts the
    rules own edited (the model of the edit, `edit_model.edited`), whatever shape the pod has; it
    never writes an object of the pod over whole (its members are added) nor a list that holds
    items of the rules' kind (they are appended); a reinvocation on that pod adds nothing."""
    original = copy.deepcopy(pod)
    wanted = decision_annotations(decision, SETTINGS)
    after = edited(pod, decision.required, decision.preferences, wanted)
    ops = patch_for(pod, decision, SETTINGS)
    assert pod == original  # neither edited nor patched: the patch is computed on a copy
    assert {op["op"] for op in ops} <= {"add"}
    for op in ops:
        if not op["path"].endswith("/-"):
            there = pointed(original, op["path"])
            assert not isinstance(there, dict), op["path"]
            assert not (isinstance(there, list) and op["path"].endswith(LISTS)), op["path"]
    applied = jsonpatch.apply_patch(pod, ops)  # raises when an operation does not apply
    assert applied == with_parts(original, after)
    assert all(annotations(applied).get(key) == value for key, value in wanted.items())
    assert patch_for(applied, decision, SETTINGS) == []


def test_the_patch_holds_only_what_changes():
    """KubeVirt's launcher pod, pinned: five additions, none of what the pod already has (its own
    term is not written again), and an annotation already right is not written."""
    pod = vm_pod()
    ops = patch_for(pod, PIN_B, SETTINGS)
    terms = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms"
    assert [op["path"] for op in ops] == [
        f"{terms}/0/matchFields", "/spec/affinity/nodeAffinity/preferredDuringSchedulingIgnoredDuringExecution",
        "/metadata/annotations/kubevirt-scheduler~1decision", "/metadata/annotations/kubevirt-scheduler~1node",
        "/metadata/annotations/kubevirt-scheduler~1reason"]
    assert all(op["op"] == "add" for op in ops)
    answered = copy.deepcopy(pod)
    answered["metadata"]["annotations"]["kubevirt-scheduler/decision"] = "pinned"
    assert "/metadata/annotations/kubevirt-scheduler~1decision" not in [op["path"] for op in patch_for(answered, PIN_B, SETTINGS)]
    among = patch_for(pod, Decision(AMONG, preferences=(("node-b", 100),), reason="among", among=("node-b", "node-c")),
                      SETTINGS)
    assert [op["path"] for op in among][:2] == [f"{terms}/0/matchFields", f"{terms}/-"]  # a copy of its term, for node-c

def test_the_patch_never_carries_the_pods_own_values_back():
    """A hostile value of the pod's own (an integer JSON encoders refuse) stays where it is: the
    patch holds what the rules add, so the answer can always be encoded."""
    import orjson

    pod = vm_pod()
    pod["spec"]["affinity"]["nodeAffinity"][PREFERRED_KEY] = [
        {"weight": 2 ** 70, "preference": {"matchExpressions": [{"key": "a", "operator": "Exists"}]}}]
    for decision in (PIN_B, Decision(AMONG, preferences=(("node-b", 100),), reason="among", among=("node-b", "node-c"))):
        ops = patch_for(pod, decision, SETTINGS)
        orjson.dumps(ops)
        assert jsonpatch.apply_patch(pod, ops)["spec"]["affinity"]["nodeAffinity"][PREFERRED_KEY][0]["weight"] == 2 ** 70
