"""A drain of a node that holds VMs and their NFS servers, and a node failure, on Longhorn 1.12's
model (kubefake/longhorn.py: the remount deletion, gated by its two Settings): on the defaults the
share-manager restarts reboot the VMs that `status` said they would; with VMs spared (the keeper's
leader with --spare-vms on) none is rebooted, and each VM ends next to its NFS server after its one
migration. KubeVirt's evacuation and Longhorn's share-manager restarts are played as they happen:
the share-managers are back within seconds, before the VMs' turn to leave."""
from __future__ import annotations

import datetime
import json

import pytest
from tests.support.kube import ago, run_verb
from tests.support.kubevirt_api import eventually
from tests.support.stale import VMS, drained_node_cluster, launchers, pause_on_io_error, stale_vm1, volumes

from kubefake import longhorn
from webhook import kinds
from webhook.config import Settings

async def predicted(tmp_path, kmock):
    """What `status --drain node-a` says the drain will do: the VMs Longhorn reboots (VM by VM in
    status, and in the drain's preview, which must agree), and the drain's migrations."""
    code, out, err = await run_verb(tmp_path, kmock, "status", "-o", "json", "--lease-namespace", "default",
                                    "--drain", "node-a")
    assert code == 0, err
    said = json.loads(out)
    rebooted = {vm["name"] for vm in said["vms"] if vm["rebooted_by_storage_restart"] == "yes"}
    assert {name.split("/")[1] for name in said["drain"]["rebooted"]} == rebooted
    # The spared ones keep their mounts: if one goes stale, the keeper's recovery, named with its price.
    spared = {f"default/{name}" for name in VMS} - set(said["drain"]["rebooted"])
    assert said["drain"]["stale_recovery"] == {"vms": sorted(spared), "migrations": 2 * len(spared)}
    assert said["drain"]["migrations"] == len(VMS) and said["drain"]["cannot_move"] == {}
    code, text, err = await run_verb(tmp_path, kmock, "status", "--lease-namespace", "default", "--drain", "node-a")
    assert code == 0 and f"draining node-a: {len(VMS)} live migration(s)" in text, text + err
    return rebooted


async def drain(kmock, cluster):
    """node-a drained: its share-managers evicted and back on node-b seconds later (Longhorn), each
    mount refreshed as Longhorn 1.12 does; then the VMs evacuated, one migration each, to node-b."""
    requested = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=1)
    deleted = []
    for name in VMS:
        await cluster.move_storage(f"pvc-{name}-disk", "node-b")
        deleted += await longhorn.remount(kmock.apiserver, f"pvc-{name}-disk", requested)
    for name in VMS:
        if f"virt-launcher-{name}-x7k2p" in launchers(kmock):  # a VM whose pod Longhorn deleted is not migrated
            await cluster.move_vm(name, "node-b")
    return {path.split("/")[1].removeprefix("virt-launcher-").removesuffix("-x7k2p") for path in deleted}


async def test_on_longhorn_112_defaults_the_drain_reboots_the_vms_status_named(tmp_path, kmock, cluster, make_keeper):
    cluster.seed(drained_node_cluster(spared=False))
    keeper = await make_keeper(Settings(keep="migrate", keep_after=0))
    await keeper.run_pass()
    assert await predicted(tmp_path, kmock) == set(VMS)
    rebooted = await drain(kmock, cluster)
    assert rebooted == set(VMS)  # each launcher pod deleted: the VM failed, to start again cold


@pytest.mark.parametrize("how", ["spared already", "--spare-vms on"])
async def test_with_vms_spared_the_drain_reboots_none_and_each_ends_by_its_storage(tmp_path, kmock, cluster,
                                                                                    make_keeper, how):
    cluster.seed(drained_node_cluster(spared=how == "spared already"))
    keeper = await make_keeper(Settings(keep="migrate", keep_after=0, spare_vms=how == "--spare-vms on"))
    await keeper.run_pass()  # the leader's first pass: the VMI kind put on the blacklist, if asked
    assert await predicted(tmp_path, kmock) == set()
    rebooted = await drain(kmock, cluster)
    assert rebooted == set()
    assert launchers(kmock) == {f"virt-launcher-{name}-x7k2p" for name in VMS}
    report = await keeper.run_pass()
    assert {r.name: (r.state.value, r.node) for r in report.vms} == {name: ("co-located", "node-b") for name in VMS}
    assert cluster.migrations() == []  # the evacuation's one migration each; none of ours


