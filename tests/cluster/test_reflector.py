"""The reflector against recorded API answers: lists, watches, relists and backoff, no emulator."""
import asyncio
import contextlib
import time

import orjson
import pytest

from webhook.cluster.reflector import Event, EventType, Reflector, Timing, split_lines

FAST = Timing(backoff_initial=0.001, backoff_cap=0.004, page_size=2, watch_seconds=(300.0, 300.0))


def pvc(name, version):
    return {"metadata": {"name": name, "namespace": "default", "resourceVersion": str(version)}}


def page(items, version, token=None):
    metadata = {"resourceVersion": str(version)}
    if token:
        metadata["continue"] = token
    return 200, orjson.dumps({"kind": "PersistentVolumeClaimList", "items": items, "metadata": metadata})


def watch_lines(*events):
    return b"".join(orjson.dumps(e) + b"\n" for e in events)


class Recorded:
    """A Transport that plays back recorded answers in order and remembers what was asked."""

    def __init__(self, lists=(), watches=()):
        self.lists = list(lists)  # (status, body)
        self.watches = list(watches)  # (status, [chunks])
        self.asked: list[tuple[str, dict[str, str]]] = []

    async def get(self, query, timeout):
        self.asked.append(("list", dict(query)))
        if not self.lists:
            await asyncio.sleep(3600)
        return self.lists.pop(0)

    @contextlib.asynccontextmanager
    async def stream(self, query):
        self.asked.append(("watch", dict(query)))
        if not self.watches:
            await asyncio.sleep(3600)  # a watch that stays open with nothing to say
        status, chunks = self.watches.pop(0)

        async def body():
            for chunk in chunks:
                yield chunk

        yield status, body()


async def take(reflector, count):
    """The first `count` events, then the reflector is closed."""
    got = []
    stream = reflector.events()
    try:
        async with asyncio.timeout(5):
            async for event in stream:
                got.append(event)
                if len(got) == count:
                    break
    finally:
        await stream.aclose()
    return got


def kinds_of(events):
    return [e.type.value for e in events]


# --------------------------------------------------------------------------- lines


@pytest.mark.parametrize("chunks, lines, left", [
    ([b'{"a":1}\n{"b":2}\n'], [b'{"a":1}', b'{"b":2}'], b""),
    ([b'{"a":', b'1}\n{"b"', b':2}\n'], [b'{"a":1}', b'{"b":2}'], b""),
    ([b'{"a":1}\n\n{"b":'], [b'{"a":1}'], b'{"b":'),
    ([b"", b"\n"], [], b""),
], ids=["whole-lines", "lines-split-across-chunks", "blank-line-and-a-partial-one", "nothing"])
def test_lines_are_cut_where_they_end_not_where_chunks_end(chunks, lines, left):
    pending = bytearray()
    assert [line for chunk in chunks for line in split_lines(chunk, pending)] == lines
    assert bytes(pending) == left


# --------------------------------------------------------------------------- list


async def test_a_paginated_list_yields_every_object_then_synced_and_keeps_its_version():
    transport = Recorded(lists=[page([pvc("a", 1), pvc("b", 2)], 10, token="next"), page([pvc("c", 3)], 11)])
    reflector = Reflector(transport, "pvcs", fields="status.phase!=Failed", timing=FAST)
    events = [e async for e in reflector.list()]
    assert kinds_of(events) == ["LISTED", "LISTED", "LISTED", "SYNCED"]
    assert [e.object["metadata"]["name"] for e in events[:3]] == ["a", "b", "c"]
    assert reflector.resource_version == "11" and reflector.resumable
    first, second = (query for _, query in transport.asked)
    assert first == {"limit": "2", "fieldSelector": "status.phase!=Failed"}
    assert second == {"limit": "2", "fieldSelector": "status.phase!=Failed", "continue": "next"}


async def test_a_list_without_a_version_cannot_be_resumed():
    transport = Recorded(lists=[(200, orjson.dumps({"items": [pvc("a", 1)], "metadata": {}}))])
    reflector = Reflector(transport, "pvcs", timing=FAST)
    [e async for e in reflector.list()]
    assert reflector.resource_version is None and not reflector.resumable


# --------------------------------------------------------------------------- watch


