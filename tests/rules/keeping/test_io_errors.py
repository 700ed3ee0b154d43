"""KubeVirt's IOerror Events read as which disk of a VM failed and why.

The Events are as virt-handler records them for virt-launcher (KubeVirt v1.9.0
`pkg/virt-launcher/notify-client/client.go` after `GetDiskErrors`; `pkg/virt-handler/notify-server/server.go`
`HandleK8SEvent`; recorder `EventSource{Component: "virt-handler", Host: ...}` in
`cmd/virt-handler/virt-handler.go`) and client-go's recorder writes them (`tools/record/event.go`
`makeEvent`, `generateEvent`: name `<object>.<hex unix nanoseconds>`, `reportingComponent` and
`reportingInstance` from the source; `events_cache.go` `eventObserve`: a repeat is the same Event,
`count` + 1, `lastTimestamp` the repeat's: virt-launcher tells it on every callback while the VM is paused, so
`count` is not read); ten distinct messages fold into "(combined from similar events): ..." (`EventAggregate`)."""
import copy
from datetime import UTC, datetime

import pytest

from webhook.rules.keeping.io_errors import FIELDS, Cause, IoError, by_vmi, read_io_error, words_of

UID = "6a1f2c3d-0000-4000-8000-000000000001"


def io_event(message="VM Paused due to IO error at the volume: rootdisk", *, count=1,
             first="2026-11-20T10:00:00Z", last="2026-11-20T10:00:00Z", uid=UID, name="vm1", host="node-a"):
    """A core/v1 Event as the apiserver serves one virt-handler recorded."""
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{name}.187a2b3c4d5e6f70", "namespace": "default", "uid": "e-1",
                     "resourceVersion": "4242", "creationTimestamp": first},
        "involvedObject": {"kind": "VirtualMachineInstance", "namespace": "default", "name": name, "uid": uid,
                           "apiVersion": "kubevirt.io/v1", "resourceVersion": "1200"},
        "reason": "IOerror", "message": message, "type": "Warning",
        "source": {"component": "virt-handler", "host": host},
        "firstTimestamp": first, "lastTimestamp": last, "count": count, "eventTime": None,
        "reportingComponent": "virt-handler", "reportingInstance": host,
    }


def at(hh_mm_ss):
    return datetime.fromisoformat(f"2026-11-20T{hh_mm_ss}+00:00")


def test_an_io_error_names_the_vmi_its_volume_and_the_cause():
    assert read_io_error(io_event()) == IoError(
        uid=UID, name="vm1", volume="rootdisk", cause=Cause.IO_ERROR, first=at("10:00:00"), last=at("10:00:00"))


@pytest.mark.parametrize("message, said", [
    ("VM Paused due to IO error at the volume: rootdisk", (Cause.IO_ERROR, "rootdisk")),
    ("VM Paused due to not enough space on volume: datadisk", (Cause.NO_SPACE, "datadisk")),
    # GetVolumeNameByTarget finds no disk for the target: the name is empty
    ("VM Paused due to IO error at the volume: ", (Cause.IO_ERROR, "")),
    # client-go's aggregator, past 10 messages of one reason in 10 minutes (EventAggregatorByReasonMessageFunc)
    ("(combined from similar events): VM Paused due to not enough space on volume: d9", (Cause.NO_SPACE, "d9")),
    ("VMI was paused, low-level IO error detected", None),
    ("vm paused due to io error at the volume: rootdisk", None),
    (None, None),
], ids=["io-error", "no-space", "no-volume", "combined", "condition-words", "other-case", "none"])
def test_kubevirts_two_wordings(message, said):
    assert words_of(message) == said
    assert (read_io_error(io_event(message)) is None) is (said is None)


def test_a_folded_repeat_is_read_from_its_first_time_to_its_last_its_count_not_read():
    error = read_io_error(io_event(count=7, first="2026-11-20T10:00:00Z", last="2026-11-20T10:05:10Z"))
    assert (error.first, error.last, error.combined) == (at("10:00:00"), at("10:05:10"), False)
    assert not hasattr(error, "count")


