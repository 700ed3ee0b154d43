"""Passes of the keeper on a real kube-apiserver in which a tenant's webhook that is down (failurePolicy
Fail) fails migrations with 500 "failed calling webhook": of one VM (`matchConditions` on its name), the
keeper holds that VM alone and moves the other in the same pass; of a whole namespace (its
`namespaceSelector`), the keeper moves a VM of another namespace in its first pass, and says it in a log
line and each VM's hold, not as a readiness note of its own (a tenant's webhook is not the keeper's
trouble). A webhook that accepts and never answers (a wedged policy engine) is answered by the apiserver
after its `timeoutSeconds`: the keeper waits that long once per namespace and moves another's VM."""
from __future__ import annotations

import asyncio
import dataclasses

import yaml
from kubefake.envtest import Api, Refused, api_client, free_port
from tests.support.kube import ago, launcher_pod_of, node, rwx_disk, vmi
from tests.support.kubevirt_api import TIMING, eventually
from tests.support.stores import TEST_TIMING

from webhook.config import Settings
from webhook.keeper.keeper import Keeper
from webhook.rules.keeping.record import Action
from webhook.rules.shared.alone import Alone
from webhook.stores.cache import WatchedClusterStore


FAILING = "tenant-down"  # the namespace of the VMs a tenant's webhook that is down fails
OTHER = "tenant-up"  # another tenant's namespace
TENANT_WEBHOOK = "tenant-migrations"
VMIM = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration"}


def tenant_webhook(port: int, *, vm1_only: bool = True) -> dict:
    """A tenant's ValidatingWebhookConfiguration for the migrations of FAILING (of its vm1 alone with
    `vm1_only`: its matchConditions), failurePolicy Fail, sideEffects None (so dry runs call it too),
    calling a loopback port nothing listens on: kube-apiserver answers 500 "failed calling webhook"."""
    hook = {"name": "migrations.tenant.example.com", "failurePolicy": "Fail", "sideEffects": "None",
            "admissionReviewVersions": ["v1"], "timeoutSeconds": 2,
            "clientConfig": {"url": f"https://127.0.0.1:{port}/validate"},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": FAILING}},
            "rules": [{"apiGroups": ["kubevirt.io"], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["virtualmachineinstancemigrations"]}]}
    if vm1_only:
        hook["matchConditions"] = [{"name": "vm1-only", "expression": 'object.spec.vmiName == "vm1"'}]
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": TENANT_WEBHOOK}, "webhooks": [hook]}


async def apart_vm(admin: Api, name: str, namespace: str, where: str, hours: int) -> list[dict]:
    """`name` of `namespace` on `where`, its disk served from fail-b, its pods started `hours` ago: what was
    created."""
    made = []
    for obj in [*rwx_disk(f"{name}-disk", "fail-b", namespace=namespace), vmi(name, where, f"{name}-disk",
                                                                            namespace=namespace)]:
        if obj["kind"] == "Pod":  # the share-manager's
            obj.setdefault("status", {})["startTime"] = ago(hours=hours)
        made.append(await admin.create(obj))
    launcher = launcher_pod_of(made[-1])  # of the VMI as stored: its uid
    launcher["status"]["startTime"] = ago(hours=hours)
    return [*made, await admin.create(launcher)]


async def apart_vms(admin: Api, *others: tuple[str, str, str, int]) -> list[dict]:
    """vm1 and vm2 of FAILING on fail-a and fail-c, apart from their disks (served from fail-b) for a day,
    and `others` (name, namespace, node, hours apart): what was created."""
    await admin.longhorn()
    made = [await admin.create(node(name)) for name in ("fail-a", "fail-b", "fail-c")]
    for name, namespace, where, hours in (("vm1", FAILING, "fail-a", 24), ("vm2", FAILING, "fail-c", 24), *others):
        await admin.namespace(namespace)
        made += await apart_vm(admin, name, namespace, where, hours)
    return made


async def refused_for(admin: Api, name: str) -> bool:
    """The apiserver calls the tenant's webhook: a dry run of a migration of `name` of FAILING is answered 500."""
    try:
        await admin.create({**VMIM, "metadata": {"generateName": f"{name}-", "namespace": FAILING},
                            "spec": {"vmiName": name}}, dry_run=True)
    except Refused as refused:
        return refused.code == 500 and "failed calling webhook" in refused.message
    return False


async def one_pass(control_plane) -> tuple:
    """The first pass of a new keeper in migrate mode on the control plane: its report, its readiness notes,
    and the keeper's record of refusals."""
    settings = Settings(keep="migrate", keep_after=0)
    async with api_client(control_plane.kubeconfig) as api:
        store = WatchedClusterStore(api, settings, TEST_TIMING)
        store.start()
        try:
            await store.wait_synced(timeout=30)
            keeper = Keeper(api, store, settings, timing=dataclasses.replace(TIMING, request_timeout=10))
            async with keeper.watching() as watch:
                await asyncio.wait_for(watch.wait_synced(), 30)
                return await keeper.run_pass(), keeper.degraded(), keeper.state
        finally:
            await store.close()


