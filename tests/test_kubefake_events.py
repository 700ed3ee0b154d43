"""kubefake playing virt-launcher's IOerror Event as KubeVirt v1.9.0 sends it, recorded through client-go's
recorder as virt-handler runs it, and the apiserver's field selectors on Events. Each test names the source
it holds the emulator to: KubeVirt v1.9.0 `pkg/virt-launcher/notify-client/client.go` (after
`GetDiskErrors`), `pkg/virt-handler/notify-server/server.go` (`HandleK8SEvent`), `cmd/virt-handler/virt-handler.go`
(the recorder's source); client-go v0.34.2 as KubeVirt vendors it, `tools/record/event.go` and
`tools/record/events_cache.go`; kube-apiserver `pkg/apis/core/v1/conversion.go`,
`pkg/registry/core/event/strategy.go` (`ToSelectableFields`) and `pkg/registry/core/event/storage/storage.go`."""
from __future__ import annotations

import asyncio
import datetime
import json
from typing import Any
from urllib.parse import quote

import pytest
from tests.support.kube import launcher_pod_of, nodes, vmi
from tests.support.kubevirt_api import Cluster
from tests.test_kubefake_kubevirt import T0, at, kmock_options, rfc3339  # noqa: F401  (kmock_options: KubeVirtApi)

from kubefake import recorder
from kubefake.io_error_retry import IoErrorRetry
from kubefake.virt_handler import NO_SPACE, io_error_pause, io_retry_resume, play_io_errors, record_io_errors, stored_vmi
from kubefake.virt_launcher import Domain

EVENTS = "/api/v1/events"
IOERRORS = "reason=IOerror,involvedObject.kind=VirtualMachineInstance"


@pytest.fixture
def cluster(kmock: Any) -> Cluster:
    """vm1 on node-a with its disk (volume disk0) and a second one (volume disk1); vm2 beside it."""
    cluster = Cluster(kmock)
    vms = [vmi("vm1", "node-a", "vm1-disk", "vm1-data"), vmi("vm2", "node-a", "vm2-disk")]
    cluster.seed(nodes("node-a", "node-b") + vms + [launcher_pod_of(v) for v in vms])
    return cluster


async def listed(cluster: Cluster, selector: str | None = None, path: str = EVENTS) -> tuple[int, Any]:
    query = f"?fieldSelector={quote(selector)}" if selector is not None else ""
    async with cluster.api() as session:
        async with session.get(path + query, raise_for_status=False) as response:
            return response.status, await response.json()


async def io_events(cluster: Cluster) -> list[dict[str, Any]]:
    _, found = await listed(cluster, IOERRORS)
    return sorted(found["items"], key=lambda e: e["message"])


async def pause_and_resume(kmock, name, moment, **options):
    await io_error_pause(kmock.apiserver, "default", name, moment, **options)
    await io_retry_resume(kmock.apiserver, "default", name, moment)


# --------------------------------------------------------------------------- what virt-launcher sends


async def test_an_io_error_pause_is_one_warning_event_per_disk_of_the_vmi_in_kubevirts_words(kmock, cluster):
    """client.go: one `SendK8sEvent(vmi, "Warning", "IOerror", ...)` per disk with an error, naming the VMI
    volume ("VM Paused due to IO error at the volume: %s", DOMAIN_DISK_ERROR_UNSPEC); server.go records it
    on the VMI with virt-handler's recorder (source virt-handler, host its node); event.go `makeEvent`,
    `generateEvent`: named `<vmi>.<hex unix nanoseconds>`, count 1, reportingComponent/Instance the source's."""
    await io_error_pause(kmock.apiserver, "default", "vm1", T0)
    disk0, disk1 = await io_events(cluster)
    assert disk0["message"] == "VM Paused due to IO error at the volume: disk0"
    assert disk1["message"] == "VM Paused due to IO error at the volume: disk1"  # every disk on a PVC, by default
    assert disk0["metadata"]["name"] == f"vm1.{int(T0.timestamp() * 10**9):x}"
    assert disk0["metadata"]["namespace"] == "default"
    assert {k: disk0["involvedObject"][k] for k in ("kind", "namespace", "name", "uid", "apiVersion")} == {
        "kind": "VirtualMachineInstance", "namespace": "default", "name": "vm1", "uid": "uid-vm1",
        "apiVersion": "kubevirt.io/v1"}
    assert (disk0["type"], disk0["reason"], disk0["source"]) == ("Warning", "IOerror",
                                                                 {"component": "virt-handler", "host": "node-a"})
    assert (disk0["reportingComponent"], disk0["reportingInstance"], disk0["eventTime"]) == ("virt-handler", "node-a",
                                                                                             None)
    assert (disk0["count"], disk0["firstTimestamp"], disk0["lastTimestamp"]) == (1, rfc3339(T0), rfc3339(T0))


