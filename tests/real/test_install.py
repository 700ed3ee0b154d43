"""The install on a real kube-apiserver: every object of `kubectl apply -k manifests` and of the
Helm chart accepted as the apiserver validates and admits it, each of its two ServiceAccounts
allowed what its component does and nothing the other does (SubjectAccessReview), the
ValidatingAdmissionPolicy enforced on the keeper's ServiceAccount (and on nobody else), and the
keeper's migrations accepted by KubeVirt 1.8's own CRD schema."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook import kinds
from webhook.rules.keeping.migrations import migration_manifest

ROOT = Path(__file__).parent.parent.parent
NS = "kubevirt-colocate"
VMS = "vms"
WEBHOOK_SA = "kubevirt-colocate"
SA = "kubevirt-colocate-keeper"  # the keeper's, the one that writes migrations


def objects_of(text: str) -> list[dict[str, Any]]:
    return [o for o in yaml.safe_load_all(text) if o]


def rendered_kustomize(control_plane, *path: str) -> str:
    return control_plane.kubectl("kustomize", str(ROOT.joinpath(*path))).stdout


def helm(control_plane, verb: str) -> str:
    """`helm install kubevirt-colocate CHART -n kubevirt-colocate --create-namespace` (or uninstall)
    by Helm's own engine against the real apiserver; the release's manifest."""
    import asyncio

    from tests.support.helm import CHART, RELEASE, sdk

    helm_sdkpy = sdk()
    config = helm_sdkpy.Configuration(namespace=NS, kubeconfig=control_plane.kubeconfig.read_text())

    async def run() -> str:
        if verb == "install":
            release = await helm_sdkpy.Install(config).run(RELEASE, str(CHART), create_namespace=True, wait=False,
                                                          timeout=60)
            return release["manifest"]
        await helm_sdkpy.Uninstall(config).run(RELEASE, wait=False, timeout=60)
        return ""

    return asyncio.run(run())


def apply(control_plane, text: str, *flags: str) -> str:
    return control_plane.kubectl("apply", "--server-side", "--force-conflicts", *flags, "-f", "-", input=text).stdout


def delete(control_plane, text: str) -> None:
    control_plane.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", input=text)


def vmim(name: str, *, ours: bool = True, targeted: bool = True) -> dict[str, Any]:
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": name, "namespace": VMS,
                         "labels": {kinds.MANAGED_BY_LABEL: kinds.COMPONENT} if ours else {}},
            "spec": {"vmiName": "vm1"} | ({"addedNodeSelector": {kinds.HOSTNAME_LABEL: "node-b"}} if targeted else {})}


def create(control_plane, obj: dict[str, Any], kubeconfig: Path | None = None, *flags: str):
    return control_plane.kubectl("create", *flags, "-f", "-", input=json.dumps(obj), check=False, kubeconfig=kubeconfig)


def eventually_refused(control_plane, obj: dict[str, Any], kubeconfig: Path, timeout: float = 15) -> str:
    """The policy is enforced a moment after it is created (the apiserver's informer): retry a
    create until it is refused, dry-run so that an early success leaves nothing behind."""
    deadline = time.monotonic() + timeout
    while True:
        result = create(control_plane, obj, kubeconfig, "--dry-run=server")
        if result.returncode != 0 or time.monotonic() > deadline:
            return result.stderr
        time.sleep(0.3)


@pytest.fixture(scope="module")
def vms_namespace(control_plane):
    control_plane.kubectl("create", "namespace", VMS, check=False)
    control_plane.kubectl("create", "serviceaccount", "default", "-n", VMS, check=False)
    return VMS


@pytest.fixture(params=["kustomize", "helm"])
def installed(request, control_plane, vms_namespace):
    """The install applied for real (kubectl apply -k manifests, or the chart's default render),
    removed again after the test."""
    if request.param == "kustomize":
        text = rendered_kustomize(control_plane, "manifests")
        out = apply(control_plane, text)
    else:
        text = out = helm(control_plane, "install")
    yield request.param, objects_of(text), out
    # The Namespace stays: without kube-controller-manager nothing would finish deleting it.
    if request.param == "kustomize":
        delete(control_plane, yaml.safe_dump_all([o for o in objects_of(text) if o["kind"] != "Namespace"]))
    else:
        helm(control_plane, "uninstall")


def test_every_object_of_the_install_is_accepted(control_plane, installed):
    """Each object is created and reads back from the apiserver as it was rendered."""
    how, objects, out = installed
    for obj in objects:
        meta = obj["metadata"]
        where = ["-n", meta["namespace"]] if meta.get("namespace") else []
        group = obj["apiVersion"].rpartition("/")[0]
        resource = f"{obj['kind'].lower()}.{group}" if group else obj["kind"].lower()
        got = control_plane.kubectl("get", resource, meta["name"], *where, "-o", "name", check=False)
        assert got.returncode == 0, f"{how}: {obj['kind']} {meta['name']} was not created: {got.stderr}\n{out}"


def test_the_policy_holds_the_installs_service_account_to_its_own_targeted_migrations(control_plane, installed):
    """What RBAC cannot say, the apiserver enforces: the keeper's ServiceAccount creates only
    labelled migrations to one node and deletes only its own; an admin is untouched."""
    keeper = control_plane.token_kubeconfig(NS, SA)
    assert "create-labelled" in eventually_refused(control_plane, vmim("unlabelled", ours=False), keeper)
    assert "create-targeted" in eventually_refused(control_plane, vmim("anywhere", targeted=False), keeper)
    made = create(control_plane, vmim("ours"), keeper)
    assert made.returncode == 0, made.stderr
    theirs = create(control_plane, vmim("theirs", ours=False, targeted=False))  # as the admin (a drain, a user)
    assert theirs.returncode == 0, theirs.stderr
    refused = control_plane.kubectl("delete", "vmim", "theirs", "-n", VMS, check=False, kubeconfig=keeper)
    assert refused.returncode != 0 and "delete-ours" in refused.stderr
    assert control_plane.kubectl("delete", "vmim", "ours", "-n", VMS, check=False, kubeconfig=keeper).returncode == 0
    control_plane.kubectl("delete", "vmim", "theirs", "-n", VMS)


def may(control_plane, account: str, verb: str, resource: str, *, group: str = "", namespace: str = VMS,
        subresource: str = "", name: str = "") -> bool:
    """The apiserver's answer (a SubjectAccessReview) to: may this ServiceAccount of the install do it?"""
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": f"system:serviceaccount:{NS}:{account}",
                       "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NS}", "system:authenticated"],
                       "resourceAttributes": {"verb": verb, "group": group, "resource": resource,
                                              "namespace": namespace, "subresource": subresource, "name": name}}}
    answer = control_plane.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(review))
    return json.loads(answer.stdout)["status"].get("allowed", False)


