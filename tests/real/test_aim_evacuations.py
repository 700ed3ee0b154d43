"""The aim-evacuations option on a real kube-apiserver: `serve --aim-evacuations on` registered by URL
with the option's webhook entry (manifests/aim-evacuations): an evacuation created as virt-controller's
ServiceAccount is stored aimed at its VM's storage; one created by a user or by the keeper's account is
stored as it was sent; a drain's evacuations created at the same moment, as virt-controller creates
them (pkg/virt-controller/watch/drain/evacuation/evacuation.go, `sync`: one goroutine each), are stored
aimed at nodes that take them all; and with the option installed, the webhook's account still writes
nothing but Events (SubjectAccessReview). Every object here has a name of its own (aim-), and the
fixtures remove what they made whatever happens (`Api(owns=True)`)."""
from __future__ import annotations

import asyncio
import collections
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubefake.envtest import Api
from tests.real.test_install import NS, WEBHOOK_SA, apply, delete, may, objects_of
from tests.support.kube import Serving, evacuation, launcher_pod_of, node, registered_while, registration, rwx_disk, vmi

ROOT = Path(__file__).parent.parent.parent
CONFIGURATION = "kubevirt-colocate-aim"
VMS = "aimed"
KUBEVIRT = "kubevirt"  # where virt-controller's ServiceAccount `kubevirt-controller` lives
HOSTNAME = "kubernetes.io/hostname"
DRAIN_TAINT = {"key": "kubevirt.io/drain", "value": "draining", "effect": "NoSchedule"}
MIGRATIONS = {"apiGroups": ["kubevirt.io"], "resources": ["virtualmachineinstancemigrations"], "verbs": ["create", "get"]}


def component_hook() -> dict[str, Any]:
    """The webhook entry manifests/aim-evacuations adds."""
    kustomization = yaml.safe_load((ROOT / "manifests" / "aim-evacuations" / "kustomization.yaml").read_text())
    [patch] = [p for p in kustomization["patches"] if p["target"]["kind"] == "MutatingWebhookConfiguration"]
    return yaml.safe_load(patch["patch"])[0]["value"]


