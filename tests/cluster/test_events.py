"""The Event each decision leaves on the object an admin looks at."""
import pytest

from webhook.cluster.events import decision_event
from webhook.rules.placement.decide import AMONG, NOT_PINNED, PINNED, Decision

SHARE_MANAGER = {"apiVersion": "longhorn.io/v1beta2", "kind": "ShareManager", "name": "pvc-d1",
                 "namespace": "longhorn-system", "uid": "u1"}


@pytest.mark.parametrize("decision, reason, kind", [
    (Decision(PINNED, node="node-b", reason="pinned to node-b"), "CoLocated", "Normal"),
    (Decision(AMONG, among=("node-b", "node-c"), reason="pinned among node-b, node-c"), "PlacedForVM", "Normal"),
    (Decision(NOT_PINNED, reason="no consumers"), "NotCoLocated", "Warning"),
], ids=["pinned", "pinned-among", "not-pinned"])
def test_each_decision_says_what_happened(decision, reason, kind):
    event = decision_event(SHARE_MANAGER, decision, "replica-1")
    assert (event["reason"], event["type"], event["message"]) == (reason, kind, decision.reason)
