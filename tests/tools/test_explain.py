"""`explain NAMESPACE/VM` against the kmock emulator, as an admin runs it."""
import asyncio
import json
import sys

import pytest
from conftest import seed
from kube import kubeconfig_for, fixture_cluster, running_vm

from webhook.kinds import VM, VMI

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
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "webhook", "explain", *args, "--kubeconfig", kubeconfig_for(tmp_path, str(kmock.url).rstrip("/")),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    return proc.returncode, out.decode(), err.decode()


def seed_vm(kmock, launcher_node="node-a", vmi=True):
    launcher = running_vm("vm1", launcher_node, "vm1-rootdisk")
    seed(kmock, fixture_cluster() + [launcher])
    kmock.resources[VM] = {}
    kmock.resources[VMI] = {}
    kmock.objects[VM, "default", "vm1"] = VM_OBJ
    if vmi:
        status = dict(VMI_OBJ, status={"nodeName": launcher_node, "phase": "Running"})
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


async def test_explain_a_stopped_vm_reads_the_template(tmp_path, kmock):
    seed_vm(kmock, vmi=False)
    code, out, err = await explain(tmp_path, kmock, "default/vm1", "-o", "json")
    report = json.loads(out)
    assert report["running_on"] is None and report["disks"][0]["claim"] == "vm1-rootdisk"
    assert report["would"]["decision"] == "unknown"


@pytest.mark.parametrize("target, message", [("default/nope", "no VirtualMachine"), ("vm1", "NAMESPACE/VM")])
async def test_explain_errors_are_clear(tmp_path, kmock, target, message):
    seed_vm(kmock)
    code, out, err = await explain(tmp_path, kmock, target)
    assert code != 0 and message in err and "Traceback" not in err


async def test_explain_ignores_our_own_earlier_pin(tmp_path, kmock):
    """The running pod carries the pin we added when it started; today's decision must not trip over it."""
    from kube import apply_valid

    from webhook.rules.patch import patch_for
    from webhook.config import Settings
    from webhook.rules.decide import PINNED, Decision

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
