"""What the keeper's caches keep of VMIs and migrations: everything rules/keeping/keep.py reads, little else;
and a migration deleted by uid, never another one that took its name."""
import copy
import json

import aiohttp
import pytest
from tests.support.stores import api_host, for_host
from tests.support.kube import load
from tests.support.kubevirt_api import VMIMS, KubeVirtApi, register

from webhook.stores.shapes import shapes
from webhook.keeper.kubevirt_api import create_migration, delete_migration
from webhook.config import Settings
from webhook.kinds import VMI, VMIM
from webhook.rules.keeping.running import read_vmi


def full_migration():
    obj = copy.deepcopy(load("vmim-to-storage.yaml"))
    obj["metadata"].update(name="vm1-colocate-x1", creationTimestamp="2026-11-20T10:00:00Z",
                           annotations={"kubevirt-scheduler/node": "node-b", "kubevirt-scheduler/reason": "long " * 200},
                           managedFields=[{"manager": "virt-controller"}])
    obj["status"] = {
        "phase": "Failed",
        "phaseTransitionTimestamps": [{"phase": "Pending", "phaseTransitionTimestamp": "2026-11-20T10:00:01Z"},
                                      {"phase": "Failed", "phaseTransitionTimestamp": "2026-11-20T10:03:00Z"}],
        "migrationState": {"endTimestamp": "2026-11-20T10:02:59Z", "sourceNode": "node-a", "targetPod": "p"},
        "conditions": [{"type": "Ready", "status": "False", "message": "x" * 500}],
    }
    return obj


def test_of_a_vmi_the_keeper_keeps_little_more_than_its_identity_placement_and_migration():
    """A VMI's status and domain are most of its bytes and none of what the keeper reads. (That
    the keeper reads the same from what is kept is the differential property of test_shapes.py.)"""
    vmi = copy.deepcopy(load("vmi-migrated.yaml"))
    vmi["spec"]["volumes"].append({"name": "cloudinit", "cloudInitNoCloud": {"userData": "#cloud-config\n" * 100}})
    vmi["metadata"]["managedFields"] = [{"manager": "virt-handler"}]
    kept = shapes(Settings())[VMI.kind](vmi)
    # Of its disks, their names and cache modes (whether a migration off a stale mount can finish).
    assert kept["spec"]["domain"] == {"cpu": {"model": "host-model"}, "machine": {"type": "q35"},
                                      "devices": {"disks": [{"name": "rootdisk"}]}}
    text = json.dumps(kept)
    for dropped in ("activePods", "cloud-config", "managedFields", "kubevirt.io/latest-observed-api-version"):
        assert dropped not in text, dropped


def test_a_custom_opt_in_annotation_is_kept_on_vmis():
    settings = Settings(opt_in_annotation="example.com/colocate")
    vmi = copy.deepcopy(load("vmi-migrated.yaml"))
    vmi["metadata"]["annotations"]["example.com/colocate"] = "true"
    assert read_vmi(shapes(settings)[VMI.kind](vmi), settings).opted_in


def test_of_a_migration_the_keeper_keeps_neither_its_conditions_nor_our_reason():
    kept = shapes(Settings())[VMIM.kind](full_migration())
    text = json.dumps(kept)
    for dropped in ("conditions", "managedFields", "kubevirt-scheduler/reason", "sourceNode", "targetPod"):
        assert dropped not in text, dropped


# --------------------------------------------------------------------------- deleting by uid


@pytest.fixture
def kmock_options(kmock_options):
    return {**kmock_options, "cls": KubeVirtApi}


async def test_a_migration_is_deleted_by_uid_never_one_that_took_its_name(kmock):
    """A cancel names the migration's uid (DeleteOptions.preconditions): if ours went and someone
    created another under the same name meanwhile, the apiserver answers 409 and leaves it be."""
    register(kmock)
    api = for_host(api_host(kmock))
    try:
        ours = await create_migration(api, load("vmim-to-storage.yaml"), timeout=2)
        name, uid = ours.obj["metadata"]["name"], ours.obj["metadata"]["uid"]
        async with aiohttp.ClientSession(api_host(kmock), raise_for_status=True) as session:
            await session.delete(f"{VMIMS}/{name}")  # an admin cancels ours, and a user's takes the name
            await session.post(VMIMS, json={"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                                            "metadata": {"name": name, "namespace": "default"},
                                            "spec": {"vmiName": "vm1"}})
        answer = await delete_migration(api, "default", name, uid=uid, timeout=2)
        assert answer.status == 409 and not answer.ok
        assert (f'VirtualMachineInstanceMigration.kubevirt.io "{name}": the UID in the precondition ({uid}) does not '
                "match the UID in record") in answer.error
        theirs = kmock.objects[VMIM, "default", name]
        assert not theirs.deleted and theirs.raw["metadata"]["uid"] != uid
        sent = [r for r in kmock if r.method == "DELETE" and r.name == name][-1]
        assert sent.data == {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}

        answer = await delete_migration(api, "default", name, uid=theirs.raw["metadata"]["uid"], timeout=2)
        assert answer.ok and kmock.objects[VMIM, "default", name].deleted
    finally:
        await api.close()


async def test_a_stale_resource_version_precondition_is_a_conflict_too(kmock):
    register(kmock)
    async with aiohttp.ClientSession(api_host(kmock)) as session:
        async with session.post(VMIMS, json=load("vmim-to-storage.yaml")) as response:
            made = await response.json()
        name = made["metadata"]["name"]
        stale = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"resourceVersion": "1"}}
        async with session.delete(f"{VMIMS}/{name}", json=stale) as response:
            assert response.status == 409 and (await response.json())["reason"] == "Conflict"
        assert not kmock.objects[VMIM, "default", name].deleted
        current = {**stale, "preconditions": {"resourceVersion": made["metadata"]["resourceVersion"],
                                              "uid": made["metadata"]["uid"]}}
        async with session.delete(f"{VMIMS}/{name}", json=current) as response:
            assert response.status == 200
        assert kmock.objects[VMIM, "default", name].deleted
