"""The keeper's proof of a stale mount holds against KubeVirt as it really talks (tests/keeper/test_recovery_kubevirt.py
sets the scene). virt-launcher tells its `IOerror` Event for each disk with an error on every domain callback while
the VM stays paused (`pkg/virt-launcher/notify-client/client.go`, `eventCallback`; a VMI with access credentials
calls back every 15 s, `access_credentials.go`), so the Event's `count` and `lastTimestamp` move with no pause and
no retry at all; QEMU forgets a disk's error on each resume (`qmp_cont`), so after a resume the Event names the disk
that failed again; virt-handler retries a pause within 30 s of its last resume after 10 s doubling to 3 min, and a
later one at once (`pkg/virt-handler/vm.go`, `retry_manager.go`); the apiserver forgets an Event an hour after its
last write (`--event-ttl`). kubefake.virt_launcher plays all of it."""
from __future__ import annotations

import datetime

import pytest

from kubefake import recorder
from kubefake.io_error_retry import IoErrorRetry
from kubefake.virt_handler import io_error_pause, io_retry_resume, NO_SPACE
from kubefake.virt_launcher import Domain

from .test_kubevirts_words import two_disks
from .test_recovery import paused, unpauses
from .test_recovery_kubevirt import evacuated, FailingMount, passes, seconds, seen, stale_cluster
from .test_stale_evidence import quarter_hour


def recoveries(cluster):
    return [m for m in cluster.migrations()
            if (m["metadata"].get("annotations") or {}).get("kubevirt-scheduler/recovers") == "stale-mount"]


@pytest.mark.parametrize("storage", ["node-a", "node-b"], ids=["beside", "apart"])
async def test_a_vm_whose_client_recovers_while_its_event_repeats_every_15_s_is_never_migrated_and_runs_again(
        kmock, cluster, make_keeper, storage):
    """Its share-manager was away 60 s; the VM paused at +7 s and KubeVirt's retries at +17, +37 and +77 s failed;
    its NFS client reached the new server at +80 s, 20 s after it served, and KubeVirt's next retry is due at
    +157 s. Meanwhile virt-launcher tells the Event again every 15 s. The VM runs again (by the keeper's one
    resume or KubeVirt's retry) and is never migrated to recover it."""
    keeper, clock, t0 = await stale_cluster(kmock, cluster, make_keeper, storage=storage, serves=seconds(60))
    play = FailingMount(keeper, kmock, IoErrorRetry().fast_failing(t0 + seconds(7), 40), seen=False,
                        works_at=t0 + seconds(80))
    await quarter_hour(keeper, clock, kmock, play)
    assert recoveries(cluster) == [] and paused(kmock) is None
    assert len(play.domain.pauses) >= 4  # it did pause and fail KubeVirt's retries while the server was away
    assert len(unpauses(kmock)) <= 1


async def test_two_pauses_five_minutes_apart_each_lifted_days_after_a_restart_move_nothing(kmock, cluster,
                                                                                            make_keeper):
    """Two days after its share-manager restarted beside it (Longhorn never clears `remountRequestedAt`), vm1
    pauses on an I/O error and KubeVirt resumes it at once; five minutes later again, resumed at once again: each
    pause lifted for good, no retry failed."""
    keeper, clock, t0 = await stale_cluster(kmock, cluster, make_keeper, storage="node-a")
    await FailingMount(keeper, kmock, IoErrorRetry().fast_failing(t0 + seconds(5), 3), seen=False)(t0 + seconds(40))
    clock.now = t0 + datetime.timedelta(days=2)
    for _ in range(2):
        await io_error_pause(kmock.apiserver, "default", "vm1", clock.now)
        await io_retry_resume(kmock.apiserver, "default", "vm1", clock.now)  # a new failure: resumed at once
        await seen(keeper, kmock)
        end = clock.now + datetime.timedelta(minutes=5)
        await passes(keeper, clock, kmock, FailingMount(keeper, kmock, []), lambda report: clock.now >= end or None)
    await quarter_hour(keeper, clock, kmock, FailingMount(keeper, kmock, []))
    assert cluster.migrations() == [] and unpauses(kmock) == [] and paused(kmock) is None


async def test_another_disks_lasting_failure_is_not_blamed_on_the_restarted_disk(kmock, cluster, make_keeper):
    """vm1's disk0 paused it while its share-manager was away (its client reached the new one at +50 s), its
    Event told again every 15 s; then its other disk, disk1, whose share-manager never restarted, fails for good
    from +76 s, its Events naming disk1 alone. Nothing moves the VM: no migration mounts disk1 afresh."""
    keeper, clock, t0 = await stale_cluster(kmock, cluster, make_keeper, storage="node-a", objects=two_disks())
    disk0 = FailingMount(keeper, kmock, IoErrorRetry().fast_failing(t0 + seconds(5), 40), seen=False,
                         works_at=t0 + seconds(50), volumes=["disk0"])
    disk1 = Domain(kmock.apiserver, "default", "vm1", volumes=["disk1"], seen=False).start(t0 + seconds(76))

    async def play(until):
        await disk0(until)
        await disk1(until)
        await seen(keeper, kmock)
    await quarter_hour(keeper, clock, kmock, play)
    assert cluster.migrations() == [] and paused(kmock) == "PausedIOError" and len(disk1.pauses) > 3
    assert len(unpauses(kmock)) <= 1


async def test_a_full_disk_vm_is_never_unpaused_also_after_its_event_expired(kmock, cluster, make_keeper):
    """vm1's guest filled its disk (KubeVirt: "not enough space"); a drain's evacuation then carried it, paused,
    onto a fresh mount, where KubeVirt keeps it paused and tells no more. An hour later the apiserver has
    forgotten the Event: the keeper still never unpauses it."""
    keeper, clock, t0 = await stale_cluster(kmock, cluster, make_keeper, storage="node-a")
    play = FailingMount(keeper, kmock, IoErrorRetry().fast_failing(t0 + seconds(60), 40), seen=False, cause=NO_SPACE)
    end = t0 + datetime.timedelta(minutes=3)
    await passes(keeper, clock, kmock, play, lambda report: clock.now >= end or None)
    await evacuated(kmock, cluster, "vm1", clock.now)
    await passes(keeper, clock, kmock, play, lambda report: clock.now >= end + datetime.timedelta(minutes=2) or None)
    clock.now += datetime.timedelta(minutes=61)
    assert await recorder.expire(kmock.apiserver, clock.now)  # the IOerror Events are gone
    await quarter_hour(keeper, clock, kmock, play)
    assert unpauses(kmock) == [] and paused(kmock) == "PausedIOError"
    assert {r.name: r.hold for r in (await keeper.run_pass()).vms}["vm1"] == "disk full"
