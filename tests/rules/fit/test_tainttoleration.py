"""TaintToleration: each toleration and taint both ways (blocks / does not block)."""
import pytest
from tests.support.kube import node

from webhook.rules.fit.tainttoleration import blocking_taint, tolerates

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