async def with_webhook_down(control_plane, *, vm1_only: bool) -> tuple:
    """One pass while the tenant's webhook is down; then the webhook and our migrations deleted."""
    async with Api(control_plane) as admin:
        control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(tenant_webhook(free_port(), vm1_only=vm1_only)))
        try:
            await eventually(lambda: refused_for(admin, "vm1"), 20, 0.2)
            return await one_pass(control_plane)
        finally:
            control_plane.kubectl("delete", "validatingwebhookconfiguration", TENANT_WEBHOOK, "--ignore-not-found")
            for namespace in (FAILING, OTHER):
                for migration in await admin.list(VMIM, namespace):
                    await admin.delete(migration)


def moved(report) -> list[str]:
    """namespace/VM of each migration the pass created."""
    return [f"{name.split('/')[0]}/{name.split('/')[1].split('-colocate-')[0]}" for name in report.created]


async def test_a_tenants_webhook_that_is_down_holds_its_vm_alone_and_the_keeper_moves_another(control_plane):
    async with Api(control_plane, owns=True) as admin:  # what it made removed whatever happens
        await apart_vms(admin)
        report, notes, state = await with_webhook_down(control_plane, vm1_only=True)
    assert moved(report) == [f"{FAILING}/vm2"]  # in the same pass
    [vm1] = [r for r in report.vms if (r.namespace, r.name) == (FAILING, "vm1")]
    assert vm1.hold is Alone.REFUSED  # held alone, with a backoff of its own
    refusal = state.refusal(FAILING, "vm1", Action.MIGRATE)
    assert refusal is not None and refusal.status == 500 and refusal.count == 1
    assert not notes  # one VM's failure: the keeper is fine


async def test_a_tenants_webhook_down_for_its_namespace_leaves_another_namespaces_vm_moved_in_the_first_pass(
        control_plane):
    """vm1 and vm2 of FAILING, apart for a day, come first; vm3 of OTHER, apart for an hour, after them."""
    async with Api(control_plane, owns=True) as admin:
        await apart_vms(admin, ("vm3", OTHER, "fail-a", 1))
        report, notes, state = await with_webhook_down(control_plane, vm1_only=False)
    assert moved(report) == [f"{OTHER}/vm3"]  # on a new leader, in its first pass
    held = {r.name: r.hold for r in report.vms if r.namespace == FAILING}
    assert held == {"vm1": Alone.REFUSED, "vm2": Alone.REFUSED}
    assert [state.refusal(FAILING, name, Action.MIGRATE).status for name in ("vm1", "vm2")] == [500, 500]
    assert not notes  # one tenant's webhook: never the API lost, nor a note of the keeper's (its log line says it)


async def hanging(port: int) -> asyncio.Server:
    """A loopback port that accepts and never answers: a wedged policy engine."""
    held: list[asyncio.StreamWriter] = []

    async def hold(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
    return await asyncio.start_server(hold, "127.0.0.1", port)


async def test_a_tenant_webhook_that_hangs_in_four_namespaces_leaves_another_namespaces_vm_moved_in_the_first_pass(
        control_plane):
    """Four tenant namespaces, two VMs apart for a day in each, whose policy engine accepts and never answers
    (`timeoutSeconds: 10`): the apiserver answers each of their requests 500 after 10 s, naming it. vm9 of
    OTHER, apart for an hour, comes after them all: moved in the keeper's first pass, no namespace's wait
    read as the API lost. Not run where KUBEBUILDER_ASSETS is not set."""
    tenants = [f"tenant-hang-{i}" for i in range(4)]
    port = free_port()
    server = await hanging(port)
    hook = tenant_webhook(port, vm1_only=False)
    hook["webhooks"][0].update(timeoutSeconds=10, namespaceSelector={"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": tenants}]})
    async with Api(control_plane) as admin:
        made = await apart_vms(admin, ("vm9", OTHER, "fail-a", 1),
                               *((f"vm{j}", ns, "fail-c", 24) for ns in tenants for j in (1, 2)))
        control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(hook))
        try:
            report, notes, _ = await one_pass(control_plane)
            assert f"{OTHER}/vm9" in moved(report)  # on a new leader, in its first pass
            assert not any(name.startswith("tenant-hang-") for name in moved(report))
            assert not [n for n in notes if "the API failed" in n]  # never the API lost
        finally:
            control_plane.kubectl("delete", "validatingwebhookconfiguration", TENANT_WEBHOOK, "--ignore-not-found")
            server.close()
            for namespace in (FAILING, OTHER, *tenants):
                for migration in await admin.list(VMIM, namespace):
                    await admin.delete(migration)
            for obj in reversed(made):
                await admin.delete(obj)