async def test_the_watch_starts_from_the_list_and_bookmarks_move_the_version_on():
    stream = watch_lines(
        {"type": "ADDED", "object": pvc("d", 12)},
        {"type": "MODIFIED", "object": pvc("a", 13)},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "20"}}},
        {"type": "DELETED", "object": pvc("b", 21)},
    )
    transport = Recorded(lists=[page([pvc("a", 1)], 10)], watches=[(200, [stream[:30], stream[30:]])])
    reflector = Reflector(transport, "pvcs", timing=FAST)
    events = await take(reflector, 6)
    assert kinds_of(events) == ["LISTED", "SYNCED", "ADDED", "MODIFIED", "BOOKMARK", "DELETED"]
    assert reflector.resource_version == "21"
    kind, query = transport.asked[1]
    assert kind == "watch"
    assert query["resourceVersion"] == "10" and query["allowWatchBookmarks"] == "true" and query["watch"] == "true"


async def test_a_closed_watch_resumes_from_the_last_version_without_listing_again():
    first = watch_lines({"type": "ADDED", "object": pvc("d", 12)})
    second = watch_lines({"type": "MODIFIED", "object": pvc("d", 14)})
    transport = Recorded(lists=[page([], 10)], watches=[(200, [first]), (200, [second])])
    events = await take(Reflector(transport, "pvcs", timing=FAST), 3)
    assert kinds_of(events) == ["SYNCED", "ADDED", "MODIFIED"]
    assert [kind for kind, _ in transport.asked] == ["list", "watch", "watch"]
    assert transport.asked[2][1]["resourceVersion"] == "12"