def creator(account: str, namespace: str) -> list[dict[str, Any]]:
    """The grant that lets a ServiceAccount create migrations (as virt-controller's may)."""
    name = f"aim-test-{namespace}-{account}"
    return [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
             "rules": [MIGRATIONS]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
             "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]}]


# Room for two VMs of 2294 MiB each beside nothing else: three such nodes take six; and for one.
TWO_VMS = {"cpu": "4", "memory": "5Gi", "pods": "110", "devices.kubevirt.io/kvm": "1k"}
ONE_VM = {**TWO_VMS, "memory": "3Gi"}
DRAINED = "aim-a"


def marked(obj: dict[str, Any]) -> dict[str, Any]:
    """The VMI as virt-api marks it when kubectl drain evicts its launcher pod (status.evacuationNodeName)."""
    obj["status"]["evacuationNodeName"] = DRAINED
    return obj


@pytest.fixture
async def cluster(scheduler):
    """aim-a cordoned and tainted for a drain; aim-vm1 on it, its disk served from aim-b (room for it
    alone); aim-vm2 to
    aim-vm7 on it too, marked for evacuation, each disk served from aim-a (leaving with it); aim-c,
    aim-d and aim-e with room for two VMs each. Whatever was made removed after, or when this fails."""
    objects = [node(DRAINED, unschedulable=True, taints=[DRAIN_TAINT]), node("aim-b", allocatable=ONE_VM),
               *(node(name, allocatable=TWO_VMS) for name in ("aim-c", "aim-d", "aim-e")),
               *rwx_disk("aim-vm1-disk", "aim-b", namespace=VMS), marked(vmi("aim-vm1", DRAINED, "aim-vm1-disk", namespace=VMS)),
               *(o for i in range(2, 8) for o in rwx_disk(f"aim-vm{i}-disk", DRAINED, namespace=VMS)),
               *(marked(vmi(f"aim-vm{i}", DRAINED, f"aim-vm{i}-disk", namespace=VMS)) for i in range(2, 8)),
               *creator("kubevirt-controller", KUBEVIRT), *creator("kubevirt-colocate-keeper", NS)]
    async with Api(scheduler, owns=True) as api:
        await api.namespace(VMS)
        await api.namespace(KUBEVIRT, "kubevirt-controller")
        await api.namespace(NS, "kubevirt-colocate-keeper")
        await api.longhorn()
        for obj in objects:
            stored = await api.create(obj)
            if obj["kind"] == "VirtualMachineInstance":  # its launcher pod names it by the uid the apiserver gave it
                await api.create(launcher_pod_of({**stored, "status": obj["status"]}))
        try:
            yield api
        finally:
            for migration in await api.list({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration"},
                                            VMS):
                await api.delete(migration)


@pytest.fixture
async def registered(scheduler, cluster, tls_files):
    """`serve --aim-evacuations on` on the real apiserver, registered by URL with the option's entry too."""
    serving = await Serving.start(tls_files, "--kubeconfig", str(scheduler.kubeconfig), "--drain-delay", "0",
                                  "--webhook-configuration", CONFIGURATION, "--aim-evacuations", "on")
    config = registration(serving, tls_files["ca"], CONFIGURATION)
    hook = component_hook()
    hook["clientConfig"] = dict(config["webhooks"][0]["clientConfig"])
    config["webhooks"].append(hook)
    async for ready in registered_while(cluster, serving, config):
        yield ready


def create_as(plane, kubeconfig, obj, *flags):
    """`kubectl create` as the account of `kubeconfig` (the admin's when None); the object as stored."""
    done = plane.kubectl("create", *flags, "-o", "json", "-f", "-", input=json.dumps(obj), check=False,
                         kubeconfig=kubeconfig)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def aimed_at(stored):
    return (stored["spec"].get("addedNodeSelector") or {}).get(HOSTNAME)


async def answering(scheduler, controller) -> None:
    """Once the registration reaches the apiserver's informer (a moment after it is created)."""
    for _ in range(100):
        if aimed_at(create_as(scheduler, controller, evacuation("aim-vm1", DRAINED, namespace=VMS), "--dry-run=server")):
            return
        await asyncio.sleep(0.2)


async def test_virt_controllers_evacuation_is_stored_aimed_and_no_one_elses(scheduler, registered):
    controller = scheduler.token_kubeconfig(KUBEVIRT, "kubevirt-controller")
    await answering(scheduler, controller)
    stored = create_as(scheduler, controller, evacuation("aim-vm1", DRAINED, namespace=VMS))
    assert aimed_at(stored) == "aim-b"  # where aim-vm1's NFS server runs
    assert stored["spec"]["priority"] == "system-critical"  # the request's user set it; the aim kept it
    assert stored["metadata"]["annotations"]["kubevirt.io/migrationUnschedulablePodTimeoutSeconds"] == "5"
    by_user = create_as(scheduler, None, evacuation("aim-vm1", DRAINED, namespace=VMS))
    assert "addedNodeSelector" not in by_user["spec"]
    keeper = scheduler.token_kubeconfig(NS, "kubevirt-colocate-keeper")
    by_keeper = create_as(scheduler, keeper, evacuation("aim-vm1", DRAINED, namespace=VMS))
    assert "addedNodeSelector" not in by_keeper["spec"]


async def test_a_drains_evacuations_created_at_once_are_aimed_at_nodes_that_take_them_all(scheduler, registered):
    """Six evacuations created at the same moment as virt-controller's account, none admitted seeing
    another: each admission plans the whole drain, so the six agree — two on each node of room for two."""
    controller = scheduler.token_kubeconfig(KUBEVIRT, "kubevirt-controller")
    await answering(scheduler, controller)
    sent = [evacuation(f"aim-vm{i}", DRAINED, namespace=VMS) for i in range(2, 8)]
    stored = await asyncio.gather(*(asyncio.to_thread(create_as, scheduler, controller, m) for m in sent))
    aims = collections.Counter(aimed_at(m) for m in stored)
    assert aims == {"aim-c": 2, "aim-d": 2, "aim-e": 2}, aims


def test_with_the_option_installed_the_webhooks_account_writes_nothing_but_events(control_plane, tmp_path):
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [os.path.relpath(ROOT / "manifests", overlay)],
        "components": [os.path.relpath(ROOT / "manifests" / "aim-evacuations", overlay)]}))
    control_plane.kubectl("create", "namespace", VMS, check=False)
    text = control_plane.kubectl("kustomize", str(overlay)).stdout
    apply(control_plane, text)
    try:
        assert {h["name"] for o in objects_of(text) if o["kind"] == "MutatingWebhookConfiguration"
                for h in o["webhooks"]} >= {"evacuation.colocate.kubevirt-scheduler.io"}
        migrations = {"group": "kubevirt.io", "resource": "virtualmachineinstancemigrations"}
        for verb in ("get", "list", "watch"):
            assert may(control_plane, WEBHOOK_SA, verb, **migrations)
        for verb in ("create", "update", "patch", "delete"):
            assert not may(control_plane, WEBHOOK_SA, verb, **migrations), verb
            assert not may(control_plane, WEBHOOK_SA, verb, "pods"), verb
        assert may(control_plane, WEBHOOK_SA, "create", "events")
    finally:
        delete(control_plane, yaml.safe_dump_all([o for o in objects_of(text) if o["kind"] != "Namespace"]))
