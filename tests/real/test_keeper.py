"""The keeper on a real apiserver: its dry run (KubeVirt 1.8's schema keeps `spec.addedNodeSelector`
and `spec.priority`; one from before KubeVirt 1.6, which knows neither, refuses them under strict
field validation, and the keeper then moves nothing), the migrations of its recovery from a stale
mount, and its state ConfigMap."""
from __future__ import annotations

import asyncio
import copy
import datetime

import yaml
from kubefake.envtest import FIXTURES, api_client
from tests.support.keeping import apart_vmi
from tests.support.kube import node

from webhook.cluster.client import request
from webhook.keeper.targeted import TargetedMigration
from webhook.rules.keeping.migrations import migration_manifest

VMS = "vms"


def manifest() -> dict:
    made = migration_manifest(apart_vmi(), node("node-b"), "disks served from node-b", priority="system-maintenance")
    made["metadata"]["namespace"] = VMS
    return made


def before_16() -> dict:
    """KubeVirt's migration CRD as a release before 1.6 served it: no addedNodeSelector, no priority."""
    crds = list(yaml.safe_load_all((FIXTURES / "kubevirt-1.8" / "crds.yaml").read_text()))
    [crd] = [copy.deepcopy(c) for c in crds if c["metadata"]["name"].startswith("virtualmachineinstancemigrations.")]
    for version in crd["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        spec.pop("addedNodeSelector", None)
        spec.pop("priority", None)
    return crd


async def test_the_keeper_learns_from_the_real_schema_whether_targeted_migration_works(control_plane):
    control_plane.kubectl("create", "namespace", VMS, check=False)
    async with api_client(control_plane.kubeconfig) as api:
        current = TargetedMigration(api, timeout=10)
        await current.dry_run(manifest())
        assert current.available is True, current.note
        assert current.priority is True, current.priority_note

        control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump(before_16()))
        try:
            old = TargetedMigration(api, timeout=10)
            for _ in range(50):  # the apiserver serves the new schema a moment later
                await old.dry_run(manifest())
                if old.available is False:
                    break
                await asyncio.sleep(0.2)
            assert old.available is False
            assert "rejects spec.addedNodeSelector as unknown" in old.note and "1.6" in old.note
        finally:
            control_plane.apply_files(FIXTURES / "kubevirt-1.8" / "crds.yaml")
            restored = TargetedMigration(api, timeout=10)
            for _ in range(50):  # served again before the next test
                await restored.dry_run(manifest())
                if restored.available:
                    break
                await asyncio.sleep(0.2)


async def test_the_recovery_paths_migrations_and_the_keepers_state_are_created_on_the_real_apiserver(control_plane):
    """What the recovery of a VM on a stale mount creates, as the real apiserver takes it with KubeVirt
    1.8's schema: the migration to its storage node and the first leg of the hop beside it (each marked
    `recovers`, one node named), and the keeper's state ConfigMap, written and written over."""
    from webhook.keeper.kubevirt_api import create_migration
    from webhook.keeper.records import StateStore
    from webhook.rules.keeping.record import Action, KeeperState

    control_plane.kubectl("create", "namespace", VMS, check=False)
    async with api_client(control_plane.kubeconfig) as api:
        for target, reason in (("node-b", "recovering a stale mount: migrating from node-a to node-b"),
                               ("node-c", "recovering a stale mount: migrating from node-a to node-c and back")):
            made = migration_manifest(apart_vmi(), node(target), reason, "system-maintenance", recovers=True)
            made["metadata"]["namespace"] = VMS
            answer = await create_migration(api, made, timeout=10)
            assert answer.ok, answer.error
            stored = answer.obj
            assert stored["metadata"]["annotations"]["kubevirt-scheduler/recovers"] == "stale-mount"
            assert stored["spec"]["addedNodeSelector"] == {"kubernetes.io/hostname": target}
        store = StateStore(api, VMS, "kubevirt-colocate-keeper-state", timeout=10)
        assert await store.read() == (KeeperState(), None)
        state = KeeperState().refused(VMS, "vm1", Action.MIGRATE, 403, "forbidden", datetime.datetime.now(datetime.UTC))
        assert await store.write(state) is True
        assert await store.write(state) is False  # unchanged: not written again
        later = state.cleared(VMS, "vm1", Action.MIGRATE)
        assert await store.write(later) is True
        assert await StateStore(api, VMS, "kubevirt-colocate-keeper-state", timeout=10).read() == (later, None)


async def test_kubevirts_io_error_events_are_read_by_the_keepers_field_selector(control_plane):
    """The apiserver selects Events on `reason` and `involvedObject.kind` (`ToSelectableFields`): virt-launcher's
    IOerror Event on a VMI, as virt-handler records it, is what the keeper reads; another Event is not."""
    from webhook.keeper.kubevirt_api import read_io_errors

    control_plane.kubectl("create", "namespace", VMS, check=False)
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    involved = {"kind": "VirtualMachineInstance", "namespace": VMS, "name": "vm1", "uid": "uid-vm1",
                "apiVersion": "kubevirt.io/v1"}
    async with api_client(control_plane.kubeconfig) as api:
        for name, reason, message in (("vm1.io", "IOerror", "VM Paused due to IO error at the volume: disk0"),
                                      ("vm1.other", "Started", "VirtualMachineInstance started.")):
            status, raw = await request(api, "POST", f"/api/v1/namespaces/{VMS}/events", body={
                "apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": VMS},
                "involvedObject": involved, "reason": reason, "message": message, "type": "Warning",
                "source": {"component": "virt-handler", "host": "node-a"}, "count": 3, "firstTimestamp": now,
                "lastTimestamp": now}, timeout=10)
            assert status == 201, raw
        found = await read_io_errors(api, timeout=10)
    assert isinstance(found, dict), found
    [error] = found["uid-vm1"]
    assert (error.volume, str(error.cause)) == ("disk0", "io-error")