def test_a_combined_event_names_its_last_disk_and_says_it_is_combined():
    error = read_io_error(io_event("(combined from similar events): VM Paused due to IO error at the volume: disk9"))
    assert (error.volume, error.combined) == ("disk9", True)


def series_event():
    """The same words through events.k8s.io, read in core/v1: `eventTime` and `series`, no timestamps."""
    event = io_event()
    for key in ("firstTimestamp", "lastTimestamp", "count", "source"):
        event.pop(key)
    event.update(eventTime="2026-11-20T10:00:00.250000Z", reportingInstance="node-b",
                 series={"count": 4, "lastObservedTime": "2026-11-20T10:03:00.500000Z"})
    return event


def test_an_event_with_eventtime_and_series_is_read_from_them():
    error = read_io_error(series_event())
    assert error.first == datetime(2026, 11, 20, 10, 0, 0, 250000, tzinfo=UTC)
    assert error.last == datetime(2026, 11, 20, 10, 3, 0, 500000, tzinfo=UTC)
    single = series_event()
    single.pop("series")
    assert read_io_error(single).last == read_io_error(single).first


def changed(path, value):
    event = io_event()
    where = event
    for key in path[:-1]:
        where = where[key]
    if value is KeyError:
        where.pop(path[-1])
    else:
        where[path[-1]] = value
    return event


@pytest.mark.parametrize("event", [
    changed(("reason",), "Paused"),
    changed(("involvedObject", "kind"), "Pod"),
    changed(("involvedObject", "uid"), KeyError),
    changed(("involvedObject", "uid"), 7),
    changed(("involvedObject", "name"), ""),
    changed(("involvedObject",), "vm1"),
    changed(("firstTimestamp",), "yesterday"),
    changed(("lastTimestamp",), KeyError) | {"firstTimestamp": None},
    changed(("message",), ["VM Paused due to IO error at the volume: x"]),
    None, [], "IOerror",
], ids=["reason", "kind", "no-uid", "uid-not-text", "no-name", "involved-not-map", "bad-time", "no-time",
        "message-not-text", "none", "list", "text"])
def test_an_event_of_another_reason_kind_or_shape_is_none(event):
    assert read_io_error(event) is None


def test_odd_counts_and_sources_are_read_leniently():
    event = io_event(count=0)
    event["source"] = "virt-handler"
    assert read_io_error(event) is not None
    assert read_io_error(changed(("count",), True)) is not None
    assert read_io_error(changed(("lastTimestamp",), KeyError)).last == at("10:00:00")


def test_by_vmi_groups_the_errors_of_each_vmi_newest_first():
    other = "6a1f2c3d-0000-4000-8000-000000000002"
    events = [
        io_event(first="2026-11-20T10:00:00Z", last="2026-11-20T10:01:00Z"),
        io_event("VM Paused due to not enough space on volume: datadisk", first="2026-11-20T10:02:00Z",
                 last="2026-11-20T10:02:00Z"),
        io_event(uid=other, name="vm2"),
        changed(("reason",), "Migrated"),
        {"kind": "Status"},
    ]
    found = by_vmi(events)
    assert set(found) == {UID, other}
    assert [(e.volume, e.cause) for e in found[UID]] == [("datadisk", Cause.NO_SPACE), ("rootdisk", Cause.IO_ERROR)]
    assert [e.name for e in found[other]] == ["vm2"]
    assert by_vmi([]) == {}


def test_the_event_read_is_not_changed():
    event = series_event()
    before = copy.deepcopy(event)
    read_io_error(event)
    assert event == before


def test_the_watch_asks_the_apiserver_for_io_errors_of_vmis_alone():
    # Fields the apiserver selects Events on: pkg/registry/core/event/strategy.go, ToSelectableFields
    assert FIELDS == "reason=IOerror,involvedObject.kind=VirtualMachineInstance"
