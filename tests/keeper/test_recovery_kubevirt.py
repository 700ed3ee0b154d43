"""The recovery of a VM on a stale NFS mount against KubeVirt as it really behaves (kubefake plays it,
with its sources: virt-handler's I/O-error retry resuming and re-pausing the VM with a new Paused
condition each time, a migration target keeping a paused VM paused, virt-api's 409s and 503s). Each
VM is spared by Longhorn and its share-manager restarted at T0 (the remount request); the keeper runs
a pass every 30 s of its own clock. Recovered means: one migration, one unpause, the same VMI uid,
within 10 minutes of the remount request."""
from __future__ import annotations

import datetime

import pytest
from tests.support.clock import Clock
from tests.support.kubevirt_api import VMIMS, eventually
from tests.support.stale import drained_node_cluster, restart_storage, volumes

from kubefake.io_error_retry import IoErrorRetry
from kubefake.kubevirt import unavailable
from kubefake.migration import complete_migration
from kubefake.virt_handler import io_error_pause, io_retry_resume, pause_condition
from webhook import kinds
from webhook.config import Settings

from .test_recovery import paused, unpauses

PASS = datetime.timedelta(seconds=30)
WITHIN = datetime.timedelta(minutes=10)


async def stale_cluster(kmock, cluster, make_keeper, **settings):
    """vm1..vm3 on node-a beside their storage, spared; vm1's share-manager restarted on node-b at T0
    (its pod, three days old, keeps the stale mount). A keeper on a clock of its own, from T0."""
    cluster.seed(drained_node_cluster(spared=True))
    volumes(kmock)
    clock = Clock()
    keeper = await make_keeper(Settings(**{"keep": "migrate", "keep_after": 600, **settings}), clock=clock)
    await restart_storage(kmock, cluster, "vm1", "node-b", datetime.timedelta(0))
    t0 = kinds_time(kmock.objects[kinds.LONGHORN_VOLUME, "longhorn-system", "pvc-vm1-disk"].raw["status"]
                    ["remountRequestedAt"])
    clock.now = t0
    return keeper, clock, t0


