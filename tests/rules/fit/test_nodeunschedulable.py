"""NodeUnschedulable: a cordoned node (`kubectl cordon`, a drain) takes no new pod of ours."""
import pytest
from tests.support.kube import node

from webhook.rules.fit.nodeunschedulable import node_unschedulable

DRAIN_TAINT = {"key": "kubevirt.io/drain", "value": "draining", "effect": "NoSchedule"}


@pytest.mark.parametrize("the_node, why", [
    (node("node-b"), None),
    (node("node-b", unschedulable=True), "node node-b is cordoned"),
    (node("node-b", unschedulable=True, taints=[DRAIN_TAINT]), "node node-b is cordoned"),
    (node("node-b", taints=[DRAIN_TAINT]), None),  # the taint is TaintToleration's to judge
    (node("node-b", ready=False), None),  # readiness is another check's
    ({"metadata": {"name": "node-b"}, "spec": None}, None),
    ({"metadata": {"name": "node-b"}, "spec": {"unschedulable": False}}, None),
], ids=["schedulable", "cordoned", "drained", "tainted-only", "not-ready", "no-spec", "uncordoned"])
def test_node_unschedulable(the_node, why):
    assert node_unschedulable("node-b", the_node) == why
