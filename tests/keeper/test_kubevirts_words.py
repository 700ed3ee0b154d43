"""The keeper moves a VM only on KubeVirt's own words about which disk failed and why: virt-launcher's
`IOerror` Event per disk, "VM Paused due to IO error at the volume: X" or "VM Paused due to not enough space
on volume: X" (KubeVirt v1.9.0 `pkg/virt-launcher/notify-client/client.go`, recorded by virt-handler and
folded by client-go's recorder: kubefake.recorder plays both), and a retry of KubeVirt's that failed after
the new share-manager served (virt-handler's `io-error-retry`, kubefake.io_error_retry). The scene is
tests/keeper/test_recovery_kubevirt.py's: vm1's share-manager goes away at T0 and serves again at T0+25 s."""
from __future__ import annotations

import datetime
import json

import pytest
from tests.support.kube import launcher_pod_of, rwx_disk, run_verb, vmi
from tests.support.kubevirt_api import eventually
from tests.support.stale import drained_node_cluster

from kubefake.io_error_retry import IoErrorRetry
from kubefake.virt_handler import io_error_pause, io_retry_resume, NO_SPACE

from .test_recovery import pause_by_user, paused, unpauses
from .test_recovery_kubevirt import FAST, FailingMount, passes, passes_until_created, recovered, seconds, seen, stale_cluster
from .test_stale_evidence import quarter_hour

FLAGS = ("--lease-namespace", "default", "--keep", "migrate", "--keep-after", "600")


async def status_of(tmp_path, kmock, name="vm1"):
    code, out, err = await run_verb(tmp_path, kmock, "status", "-o", "json", *FLAGS)
    assert code == 0, err
    return next(vm for vm in json.loads(out)["vms"] if vm["name"] == name)


@pytest.mark.parametrize("storage", ["node-a", "node-b"], ids=["beside", "apart"])
async def test_a_vm_whose_disk_fills_after_its_share_manager_restarted_is_never_moved_nor_unpaused(
        tmp_path, kmock, cluster, make_keeper, storage):
    """Its guest filled its disk a minute after its NFS server restarted: KubeVirt says "not enough space", each
    retry pausing it again. No migration frees space, nor an unpause: never moved, never unpaused, said."""
    keeper, clock, t0 = await stale_cluster(kmock, cluster, make_keeper, storage=storage)
    play = FailingMount(keeper, kmock, IoErrorRetry().fast_failing(t0 + seconds(60), 40), seen=False, cause=NO_SPACE)
    await quarter_hour(keeper, clock, kmock, play)
    assert cluster.migrations() == [] and unpauses(kmock) == [] and paused(kmock) == "PausedIOError"
    said = await status_of(tmp_path, kmock)
    assert said["hold"] == "disk full" and said["stale_mount"] is None
    assert "is full (KubeVirt: not enough space on volume disk0" in said["decision"]


@pytest.mark.parametrize("later", [seconds(60), datetime.timedelta(days=2)], ids=["a-minute-after", "days-after"])
async def test_one_pause_kubevirts_first_retry_lifted_moves_nothing(kmock, cluster, make_keeper, later):
    """vm1 beside its storage paused twice while its NFS server was away, and KubeVirt's retry after it served
    resumed it; `later` after the server served, one I/O error more, lifted by KubeVirt's first retry. The
    Event folds all three (count 3): no retry failed after the server served, nothing moves."""
    keeper, clock, t0 = await stale_cluster(kmock, cluster, make_keeper, storage="node-a")
    play = FailingMount(keeper, kmock, IoErrorRetry().fast_failing(t0 + seconds(5), 2), seen=False)
    await play(t0 + seconds(30))
    clock.now = t0 + seconds(25) + later
    await io_error_pause(kmock.apiserver, "default", "vm1", clock.now)
    await io_retry_resume(kmock.apiserver, "default", "vm1", clock.now)  # a new failure: resumed at once
    await seen(keeper, kmock)
    await quarter_hour(keeper, clock, kmock, FailingMount(keeper, kmock, []))
    assert cluster.migrations() == [] and unpauses(kmock) == [] and paused(kmock) is None


def two_disks():
    """vm1 with a second RWX disk, vm1-data (its VMI volume disk1), served from node-a too."""
    objects = [o for o in drained_node_cluster(spared=True)
               if not (o["kind"] in ("VirtualMachineInstance", "Pod") and o["metadata"]["name"].startswith(("vm1", "virt-launcher-vm1")))]
    the_vmi = vmi("vm1", "node-a", "vm1-disk", "vm1-data")
    pod = launcher_pod_of(the_vmi)
    pod["metadata"]["name"] = "virt-launcher-vm1-x7k2p"
    return objects + [the_vmi, pod, *rwx_disk("vm1-data", "node-a")]