@pytest.mark.parametrize("gone", [
    (200, [watch_lines({"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}})]),
    (410, []),
], ids=["error-event-410", "status-410"])
async def test_410_gone_lists_again_at_once(gone):
    transport = Recorded(lists=[page([pvc("a", 1)], 10), page([pvc("b", 2)], 30)], watches=[gone])
    reflector = Reflector(transport, "pvcs", timing=FAST)
    events = await take(reflector, 5)
    assert kinds_of(events) == ["LISTED", "SYNCED", "RELISTING", "LISTED", "SYNCED"]
    assert events[2].retry_in == 0.0  # the first relist does not wait
    assert events[3].object["metadata"]["name"] == "b" and reflector.resource_version == "30"


async def test_a_failed_watch_backs_off_and_resumes_without_a_list():
    ok = watch_lines({"type": "ADDED", "object": pvc("d", 12)})
    transport = Recorded(lists=[page([], 10)], watches=[(500, []), (200, [ok])])
    events = await take(Reflector(transport, "pvcs", timing=FAST), 3)
    assert kinds_of(events) == ["SYNCED", "FAILED", "ADDED"]
    assert "500" in events[1].error and 0 < events[1].retry_in <= FAST.backoff_initial
    assert [kind for kind, _ in transport.asked] == ["list", "watch", "watch"]
    assert transport.asked[2][1]["resourceVersion"] == "10"


async def test_an_event_without_a_version_means_the_next_watch_starts_with_a_list():
    stream = watch_lines({"type": "ADDED", "object": {"metadata": {"name": "d", "namespace": "default"}}})
    transport = Recorded(lists=[page([], 10), page([], 40)], watches=[(200, [stream])])
    events = await take(Reflector(transport, "pvcs", timing=FAST), 3)
    assert kinds_of(events) == ["SYNCED", "ADDED", "SYNCED"]
    assert [kind for kind, _ in transport.asked] == ["list", "watch", "list"]


async def test_a_watch_that_ends_at_once_with_nothing_is_a_failure():
    transport = Recorded(lists=[page([], 10)], watches=[(200, [])])
    events = await take(Reflector(transport, "pvcs", timing=FAST), 2)
    assert kinds_of(events) == ["SYNCED", "FAILED"]
    assert "ended at once" in events[1].error


@pytest.mark.parametrize("line, message", [
    (watch_lines({"type": "SURPRISE", "object": {}}), "unexpected event"),
    (watch_lines({"type": "ERROR", "object": {"code": 500, "message": "etcd"}}), "error event 500"),
    (b"not json\n", "JSONDecodeError"),
], ids=["unknown-type", "error-event", "garbage"])
async def test_a_broken_stream_is_a_failure_not_a_crash(line, message):
    transport = Recorded(lists=[page([], 10)], watches=[(200, [line])])
    events = await take(Reflector(transport, "pvcs", timing=FAST), 2)
    assert events[1].type is EventType.FAILED and message in events[1].error


async def test_failures_back_off_exponentially_and_a_good_watch_resets_the_backoff():
    ok = watch_lines({"type": "ADDED", "object": pvc("d", 12)})
    transport = Recorded(lists=[page([], 10)], watches=[(500, []), (500, []), (500, []), (200, [ok]), (500, [])])
    timing = Timing(backoff_initial=0.001, backoff_cap=1.0)
    events = await take(Reflector(transport, "pvcs", timing=timing), 6)
    assert kinds_of(events) == ["SYNCED", "FAILED", "FAILED", "FAILED", "ADDED", "FAILED"]
    waits = [e.retry_in for e in events if e.type is EventType.FAILED]
    for n, wait in enumerate(waits[:3]):
        assert 0.001 * 2 ** n / 2 <= wait <= 0.001 * 2 ** n
    assert waits[3] <= 0.001  # after a healthy watch the backoff starts over


async def test_a_list_that_fails_is_retried_after_a_backoff():
    transport = Recorded(lists=[(403, b'{"kind":"Status","code":403}'), page([pvc("a", 1)], 10)])
    events = await take(Reflector(transport, "pvcs", timing=FAST), 3)
    assert kinds_of(events) == ["FAILED", "LISTED", "SYNCED"]
    assert "403" in events[0].error


async def kept_while_the_loop_turns(events, count):
    """Each event kept as a consumer keeps it (20 µs of work), and the loop's turns counted meanwhile:
    (events kept at each turn)."""
    kept, turns = [0], []

    async def loop_turns():
        while kept[0] < count:
            turns.append(kept[0])
            await asyncio.sleep(0)

    async def keep():
        async for _ in events:
            until = time.perf_counter() + 0.00002
            while time.perf_counter() < until:
                pass
            kept[0] += 1
            if kept[0] == count:
                return

    await asyncio.gather(keep(), loop_turns())
    return turns


async def test_a_long_page_gives_the_event_loop_back_while_it_is_kept():
    """A relist's page (hundreds of objects, tens of milliseconds to keep) is kept in slices: a review
    arriving meanwhile is answered between them, not after the whole page."""
    items = [pvc(f"c{i}", i) for i in range(5000)]
    reflector = Reflector(Recorded(lists=[page(items, 5000)]), "pvcs", timing=Timing(page_size=5000))
    turns = await kept_while_the_loop_turns(reflector.list(), 5000)
    assert sum(0 < kept < 5000 for kept in turns) >= 10  # 100 ms of keeping, the loop given back every 2 ms


async def test_a_backlog_of_watch_events_gives_the_event_loop_back_while_it_is_kept():
    events = [{"type": "ADDED", "object": pvc(f"c{i}", i)} for i in range(5000)]
    reflector = Reflector(Recorded(watches=[(200, [watch_lines(*events)])]), "pvcs", timing=FAST)
    turns = await kept_while_the_loop_turns(reflector.watch(), 5000)
    assert sum(0 < kept < 5000 for kept in turns) >= 10


def test_events_are_plain_values():
    assert Event(EventType.SYNCED, seconds=0.5) == Event(EventType.SYNCED, seconds=0.5)


async def test_a_bookmark_without_a_version_does_not_force_a_list():
    stream = watch_lines({"type": "ADDED", "object": pvc("d", 12)}, {"type": "BOOKMARK", "object": {"metadata": {}}})
    again = watch_lines({"type": "MODIFIED", "object": pvc("d", 13)})
    transport = Recorded(lists=[page([], 10)], watches=[(200, [stream]), (200, [again])])
    events = await take(Reflector(transport, "pvcs", timing=FAST), 4)
    assert kinds_of(events) == ["SYNCED", "ADDED", "BOOKMARK", "MODIFIED"]
    assert [kind for kind, _ in transport.asked] == ["list", "watch", "watch"]
    assert transport.asked[2][1]["resourceVersion"] == "12"
