"""The safety net's rule: which pinned pods count as stranded."""
import copy
import datetime

import jsonpatch
import pytest
from tests.support.kube import affinity_ops, vm_pod

from webhook.config import Settings
from webhook.rules.placement.stranded import stranded

NOW = datetime.datetime(2026, 11, 22, 12, 0, tzinfo=datetime.timezone.utc)
MESSAGE = "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't match Pod's node affinity/selector."


def pinned_pod(*, minutes=5, decision="pinned", scheduled=None, reason="Unschedulable", node_name=None,
               terminating=False, forged=False):
    pod = vm_pod()
    pod["metadata"]["name"] = "virt-launcher-vm1-x7k2p"
    pod["metadata"]["creationTimestamp"] = (NOW - datetime.timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")
    pod["metadata"]["annotations"].update({"kubevirt-scheduler/decision": decision, "kubevirt-scheduler/node": "node-b"})
    if decision == "pinned" and not forged:  # the pin the webhook writes with that annotation
        pod = jsonpatch.apply_patch(pod, affinity_ops(pod["spec"], ("node-b",), ()))
    condition = {"type": "PodScheduled", "status": "False" if scheduled is None else scheduled, "reason": reason,
                 "message": MESSAGE, "lastTransitionTime": pod["metadata"]["creationTimestamp"]}
    pod["status"] = {"phase": "Pending", "conditions": [condition]}
    if node_name:
        pod["spec"]["nodeName"] = node_name
    if terminating:
        pod["metadata"]["deletionTimestamp"] = "2026-11-22T11:59:00Z"
    return pod


@pytest.mark.parametrize("pod, expected", [
    pytest.param(pinned_pod(), True, id="pinned-unschedulable-5-min"),
    pytest.param(pinned_pod(minutes=1), False, id="within-the-grace"),
    pytest.param(pinned_pod(decision="preferred"), False, id="only-preferred-by-us"),
    pytest.param(pinned_pod(forged=True), False, id="annotation-without-our-pin"),
    pytest.param(pinned_pod(scheduled="True", reason=""), False, id="scheduled"),
    pytest.param(pinned_pod(reason="SchedulerError"), False, id="not-unschedulable"),
    pytest.param(pinned_pod(node_name="node-b"), False, id="bound"),
    pytest.param(pinned_pod(terminating=True), False, id="terminating"),
], )
def test_a_pinned_pod_unschedulable_past_the_grace_is_stranded(pod, expected):
    found = stranded(pod, "default", Settings(), NOW)
    assert (found is not None) == expected
    if found:
        assert (found.namespace, found.pod, found.vm, found.node) == ("default", "virt-launcher-vm1-x7k2p", "vm1", "node-b")
        assert found.describe(NOW) == f"pinned to node-b, unschedulable for 5 min: {MESSAGE}"


def test_a_pod_of_unexpected_shape_is_not_reported():
    pod = pinned_pod()
    broken = copy.deepcopy(pod)
    broken["status"]["conditions"] = "nope"
    assert stranded(broken, "default", Settings(), NOW) is None
    broken = copy.deepcopy(pod)
    broken["metadata"]["creationTimestamp"] = "yesterday"
    assert stranded(broken, "default", Settings(), NOW) is None