async def test_a_pause_of_the_vms_other_disk_moves_nothing(kmock, cluster, make_keeper):
    """vm1's first disk's NFS server restarted; its other disk's fails at once, for good. KubeVirt names the
    other disk: no migration, no unpause, whatever its count."""
    keeper, clock, t0 = await stale_cluster(kmock, cluster, make_keeper, storage="node-a", objects=two_disks())
    play = FailingMount(keeper, kmock, IoErrorRetry().fast_failing(t0 + seconds(60), 40), seen=False,
                        volumes=["disk1"])
    await quarter_hour(keeper, clock, kmock, play)
    assert cluster.migrations() == [] and unpauses(kmock) == [] and paused(kmock) == "PausedIOError"


async def test_a_user_pause_after_an_io_pause_moves_nothing(tmp_path, kmock, cluster, make_keeper):
    """A slowly failing mount: paused after the server served, resumed at once, paused again 2 minutes later (a
    retry that failed); then its user paused it. The user's pause wins: never moved for recovery, never
    unpaused."""
    keeper, clock, t0 = await stale_cluster(kmock, cluster, make_keeper, storage="node-a")
    play = FailingMount(keeper, kmock, IoErrorRetry().slowly_failing(t0 + seconds(5), [seconds(70), seconds(120)]))
    await passes(keeper, clock, kmock, play, lambda report: report if clock.now >= t0 + seconds(90) else None)
    await play(t0 + seconds(200))  # paused at +5, +75 (the keeper saw it) and +195 s, each resumed at once
    await pause_by_user(cluster, "vm1")
    clock.advance(30)
    await eventually(lambda: paused(kmock) == "PausedByUser")
    await seen(keeper, kmock)
    await quarter_hour(keeper, clock, kmock, FailingMount(keeper, kmock, []))
    assert cluster.migrations() == [] and unpauses(kmock) == [] and paused(kmock) == "PausedByUser"
    assert (await status_of(tmp_path, kmock))["stale_mount"] is None


@pytest.mark.parametrize("storage", ["node-a", "node-b"], ids=["beside", "apart"])
async def test_a_keeper_started_30_s_before_the_restart_recovers_a_fast_failing_mount_within_two_minutes(
        kmock, cluster, make_keeper, storage):
    """No watch history is needed: KubeVirt's Events say it all at the keeper's first passes."""
    keeper, clock, t0 = await stale_cluster(kmock, cluster, make_keeper, storage=storage,
                                            started=datetime.timedelta(seconds=30))
    play = FailingMount(keeper, kmock, IoErrorRetry().fast_failing(t0 + seconds(5), 40), seen=False)
    made, created = await passes_until_created(keeper, clock, kmock, cluster, play, t0)
    node = made["spec"]["addedNodeSelector"]["kubernetes.io/hostname"]
    assert await recovered(keeper, clock, kmock, cluster, t0, made, created + seconds(20), node=node) <= FAST


async def test_a_slowly_failing_mount_beside_its_storage_goes_away_and_back(kmock, cluster, make_keeper):
    """Resumed at once after each pause and paused again 1 to 3 minutes later: recovered through another node
    once a retry after the margin failed, and brought back by the ordinary rule."""
    keeper, clock, t0 = await stale_cluster(kmock, cluster, make_keeper, storage="node-a")
    running = [seconds(s) for s in (70, 150, 100, 170, 60, 120, 90, 160, 80, 140)]
    play = FailingMount(keeper, kmock, IoErrorRetry().slowly_failing(t0 + seconds(5), running))
    away, created = await passes_until_created(keeper, clock, kmock, cluster, play, t0, within=datetime.timedelta(minutes=5))
    assert away["metadata"]["annotations"]["kubevirt-scheduler/recovers"] == "stale-mount"
    assert away["spec"]["addedNodeSelector"]["kubernetes.io/hostname"] in ("node-b", "node-c")


async def test_a_vm_whose_share_manager_does_not_serve_again_is_said_to_wait_for_its_storage(
        tmp_path, kmock, cluster, make_keeper):
    """The new share-manager pod runs but never gets Ready (NFS-Ganesha does not come up): no migration can
    mount what is not served. Ten minutes after the VM's disk first failed, one Event says the VM waits for its
    storage, not for the keeper (`status`, on the cluster's clock, says what it waits for meanwhile)."""
    keeper, clock, t0 = await stale_cluster(kmock, cluster, make_keeper, storage="node-a")
    await cluster.patch("/api/v1/namespaces/longhorn-system/pods/share-manager-pvc-vm1-disk", {"status": {
        "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}]}})
    play = FailingMount(keeper, kmock, IoErrorRetry().fast_failing(t0 + seconds(5), 40), seen=False)
    await quarter_hour(keeper, clock, kmock, play)
    assert cluster.migrations() == [] and unpauses(kmock) == []
    said = await eventually(lambda: [e for e in cluster.events() if e.get("reason") == "WaitingForStorage"])
    assert len(said) == 1 and said[0]["message"].startswith(
        "waiting for its storage, not for the keeper: share-manager share-manager-pvc-vm1-disk has not served since ")
    # `status` looks at the cluster's own clock, a moment after the restart: the share-manager does not serve yet.
    assert (await status_of(tmp_path, kmock))["waiting_for_retry"] == (
        "share-manager share-manager-pvc-vm1-disk does not serve yet")