async def test_a_node_failure_reboots_the_vms_whose_nfs_server_it_held_unless_spared(kmock, cluster):
    """node-a fails: its share-managers restart on node-b. vm3 runs on node-c with its disk served from
    node-a: on the defaults Longhorn deletes its pod too, though its node is fine."""
    for spared in (False, True):
        kmock.objects.clear()
        objects = drained_node_cluster(spared)
        for obj in objects:
            if obj["kind"] in ("VirtualMachineInstance", "Pod") and "vm3" in obj["metadata"]["name"]:
                (obj.get("status") or {})["nodeName"] = "node-c"
                obj.setdefault("spec", {})
                if obj["kind"] == "Pod":
                    obj["spec"]["nodeName"] = "node-c"
        cluster.seed(objects)
        requested = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=1)
        await cluster.move_storage("pvc-vm3-disk", "node-b")
        deleted = await longhorn.remount(kmock.apiserver, "pvc-vm3-disk", requested)
        assert deleted == ([] if spared else ["default/virt-launcher-vm3-x7k2p"]), spared


# --------------------------------------------------------------------------- a spared VM on a stale mount

async def test_a_spared_vm_on_a_stale_mount_apart_from_its_storage_moves_there_once_at_once(tmp_path, kmock, cluster,
                                                                                              make_keeper):
    """The NFS servers of a drained node restart on node-b before the VMs leave: vm1's pod, older than the
    remount request, keeps its stale mount and QEMU stops it. The keeper's move to its storage mounts it
    afresh, without --keep-after's wait (vm2 and vm3, apart as long, wait); once its new pod started after
    the request, no second migration, even while it still shows paused."""
    keeper = await stale_vm1(kmock, cluster, make_keeper, "node-b", keep_after=3600, restarted=("vm1", "vm2"))
    await cluster.patch("/api/v1/namespaces/default/pods/virt-launcher-vm2-x7k2p",  # vm2 came back after the request
                        {"metadata": {"creationTimestamp": ago(seconds=0)}, "status": {"startTime": ago(seconds=0)}})
    code, out, err = await run_verb(tmp_path, kmock, "status", "-o", "json", "--lease-namespace", "default",
                                    "--keep", "migrate", "--keep-after", "3600")
    assert code == 0, err
    said = {vm["name"]: vm for vm in json.loads(out)["vms"]}
    assert said["vm1"]["stale_mount"].startswith("paused on an I/O error of disk disk0 at ")
    assert "after the keeper resumed it at" in said["vm1"]["stale_mount"]
    requested = kmock.objects[kinds.LONGHORN_VOLUME, "longhorn-system", "pvc-vm1-disk"].raw["status"]["remountRequestedAt"]
    assert said["vm1"]["stale_since"] == requested  # the remount request its stale mount dates from
    assert said["vm1"]["next"] == "moves to node-b at the keeper's next pass (stale mount)"
    assert said["vm2"]["stale_mount"] is None and said["vm2"]["hold"] == "apart too briefly"
    await keeper.run_pass()
    made = cluster.migrations()
    assert [(m["spec"]["vmiName"], m["spec"].get("addedNodeSelector")) for m in made] == [
        ("vm1", {"kubernetes.io/hostname": "node-b"})]
    assert made[0]["metadata"]["annotations"]["kubevirt-scheduler/reason"].startswith(
        "recovering a stale mount: migrating from node-a to node-b: paused on an I/O error of disk disk0 at ")
    [event] = await eventually(lambda: [e for e in cluster.events() if e.get("reason") == "RecoveringStaleMount"])
    assert event["involvedObject"]["name"] == "vm1" and made[0]["metadata"]["name"] in event["message"]
    await cluster.finish(made[0]["metadata"]["name"], "Succeeded", "vm1", "node-b")
    report = await keeper.run_pass()
    assert len(cluster.migrations()) == 1  # its pod started after the request: nothing stale to recover
    assert {r.name: (r.state.value, r.hold) for r in report.vms}["vm1"] == ("co-located", "not apart")


