"""What is left empty once our terms are taken out of a pod is removed too, so that the pod reads
as it did before they were added (Kubernetes never stores an empty affinity or list of terms)."""
import copy

import pytest
from tests.support.kube import migration_target, share_manager_pod, vm_pod

from webhook.rules.shared.prune import dict_or_none, drop_empty, keep_or_drop

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
OURS = {"weight": 100, "preference": {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-b"]}]}}


def with_ours(pod):
    """`pod` with our preferred term added, as the patch adds it."""
    pod = copy.deepcopy(pod)
    affinity = pod["spec"].setdefault("affinity", {})
    affinity.setdefault("nodeAffinity", {}).setdefault(PREFERRED, []).append(OURS)
    return pod


def without_ours(pod):
    """Our preferred term taken out again, and what that leaves empty."""
    node_affinity = pod["spec"]["affinity"]["nodeAffinity"]
    keep_or_drop(node_affinity, PREFERRED, [term for term in node_affinity[PREFERRED] if term != OURS])
    drop_empty(pod["spec"], "affinity", "nodeAffinity")
    return pod


@pytest.mark.parametrize("pod", [vm_pod(), migration_target(), share_manager_pod("pvc-d1"),
                                 share_manager_pod("pvc-d1", topology_zone="zone-a")],
                         ids=["vm-pod", "migration-target", "share-manager-pod", "share-manager-pod-zonal"])
def test_taking_our_term_out_gives_the_pod_as_it_was(pod):
    assert without_ours(with_ours(pod)) == pod


def test_a_users_own_preferred_term_stays():
    pod = vm_pod()
    theirs = {"weight": 5, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}
    pod["spec"]["affinity"]["nodeAffinity"][PREFERRED] = [theirs]
    assert without_ours(with_ours(pod))["spec"]["affinity"]["nodeAffinity"][PREFERRED] == [theirs]


@pytest.mark.parametrize("spec, keys, left", [
    ({"affinity": {"nodeAffinity": {}}}, ("affinity", "nodeAffinity"), {}),
    ({"affinity": {"nodeAffinity": {}, "podAntiAffinity": {REQUIRED: []}}}, ("affinity", "nodeAffinity"),
     {"affinity": {"podAntiAffinity": {REQUIRED: []}}}),
    ({"affinity": {"nodeAffinity": {REQUIRED: {}}}}, ("affinity", "nodeAffinity", REQUIRED), {}),
    ({"affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{}]}}}}, ("affinity", "nodeAffinity", REQUIRED),
     {"affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{}]}}}}),
    ({"affinity": "odd"}, ("affinity", "nodeAffinity"), {"affinity": "odd"}),
    ({}, ("affinity", "nodeAffinity"), {}),
    ({"affinity": {}}, ("affinity", "nodeAffinity"), {"affinity": {}}),  # not ours to tidy: nothing was taken out
    ({"affinity": {"nodeAffinity": []}}, ("affinity", "nodeAffinity"), {"affinity": {"nodeAffinity": []}}),
], ids=["all-empty", "sibling-kept", "innermost-first", "nothing-empty", "not-an-object", "absent", "innermost-absent",
        "empty-list-is-not-an-empty-object"])
def test_drop_empty(spec, keys, left):
    drop_empty(spec, *keys)
    assert spec == left


@pytest.mark.parametrize("items, left", [
    ([OURS], {PREFERRED: [OURS]}),
    ([], {}),
], ids=["some-left", "none-left"])
def test_keep_or_drop(items, left):
    mapping = {PREFERRED: [OURS, OURS]}
    keep_or_drop(mapping, PREFERRED, items)
    assert mapping == left


@pytest.mark.parametrize("value, read", [({}, {}), ({"a": 1}, {"a": 1}), (None, None), ([], None), ("x", None)],
                         ids=["empty-object", "object", "absent", "list", "string"])
def test_dict_or_none_tells_absent_from_empty(value, read):
    assert dict_or_none(value) == read
