"""`explain NAMESPACE/VM` against the kmock emulator, as an admin runs it."""
import copy
import json

import jsonpatch
import pytest
from tests.support.stores import seed
from tests.support.kube import (
    affinity_ops,
    fixture_cluster,
    launcher_pod,
    load,
    longhorn_volume,
    run_verb,
    running_vm,
)

from webhook.kinds import POD, VM, VMI

VMI_OBJ = {
    "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
    "metadata": {"name": "vm1", "namespace": "default", "uid": "5f0c3c1e-8f4b-4c36-9a57-2a1f0e6b7c01"},
    "spec": {"volumes": [{"name": "rootdisk", "persistentVolumeClaim": {"claimName": "vm1-rootdisk"}},
                         {"name": "cloudinitdisk", "cloudInitNoCloud": {"userData": "#cloud-config"}}]},
    "status": {"nodeName": "node-a", "phase": "Running"},
}
VM_OBJ = {
    "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
    "metadata": {"name": "vm1", "namespace": "default"},
    "spec": {"runStrategy": "Always", "template": {
        "metadata": {"annotations": {"kubevirt-scheduler/co-schedule": "true"}},
        "spec": {"volumes": [{"name": "rootdisk", "dataVolume": {"name": "vm1-rootdisk"}}]}}},
}




async def explain(tmp_path, kmock, *args):
    return await run_verb(tmp_path, kmock, "explain", *args, timeout=30)


def seed_vm(kmock, launcher_node="node-a", vmi=True, cache=None):
    launcher = running_vm("vm1", launcher_node, "vm1-rootdisk")
    seed(kmock, fixture_cluster() + [launcher])
    kmock.resources[VM] = {}
    kmock.resources[VMI] = {}
    kmock.objects[VM, "default", "vm1"] = VM_OBJ
    if vmi:
        status = dict(VMI_OBJ, status={"nodeName": launcher_node, "phase": "Running"})
        if cache:
            status["spec"] = dict(VMI_OBJ["spec"], domain={"devices": {"disks": [{"name": "rootdisk", "cache": cache}]}})
        kmock.objects[VMI, "default", "vm1"] = status


async def test_explain_a_vm_away_from_its_share_manager(tmp_path, kmock):
    seed_vm(kmock, "node-a")
    code, out, err = await explain(tmp_path, kmock, "default/vm1")
    assert code == 0, err
    assert "running on node-a" in out
    assert "disk vm1-rootdisk: share-manager on node-b" in out
    assert "co-located: no" in out
    assert "the webhook would now: pinned node-b" in out, out


async def test_explain_json_for_a_co_located_vm(tmp_path, kmock):
    seed_vm(kmock, "node-b")
    code, out, err = await explain(tmp_path, kmock, "default/vm1", "-o", "json")
    assert code == 0, err
    report = json.loads(out)
    assert report["co_located"] is True and report["opted_in"] is True
    assert report["disks"][0]["share_manager_node"] == "node-b"
    assert report["would"]["decision"] == "pinned" and report["would"]["node"] == "node-b"


@pytest.mark.parametrize(("node", "cache", "noted"), [("node-b", "writeback", True), ("node-b", "none", False),
                                                     ("node-a", "writeback", False)])
async def test_explain_names_a_disk_with_cache_writeback_served_beside_the_vm(tmp_path, kmock, node, cache, noted):
    """Loopback NFS: a disk in cache mode writeback whose share-manager runs on the VM's node is named,
    with what to do; in KubeVirt's default mode, or served from another node, it is not."""
    seed_vm(kmock, node, cache=cache)
    code, out, err = await explain(tmp_path, kmock, "default/vm1")
    assert code == 0, err
    notes = [line for line in out.splitlines() if "writeback" in line]
    assert notes == ([
        "note: vm1-rootdisk uses cache: writeback and is served by an NFS server on the VM's own node: under memory "
        "pressure its dirty pages written back through it can deadlock the node (loopback NFS); set the disk's cache "
        "to none (KubeVirt's default) or writethrough, or opt the VM out (docs/operations.md)"] if noted else [])


async def test_explain_a_stopped_vm_reads_the_template(tmp_path, kmock):
    seed_vm(kmock, vmi=False)
    code, out, err = await explain(tmp_path, kmock, "default/vm1", "-o", "json")
    report = json.loads(out)
    assert report["running_on"] is None and report["disks"][0]["claim"] == "vm1-rootdisk"
    assert report["would"]["decision"] == "unknown"


@pytest.mark.parametrize("target, message", [("default/nope", "no VirtualMachine"), ("a/vm1/x", "NAMESPACE/VM")])
async def test_explain_errors_are_clear(tmp_path, kmock, target, message):
    seed_vm(kmock)
    code, out, err = await explain(tmp_path, kmock, target)
    assert code != 0 and message in err and "Traceback" not in err


