import pytest

from webhook.rules.placement.decide import NOT_PINNED, PINNED, PREFERRED, decide
from webhook.rules.shared.facts import Fact


def fact(claim, node):
    return Fact(claim, node, f"{claim} on {node}" if node else f"{claim}: no share-manager")


@pytest.mark.parametrize("facts, outcome, node, prefs", [
    ([fact("a", "n1")], PINNED, "n1", (("n1", 100),)),
    ([fact("a", "n1"), fact("b", "n1")], PINNED, "n1", (("n1", 100),)),
    ([fact("a", "n1"), fact("b", None)], PINNED, "n1", (("n1", 100),)),
    ([fact("a", "n1"), fact("b", "n2")], PREFERRED, None, (("n1", 50), ("n2", 50))),
    ([fact("a", "n2"), fact("b", "n1"), fact("c", "n2")], PREFERRED, None, (("n2", 67), ("n1", 33))),
    ([fact(str(i), f"n{i}") for i in range(250)], PREFERRED, None, None),  # 100/250 rounds to 0: floor 1
    ([fact("a", None)], NOT_PINNED, None, ()),
    ([], NOT_PINNED, None, ()),
], ids=["one", "two-same", "one-unknown", "split", "weighted", "many-nodes", "none", "no-disks"])
def test_decide(facts, outcome, node, prefs):
    decision = decide(facts)
    assert decision.outcome == outcome and decision.node == node
    if prefs is not None:
        assert decision.preferences == prefs
    assert all(1 <= w <= 100 for _, w in decision.preferences)
    if outcome != PINNED:
        assert decision.warnings


def test_failed_node_check_keeps_only_the_preference():
    decision = decide([fact("a", "n1")], blocked="node n1 is cordoned")
    assert decision.outcome == PREFERRED and decision.node is None
    assert decision.preferences == (("n1", 100),)
    assert "cordoned" in decision.reason and decision.warnings



def test_the_requiring_decisions_are_those_the_caches_index_as_waiting_for_our_node():
    """The caches (cluster/, which imports no rule) index pods by the annotation values of kinds;
    they are the decisions that add a required term (but an evacuation's aim: no pod's)."""
    from webhook import kinds
    from webhook.rules.placement.decide import AIMED, Decision, Placement

    adding = tuple(str(p) for p in Placement if p is not AIMED and Decision(p, node="node-a", among=("node-a",)).required)
    assert adding == kinds.REQUIRING_DECISIONS