def test_each_account_may_do_what_its_component_does_and_the_webhooks_no_more(control_plane, installed):
    """The pod the apiserver calls for every opted-in pod cannot create a migration, hold the Lease
    or patch a Setting; the keeper's can create (and cancel) migrations and hold its Lease."""
    how, _, _ = installed
    migrations = {"group": "kubevirt.io", "resource": "virtualmachineinstancemigrations"}
    assert not may(control_plane, WEBHOOK_SA, "create", **migrations), how
    assert not may(control_plane, WEBHOOK_SA, "delete", **migrations), how
    assert may(control_plane, SA, "create", **migrations), how
    assert may(control_plane, SA, "delete", **migrations), how
    lease = {"group": "coordination.k8s.io", "resource": "leases", "namespace": NS, "name": "kubevirt-colocate-keeper"}
    assert may(control_plane, SA, "update", **lease) and not may(control_plane, WEBHOOK_SA, "update", **lease), how
    state = {"resource": "configmaps", "namespace": NS, "name": "kubevirt-colocate-keeper-state"}
    assert may(control_plane, SA, "update", **state) and not may(control_plane, WEBHOOK_SA, "update", **state), how
    assert not may(control_plane, SA, "update", "configmaps", namespace=NS, name="another"), how
    unpause = {"group": "subresources.kubevirt.io", "resource": "virtualmachineinstances", "subresource": "unpause"}
    assert may(control_plane, SA, "update", **unpause) and not may(control_plane, WEBHOOK_SA, "update", **unpause)
    # What the webhook does: read what the rules read, write Events.
    for resource, group in (("pods", ""), ("persistentvolumeclaims", ""), ("sharemanagers", "longhorn.io"),
                            ("virtualmachineinstances", "kubevirt.io")):
        for verb in ("get", "list", "watch"):
            assert may(control_plane, WEBHOOK_SA, verb, resource, group=group), (how, verb, resource)
        assert not may(control_plane, WEBHOOK_SA, "update", resource, group=group), (how, resource)
    assert may(control_plane, WEBHOOK_SA, "create", "events") and may(control_plane, WEBHOOK_SA, "patch", "events")
    assert not may(control_plane, WEBHOOK_SA, "get", "secrets", namespace=NS), how
    # The keeper reads the webhook's Deployment by name (settings an older install left there), no other.
    deployments = {"group": "apps", "resource": "deployments", "namespace": NS}
    assert may(control_plane, SA, "get", **deployments, name="kubevirt-colocate"), how
    assert not may(control_plane, SA, "get", **deployments, name="other"), how
    assert not may(control_plane, SA, "update", **deployments, name="kubevirt-colocate"), how
    # The keeper watches KubeVirt's IOerror Events cluster-wide: which disk failed and why.
    for verb in ("list", "watch"):
        assert may(control_plane, SA, verb, "events"), (how, verb)


