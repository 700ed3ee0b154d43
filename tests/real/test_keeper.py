"""The keeper on a real apiserver: its dry run (KubeVirt 1.8's schema keeps `spec.addedNodeSelector`
and `spec.priority`; one from before KubeVirt 1.6, which knows neither, refuses them under strict
field validation, and the keeper then moves nothing), the migrations of its recovery from a stale
mount, its state ConfigMap, and a pass in which a tenant's webhook that is down fails one VM's
migrations with 500."""
from __future__ import annotations

import asyncio
import copy
import dataclasses
import datetime

import yaml
from kubefake.envtest import FIXTURES, Api, Refused, api_client, free_port
from tests.support.keeping import apart_vmi
from tests.support.kube import launcher_pod_of, node, rwx_disk, vmi
from tests.support.kubevirt_api import TIMING, eventually
from tests.support.stores import TEST_TIMING

from webhook.config import Settings
from webhook.keeper.keeper import Keeper
from webhook.keeper.targeted import TargetedMigration
from webhook.stores.cache import WatchedClusterStore
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
        assert await current.check(manifest()) is True, current.note
        assert current.priority is True, current.priority_note

        control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=yaml.safe_dump(before_16()))
        try:
            old = TargetedMigration(api, timeout=10)
            for _ in range(50):  # the apiserver serves the new schema a moment later
                if await old.check(manifest()) is False:
                    break
                await asyncio.sleep(0.2)
            assert old.available is False
            assert "rejects spec.addedNodeSelector as unknown" in old.note and "1.6" in old.note
        finally:
            control_plane.apply_files(FIXTURES / "kubevirt-1.8" / "crds.yaml")
            restored = TargetedMigration(api, timeout=10)
            for _ in range(50):  # served again before the next test
                if await restored.check(manifest()):
                    break
                await asyncio.sleep(0.2)


async def test_the_recovery_paths_migrations_and_the_keepers_state_are_created_on_the_real_apiserver(control_plane):
    """What the recovery of a VM on a stale mount creates, as the real apiserver takes it with KubeVirt
    1.8's schema: the migration to its storage node and the first leg of the hop beside it (each marked
    `recovers`, one node named), and the keeper's state ConfigMap, written and written over."""
    import dataclasses

    from webhook.keeper.kubevirt_api import create_migration
    from webhook.keeper.state_store import StateStore
    from webhook.rules.keeping.state import Action, KeeperState

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
        assert await store.read() == KeeperState()
        state = KeeperState().refused(VMS, "vm1", Action.MIGRATE, 403, "forbidden", datetime.datetime.now(datetime.UTC))
        assert await store.write(state) is True
        assert await store.write(state) is False  # unchanged: not written again
        later = dataclasses.replace(state, refusals=())
        assert await store.write(later) is True
        assert await StateStore(api, VMS, "kubevirt-colocate-keeper-state", timeout=10).read() == later


FAILING = "tenant-down"  # the namespace of the VMs a tenant's webhook that is down fails one of
TENANT_WEBHOOK = "tenant-migrations"
VMIM = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration"}


def tenant_webhook(port: int) -> dict:
    """A tenant's ValidatingWebhookConfiguration for the migrations of vm1 of FAILING alone (its
    matchConditions), failurePolicy Fail, sideEffects None (so dry runs call it too), calling a
    loopback port nothing listens on: kube-apiserver answers 500 "failed calling webhook"."""
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": TENANT_WEBHOOK},
            "webhooks": [{"name": "migrations.tenant.example.com", "failurePolicy": "Fail", "sideEffects": "None",
                          "admissionReviewVersions": ["v1"], "timeoutSeconds": 2,
                          "clientConfig": {"url": f"https://127.0.0.1:{port}/validate"},
                          "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": FAILING}},
                          "rules": [{"apiGroups": ["kubevirt.io"], "apiVersions": ["v1"], "operations": ["CREATE"],
                                     "resources": ["virtualmachineinstancemigrations"]}],
                          "matchConditions": [{"name": "vm1-only", "expression": 'object.spec.vmiName == "vm1"'}]}]}


async def apart_vms(admin: Api) -> list[dict]:
    """vm1 and vm2 of FAILING on fail-a and fail-c, their disks served from fail-b: what was created."""
    await admin.namespace(FAILING)
    await admin.longhorn()
    made = [await admin.create(node(name)) for name in ("fail-a", "fail-b", "fail-c")]
    for vm, where in (("vm1", "fail-a"), ("vm2", "fail-c")):
        made += [await admin.create(obj) for obj in rwx_disk(f"{vm}-disk", "fail-b", namespace=FAILING)]
        made.append(await admin.create(vmi(vm, where, f"{vm}-disk", namespace=FAILING)))
        made.append(await admin.create(launcher_pod_of(made[-1])))
    return made


async def refused_for_vm1(admin: Api) -> bool:
    """The apiserver calls the tenant's webhook: a dry run of a migration of vm1 is answered 500."""
    try:
        await admin.create({**VMIM, "metadata": {"generateName": "vm1-", "namespace": FAILING},
                            "spec": {"vmiName": "vm1"}}, dry_run=True)
    except Refused as refused:
        return refused.code == 500 and "failed calling webhook" in refused.message
    return False


async def one_pass(control_plane) -> tuple:
    """One pass of a keeper in migrate mode on the control plane: its report and its readiness notes."""
    settings = Settings(keep="migrate", keep_after=0)
    async with api_client(control_plane.kubeconfig) as api:
        store = WatchedClusterStore(api, settings, TEST_TIMING)
        store.start()
        try:
            await store.wait_synced(timeout=30)
            keeper = Keeper(api, store, settings, timing=dataclasses.replace(TIMING, request_timeout=10))
            async with keeper.watching() as watch:
                await asyncio.wait_for(watch.wait_synced(), 30)
                return await keeper.run_pass(), keeper.degraded()
        finally:
            await store.close()


async def test_a_tenants_webhook_that_is_down_holds_its_vm_alone_and_the_keeper_moves_another(control_plane):
    async with Api(control_plane) as admin:
        made = await apart_vms(admin)
        control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(tenant_webhook(free_port())))
        try:
            await eventually(lambda: refused_for_vm1(admin), 20, 0.2)
            report, notes = await one_pass(control_plane)
        finally:
            control_plane.kubectl("delete", "validatingwebhookconfiguration", TENANT_WEBHOOK, "--ignore-not-found")
            for migration in await admin.list(VMIM, FAILING):
                await admin.delete(migration)
            for obj in reversed(made):
                await admin.delete(obj)
    moved = [name.split("/")[1].split("-colocate-")[0] for name in report.created if name.startswith(f"{FAILING}/")]
    assert moved == ["vm2"]  # in the same pass
    [vm1] = [r for r in report.vms if (r.namespace, r.name) == (FAILING, "vm1")]
    assert "failed: API answered 500: " in vm1.last_action and "failed calling webhook" in vm1.last_action
    assert not [note for note in notes if "500" in note]  # one VM's failure: the keeper is fine
