"""The keeper's watch of KubeVirt's IOerror Events, against kubefake playing virt-launcher's Event as
KubeVirt v1.9.0 sends it (`pkg/virt-launcher/notify-client/client.go`, recorded by virt-handler through
client-go's recorder: repeats folded into `count` and `lastTimestamp`, `tools/record/events_cache.go`):
which disk of a VM failed and why, per VMI; and a watch that cannot read Events says so, and turns off only
what needs them: the Events are a source, not a gate."""
from __future__ import annotations

import asyncio
import datetime

import kmock as kmocklib
import pytest
from tests.support.kubevirt_api import TIMING, apart_vm, eventually, three_nodes
from tests.support.stores import api_host, for_host

from kubefake.io_error_retry import IoErrorRetry
from kubefake.virt_handler import NO_SPACE, io_error_pause, io_retry_resume, play_io_errors
from webhook.cluster import client
from webhook.cluster.reflector import Timing
from webhook.config import Settings
from webhook.keeper.keeper import KeeperTiming
from webhook.keeper.kubevirt_api import KubeVirtWatch, read_io_errors
from webhook.rules.keeping.io_errors import Cause

T0 = datetime.datetime.now(datetime.UTC).replace(microsecond=0) - datetime.timedelta(minutes=10)
SHORT = Timing(watch_seconds=(0.2, 0.3), backoff_initial=0.02, backoff_cap=0.2, short_watch=0.1)


def seconds(n):
    return T0 + datetime.timedelta(seconds=n)


def refused(status, reason):
    def answer():
        raise kmocklib.KubernetesError(status=status, reason=reason, message=f"events is {reason.lower()}")
    return answer


async def test_the_watch_shows_each_disks_io_errors_folded_newest_first(cluster, make_keeper, kmock):
    cluster.seed(three_nodes() + apart_vm("vm1") + apart_vm("vm2"))
    keeper = await make_keeper(Settings(keep="report"))
    # A mount that fails at once: paused at 0, 0, 10, 30 and 70 s, each pause KubeVirt's Event again.
    await play_io_errors(kmock.apiserver, "default", "vm1", IoErrorRetry().fast_failing(T0, 5), seconds(71))
    await io_error_pause(kmock.apiserver, "default", "vm2", seconds(100), cause=NO_SPACE)

    [vm1] = await eventually(lambda: [e for e in keeper.watch.io_errors("uid-vm1") if e.last == seconds(70)])
    assert (vm1.name, vm1.volume, vm1.cause) == ("vm1", "disk0", Cause.IO_ERROR)
    assert (vm1.first, vm1.last) == (T0, seconds(70))
    [vm2] = await eventually(lambda: keeper.watch.io_errors("uid-vm2"))
    assert (vm2.cause, vm2.first, vm2.last) == (Cause.NO_SPACE, seconds(100), seconds(100))

    await io_retry_resume(kmock.apiserver, "default", "vm2", seconds(100))
    await io_error_pause(kmock.apiserver, "default", "vm2", seconds(130), volumes=["disk0"])  # its own disk, an I/O error
    await eventually(lambda: len(keeper.watch.io_errors("uid-vm2")) == 2)
    assert [e.cause for e in keeper.watch.io_errors("uid-vm2")] == [Cause.IO_ERROR, Cause.NO_SPACE]  # newest first
    assert keeper.watch.io_errors("uid-none") == ()
    assert not keeper.degraded()


async def test_a_keeper_whose_events_watch_fails_says_so(cluster, make_keeper, kmock):
    cluster.seed(three_nodes() + apart_vm("vm1"))
    keeper = await make_keeper(Settings(keep="report"), timing=KeeperTiming(period=TIMING.period, request_timeout=2.0,
                                                                             watch=SHORT))
    await io_error_pause(kmock.apiserver, "default", "vm1", T0)
    await eventually(lambda: keeper.watch.io_errors("uid-vm1"))
    kmock["/api/v1/events"] << refused(403, "Forbidden")  # RBAC lost after start
    notes = await eventually(lambda: [n for n in keeper.degraded() if n.startswith("KubeVirt's IOerror Events: ")],
                             timeout=5)
    assert "403" in notes[0] and notes[0].endswith("stale-mount recovery goes by those last seen")
    assert keeper.watch.io_errors("uid-vm1")  # what it held, kept while it says it is degraded
    assert keeper.watch.degraded() == []  # every VM and migration still seen: its passes act


