"""What the keeper takes as a stale mount, on the emulator playing Longhorn and KubeVirt as their source
says (tests/keeper/test_recovery_kubevirt.py sets the scene): a share-manager restart alone, which Longhorn
records as a remount request wherever its new pod comes back, moves no VM; a VM whose NFS client
recovered (it never paused, or KubeVirt's first retry after the server served resumed it) is left as any
other; only a retry that failed once the new server served makes a VM frozen, and a frozen VM is held by
none of drift's limits, nor by unfit nodes that sort first. An unpause that does not hold is not repeated
for ever."""
from __future__ import annotations

import datetime
import json

import pytest
from tests.support.kube import run_verb
from tests.support.kubevirt_api import VMIS, eventually

from kubefake.io_error_retry import IoErrorRetry
from kubefake.objects import migration, node, stamp
from kubefake.virt_handler import io_error_pause, pause_condition
from webhook import kinds

from .test_recovery import paused, unpauses
from .test_recovery_kubevirt import (evacuated, FAST, FailingMount, passes, passes_until_created, recovered, seconds,
                                     seen, stale_cluster)

QUARTER = datetime.timedelta(minutes=15)


async def quarter_hour(keeper, clock, kmock, play):
    """Passes every 30 s for 15 minutes of the keeper's clock, KubeVirt played up to each: when each
    migration was created, by the keeper's clock."""
    end, created = clock.now + QUARTER, []

    def until(report):
        created.extend(clock.now for _ in report.created)
        return created if clock.now >= end else None
    return await passes(keeper, clock, kmock, play, until)


def nothing(_):
    async def play(until):
        return None
    return play


@pytest.mark.parametrize("storage", ["node-a", "node-b"], ids=["same-node", "elsewhere"])
@pytest.mark.parametrize("retry", ["never-paused", "first-retry-succeeds-each-seen", "first-retry-succeeds-kept"])
async def test_a_vm_whose_nfs_client_recovers_is_never_taken_for_stale(tmp_path, kmock, cluster, make_keeper, storage,
                                                                       retry):
    """Its share-manager restarted (the remount request stamped): the VM never paused, or paused while the
    server was away and KubeVirt's retry 10 s after it served (+35 s) resumed it. Beside its storage it is
    never moved; apart from it, it is moved back once, by the ordinary rule (after --keep-after), never
    as a recovery."""
    keeper, clock, t0 = await stale_cluster(kmock, cluster, make_keeper, storage=storage)
    uid = kmock.objects[kinds.VMI, "default", "vm1"].raw["metadata"]["uid"]
    play = nothing(None) if retry == "never-paused" else FailingMount(
        keeper, kmock, IoErrorRetry().fast_failing(t0 + seconds(5), 3), seen=retry.endswith("each-seen"))
    created = await quarter_hour(keeper, clock, kmock, play)
    made = cluster.migrations()
    if storage == "node-a":
        assert made == []
    else:
        [back] = made
        assert "kubevirt-scheduler/recovers" not in back["metadata"].get("annotations", {})
        assert back["spec"]["addedNodeSelector"] == {"kubernetes.io/hostname": "node-b"}
        assert created[0] >= t0 + datetime.timedelta(seconds=600)  # apart for --keep-after
    assert unpauses(kmock) == [] and paused(kmock) is None
    assert kmock.objects[kinds.VMI, "default", "vm1"].raw["metadata"]["uid"] == uid
    code, out, err = await run_verb(tmp_path, kmock, "status", "-o", "json", "--lease-namespace", "default",
                                    "--keep", "migrate", "--keep-after", "600")
    assert code == 0, err
    assert all(vm["stale_mount"] is None for vm in json.loads(out)["vms"])


async def test_a_vm_its_user_paused_is_never_moved_nor_unpaused(kmock, cluster, make_keeper):
    keeper, clock, t0 = await stale_cluster(kmock, cluster, make_keeper, storage="node-a")
    await cluster.patch(f"{VMIS}/vm1", {"status": {"conditions": [pause_condition("PausedByUser", t0 - seconds(60))]}})
    await seen(keeper, kmock)
    await quarter_hour(keeper, clock, kmock, nothing(None))
    assert cluster.migrations() == [] and unpauses(kmock) == [] and paused(kmock) == "PausedByUser"


async def test_a_days_budget_drift_used_up_does_not_keep_a_frozen_vm_frozen(kmock, cluster, make_keeper):
    """vm1 was moved twice by the keeper in the last 24 h (--keep-max-per-day 2): its recovery goes on."""
    now = datetime.datetime.now(datetime.UTC)
    earlier = [migration(f"vm1-colocate-{n}", "vm1", phase="Succeeded", ours=True, created=stamp(now - ago))
               for n, ago in (("d1", datetime.timedelta(hours=20)), ("d2", datetime.timedelta(hours=10)))]
    keeper, clock, t0 = await stale_cluster(kmock, cluster, make_keeper, extra=earlier)
    play = FailingMount(keeper, kmock, IoErrorRetry().fast_failing(t0 + seconds(5), 40))
    made, created = await passes_until_created(keeper, clock, kmock, cluster, play, t0)
    assert made["metadata"]["annotations"]["kubevirt-scheduler/recovers"] == "stale-mount"
    assert await recovered(keeper, clock, kmock, cluster, t0, made, created + seconds(20)) <= FAST


