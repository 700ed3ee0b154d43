"""The Event each decision leaves on the object an admin looks at."""
import asyncio

import pytest

from webhook.cluster.events import EventSink, decision_event
from webhook.metrics import REGISTRY
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


async def test_an_event_after_close_is_dropped_and_leaves_no_worker_behind():
    """On shutdown the sink is closed last: an Event emitted after that is counted as dropped,
    and no task is left running that nothing would stop."""
    sink = EventSink(api_client=None)
    await sink.close()
    dropped = REGISTRY.get_sample_value("colocate_events_total", {"result": "dropped"}) or 0.0

    sink.emit_about(SHARE_MANAGER, "MigratingToStorage", "after close")

    assert REGISTRY.get_sample_value("colocate_events_total", {"result": "dropped"}) == dropped + 1
    assert [t for t in asyncio.all_tasks() if t.get_name() == "events"] == []