async def test_explain_ignores_our_own_earlier_pin(tmp_path, kmock):
    """The running pod carries the pin we added when it started; today's decision must not trip over it."""
    from tests.support.kube import apply_valid

    from webhook.config import Settings
    from webhook.rules.placement.decide import PINNED, Decision
    from webhook.rules.placement.patch import patch_for

    launcher = running_vm("vm1", "node-a", "vm1-rootdisk")
    launcher["spec"].pop("affinity")
    user_term = {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["node-c"]}]}
    launcher["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [user_term]}}}
    earlier = Decision(PINNED, node="node-a", preferences=(("node-a", 100),), reason="pinned to node-a")
    launcher = apply_valid(launcher, patch_for(launcher, earlier, Settings()))
    seed(kmock, fixture_cluster() + [launcher])
    kmock.resources[VM] = {}
    kmock.resources[VMI] = {}
    kmock.objects[VM, "default", "vm1"] = VM_OBJ
    kmock.objects[VMI, "default", "vm1"] = VMI_OBJ
    code, out, err = await explain(tmp_path, kmock, "default/vm1", "-o", "json")
    report = json.loads(out)
    assert report["would"]["decision"] == "pinned" and report["would"]["node"] == "node-b", report


# --------------------------------------------------------------------------- after a migration


def seed_migrated(kmock, pods, **status):
    """vm1 as vmi-migrated.yaml shows it (moved from node-b, where its share-manager runs, to
    node-a), with `status` fields changed, and these launcher pods."""
    vmi = copy.deepcopy(load("vmi-migrated.yaml"))
    vmi["status"].update(status)
    seed(kmock, fixture_cluster() + pods)
    kmock.resources[VM] = {}
    kmock.resources[VMI] = {}
    kmock.objects[VM, "default", "vm1"] = VM_OBJ
    kmock.objects[VMI, "default", "vm1"] = vmi


def source_pod(node="node-b", phase="Running", **kw):
    return launcher_pod("virt-launcher-pod.yaml", "virt-launcher-vm1-abcde", node, "2026-11-01T08:00:00Z", phase, **kw)


def target_pod(node="node-c", phase="Running", **kw):
    return launcher_pod("migration-target-pod.yaml", "virt-launcher-vm1-zzzzz", node, "2026-11-20T11:59:00Z", phase, **kw)


IN_FLIGHT = {"nodeName": "node-a", "migrationState": {
    "sourceNode": "node-a", "targetNode": "node-c", "targetPod": "virt-launcher-vm1-zzzzz",
    "startTimestamp": "2026-11-20T11:59:00Z", "completed": False}}


async def test_explain_finds_the_migrated_launcher_pod(tmp_path, kmock):
    seed_migrated(kmock, [source_pod(phase="Succeeded"), load("migrated-launcher-pod.yaml")])
    code, out, err = await explain(tmp_path, kmock, "default/vm1")
    assert code == 0, err
    assert out.splitlines()[:2] == [
        "VM default/vm1: running on node-a (pod virt-launcher-vm1-q8w4z), opted in: yes",
        "  last migration from node-b to node-a: completed at 2026-11-20T09:58:31Z",
    ]
    assert "disk vm1-rootdisk: share-manager on node-b" in out and "co-located: no" in out
    assert "the webhook would now: pinned node-b" in out, out


async def test_explain_json_after_a_migration(tmp_path, kmock):
    seed_migrated(kmock, [load("migrated-launcher-pod.yaml")])
    code, out, err = await explain(tmp_path, kmock, "default/vm1", "-o", "json")
    report = json.loads(out)
    assert (report["running_on"], report["launcher_pod"], report["launcher_node"]) == (
        "node-a", "virt-launcher-vm1-q8w4z", "node-a")
    assert report["migration"] == {"source": "node-b", "target": "node-a", "target_pod": "virt-launcher-vm1-q8w4z",
                                   "state": "completed", "ended": "2026-11-20T09:58:31Z"}
    assert report["would"]["decision"] == "pinned" and report["would"]["node"] == "node-b"


@pytest.mark.parametrize("target, pod, line", [
    (target_pod(), "virt-launcher-vm1-zzzzz on node-c", "  migrating from node-a to node-c"),
    (target_pod(None, "Pending"), "virt-launcher-vm1-abcde", "  migrating from node-a to node-c"),
    (target_pod(terminating=True), "virt-launcher-vm1-abcde", "  migrating from node-a to node-c"),
    (target_pod(phase="Failed"), "virt-launcher-vm1-abcde", "  migrating from node-a to node-c"),
], ids=["target-scheduled", "target-not-scheduled", "failed-target-terminating", "failed-target-finished"])
async def test_explain_during_a_migration(tmp_path, kmock, target, pod, line):
    """The VM counts where it is going once the target is scheduled; a failed target never."""
    seed_migrated(kmock, [source_pod("node-a"), target], **IN_FLIGHT)
    code, out, err = await explain(tmp_path, kmock, "default/vm1")
    assert code == 0, err
    assert out.splitlines()[0] == f"VM default/vm1: running on node-a (pod {pod}), opted in: yes"
    assert out.splitlines()[1].startswith(line)
    assert "the webhook would now: pinned node-b" in out, out


async def test_explain_a_vm_that_is_not_opted_in(tmp_path, kmock):
    """explain answers for any VM: its pod is found, and admission would leave it alone."""
    seed_vm(kmock, "node-a")
    kmock.objects[POD, "default", "virt-launcher-vm1-x7k2p"] = running_vm("vm1", "node-a", "vm1-rootdisk", opted_in=False)
    code, out, err = await explain(tmp_path, kmock, "default/vm1", "-o", "json")
    report = json.loads(out)
    assert report["launcher_pod"] == "virt-launcher-vm1-x7k2p" and report["opted_in"] is False
    assert report["would"] == {"decision": "untouched", "reason": "not opted in"}


async def test_explain_shows_a_pinned_pod_the_scheduler_cannot_place(tmp_path, kmock):
    """The safety net: a pod we pinned, unschedulable for minutes, with the scheduler's message."""
    seed_vm(kmock, "node-a", vmi=False)
    stuck = running_vm("vm1", None, "vm1-rootdisk")
    stuck["metadata"]["name"] = "virt-launcher-vm1-zzzzz"
    stuck["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    stuck["metadata"]["annotations"].update({"kubevirt-scheduler/decision": "pinned", "kubevirt-scheduler/node": "node-b"})
    stuck = jsonpatch.apply_patch(stuck, affinity_ops(stuck["spec"], ("node-b",), ()))  # the pin that goes with it
    message = "0/3 nodes are available: 1 Insufficient memory, 2 node(s) didn't match Pod's node affinity/selector."
    stuck["status"] = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]}
    kmock.objects[POD, "default", stuck["metadata"]["name"]] = stuck
    code, out, err = await explain(tmp_path, kmock, "default/vm1")
    assert code == 0, err
    line = next(line for line in out.splitlines() if line.startswith("STRANDED:"))
    assert "pod virt-launcher-vm1-zzzzz pinned to node-b, unschedulable for" in line and message in line
    code, out, err = await explain(tmp_path, kmock, "default/vm1", "-o", "json")
    assert json.loads(out)["stranded"][0]["node"] == "node-b"