async def test_a_full_disk_is_said_in_its_own_words_on_the_volume_a_test_names(kmock, cluster):
    """client.go: "VM Paused due to not enough space on volume: %s" for DOMAIN_DISK_ERROR_NO_SPACE."""
    await io_error_pause(kmock.apiserver, "default", "vm1", T0, volumes=["disk1"], cause=NO_SPACE)
    [event] = await io_events(cluster)
    assert event["message"] == "VM Paused due to not enough space on volume: disk1"


# --------------------------------------------------------------------------- how the recorder folds repeats


async def test_each_failed_retry_is_the_same_event_counted_again(kmock, cluster):
    """events_cache.go `eventObserve`: an Event identical to one sent (`getEventKey`: source, object, type,
    reason, message) keeps its name and firstTimestamp, count + 1; event.go `recordEvent` patches count and
    lastTimestamp. A different volume is an Event of its own. Played: a mount that fails at once."""
    pairs = IoErrorRetry().fast_failing(T0, 4)  # paused at 0, 0, 10, 30 s
    await play_io_errors(kmock.apiserver, "default", "vm1", pairs, at(31), volumes=["disk0"])
    await io_error_pause(kmock.apiserver, "default", "vm2", at(5))
    await io_retry_resume(kmock.apiserver, "default", "vm2", at(5))
    await io_error_pause(kmock.apiserver, "default", "vm2", at(40), volumes=["disk1"])
    found = {(e["involvedObject"]["name"], e["message"].rpartition(" ")[2]): e for e in await io_events(cluster)}
    vm1 = found["vm1", "disk0"]
    assert (vm1["count"], vm1["firstTimestamp"], vm1["lastTimestamp"]) == (4, rfc3339(T0), rfc3339(at(30)))
    assert vm1["metadata"]["name"] == f"vm1.{int(T0.timestamp() * 10**9):x}"
    # Another VMI, another volume: Events of their own.
    assert (found["vm2", "disk0"]["count"], found["vm2", "disk1"]["count"], len(found)) == (1, 1, 3)


async def test_a_pause_virt_handler_never_sees_still_sends_its_event(kmock, cluster):
    """A pause at the instant of a resume (`play_io_errors(seen=False)`) leaves the VMI's condition as it
    was, but virt-launcher's callback for it reads the domain paused on an I/O error (client.go,
    `eventCallback`: `domain.Status.Reason` PausedIOError) and sends the Event all the same."""
    pairs = IoErrorRetry().fast_failing(T0, 4)
    await play_io_errors(kmock.apiserver, "default", "vm1", pairs, at(31), seen=False, volumes=["disk0"])
    [event] = await io_events(cluster)
    assert (event["count"], event["lastTimestamp"]) == (4, rfc3339(at(30)))


async def test_an_event_deleted_is_created_again_with_the_count_the_recorder_kept(kmock, cluster):
    """event.go `recordEvent`: a patch of an Event the apiserver no longer has (deleted, or gone at its
    TTL) falls back to a create of the Event as it stands: the cache's name, firstTimestamp and count."""
    await pause_and_resume(kmock, "vm1", T0, volumes=["disk0"])
    await pause_and_resume(kmock, "vm1", at(60), volumes=["disk0"])
    [event] = await io_events(cluster)
    async with cluster.api() as session:
        await session.delete(f"/api/v1/namespaces/default/events/{event['metadata']['name']}")
    assert await io_events(cluster) == []
    await pause_and_resume(kmock, "vm1", at(120), volumes=["disk0"])
    [again] = await io_events(cluster)
    assert again["metadata"]["name"] == event["metadata"]["name"]
    assert (again["count"], again["firstTimestamp"], again["lastTimestamp"]) == (3, rfc3339(T0), rfc3339(at(120)))
    assert again["metadata"]["uid"] != event["metadata"]["uid"]


