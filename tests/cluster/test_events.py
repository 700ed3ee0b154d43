"""Events, sent in the background: dropped after close, never a worker left behind, never a POST
while reviews are in flight (for the hold at most)."""
import asyncio
import time

import pytest

from webhook.cluster import client
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


@pytest.fixture
def posted(monkeypatch):
    """The Events the sink POSTs, (when, reason), the API answering 201 at once."""
    found = []

    async def request(api, method, path, *, body=None, timeout=None, **_):
        found.append((time.monotonic(), body["reason"]))
        return 201, b"{}"

    monkeypatch.setattr(client, "request", request)
    return found


async def test_an_event_waits_for_the_reviews_in_flight_and_goes_once_they_are_answered(posted):
    """A POST is CPU the reviews in flight would wait for: the Event goes after their answers."""
    sink, in_flight = EventSink(api_client=None, hold=5.0), [1]
    sink.yield_to(lambda: bool(in_flight))
    sink.emit_about(SHARE_MANAGER, "CoLocated", "pinned among node-a, node-b")
    await asyncio.sleep(0.2)
    assert posted == []  # a review is in flight: held
    answered = time.monotonic()
    in_flight.clear()
    await sink.close(grace=1.0)  # what is queued is sent first
    assert [reason for _, reason in posted] == ["CoLocated"] and posted[0][0] - answered < 0.5


async def test_events_held_as_long_as_the_hold_go_out_though_reviews_keep_coming(posted):
    """A sustained load, or a client holding a connection open, delays the Events by the hold at
    most: then they all go, one after another, not one per hold."""
    sink = EventSink(api_client=None, hold=0.2)
    sink.yield_to(lambda: True)
    began = time.monotonic()
    for i in range(5):
        sink.emit_about(SHARE_MANAGER, f"Reason{i}", "message")
    await sink.close(grace=2.0)
    assert [reason for _, reason in posted] == [f"Reason{i}" for i in range(5)]
    assert 0.2 <= posted[0][0] - began and posted[-1][0] - began < 0.2 + 0.5


async def test_with_nothing_in_flight_an_event_goes_at_once(posted):
    sink = EventSink(api_client=None)  # the keeper's, which answers no reviews
    began = time.monotonic()
    sink.emit_about(SHARE_MANAGER, "CoLocated", "pinned")
    await sink.close(grace=1.0)
    assert len(posted) == 1 and posted[0][0] - began < 0.1


async def test_an_event_waits_for_a_pause_between_a_bursts_arrivals(posted):
    """A burst's reviews arrive over tens of milliseconds: an Event emitted for the first one answered
    waits through a gap of 50 ms before the next arrives, and goes once none has come for QUIET seconds."""
    from webhook.cluster.events import QUIET
    from webhook.process.listening import Arrivals

    arrivals, sink = Arrivals(), EventSink(api_client=None, hold=5.0)
    sink.yield_to(lambda: arrivals.busy_within(QUIET))
    first, second = object(), object()
    arrivals.connected(first, time.monotonic())
    arrivals.answered(first)
    sink.emit_about(SHARE_MANAGER, "CoLocated", "pinned among node-a, node-b")
    await asyncio.sleep(0.05)
    assert posted == []  # nothing in flight, but the burst has not paused yet
    arrivals.connected(second, time.monotonic())
    await asyncio.sleep(0.2)
    assert posted == []
    arrivals.answered(second)
    answered = time.monotonic()
    await sink.close(grace=1.0)
    assert QUIET <= posted[0][0] - answered < QUIET + 0.2