@pytest.mark.parametrize("local_replica", [True, False], ids=["local-replica", "no-local-replica"])
async def test_explain_follows_the_io_path_to_the_replicas(tmp_path, kmock, local_replica):
    seed_vm(kmock, "node-a")
    longhorn_volume(kmock, local_replica=local_replica)
    code, out, err = await explain(tmp_path, kmock, "default/vm1")
    assert code == 0, err
    said = "yes" if local_replica else "no"
    assert f"    data locality best-effort, healthy replica on node-b: {said}" in out.splitlines(), out
    note = [line for line in out.splitlines() if line.startswith("note: ")]
    if local_replica:
        assert note == []
    else:
        assert note == ["note: co-location removes only the NFS hop for vm1-rootdisk (no healthy replica on node-b, "
                        "data locality best-effort): its block I/O still crosses the network"]


async def test_explain_without_longhorn_volumes_readable_says_so(tmp_path, kmock):
    seed_vm(kmock, "node-a")
    code, out, err = await explain(tmp_path, kmock, "default/vm1", "-o", "json")
    assert code == 0, err
    [path] = json.loads(out)["io_path"]
    assert path["local_replica"] is None and path["unknown"].startswith("Longhorn volumes and replicas not read")


async def test_explain_says_where_the_vms_evacuations_were_aimed(tmp_path, kmock):
    """The evacuation the webhook aimed (`--aim-evacuations on`), and one left as KubeVirt made it."""
    from webhook.kinds import VMIM

    seed_vm(kmock, "node-b")
    aimed = copy.deepcopy(load("vmim-evacuation.yaml"))
    aimed["metadata"].update(name="kubevirt-evacuation-aimed", creationTimestamp="2026-11-20T09:58:00Z")
    aimed["spec"]["addedNodeSelector"] = {"kubernetes.io/hostname": "node-b"}
    untouched = copy.deepcopy(load("vmim-evacuation.yaml"))
    untouched["metadata"].update(name="kubevirt-evacuation-first", creationTimestamp="2026-11-20T09:50:00Z")
    untouched["status"]["phase"] = "Failed"
    kmock.resources[VMIM] = {}
    for migration in (aimed, untouched):
        kmock.objects[VMIM, "default", migration["metadata"]["name"]] = migration
    code, out, err = await explain(tmp_path, kmock, "default/vm1")
    assert code == 0, err
    assert "  evacuation kubevirt-evacuation-first off node-b: not aimed (KubeVirt's own choice), Failed" in out
    assert "  evacuation kubevirt-evacuation-aimed off node-b: aimed at node-b, Succeeded" in out
    code, out, err = await explain(tmp_path, kmock, "default/vm1", "-o", "json")
    assert json.loads(out)["evacuations"][1] == {"name": "kubevirt-evacuation-aimed", "from": "node-b",
                                                 "aimed_at": "node-b", "phase": "Succeeded"}