def kinds_time(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def where_and_pause(vmi):
    status = vmi.get("status") or {}
    return status.get("nodeName"), [(c.get("reason"), c.get("lastTransitionTime")) for c in status.get("conditions") or []
                                    if c.get("type") == "Paused"]


async def seen(keeper, kmock, name="vm1"):
    """The keeper's watch shows the VMI where it runs and as paused as it is stored."""
    stored = where_and_pause(kmock.objects[kinds.VMI, "default", name].raw)
    await eventually(lambda: any(v["metadata"]["name"] == name and where_and_pause(v) == stored
                                 for v in keeper.watch.all_vmis()))


class FailingMount:
    """A failing mount's pauses and resumes (`IoErrorRetry`'s pairs), played as time goes on: each at
    most once. With `seen=False` a resume the next pause follows at once is one virt-handler never
    sees: the VMI keeps its first Paused condition (`kubefake.virt_handler.play_io_errors`)."""

    def __init__(self, kmock, pairs, *, seen=True):
        self.kmock, self.events = kmock, []
        for i, (pause, resume) in enumerate(pairs):
            if seen or not i or pairs[i - 1][1] != pause:
                self.events.append((pause, io_error_pause))
            if seen or i + 1 == len(pairs) or pairs[i + 1][0] != resume:
                self.events.append((resume, io_retry_resume))

    async def __call__(self, until):
        while self.events and self.events[0][0] <= until:
            at, play = self.events.pop(0)
            await play(self.kmock.apiserver, "default", "vm1", at)

    async def paused_at(self, after):
        """Up to the next pause after `after`, and that pause alone: QEMU stopped the VM on the I/O error
        before the switchover, and virt-handler did not resume it before the target took it over."""
        pause = next(at for at, play in self.events if play is io_error_pause and at > after)
        await self(pause - datetime.timedelta(microseconds=1))
        at, play = self.events.pop(0)
        await play(self.kmock.apiserver, "default", "vm1", at)
        return at


async def passes_until_created(keeper, clock, kmock, cluster, play):
    """Passes every 30 s of the keeper's clock, virt-handler's retry played up to each, until the keeper
    creates its migration: (the migration, when); at most until 10 minutes after the remount request."""
    start = clock.now
    while True:
        assert clock.now - start <= WITHIN, "no migration within 10 minutes of the remount request"
        await play(clock.now)
        await seen(keeper, kmock)
        report = await keeper.run_pass()
        if report.created:
            [made] = cluster.migrations()
            return made, clock.now
        clock.advance(PASS.total_seconds())


async def recovered(keeper, clock, kmock, cluster, t0, made, moved_at):
    """The migration ends at `moved_at` with the VM paused; the keeper's passes then unpause it once."""
    uid = kmock.objects[kinds.VMI, "default", "vm1"].raw["metadata"]["uid"]
    assert paused(kmock) == "PausedIOError"  # paused when its migration hands over
    await complete_migration(kmock.apiserver, "default", made["metadata"]["name"], "node-b", moved_at)
    assert paused(kmock) == "PausedIOError"  # as KubeVirt leaves it: the target keeps it paused
    await eventually(lambda: (keeper.watch.migrations.get("default", made["metadata"]["name"]).get("status") or {})
                     .get("phase") == "Succeeded")
    while not unpauses(kmock):
        clock.advance(PASS.total_seconds())
        assert clock.now - t0 <= WITHIN, "not unpaused within 10 minutes of the remount request"
        await seen(keeper, kmock)
        await keeper.run_pass()
    unpaused_at = clock.now
    for _ in range(3):
        clock.advance(PASS.total_seconds())
        await seen(keeper, kmock)
        await keeper.run_pass()
    vm1 = kmock.objects[kinds.VMI, "default", "vm1"].raw
    assert len(unpauses(kmock)) == 1 and paused(kmock) is None
    assert len(cluster.migrations()) == 1 and vm1["metadata"]["uid"] == uid and vm1["status"]["nodeName"] == "node-b"
    return unpaused_at - t0


@pytest.mark.parametrize("seen_each", [True, False], ids=["each-pause-seen", "first-condition-kept"])
async def test_a_fast_failing_mount_paused_throughout_is_recovered(kmock, cluster, make_keeper, seen_each):
    keeper, clock, t0 = await stale_cluster(kmock, cluster, make_keeper)
    play = FailingMount(kmock, IoErrorRetry().fast_failing(t0 + datetime.timedelta(seconds=5), 40), seen=seen_each)
    made, created = await passes_until_created(keeper, clock, kmock, cluster, play)
    assert made["metadata"]["annotations"]["kubevirt-scheduler/recovers"] == "stale-mount"
    assert made["spec"]["addedNodeSelector"] == {"kubernetes.io/hostname": "node-b"}
    assert datetime.timedelta(minutes=5) <= created - t0 <= datetime.timedelta(minutes=6)  # KubeVirt's retry first
    took = await recovered(keeper, clock, kmock, cluster, t0, made, created + datetime.timedelta(seconds=20))
    assert took <= WITHIN


async def test_a_slowly_failing_mount_running_most_of_the_time_is_recovered(kmock, cluster, make_keeper):
    """Re-paused 1 to 3 minutes after each resume: every Paused condition is young, the VM shows Running
    most of the time. The wait counts from the remount request all the same."""
    keeper, clock, t0 = await stale_cluster(kmock, cluster, make_keeper)
    running = [datetime.timedelta(seconds=s) for s in (70, 150, 100, 170, 60, 120, 90, 160, 80, 140)]
    play = FailingMount(kmock, IoErrorRetry().slowly_failing(t0 + datetime.timedelta(seconds=40), running))
    made, created = await passes_until_created(keeper, clock, kmock, cluster, play)
    assert created - t0 <= datetime.timedelta(minutes=6)
    # It migrates while the mount fails again: paused at the switchover.
    next_pause = await play.paused_at(created)
    took = await recovered(keeper, clock, kmock, cluster, t0, made, next_pause + datetime.timedelta(seconds=5))
    assert took <= WITHIN


async def test_a_condition_re_stamped_between_the_migrations_creation_and_its_start_still_ends_unpaused(
        kmock, cluster, make_keeper):
    """virt-handler's retry resumes the VM after the keeper created its migration and QEMU pauses it again
    before the switchover: a new condition, newer than the migration. The VM still ends unpaused."""
    keeper, clock, t0 = await stale_cluster(kmock, cluster, make_keeper)
    play = FailingMount(kmock, [(t0 + datetime.timedelta(seconds=5), t0 + datetime.timedelta(minutes=9))])
    made, created = await passes_until_created(keeper, clock, kmock, cluster, play)
    await io_retry_resume(kmock.apiserver, "default", "vm1", created + datetime.timedelta(seconds=3))
    await io_error_pause(kmock.apiserver, "default", "vm1", created + datetime.timedelta(seconds=8))
    since = kmock.objects[kinds.VMI, "default", "vm1"].raw["status"]["conditions"][-1]["lastTransitionTime"]
    assert kinds_time(since) > kinds_time(made["metadata"]["creationTimestamp"])  # re-stamped after the creation
    took = await recovered(keeper, clock, kmock, cluster, t0, made, created + datetime.timedelta(seconds=20))
    assert took <= WITHIN


async def evacuated(kmock, cluster, name, at):
    """A drain's evacuation of `name` (KubeVirt's own migration, not ours) moved it to node-b at `at`."""
    migration = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                 "metadata": {"name": f"kubevirt-evacuation-{name}", "namespace": "default",
                              "annotations": {"kubevirt.io/evacuationMigration": "node-a"}},
                 "spec": {"vmiName": name, "priority": "system-critical"}}
    await cluster.create(VMIMS, migration)
    await complete_migration(kmock.apiserver, "default", f"kubevirt-evacuation-{name}", "node-b", at)


