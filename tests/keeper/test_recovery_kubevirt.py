"""The recovery of a VM on a stale NFS mount against KubeVirt and Longhorn as they really behave (kubefake
plays them, with their sources: longhorn-manager stamping the remount request on every reconcile while
the share-manager is down, virt-handler's I/O-error retry resuming and re-pausing the VM with a new Paused
condition each time or keeping its first one, a migration target keeping a paused VM paused, virt-api's
409s and 503s). vm1 is spared by Longhorn; its share-manager goes away at T0, its new pod starts at
T0+15 s and serves from T0+25 s (SERVES); the keeper, watching for ten minutes before, makes a pass
every 30 s of its own clock. Recovered means: one migration apart from its storage (two beside it), one
unpause, the same VMI uid; running again within 2 minutes of SERVES for a mount that fails at once,
within 5 for one that fails slowly."""
from __future__ import annotations

import datetime

import pytest
from tests.support.stores import in_cache
from tests.support.clock import Clock
from tests.support.kubevirt_api import VMIMS, cached_vmis, eventually
from tests.support.stale import drained_node_cluster, volumes

from kubefake import longhorn
from kubefake.io_error_retry import IoErrorRetry
from kubefake.kubevirt import unavailable
from kubefake.migration import complete_migration
from kubefake.virt_handler import io_error_pause, io_retry_resume, pause_condition
from kubefake.virt_launcher import CREDENTIALS, Domain
from webhook import kinds
from webhook.config import Settings

from .test_recovery import paused, unpauses

PASS = datetime.timedelta(seconds=30)
SERVES = datetime.timedelta(seconds=25)  # after T0: the new share-manager serves
FAST, SLOW = datetime.timedelta(minutes=2), datetime.timedelta(minutes=5)


def seconds(n):
    return datetime.timedelta(seconds=n)


async def stale_cluster(kmock, cluster, make_keeper, storage="node-b", extra=(), started=datetime.timedelta(minutes=10),
                        objects=None, serves=SERVES, **settings):
    """vm1..vm3 on node-a beside their storage (`objects`: else), spared; a keeper started `started` before T0
    on a clock of its own; vm1's share-manager restarted at T0 on `storage`, its new pod serving `serves` after
    and started 10 s before. (keeper, clock, T0)."""
    cluster.seed([*(drained_node_cluster(spared=True) if objects is None else objects), *extra])
    volumes(kmock)
    t0 = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    clock = Clock(t0 - started)
    keeper = await make_keeper(Settings(**{"keep": "migrate", "keep_after": 600, **settings}), clock=clock)
    await keeper.run_pass()
    clock.now = t0
    requested, deleted = await longhorn.restart_share_manager(kmock.apiserver, "pvc-vm1-disk", storage, down=t0,
                                                              starts=t0 + serves - seconds(10), serves=t0 + serves)
    assert requested == t0 + serves - seconds(15)  # stamped on each reconcile while the share-manager was down
    assert deleted == []  # spared: the VMI kind is on the blacklist
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
                                 for v in cached_vmis(keeper.watch)))


class FailingMount:
    """A failing mount as `IoErrorRetry`'s pairs script it, played by kubefake.virt_launcher.Domain as time goes
    on: paused first at the first pair's pause, each failing resume running as long as the script says, the
    mount working after its last resume; KubeVirt's retry and the keeper's unpause resume it alike, and
    virt-launcher tells its Event again every `every` while it is paused (access credentials: 15 s). With
    `seen=False` a resume the next pause follows at once is one virt-handler never sees: the VMI keeps its first
    Paused condition. The watch shows where it left off before each pass."""

    def __init__(self, keeper, kmock, pairs, *, seen=True, every=CREDENTIALS, works_at=None, name="vm1", **words):
        self.keeper, self.kmock, self.name = keeper, kmock, name
        runs = [pause - resume for (_, resume), (pause, _) in zip(pairs, pairs[1:])]
        self.domain = Domain(kmock.apiserver, "default", name, runs_for=runs, seen=seen, every=every,
                             works_at=works_at, **words).start(pairs[0][0]) if pairs else None

    async def __call__(self, until):
        if self.domain is not None:
            await self.domain(until)
        await seen(self.keeper, self.kmock, self.name)

    async def paused_at(self, after):
        """Up to the next pause after `after`, and that pause alone: QEMU stopped the VM on the I/O error
        before the switchover, and virt-handler did not resume it before the target took it over."""
        return await self.domain.paused_at(after)


