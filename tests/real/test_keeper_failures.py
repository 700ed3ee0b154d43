"""A pass of the keeper on a real kube-apiserver in which a tenant's webhook that is down (failurePolicy
Fail, `matchConditions` on one VM's name) fails that VM's migrations with 500 "failed calling webhook":
the keeper holds that VM alone, with the apiserver's words, and moves the other in the same pass."""
from __future__ import annotations

import asyncio
import dataclasses

import yaml
from kubefake.envtest import Api, Refused, api_client, free_port
from tests.support.kube import launcher_pod_of, node, rwx_disk, vmi
from tests.support.kubevirt_api import TIMING, eventually
from tests.support.stores import TEST_TIMING

from webhook.config import Settings
from webhook.keeper.keeper import Keeper
from webhook.stores.cache import WatchedClusterStore


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