async def test_a_vm_paused_on_an_io_error_with_no_remount_after_its_pod_started_is_left_alone(kmock, cluster,
                                                                                               make_keeper):
    """Paused on an I/O error with no remount requested after its pod started: nothing says a migration
    would help; the keeper reports and does nothing."""
    cluster.seed(drained_node_cluster(spared=True))
    volumes(kmock)
    keeper = await make_keeper(Settings(keep="migrate", keep_after=0))
    await pause_on_io_error(kmock, cluster, "vm1")
    report = await keeper.run_pass()
    assert cluster.migrations() == []
    assert {r.name: r.hold for r in report.vms}["vm1"] == "not apart"


@pytest.mark.parametrize("spared, auto_delete, deleted", [
    (False, "true", True), (True, "true", True), (True, "false", False)])
def test_the_attachment_pod_of_a_hotplugged_disk_is_deleted_whatever_the_blacklist(spared, auto_delete, deleted):
    """KubeVirt's attachment pod is owned by the launcher pod, a core-group owner: Longhorn matches
    the blacklist on `group/Kind` and a `v1` owner has no group, so only auto-delete off spares it."""
    from tests.support.kube import load

    pod = load("kubevirt-1.8/hotplug-attachment-pod.yaml")
    pod["status"]["startTime"] = ago(days=1)
    settings = {longhorn.AUTO_DELETE: auto_delete,
                longhorn.BLACKLIST: "kubevirt.io/VirtualMachineInstance;/Pod;Pod" if spared else ""}
    requested = datetime.datetime.now(datetime.UTC)
    assert bool(longhorn.doomed([pod], {("vms", "disk-hp")}, requested, settings)) is deleted


# --------------------------------------------------------------------------- Longhorn's remount request itself

@pytest.mark.parametrize("spared", [True, False], ids=["spared", "defaults"])
async def test_a_share_manager_restart_stamps_the_request_on_every_reconcile_wherever_it_comes_back(cluster, kmock,
                                                                                                   spared):
    """longhorn-manager v1.12.1 (`ReconcileShareManagerState`): the request is "now" at each reconcile while
    the share-manager is in Error or Unknown, on the same node too, and never cleared; once the new pod
    serves, the pods that started before it are deleted unless their owner kind is on the blacklist."""
    cluster.seed(drained_node_cluster(spared=spared))
    volumes(kmock)
    down = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    volume = kmock.objects[kinds.LONGHORN_VOLUME, "longhorn-system", "pvc-vm1-disk"]
    requested, deleted = await longhorn.restart_share_manager(
        kmock.apiserver, "pvc-vm1-disk", "node-a", down=down, starts=down + datetime.timedelta(seconds=22),
        serves=down + datetime.timedelta(seconds=30))
    assert requested == down + datetime.timedelta(seconds=20)  # the last of the stamps every 5 s before the start
    assert volume.raw["status"]["remountRequestedAt"] == requested.strftime("%Y-%m-%dT%H:%M:%SZ")
    server = kmock.objects[kinds.POD, "longhorn-system", "share-manager-pvc-vm1-disk"].raw
    assert server["spec"]["nodeName"] == "node-a"  # back on its own node: requested all the same
    assert server["status"]["conditions"] == [{"type": "Ready", "status": "True",
                                               "lastTransitionTime": (down + datetime.timedelta(seconds=30))
                                               .strftime("%Y-%m-%dT%H:%M:%SZ")}]
    assert deleted == ([] if spared else ["default/virt-launcher-vm1-x7k2p"])
    later = down + datetime.timedelta(minutes=5)
    await longhorn.request_remount(kmock.apiserver, "pvc-vm1-disk", later)  # an auto-salvage: stamped again
    assert volume.raw["status"]["remountRequestedAt"] == later.strftime("%Y-%m-%dT%H:%M:%SZ")
