"""The node-level checks of a pin in order (cordon, readiness, KubeVirt's label, taints, the
pod's own affinity), each both ways (blocks / does not block)."""
import pytest
from kube import node, vm_pod

from webhook.rules.fit.checks import why_not_run

NO_SCHEDULE = {"key": "dedicated", "value": "storage", "effect": "NoSchedule"}
PREFER_NO = {"key": "busy", "value": "yes", "effect": "PreferNoSchedule"}


@pytest.mark.parametrize("the_node, needs_kubevirt, fragment", [
    (node("node-b"), True, None),
    (None, True, "not found"),
    (node("node-b", unschedulable=True), True, "cordoned"),
    (node("node-b", ready=False), True, "not Ready"),
    (node("node-b", schedulable_label=False), True, "lacks kubevirt.io/schedulable=true"),
    (node("node-b", schedulable_label=False), False, None),  # share-manager pods don't need it
    (node("node-b", taints=[NO_SCHEDULE]), True, "untolerated taint dedicated=storage:NoSchedule"),
    (node("node-b", taints=[PREFER_NO]), True, None),
    (node("node-b", **{"kubernetes.io/arch": "arm64"}), True, "nodeSelector/affinity"),
], ids=["fine", "missing", "cordoned", "not-ready", "no-kubevirt-label", "label-not-needed", "tainted",
        "prefer-no-schedule", "selector"])
def test_why_not_run(the_node, needs_kubevirt, fragment):
    pod = vm_pod() if needs_kubevirt else {"spec": {}}  # a share-manager pod has no KubeVirt nodeSelector
    reason = why_not_run("node-b", the_node, pod, needs_kubevirt=needs_kubevirt)
    assert (reason is None) if fragment is None else (fragment in reason)


def test_node_without_ready_condition_is_not_ready():
    bare = node("node-b")
    bare["status"] = {}
    assert "not Ready" in why_not_run("node-b", bare, vm_pod(), needs_kubevirt=True)


def test_a_node_read_afresh_is_answered_afresh():
    """A direct GET hands out a new node object each time: its answer is its own (a node
    cordoned meanwhile is seen)."""
    pod = vm_pod()
    assert why_not_run("node-fresh", node("node-fresh"), pod, needs_kubevirt=True) is None
    cordoned = node("node-fresh")
    cordoned["spec"] = {"unschedulable": True}
    assert why_not_run("node-fresh", cordoned, pod, needs_kubevirt=True) == "node node-fresh is cordoned"
    for _ in range(50):
        assert why_not_run("node-fresh", node("node-fresh"), pod, needs_kubevirt=True) is None