@pytest.mark.parametrize("priority", [None, "system-maintenance"])
def test_the_keepers_migration_is_accepted_by_kubevirts_own_schema(control_plane, vms_namespace, priority):
    """Strict field validation: KubeVirt 1.8's CRD knows every field the keeper writes, so none is
    pruned (a pruned addedNodeSelector would be a migration to anywhere)."""
    from tests.support.keeping import apart_vmi
    from tests.support.kube import node

    manifest = migration_manifest(apart_vmi(), node("node-b"), "disks served from node-b", priority=priority)
    manifest["metadata"]["namespace"] = VMS
    result = control_plane.kubectl("create", "--dry-run=server", "--validate=strict", "-o", "json", "-f", "-",
                                   input=json.dumps(manifest), check=False)
    assert result.returncode == 0, result.stderr
    stored = json.loads(result.stdout)
    assert stored["spec"]["addedNodeSelector"] == manifest["spec"]["addedNodeSelector"]
    assert stored["spec"].get("priority") == priority
    assert "Warning" not in result.stderr


def test_every_grant_the_apiserver_stores_is_named_for_its_account(control_plane, installed):
    """As stored: each Role and RoleBinding of the install namespace, each ClusterRole(Binding) of
    the install, bears the name of the one ServiceAccount it serves (the keeper's Role
    `kubevirt-colocate-keeper`, never the webhook's name)."""
    how, rendered, _ = installed
    ours = {(o["kind"], o["metadata"]["name"]) for o in rendered}
    stored = []
    for kinds_, where in (("roles,rolebindings", ["-n", NS]), ("clusterroles,clusterrolebindings", [])):
        listed = json.loads(control_plane.kubectl("get", kinds_, *where, "-o", "json").stdout)["items"]
        stored += [o for o in listed if (o["kind"], o["metadata"]["name"]) in ours]
    assert {o["kind"] for o in stored} == {"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}, how
    for binding in [o for o in stored if o["kind"].endswith("Binding")]:
        [subject] = binding["subjects"]
        assert binding["metadata"]["name"] == binding["roleRef"]["name"] == subject["name"], (how, binding["metadata"])
    names = {o["metadata"]["name"] for o in stored if o["kind"] in ("Role", "RoleBinding")}
    assert names == {SA, "kubevirt-colocate-certs"}, how
