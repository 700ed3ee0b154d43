"""An answer prepared for a drain's share-manager holds for the pod created in its place only where
nothing it rests on has changed: the pod's ask, why its VM leaves, the nodes it names (its reads:
tests/admission/test_prepare.py)."""
import dataclasses

import jsonpatch
import pytest
from tests.support.kube import LONGHORN_NS, share_manager_pod

from webhook.config import Settings
from webhook.rules.fit.demand import Demand
from webhook.rules.placement.decide import AMONG, Decision
from webhook.rules.placement.patch import as_created, patch_for
from webhook.rules.placement.prepared import (PREPARED_SECONDS, Prepared, as_answer,
                                              ask_of, check)

DECISION = Decision(AMONG, preferences=(("node-c", 100), ("node-b", 50)), among=("node-b", "node-c", "node-d"),
                    reason="pinned among node-b, node-c, node-d")


class Changes:
    """A view's record of changed nodes: `changed` since position 7, nothing known before."""

    def __init__(self, changed=(), known=True, beyond_room=None):
        self.changed, self.known = frozenset(changed), known
        self.beyond = self.changed if beyond_room is None else frozenset(beyond_room)

    def changes_among(self, names, since):
        if not self.known or since != 7:
            return None
        return self.changed.intersection(names), self.beyond.intersection(names)


ASK, LEAVING = ask_of(share_manager_pod("pvc-1"), LONGHORN_NS), "node node-a is cordoned"
PREPARED = Prepared(decision=DECISION, ask=ASK, leaving=LEAVING, reads=(), position=7, made=100.0, vm="uid-vm1")

CHECKS = [
    ("nothing changed", ASK, LEAVING, Changes(), 101.0, None, ()),
    ("a node it does not name changed", ASK, LEAVING, Changes({"node-x", "node-e", "node-a"}), 101.0, None, ()),
    ("named nodes changed: judged again", ASK, LEAVING, Changes({"node-c", "node-d", "node-x"}), 101.0, None,
     ("node-c", "node-d")),
    ("too old", ASK, LEAVING, Changes(), 100.0 + PREPARED_SECONDS + 1, "prepared 61 s before", ()),
    ("no record of changes", ASK, LEAVING, Changes(known=False), 101.0, "cannot say which nodes changed", ()),
    ("leaving for another reason", ASK, "node node-a is not Ready", Changes(), 101.0,
     "leaves its node for another reason now (node node-a is not Ready)", ()),
    ("another ask", ask_of(share_manager_pod("pvc-1", tolerations=[{"key": "dedicated", "operator": "Exists"}]),
                           LONGHORN_NS), LEAVING, Changes(), 101.0, "asks the nodes otherwise", ()),
    ("a pod that cannot be said", None, LEAVING, Changes(), 101.0, "asks the nodes otherwise", ()),
]


@pytest.mark.parametrize("name, ask, leaving, view, now, why, again", CHECKS, ids=[c[0] for c in CHECKS])
def test_a_prepared_answer_holds_only_while_what_it_rests_on_is_unchanged(name, ask, leaving, view, now, why, again):
    found = check(PREPARED, ask, leaving, view, now)
    assert (found.why is None) if why is None else (found.why is not None and why in found.why), found
    assert found.again == frozenset(again)


def test_the_pod_created_again_asks_as_the_evicted_one_did_once_our_answer_is_taken_off():
    """The evicted pod carries the pin we gave it; longhorn-manager's new one does not."""
    settings = Settings()
    fresh = share_manager_pod("pvc-1")
    ops = patch_for(fresh, DECISION, settings)
    evicted = jsonpatch.apply_patch(fresh, list(ops))
    evicted["spec"]["nodeName"] = "node-a"
    assert ask_of(evicted, LONGHORN_NS) != ask_of(fresh, LONGHORN_NS)
    assert ask_of(as_created(evicted, settings), LONGHORN_NS) == ask_of(fresh, LONGHORN_NS)
    assert ask_of(share_manager_pod("pvc-2"), LONGHORN_NS) != ask_of(fresh, LONGHORN_NS)  # its name


def test_what_a_pod_without_a_name_asks_cannot_be_said():
    pod = share_manager_pod("pvc-1")
    del pod["metadata"]["name"]
    assert ask_of(pod, LONGHORN_NS) is None


def test_the_answer_says_it_was_worked_out_before_the_pod():
    decision = as_answer(PREPARED, 102.5)
    assert decision.among == DECISION.among and decision.preferences == DECISION.preferences
    assert decision.reason == f"{DECISION.reason} (worked out 2.5 s before the pod was created, from the one it replaces)"


ROOM_ONLY = Changes({"node-c", "node-d", "node-x"}, beyond_room={"node-d"})


@pytest.mark.parametrize("moved, again, room", [
    (Demand.of(share_manager_pod("pvc-1"), LONGHORN_NS), {"node-d"}, {"node-c"}),
    (None, {"node-c", "node-d"}, set()),
], ids=["the VM judged by room alone there", "the VM's filters read more of the pods there"])
def test_a_named_node_where_only_pods_that_take_room_came_is_checked_for_room_alone(moved, again, room):
    """node-c saw only such pods come (a drain's other share-managers); node-d something more."""
    found = check(dataclasses.replace(PREPARED, moved=moved), ASK, LEAVING, ROOM_ONLY, 101.0)
    assert found.why is None and found.again == again and found.room == room