async def test_a_watch_that_cannot_list_events_syncs_without_them_and_says_what_is_off(cluster, kmock):
    cluster.seed(three_nodes() + apart_vm("vm1"))
    kmock["/api/v1/events"] << refused(500, "InternalError")
    api = for_host(api_host(kmock))
    watch = KubeVirtWatch(api, Settings(), SHORT)
    watch.start()
    try:
        await asyncio.wait_for(watch.wait_synced(), 2)
        assert watch.synced() and watch.degraded() == []
        [note] = await eventually(lambda: watch.events_note() if "500" in "".join(watch.events_note()) else None)
        assert note.startswith("stale-mount recovery is off: KubeVirt's IOerror Events cannot be listed (")
    finally:
        await watch.close()
        await api.close()


async def test_a_keeper_without_the_right_to_list_events_still_moves_a_drifted_vm(cluster, make_keeper, kmock):
    """Its Role lacks `list` on Events: the keeper still syncs, moves vm1 back to its storage and says, in its
    readiness notes, that stale-mount recovery is off and why."""
    cluster.seed(three_nodes() + apart_vm("vm1"))
    kmock["/api/v1/events"] << refused(403, "Forbidden")
    keeper = await make_keeper(timing=KeeperTiming(period=TIMING.period, request_timeout=2.0, watch=SHORT))
    report = await keeper.run_pass()
    assert len(report.created) == 1 and cluster.migrations()
    [note] = await eventually(lambda: [n for n in keeper.degraded() if "403" in n])
    assert note.startswith("stale-mount recovery is off: KubeVirt's IOerror Events cannot be listed (")


async def test_status_reads_the_io_errors_once_or_says_why_it_cannot(cluster, kmock):
    cluster.seed(three_nodes() + apart_vm("vm1"))
    await io_error_pause(kmock.apiserver, "default", "vm1", T0)
    await io_retry_resume(kmock.apiserver, "default", "vm1", T0)
    await io_error_pause(kmock.apiserver, "default", "vm1", seconds(40))
    await cluster.create("/api/v1/namespaces/default/events", {
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": "vm1.keeper", "namespace": "default"},
        "involvedObject": {"kind": "VirtualMachineInstance", "namespace": "default", "name": "vm1", "uid": "uid-vm1"},
        "reason": "Unpaused", "message": "unpaused", "type": "Normal"})
    api = for_host(api_host(kmock))
    try:
        found = await read_io_errors(api, timeout=2.0)
        assert list(found) == ["uid-vm1"]
        [error] = found["uid-vm1"]
        assert (error.volume, error.first, error.last) == ("disk0", T0, seconds(40))
        kmock["/api/v1/events"] << refused(403, "Forbidden")
        why = await read_io_errors(api, timeout=2.0)
        assert isinstance(why, str) and why.startswith("Events: API answered 403")
    finally:
        await api.close()


async def test_status_reads_every_page(cluster, kmock):
    """A list cut in pages (`limit`, `continue`): each page read."""
    cluster.seed(three_nodes() + apart_vm("vm1") + apart_vm("vm2"))
    await io_error_pause(kmock.apiserver, "default", "vm1", T0)
    await io_error_pause(kmock.apiserver, "default", "vm2", T0)
    pages = iter([{"metadata": {"continue": "next"}, "items": [e]} for e in cluster.events()[:1]] +
                 [{"metadata": {}, "items": cluster.events()[1:]}])
    kmock["/api/v1/events"] << (lambda: next(pages))
    api = for_host(api_host(kmock))
    try:
        assert sorted(await read_io_errors(api, timeout=2.0)) == ["uid-vm1", "uid-vm2"]
    finally:
        await api.close()
    assert [r.params.get("continue") for r in kmock if r.url.path == "/api/v1/events"] == [None, "next"]


async def test_status_says_when_it_could_not_read_kubevirts_io_errors(cluster, kmock):
    """No VM is shown on a stale mount on what was not read: `status` says why, in its header."""
    from .test_failures import status_now
    cluster.seed(three_nodes() + apart_vm("vm1"))
    kmock["/api/v1/events"] << refused(403, "Forbidden")
    said = await status_now(kmock)
    assert said.cluster.io_errors.startswith("KubeVirt's IOerror Events could not be read (Events: API answered 403")
    assert any(line.startswith("warning: KubeVirt's IOerror Events could not be read") for line in said.cluster.lines())
    assert said.cluster.to_json()["io_errors_unread"] == said.cluster.io_errors
