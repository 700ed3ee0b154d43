"""Table tests of the never-strand checks, each in both directions (blocks / does not block)."""
import pytest
from kube import node, vm_pod

from webhook.rules.nodes import blocking_taint, pod_admits, term_matches, tolerates, why_not

NO_SCHEDULE = {"key": "dedicated", "value": "storage", "effect": "NoSchedule"}
NO_EXECUTE = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}
PREFER_NO = {"key": "busy", "value": "yes", "effect": "PreferNoSchedule"}


@pytest.mark.parametrize("toleration, taint, expected", [
    ({"key": "dedicated", "operator": "Equal", "value": "storage", "effect": "NoSchedule"}, NO_SCHEDULE, True),
    ({"key": "dedicated", "value": "storage", "effect": "NoSchedule"}, NO_SCHEDULE, True),  # default operator Equal
    ({"key": "dedicated", "operator": "Equal", "value": "db", "effect": "NoSchedule"}, NO_SCHEDULE, False),
    ({"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}, NO_SCHEDULE, True),
    ({"key": "dedicated", "operator": "Exists"}, NO_SCHEDULE, True),  # empty effect matches every effect
    ({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}, NO_SCHEDULE, False),
    ({"operator": "Exists"}, NO_SCHEDULE, True),  # empty key + Exists tolerates everything
    ({"operator": "Exists"}, NO_EXECUTE, True),
    ({"key": "other", "operator": "Exists"}, NO_SCHEDULE, False),
    ({"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}, NO_EXECUTE, True),
], ids=["equal", "default-equal", "equal-other-value", "exists", "exists-empty-effect", "other-effect",
        "exists-everything", "exists-everything-noexecute", "other-key", "noexecute-seconds"])
def test_tolerates(toleration, taint, expected):
    assert tolerates(toleration, taint) is expected


@pytest.mark.parametrize("taints, tolerations, blocked", [
    ([NO_SCHEDULE], [], True),
    ([NO_EXECUTE], [], True),
    ([PREFER_NO], [], False),  # PreferNoSchedule does not block
    ([NO_SCHEDULE], [{"key": "dedicated", "operator": "Exists"}], False),
    ([NO_SCHEDULE, NO_EXECUTE], [{"key": "dedicated", "operator": "Exists"}], True),
    ([NO_SCHEDULE, NO_EXECUTE], [{"operator": "Exists"}], False),
    ([], [], False),
], ids=["noschedule", "noexecute", "prefer-no-schedule", "tolerated", "one-of-two-tolerated", "all-tolerated", "no-taints"])
def test_blocking_taint(taints, tolerations, blocked):
    assert (blocking_taint(node("n", taints=taints), tolerations) is not None) is blocked


ZONE = "topology.kubernetes.io/zone"


@pytest.mark.parametrize("term, expected", [
    ({"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["zone-b"]}]}, True),
    ({"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["zone-a"]}]}, False),
    ({"matchExpressions": [{"key": ZONE, "operator": "NotIn", "values": ["zone-a"]}]}, True),
    ({"matchExpressions": [{"key": ZONE, "operator": "NotIn", "values": ["zone-b"]}]}, False),
    ({"matchExpressions": [{"key": "missing", "operator": "NotIn", "values": ["x"]}]}, True),
    ({"matchExpressions": [{"key": ZONE, "operator": "Exists"}]}, True),
    ({"matchExpressions": [{"key": "missing", "operator": "Exists"}]}, False),
    ({"matchExpressions": [{"key": "missing", "operator": "DoesNotExist"}]}, True),
    ({"matchExpressions": [{"key": ZONE, "operator": "DoesNotExist"}]}, False),
    ({"matchExpressions": [{"key": "cpus", "operator": "Gt", "values": ["8"]}]}, True),
    ({"matchExpressions": [{"key": "cpus", "operator": "Gt", "values": ["16"]}]}, False),
    ({"matchExpressions": [{"key": "cpus", "operator": "Lt", "values": ["32"]}]}, True),
    ({"matchExpressions": [{"key": "cpus", "operator": "Lt", "values": ["16"]}]}, False),
    ({"matchExpressions": [{"key": ZONE, "operator": "Gt", "values": ["1"]}]}, False),  # not an integer
    ({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-b"]}]}, True),
    ({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}, False),
    ({"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["node-a"]}]}, True),
    ({"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["zone-b"]}],
      "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}, False),  # ANDed
    ({}, False),  # an empty term matches nothing
], ids=["in", "in-miss", "notin", "notin-miss", "notin-absent", "exists", "exists-miss", "doesnotexist",
        "doesnotexist-miss", "gt", "gt-miss", "lt", "lt-miss", "gt-not-int", "fields-in", "fields-in-miss",
        "fields-notin", "anded", "empty"])
def test_term_matches(term, expected):
    assert term_matches(term, node("node-b", **{ZONE: "zone-b", "cpus": "16"})) is expected


def _affinity(*terms):
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


@pytest.mark.parametrize("spec, expected", [
    ({}, True),
    ({"nodeSelector": {"kubevirt.io/schedulable": "true"}}, True),
    ({"nodeSelector": {"kubernetes.io/arch": "arm64"}}, False),
    ({"affinity": _affinity({"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["zone-a"]}]})}, False),
    ({"affinity": _affinity({"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["zone-a"]}]},
                            {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["zone-b"]}]})}, True),  # ORed
    ({"affinity": _affinity({})}, False),
], ids=["nothing", "selector-ok", "selector-excludes", "zone-excludes", "or-terms", "only-empty-term"])
def test_pod_admits(spec, expected):
    assert pod_admits({"spec": spec}, node("node-b", **{ZONE: "zone-b"})) is expected


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
def test_why_not(the_node, needs_kubevirt, fragment):
    pod = vm_pod() if needs_kubevirt else {"spec": {}}  # a share-manager pod has no KubeVirt nodeSelector
    reason = why_not("node-b", the_node, pod, needs_kubevirt=needs_kubevirt)
    assert (reason is None) if fragment is None else (fragment in reason)


def test_node_without_ready_condition_is_not_ready():
    bare = node("node-b")
    bare["status"] = {}
    assert "not Ready" in why_not("node-b", bare, vm_pod(), needs_kubevirt=True)


def test_a_node_read_afresh_is_answered_afresh():
    """A direct GET hands out a new node object each time: its answer is its own (a node
    cordoned meanwhile is seen)."""
    pod = vm_pod()
    assert why_not("node-fresh", node("node-fresh"), pod, needs_kubevirt=True) is None
    cordoned = node("node-fresh")
    cordoned["spec"] = {"unschedulable": True}
    assert why_not("node-fresh", cordoned, pod, needs_kubevirt=True) == "node node-fresh is cordoned"
    for _ in range(50):
        assert why_not("node-fresh", node("node-fresh"), pod, needs_kubevirt=True) is None
