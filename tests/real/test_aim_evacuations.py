"""The aim-evacuations option on a real kube-apiserver: `serve --aim-evacuations on` registered by URL
with the option's webhook entry (manifests/aim-evacuations): an evacuation created as virt-controller's
ServiceAccount is stored aimed at its VM's storage; one created by a user or by the keeper's account is
stored as it was sent; and with the option installed, the webhook's account still writes nothing but
Events (SubjectAccessReview)."""
from __future__ import annotations

import asyncio
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


@pytest.fixture
async def cluster(scheduler):
    """node-a cordoned and tainted for a drain, vm1 on it, its disk served from node-b; node-c beside."""
    objects = [node("node-a", unschedulable=True, taints=[DRAIN_TAINT]), node("node-b"), node("node-c"),
               *rwx_disk("vm1-disk", "node-b", namespace=VMS), vmi("vm1", "node-a", "vm1-disk", namespace=VMS),
               *creator("kubevirt-controller", KUBEVIRT), *creator("kubevirt-colocate-keeper", NS)]
    made = []
    async with Api(scheduler) as api:
        await api.namespace(VMS)
        await api.namespace(KUBEVIRT, "kubevirt-controller")
        await api.namespace(NS, "kubevirt-colocate-keeper")
        await api.longhorn()
        for obj in objects:
            made.append(await api.create(obj))
        # The launcher pod names its VMI by the uid the apiserver gave it.
        made.append(await api.create(launcher_pod_of(next(o for o in made if o["kind"] == "VirtualMachineInstance"))))
        yield api
        for migration in await api.list({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration"}, VMS):
            await api.delete(migration)
        for obj in reversed(made):
            await api.delete(obj)


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


async def test_virt_controllers_evacuation_is_stored_aimed_and_no_one_elses(scheduler, registered):
    controller = scheduler.token_kubeconfig(KUBEVIRT, "kubevirt-controller")
    sent = evacuation("vm1", "node-a", namespace=VMS)
    for _ in range(100):  # the registration reaches the apiserver's informer a moment after it is created
        if aimed_at(create_as(scheduler, controller, sent, "--dry-run=server")):
            break
        await asyncio.sleep(0.2)
    stored = create_as(scheduler, controller, sent)
    assert aimed_at(stored) == "node-b"  # where vm1's NFS server runs
    assert stored["spec"]["priority"] == "system-critical"  # the request's user set it; the aim kept it
    by_user = create_as(scheduler, None, evacuation("vm1", "node-a", namespace=VMS))
    assert "addedNodeSelector" not in by_user["spec"]
    keeper = scheduler.token_kubeconfig(NS, "kubevirt-colocate-keeper")
    by_keeper = create_as(scheduler, keeper, evacuation("vm1", "node-a", namespace=VMS))
    assert "addedNodeSelector" not in by_keeper["spec"]


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