async def test_events_not_written_for_an_hour_are_gone(kmock, cluster):
    """storage.go: each write of an Event sets its TTL, kube-apiserver's --event-ttl (1 h by default)."""
    await pause_and_resume(kmock, "vm1", T0, volumes=["disk0"])
    await pause_and_resume(kmock, "vm2", at(1800))
    assert await recorder.expire(kmock.apiserver, at(3599)) == []
    [gone] = await recorder.expire(kmock.apiserver, at(3600))
    assert gone.startswith("vm1.")
    assert [e["involvedObject"]["name"] for e in await io_events(cluster)] == ["vm2"]


async def test_the_spam_filter_lets_25_events_through_then_one_each_5_minutes(kmock, cluster):
    """events_cache.go: `EventSourceObjectSpamFilter`, a token bucket per source and object (`getSpamKey`)
    of `defaultSpamBurst` 25 refilled at `defaultSpamQPS` 1/300 s; `EventCorrelate` counts in the cache
    before the filter drops, so the next Event let through carries the dropped ones in its count."""
    for second in range(30):
        await pause_and_resume(kmock, "vm1", at(second), volumes=["disk0"])
    [event] = await io_events(cluster)
    assert (event["count"], event["lastTimestamp"]) == (25, rfc3339(at(24)))
    await pause_and_resume(kmock, "vm1", at(200), volumes=["disk0"])  # not a whole token back yet
    assert (await io_events(cluster))[0]["count"] == 25
    await pause_and_resume(kmock, "vm1", at(330), volumes=["disk0"])  # one token back
    [event] = await io_events(cluster)
    assert (event["count"], event["lastTimestamp"]) == (32, rfc3339(at(330)))
    # Another disk of the same VMI draws on the same bucket (source and object); another VMI has its own.
    await pause_and_resume(kmock, "vm1", at(331), volumes=["disk1"])
    await pause_and_resume(kmock, "vm2", at(331))
    assert sorted(e["involvedObject"]["name"] for e in await io_events(cluster)) == ["vm1", "vm2"]


async def test_ten_distinct_messages_within_10_minutes_are_combined_into_one_event(kmock, cluster):
    """events_cache.go, `EventAggregate` (`defaultAggregateMaxEvents` 10, `defaultAggregateIntervalInSeconds`
    600, `EventAggregatorByReasonMessageFunc`): a VMI with twelve disks failing at once. The first nine are Events
    of their own; the tenth is a new "(combined from similar events)" Event, and the last two fold into it, its
    message the last one's: its count is no one disk's."""
    async with kmock.apiserver.lock:
        await record_io_errors(kmock.apiserver, stored_vmi(kmock.apiserver, "default", "vm1"), at(0),
                               volumes=[f"disk{i:02d}" for i in range(12)])
    found = await io_events(cluster)
    combined = [e for e in found if e["message"].startswith("(combined from similar events): ")]
    assert len(found) == 10 and len(combined) == 1
    assert combined[0]["message"] == "(combined from similar events): VM Paused due to IO error at the volume: disk11"
    assert combined[0]["count"] == 3
    async with kmock.apiserver.lock:  # 11 minutes later: counted afresh, its own Event again
        await record_io_errors(kmock.apiserver, stored_vmi(kmock.apiserver, "default", "vm1"), at(11 * 60),
                               volumes=["disk00"])
    assert len(await io_events(cluster)) == 10


async def test_a_paused_domain_tells_its_event_on_every_callback_with_no_pause(kmock, cluster):
    """client.go, `eventCallback`: an IOerror Event per disk with an error on each callback while paused; a VMI with
    access credentials calls back every 15 s. One pause, a retry due minutes later: the Event's count and
    lastTimestamp move every 15 s."""
    domain = Domain(kmock.apiserver, "default", "vm2").start(at(0))
    domain.retry = IoErrorRetry(initial_wait=datetime.timedelta(minutes=3))
    domain.backoff = domain.retry.fresh(at(-5))  # resumed 5 s before: this pause waits for the retry, minutes away
    await domain(at(61))
    [event] = await io_events(cluster)
    assert domain.pauses == [at(0)] and (event["count"], event["lastTimestamp"]) == (5, rfc3339(at(60)))