async def passes(keeper, clock, kmock, play, until):
    """Passes every 30 s of the keeper's clock, KubeVirt played up to each, until `until` says what to return."""
    while True:
        await play(clock.now)
        await seen(keeper, kmock)
        report = await keeper.run_pass()
        if (found := until(report)) is not None:
            return found
        clock.advance(PASS.total_seconds())


async def passes_until_created(keeper, clock, kmock, cluster, play, t0, within=FAST):
    """(the migration, when) the keeper creates it; at most until `within` after the share-manager serves."""
    def made(report):
        assert clock.now - t0 - SERVES <= within, "no migration in time"
        return (cluster.migrations()[-1], clock.now) if report.created else None
    return await passes(keeper, clock, kmock, play, made)


async def recovered(keeper, clock, kmock, cluster, t0, made, moved_at, node="node-b", within=FAST):
    """The migration ends at `moved_at` with the VM paused; the keeper's passes then unpause it once. How
    long after the share-manager served it runs again."""
    uid, probed = kmock.objects[kinds.VMI, "default", "vm1"].raw["metadata"]["uid"], len(unpauses(kmock))
    assert probed <= 1  # the keeper's one resume to see whether the mount works again, at most
    assert paused(kmock) == "PausedIOError"  # paused when its migration hands over
    await complete_migration(kmock.apiserver, "default", made["metadata"]["name"], node, moved_at)
    assert paused(kmock) == "PausedIOError"  # as KubeVirt leaves it: the target keeps it paused
    await eventually(lambda: (in_cache(keeper.watch.migrations, "default", made["metadata"]["name"]).get("status")
                              or {}).get("phase") == "Succeeded")
    while not unpauses(kmock):
        clock.advance(PASS.total_seconds())
        assert clock.now - t0 - SERVES <= within, "not unpaused in time"
        await seen(keeper, kmock)
        await keeper.run_pass()
    unpaused_at = clock.now
    for _ in range(3):
        clock.advance(PASS.total_seconds())
        await seen(keeper, kmock)
        await keeper.run_pass()
    vm1 = kmock.objects[kinds.VMI, "default", "vm1"].raw
    assert len(unpauses(kmock)) == probed + 1 and paused(kmock) is None
    assert vm1["metadata"]["uid"] == uid and vm1["status"]["nodeName"] == node
    return unpaused_at - t0 - SERVES


@pytest.mark.parametrize("seen_each", [True, False], ids=["each-pause-seen", "first-condition-kept"])
async def test_a_fast_failing_mount_apart_from_its_storage_runs_again_within_two_minutes(kmock, cluster, make_keeper,
                                                                                         seen_each):
    keeper, clock, t0 = await stale_cluster(kmock, cluster, make_keeper)
    play = FailingMount(keeper, kmock, IoErrorRetry().fast_failing(t0 + seconds(5), 40), seen=seen_each)
    made, created = await passes_until_created(keeper, clock, kmock, cluster, play, t0)
    assert made["metadata"]["annotations"]["kubevirt-scheduler/recovers"] == "stale-mount"
    assert made["spec"]["addedNodeSelector"] == {"kubernetes.io/hostname": "node-b"}
    # Not before KubeVirt's retry after the server served (+75 s, past the 30 s reconnect margin) failed.
    assert created - t0 >= seconds(85)
    took = await recovered(keeper, clock, kmock, cluster, t0, made, created + seconds(20))
    assert took <= FAST and len(cluster.migrations()) == 1


