"""Upgrading from the install whose webhook replicas also ran the keeper (one Deployment, the
release before the keeper had a Deployment of its own) with `helm upgrade` and with
`kubectl apply -k`, judged on both versions as rendered: never a moment without a webhook
replica answering, never two keepers acting at once, nothing of the old grants left behind.

The previous version's chart and manifests are read from git (PREVIOUS); without that commit (a
shallow clone) these tests skip.
"""
import io
import subprocess
import tarfile
from pathlib import Path

import pytest
from tests.support.helm import objects, render
from tests.support.kube import kubectl

from webhook.__main__ import build_parser, settings_from
from webhook.config import Settings
from webhook.keeper.lease import lease_namespace

ROOT = Path(__file__).resolve().parents[1]
PREVIOUS = "e1ca05a"  # the last commit with one Deployment for the webhook and the keeper
NS = "kubevirt-colocate"
KEEPER = "kubevirt-colocate-keeper"


@pytest.fixture(scope="module")
def previous(tmp_path_factory):
    """charts/ and manifests/ of PREVIOUS, extracted into a directory of their own."""
    done = subprocess.run(["git", "archive", "--format=tar", PREVIOUS, "charts", "manifests"], cwd=ROOT,
                          capture_output=True, timeout=60)
    if done.returncode != 0:
        pytest.skip(f"git has no {PREVIOUS}: {done.stderr.decode().strip()}")
    where = tmp_path_factory.mktemp("previous")
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as archive:
        archive.extractall(where, filter="tar")
    return where


def kustomized(root: Path) -> list[dict]:
    tool = kubectl()
    if tool is None:
        pytest.skip("kubectl is not installed (or set KUBECTL)")
    done = subprocess.run([tool, "kustomize", str(root / "manifests")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return objects(done.stdout)


@pytest.fixture(params=["kubectl apply -k", "helm upgrade"])
def versions(request, previous):
    """(before, after): the objects of the previous install and of this one, as each tool renders them."""
    if request.param == "helm upgrade":
        return request.param, render(chart=previous / "charts" / "kubevirt-colocate"), render()
    return request.param, kustomized(previous), kustomized(ROOT)


def one(found, kind, name):
    [obj] = [o for o in found if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


def key(obj):
    return obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"]


def test_the_webhook_is_the_same_deployment_rolled_one_replica_at_a_time(versions):
    """Same name and selector (a selector cannot change): the upgrade is a rolling update of the
    Deployment that answers now, a new replica ready before an old one goes, and drains take one."""
    _, before, after = versions
    old, new = one(before, "Deployment", NS), one(after, "Deployment", NS)
    assert new["spec"]["selector"] == old["spec"]["selector"]
    assert new["spec"]["replicas"] >= 2
    assert new["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert new["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"] == "/readyz"
    budget = one(after, "PodDisruptionBudget", NS)
    assert budget["spec"]["maxUnavailable"] == 1 and budget["spec"]["selector"] == new["spec"]["selector"]
    # The Service goes on sending reviews to the same pods (old and new replicas alike).
    assert one(after, "Service", NS)["spec"]["selector"] == one(before, "Service", NS)["spec"]["selector"]


def test_the_old_replicas_and_the_new_keeper_campaign_for_one_lease(versions, tmp_path):
    """While old replicas still run, they and the new keeper's replicas contend for the same Lease
    in the same namespace: one holder acts at a time, whichever it is."""
    _, before, after = versions
    old = one(before, "Deployment", NS)["spec"]["template"]["spec"]["containers"][0]
    new = one(after, "Deployment", KEEPER)["spec"]["template"]["spec"]["containers"][0]
    # The old release's serve took the keeper's flags; today's keep reads them the same way.
    old_settings = Settings.from_command(old["args"], {})
    new_settings = settings_from(build_parser().parse_args(["keep", *new["args"]]))
    assert old_settings.keep == new_settings.keep == "migrate"
    assert old_settings.lease_name == new_settings.lease_name
    for container in (old, new):
        env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in container["env"]}
        assert env["POD_NAMESPACE"] == "metadata.namespace"
    assert one(before, "Deployment", NS)["metadata"].get("namespace") == one(after, "Deployment", KEEPER)[
        "metadata"].get("namespace")
    assert lease_namespace(new_settings, {"POD_NAMESPACE": NS}, tmp_path / "no-mount") == NS


def test_the_old_replicas_lose_the_keepers_rights_at_once(versions):
    """RBAC changes with the upgrade, before the old pods are gone: the webhook's account can no
    longer renew the Lease nor create a migration, so an old replica leading stops acting within
    the renew deadline (10 s) and the new keeper takes the Lease over when it expires."""
    _, _, after = versions
    grants = set()
    for binding in [o for o in after if o["kind"] in ("RoleBinding", "ClusterRoleBinding")]:
        if {"kind": "ServiceAccount", "name": NS, "namespace": NS} in binding["subjects"]:
            role = one(after, binding["roleRef"]["kind"], binding["roleRef"]["name"])
            grants |= {(resource, verb) for rule in role["rules"] for resource in rule["resources"]
                       for verb in rule["verbs"]}
    assert not {(r, v) for r, v in grants if r == "leases" or v not in ("get", "list", "watch")} - {
        ("events", "create"), ("events", "patch")}


def test_apply_leaves_nothing_of_the_previous_install_behind(versions):
    """`kubectl apply -k` deletes nothing: every object of the previous install is one of this
    install's, updated in place (a binding's roleRef, which cannot change, unchanged), so no old
    grant stays behind. Helm deletes what it no longer renders; the same holds for it."""
    tool, before, after = versions
    now = {key(o): o for o in after}
    for obj in before:
        if obj["kind"] == "Job":
            continue  # the certificate Job: removed 10 minutes after it ran, named after its spec by Helm
        assert key(obj) in now, f"{tool}: {key(obj)} would be left behind"
        if obj["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            assert now[key(obj)]["roleRef"] == obj["roleRef"], key(obj)
        if obj["kind"] == "Deployment":
            assert now[key(obj)]["spec"]["selector"] == obj["spec"]["selector"], key(obj)