async def test_a_paused_vm_a_drains_evacuation_moved_onto_a_fresh_mount_is_unpaused(kmock, cluster, make_keeper):
    keeper, clock, t0 = await stale_cluster(kmock, cluster, make_keeper)
    await io_error_pause(kmock.apiserver, "default", "vm1", t0 + datetime.timedelta(seconds=5))
    await evacuated(kmock, cluster, "vm1", t0 + datetime.timedelta(seconds=40))
    assert paused(kmock) == "PausedIOError"
    clock.advance(60)
    await seen(keeper, kmock)
    report = await keeper.run_pass()
    assert len(unpauses(kmock)) == 1 and paused(kmock) is None and report.created == ()
    assert cluster.migrations() == []  # none of ours: its new pod mounted afresh


@pytest.mark.parametrize("how", ["PausedByUser", "PausedByMigrationMonitor", "opted-out"])
async def test_a_vm_paused_by_another_hand_or_opted_out_is_never_unpaused(kmock, cluster, make_keeper, how):
    keeper, clock, t0 = await stale_cluster(kmock, cluster, make_keeper)
    if how == "opted-out":
        await cluster.patch("/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances/vm1",
                            {"metadata": {"annotations": {"kubevirt-scheduler/keep": "false"}}})
        await io_error_pause(kmock.apiserver, "default", "vm1", t0 + datetime.timedelta(seconds=5))
    else:
        conditions = kmock.objects[kinds.VMI, "default", "vm1"].raw["status"].get("conditions") or []
        await cluster.patch("/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances/vm1", {"status": {
            "conditions": [*conditions, pause_condition(how, t0 + datetime.timedelta(seconds=5))]}})
    await evacuated(kmock, cluster, "vm1", t0 + datetime.timedelta(seconds=40))
    for _ in range(4):
        clock.advance(PASS.total_seconds())
        await seen(keeper, kmock)
        report = await keeper.run_pass()
    assert unpauses(kmock) == [] and paused(kmock) == ("PausedIOError" if how == "opted-out" else how)
    assert {r.name: r.hold for r in report.vms}["vm1"] in ("not apart", "keep disabled")


async def test_an_unpause_answered_503_once_is_retried_within_a_minute(kmock, cluster, make_keeper):
    keeper, clock, t0 = await stale_cluster(kmock, cluster, make_keeper)
    await io_error_pause(kmock.apiserver, "default", "vm1", t0 + datetime.timedelta(seconds=5))
    await evacuated(kmock, cluster, "vm1", t0 + datetime.timedelta(seconds=40))
    failing = unavailable(kmock, 1, namespace="default", name="vm1")
    clock.advance(60)
    await seen(keeper, kmock)
    first = clock.now
    await keeper.run_pass()
    assert len(list(failing)) == 1 and paused(kmock) == "PausedIOError"
    assert not keeper.degraded()  # that VM's failure, not the keeper's
    while paused(kmock) is not None:
        clock.advance(PASS.total_seconds())
        assert clock.now - first <= datetime.timedelta(minutes=1), "not retried within a minute"
        await keeper.run_pass()
    assert len(unpauses(kmock)) == 2