async def test_a_fast_failing_mount_beside_its_storage_goes_away_and_back(kmock, cluster, make_keeper):
    """Its share-manager came back on its own node: the recovery goes through another node (KubeVirt's
    target pod cannot land beside its own pod), runs again within 2 minutes there, and comes back by the
    keeper's ordinary rule: two migrations, the keeper's resume that showed the mount stale and one unpause."""
    keeper, clock, t0 = await stale_cluster(kmock, cluster, make_keeper, storage="node-a")
    play = FailingMount(keeper, kmock, IoErrorRetry().fast_failing(t0 + seconds(5), 40), seen=False)
    away, created = await passes_until_created(keeper, clock, kmock, cluster, play, t0)
    via = away["spec"]["addedNodeSelector"]["kubernetes.io/hostname"]
    assert via in ("node-b", "node-c") and away["metadata"]["annotations"]["kubevirt-scheduler/recovers"] == "stale-mount"
    took = await recovered(keeper, clock, kmock, cluster, t0, away, created + seconds(20), node=via)
    assert took <= FAST
    back = await passes(keeper, clock, kmock, play, lambda report: cluster.migrations()[-1] if report.created else None)
    assert back["spec"]["addedNodeSelector"] == {"kubernetes.io/hostname": "node-a"}
    assert "kubevirt-scheduler/recovers" not in back["metadata"].get("annotations", {})
    assert len(cluster.migrations()) == 2 and len(unpauses(kmock)) == 2  # the resume that showed it, and the unpause


async def test_a_slowly_failing_mount_running_most_of_the_time_is_recovered_within_five_minutes(kmock, cluster,
                                                                                                 make_keeper):
    """Re-paused 1 to 3 minutes after each resume, each pause resumed at once (a new failure each time):
    the VM shows Running at almost every pass. The pause the watch saw after the server served is the
    evidence."""
    keeper, clock, t0 = await stale_cluster(kmock, cluster, make_keeper)
    running = [datetime.timedelta(seconds=s) for s in (70, 150, 100, 170, 60, 120, 90, 160, 80, 140)]
    play = FailingMount(keeper, kmock, IoErrorRetry().slowly_failing(t0 + seconds(5), running))
    made, created = await passes_until_created(keeper, clock, kmock, cluster, play, t0, within=SLOW)
    next_pause = await play.paused_at(created)  # it migrates while the mount fails again: paused at the switchover
    took = await recovered(keeper, clock, kmock, cluster, t0, made, next_pause + seconds(5), within=SLOW)
    assert took <= SLOW and len(cluster.migrations()) == 1


async def test_a_condition_re_stamped_between_the_migrations_creation_and_its_start_still_ends_unpaused(
        kmock, cluster, make_keeper):
    """virt-handler's retry resumes the VM after the keeper created its migration and QEMU pauses it again
    before the switchover: a new condition, newer than the migration. The VM still ends unpaused."""
    keeper, clock, t0 = await stale_cluster(kmock, cluster, make_keeper)
    play = FailingMount(keeper, kmock, IoErrorRetry().fast_failing(t0 + seconds(5), 5), seen=False)
    made, created = await passes_until_created(keeper, clock, kmock, cluster, play, t0)
    await io_retry_resume(kmock.apiserver, "default", "vm1", created + seconds(3))
    await io_error_pause(kmock.apiserver, "default", "vm1", created + seconds(8))
    since = kmock.objects[kinds.VMI, "default", "vm1"].raw["status"]["conditions"][-1]["lastTransitionTime"]
    assert kinds_time(since) > kinds_time(made["metadata"]["creationTimestamp"])  # re-stamped after the creation
    took = await recovered(keeper, clock, kmock, cluster, t0, made, created + seconds(20))
    assert took <= FAST


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
