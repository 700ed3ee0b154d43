import copy

import jsonpatch
import pytest
from kube import annotations, apply_valid, pin_of, preferred_terms, required_terms, vm_pod

from webhook.rules.patch import annotation_ops, escape, patch_for
from webhook.config import Settings
from webhook.rules.decide import NOT_PINNED, PINNED, PREFERRED, Decision

SETTINGS = Settings()
PIN_B = Decision(PINNED, node="node-b", preferences=(("node-b", 100),), reason="pinned to node-b")
PREFER_AB = Decision(PREFERRED, preferences=(("node-a", 67), ("node-b", 33)), reason="spread")
SKIP = Decision(NOT_PINNED, reason="PVC default/x is not ReadWriteMany")

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


@pytest.mark.parametrize("decision", [PIN_B, PREFER_AB, SKIP], ids=["pin", "prefer", "skip"])
@pytest.mark.parametrize("affinity", ["fixture", None, required({"matchExpressions": [ZONE_A]}, {"matchExpressions": [ZONE_B]})],
                         ids=["kubevirt", "none", "or-terms"])
def test_reviewing_a_mutated_pod_adds_nothing(decision, affinity):
    pod = vm_pod()
    if affinity != "fixture":
        pod["spec"]["affinity"] = copy.deepcopy(affinity)
    once = apply_valid(pod, patch_for(pod, decision, SETTINGS))
    assert patch_for(once, decision, SETTINGS) == []


def test_keys_are_escaped_in_paths():
    assert escape("a/b~c") == "a~1b~0c"
    pod = vm_pod()
    ops = annotation_ops(pod, {"we~ird/key": "v"})
    assert ops == [{"op": "add", "path": "/metadata/annotations/we~0ird~1key", "value": "v"}]
    assert jsonpatch.apply_patch(pod, ops)["metadata"]["annotations"]["we~ird/key"] == "v"


def test_missing_annotations_are_added_whole():
    pod = vm_pod()
    del pod["metadata"]["annotations"]
    result = apply_valid(pod, patch_for(pod, PIN_B, SETTINGS))
    assert set(annotations(result)) == {"kubevirt-scheduler/decision", "kubevirt-scheduler/node", "kubevirt-scheduler/reason"}