def test_the_bucket_refills_one_token_each_5_minutes_up_to_25():
    bucket = recorder.Recorder()
    key = ("virt-handler", "node-a", "VirtualMachineInstance", "default", "vm1", "uid-vm1", "kubevirt.io/v1")
    assert [bucket.accepts(key, T0) for _ in range(26)] == [True] * 25 + [False]
    assert bucket.accepts(key, at(299)) is False
    assert bucket.accepts(key, at(300)) is True
    assert [bucket.accepts(key, at(300 + 300 * 40)) for _ in range(26)] == [True] * 25 + [False]  # capped at 25


# --------------------------------------------------------------------------- field selectors


async def seed_events(kmock, cluster):
    """vm1's I/O error, vm2's full disk, and an Event of another reason and kind (the keeper's own kind)."""
    await io_error_pause(kmock.apiserver, "default", "vm1", T0, volumes=["disk0"])
    await io_error_pause(kmock.apiserver, "default", "vm2", T0, cause=NO_SPACE)
    await cluster.create("/api/v1/namespaces/default/events", {
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": "virt-launcher-vm1-x7k2p.1", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "namespace": "default", "name": "virt-launcher-vm1-x7k2p"},
        "reason": "Scheduled", "message": "placed", "type": "Normal", "source": {"component": "default-scheduler"}})


@pytest.mark.parametrize("selector, names", [
    (IOERRORS, ["vm1", "vm2"]),
    ("reason==IOerror,involvedObject.name=vm1", ["vm1"]),
    ("involvedObject.uid=uid-vm2", ["vm2"]),
    ("involvedObject.kind!=VirtualMachineInstance", ["virt-launcher-vm1-x7k2p"]),
    ("type=Warning,source=virt-handler", ["vm1", "vm2"]),
    ("reportingComponent=virt-handler,involvedObject.namespace=default", ["vm1", "vm2"]),
    ("type=Normal,source=default-scheduler", ["virt-launcher-vm1-x7k2p"]),
    ("metadata.namespace=default,metadata.name=virt-launcher-vm1-x7k2p.1", ["virt-launcher-vm1-x7k2p"]),
    ("reason=IOerror,reason!=IOerror", []),
    ("", ["virt-launcher-vm1-x7k2p", "vm1", "vm2"]),
])
async def test_events_are_listed_by_the_fields_the_apiserver_selects_on(kmock, cluster, selector, names):
    """conversion.go (the Event's field labels) and strategy.go `ToSelectableFields`: `=`, `==`, `!=`,
    terms ANDed by commas (apimachinery `fields.ParseSelector`); `source` is source.component."""
    await seed_events(kmock, cluster)
    status, found = await listed(cluster, selector)
    assert status == 200
    assert sorted(e["involvedObject"]["name"] for e in found["items"]) == names


async def test_a_field_events_cannot_be_selected_on_is_refused_with_400_for_lists_and_watches(kmock, cluster):
    """get.go `ListResource` (lists and watches): `ConvertFieldLabel` fails, `NewBadRequest(err.Error())`:
    "field label not supported: <field>"."""
    for path in (EVENTS, "/api/v1/namespaces/default/events", f"{EVENTS}?watch=true&"):
        base, _, extra = path.partition("?")
        async with cluster.api() as session:
            async with session.get(f"{base}?{extra}fieldSelector={quote('message=x,reason=IOerror')}",
                                   raise_for_status=False) as response:
                status, body = response.status, await response.json()
        assert status == 400, path
        assert (body["reason"], body["message"]) == ("BadRequest", "field label not supported: message")


async def test_a_watch_by_field_sees_only_the_events_it_selects(kmock, cluster):
    """The apiserver filters each watch event by the same selector (strategy.go `Matcher`)."""
    async with cluster.api() as session:
        async with session.get(f"{EVENTS}?watch=true&fieldSelector={quote('involvedObject.name=vm2')}") as response:
            await seed_events(kmock, cluster)
            await io_retry_resume(kmock.apiserver, "default", "vm1", at(10))
            await io_error_pause(kmock.apiserver, "default", "vm1", at(20), volumes=["disk0"])  # vm1's, counted again
            first = json.loads(await asyncio.wait_for(response.content.readline(), 2))
            assert (first["type"], first["object"]["involvedObject"]["name"]) == ("ADDED", "vm2")
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(response.content.readline(), 0.3)  # nothing of vm1 or of the pod