async def test_eight_unfit_nodes_that_sort_first_do_not_keep_a_frozen_vm_frozen(kmock, cluster, make_keeper):
    """Beside its storage, its recovery goes through another node: eight tainted control-plane nodes named
    cp-1..cp-8 come first by name, two workers can take it."""
    taint = [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
    control_plane = [node(f"cp-{n}", taints=taint) for n in range(1, 9)]
    keeper, clock, t0 = await stale_cluster(kmock, cluster, make_keeper, storage="node-a", extra=control_plane)
    play = FailingMount(keeper, kmock, IoErrorRetry().fast_failing(t0 + seconds(5), 40), seen=False)
    away, created = await passes_until_created(keeper, clock, kmock, cluster, play, t0)
    via = away["spec"]["addedNodeSelector"]["kubernetes.io/hostname"]
    assert via in ("node-b", "node-c")
    assert await recovered(keeper, clock, kmock, cluster, t0, away, created + seconds(20), node=via) <= FAST


async def test_an_unpause_that_does_not_hold_is_not_repeated_and_the_vm_is_said_to_need_a_restart(
        kmock, cluster, make_keeper):
    """Carried paused onto node-b by a drain's evacuation, vm1 is unpaused; its disk fails there too and it
    pauses again at once, before virt-handler sees it running (the VMI keeps its first condition). The
    keeper unpauses it twice in that pod, then says it needs a restart, in an Event. Its record
    counts the unpauses and the Event said: a new leader unpauses no more and says nothing again."""
    keeper, clock, t0 = await stale_cluster(kmock, cluster, make_keeper)
    first = t0 + seconds(5)
    await io_error_pause(kmock.apiserver, "default", "vm1", first)
    await evacuated(kmock, cluster, "vm1", t0 + seconds(40))
    kept = kmock.objects[kinds.VMI, "default", "vm1"].raw["status"]["conditions"]

    async def fails_again(until):
        if paused(kmock) is None:  # unpaused: QEMU stops it again before virt-handler looks
            await cluster.patch(f"{VMIS}/vm1", {"status": {"conditions": kept}})

    async def ten_minutes(keeper):
        end = clock.now + datetime.timedelta(minutes=10)
        await passes(keeper, clock, kmock, fails_again, lambda report: report if clock.now >= end else None)
    clock.advance(60)
    await ten_minutes(keeper)
    assert len(unpauses(kmock)) == 2 and cluster.migrations() == []
    [event] = await eventually(lambda: [e for e in cluster.events() if e.get("reason") == "NeedsRestart"])
    assert event["involvedObject"]["name"] == "vm1" and event["type"] == "Warning"
    assert "paused again on its fresh mount after 2 unpauses" in event["message"]
    [record] = [r for r in keeper.records.reports.values() if r.name == "vm1"]
    assert record.hold == "needs a restart" and record.decision.startswith("paused again on its fresh mount")
    await ten_minutes(await make_keeper(keeper.settings, clock=clock))  # a new leader
    assert len(unpauses(kmock)) == 2 and cluster.migrations() == []
    assert len([e for e in cluster.events() if e.get("reason") == "NeedsRestart"]) == 1 and event.get("count", 1) == 1


async def test_what_the_keeper_saw_is_said_by_status_and_taken_by_the_next_leader(tmp_path, kmock, cluster,
                                                                                     make_keeper):
    """A slowly failing mount: paused 50 s after the share-manager served, resumed at once, running 150 s, paused
    again: a retry after the margin failed. Each pause lasted an instant and the VM shows Running. The keeper
    (here reporting) saw the first pause after the margin; its record keeps it, so `status`, which looks once,
    shows the same stale mount, and a new leader recovers it at its first pass."""
    keeper, clock, t0 = await stale_cluster(kmock, cluster, make_keeper, keep="report")
    play = FailingMount(keeper, kmock, IoErrorRetry().slowly_failing(t0 + seconds(5), [seconds(70), seconds(150),
                                                                                       seconds(900)]))

    def reported(report):
        [vm1] = [r for r in report.vms if r.name == "vm1"]
        return vm1 if vm1.hold == "report only" else None
    vm1 = await passes(keeper, clock, kmock, play, reported)
    assert clock.now - t0 >= seconds(225)  # not at the first pause after the margin (+75 s): at the one after
    assert "after the pause KubeVirt's retry lifted" in vm1.decision and paused(kmock) is None  # running again
    code, out, err = await run_verb(tmp_path, kmock, "status", "-o", "json", "--lease-namespace", "default",
                                    "--keep", "report", "--keep-after", "600")
    assert code == 0, err
    [said] = [vm for vm in json.loads(out)["vms"] if vm["name"] == "vm1"]
    assert "after the pause KubeVirt's retry lifted" in said["stale_mount"] and said["hold"] == "report only"
    leader = await make_keeper(keeper.settings.__class__(keep="migrate", keep_after=600), clock=clock)
    report = await leader.run_pass()
    [made] = cluster.migrations()
    assert report.created and made["metadata"]["annotations"]["kubevirt-scheduler/recovers"] == "stale-mount"
