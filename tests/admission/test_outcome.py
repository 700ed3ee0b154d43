"""The Event each decision leaves on the object an admin looks at."""
import pytest

from webhook.admission.outcome import decision_event
from webhook.rules.placement.decide import AMONG, NOT_PINNED, PINNED, Decision


@pytest.mark.parametrize("decision, reason, warning", [
    (Decision(PINNED, node="node-b", reason="pinned to node-b"), "CoLocated", False),
    (Decision(AMONG, among=("node-b", "node-c"), reason="pinned among node-b, node-c"), "PlacedForVM", False),
    (Decision(NOT_PINNED, reason="no consumers"), "NotCoLocated", True),
], ids=["pinned", "pinned-among", "not-pinned"])
def test_each_decision_says_what_happened(decision, reason, warning):
    assert decision_event(decision) == (reason, decision.reason, warning)
