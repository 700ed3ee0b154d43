"""Events, sent in the background: dropped after close, never a worker left behind."""
import asyncio

from webhook.cluster.events import EventSink
from webhook.metrics import REGISTRY

SHARE_MANAGER = {"apiVersion": "longhorn.io/v1beta2", "kind": "ShareManager", "name": "pvc-d1",
                 "namespace": "longhorn-system", "uid": "u1"}


async def test_an_event_after_close_is_dropped_and_leaves_no_worker_behind():
    """On shutdown the sink is closed last: an Event emitted after that is counted as dropped,
    and no task is left running that nothing would stop."""
    sink = EventSink(api_client=None)
    await sink.close()
    dropped = REGISTRY.get_sample_value("colocate_events_total", {"result": "dropped"}) or 0.0

    sink.emit_about(SHARE_MANAGER, "MigratingToStorage", "after close")

    assert REGISTRY.get_sample_value("colocate_events_total", {"result": "dropped"}) == dropped + 1
    assert [t for t in asyncio.all_tasks() if t.get_name() == "events"] == []
