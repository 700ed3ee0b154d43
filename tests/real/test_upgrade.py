"""The upgrade over an install whose admin chose report mode on the webhook's Deployment, applied
on the real kube-apiserver with `kubectl apply -k`: the README's patch of that release is refused
whole (nothing changes), and an overlay that still sets the keeper's mode there leaves the new
keeper, reading the stored Deployment with its own account, in report mode. The upgrade from
0.2.0, with `kubectl apply -k` and the documented `kubectl delete` lines and with `helm upgrade`,
leaves only grants named for their account, the keeper's rights intact; the rollback to 0.2.0 with
`kubectl apply -k` and docs/operations.md's lines leaves only 0.2.0's; the keeper's account reads
its own Deployment, where the incident's pause is."""
from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
import yaml
from kubefake.envtest import api_client
from tests.support.releases import deletes, RELEASE_0_2_0, ROLLING_BACK, tree_at, upgrade_step

from webhook.stores.direct import ClusterStore
from webhook.config import KeeperSettings, KeepMode
from webhook.keeper.upgrade import PAUSE, read_hold, read_mode

ROOT = Path(__file__).parent.parent.parent
NS = "kubevirt-colocate"
KEEPER_SA = "kubevirt-colocate-keeper"


def overlay(tmp_path: Path, patch: str) -> Path:
    where = tmp_path / "my-cluster"
    where.mkdir()
    (where / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [os.path.relpath(ROOT / "manifests", where)],
        "patches": [{"target": {"kind": "Deployment", "name": NS}, "patch": patch}]}))
    return where


def test_the_readmes_patch_is_refused_whole(control_plane, tmp_path):
    """`kubectl apply -k` with the previous README's overlay applies nothing: its patch has no
    arg to replace on the new webhook."""
    done = control_plane.kubectl("apply", "-k", str(overlay(tmp_path, '[{"op": "replace", "path": '
                                 '"/spec/template/spec/containers/0/args/4", "value": "--keep=report"}]')), check=False)
    assert done.returncode != 0 and "args/4" in done.stderr  # kustomize fails before anything is sent
    assert "created" not in done.stdout and "configured" not in done.stdout


@pytest.mark.parametrize("patch", [
    '[{"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": "--keep=report"}]',
    '[{"op": "add", "path": "/spec/template/spec/containers/0/env/-", '
    '"value": {"name": "COLOCATE_KEEP", "value": "report"}}]',
], ids=["flag", "variable"])
def test_the_keeper_reads_the_webhooks_deployment_with_its_own_account_and_reports(control_plane, tmp_path, patch):
    rendered = control_plane.kubectl("kustomize", str(overlay(tmp_path, patch))).stdout
    control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=rendered)
    try:
        [keeper] = [o for o in yaml.safe_load_all(control_plane.kubectl("get", "deployment", KEEPER_SA, "-n", NS,
                                                                        "-o", "yaml").stdout) if o]
        container = keeper["spec"]["template"]["spec"]["containers"][0]
        own = KeeperSettings.from_command(container["args"], {})
        assert own.keep is KeepMode.MIGRATE
        kubeconfig = control_plane.token_kubeconfig(NS, KEEPER_SA)

        async def read():
            async with api_client(kubeconfig) as api:
                return await read_hold(ClusterStore(api), own, NS)

        held = asyncio.run(read())
        assert held.mode is KeepMode.REPORT, held
        assert "not read" not in (held.why or "")  # its account may read that one Deployment
    finally:  # the Namespace stays: without kube-controller-manager nothing would finish deleting it
        rest = [o for o in yaml.safe_load_all(rendered) if o and o["kind"] != "Namespace"]
        control_plane.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", input=yaml.safe_dump_all(rest),
                              check=False)


LONGHORN = "longhorn-system"
OURS = {("Role", NS, KEEPER_SA), ("RoleBinding", NS, KEEPER_SA), ("Role", LONGHORN, KEEPER_SA),
        ("RoleBinding", LONGHORN, KEEPER_SA), ("Role", NS, f"{NS}-certs"), ("RoleBinding", NS, f"{NS}-certs")}


def spare_vms_overlay(where: Path, manifests: Path) -> Path:
    where.mkdir(parents=True)
    (where / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [os.path.relpath(manifests, where)],
        "components": [os.path.relpath(manifests / "spare-vms", where)]}))
    return where


def namespaced_grants(control_plane) -> set[tuple[str, str, str]]:
    """(kind, namespace, name) of every Role and RoleBinding of the install's name in the two namespaces."""
    found = set()
    for namespace in (NS, LONGHORN):
        listed = yaml.safe_load(control_plane.kubectl("get", "roles,rolebindings", "-n", namespace, "-o", "yaml").stdout)
        found |= {(o["kind"], namespace, o["metadata"]["name"]) for o in listed["items"]
                  if o["metadata"]["name"].startswith(NS)}
    return found


def keeper_may(control_plane, verb: str, what: str, namespace: str) -> bool:
    done = control_plane.kubectl("auth", "can-i", verb, what, "-n", namespace,
                                 f"--as=system:serviceaccount:{NS}:{KEEPER_SA}", check=False)
    return done.stdout.strip() == "yes"


def upgraded_with_helm(control_plane, old_chart: Path) -> None:
    """`helm install` of 0.2.0's chart with `longhorn.spareVMs`, then `helm upgrade` to this one."""
    from tests.support.helm import CHART, RELEASE, sdk

    helm_sdkpy = sdk()
    config = helm_sdkpy.Configuration(namespace=NS, kubeconfig=control_plane.kubeconfig.read_text())
    values = {"longhorn": {"spareVMs": True}}

    async def run() -> None:
        await helm_sdkpy.Install(config).run(RELEASE, str(old_chart), values=values, create_namespace=True,
                                             wait=False, timeout=60)
        assert ("Role", NS, NS) in namespaced_grants(control_plane)  # 0.2.0's name, before
        await helm_sdkpy.Upgrade(config).run(RELEASE, str(CHART), values=values, wait=False, timeout=60)

    asyncio.run(run())


def uninstall_with_helm(control_plane) -> None:
    from tests.support.helm import RELEASE, sdk

    helm_sdkpy = sdk()
    config = helm_sdkpy.Configuration(namespace=NS, kubeconfig=control_plane.kubeconfig.read_text())
    asyncio.run(helm_sdkpy.Uninstall(config).run(RELEASE, wait=False, timeout=60))


def applied_with_spare_vms(control_plane, overlay, manifests):
    """`manifests` with spare-vms applied as README, Upgrade says: the finished certificate Job
    deleted first (a Job's template cannot change); what was applied, for the cleanup."""
    rendered = control_plane.kubectl("kustomize", str(spare_vms_overlay(overlay, manifests))).stdout
    control_plane.kubectl("delete", "job", f"{NS}-certs", "-n", NS, "--ignore-not-found")
    control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=rendered)
    return rendered


@pytest.mark.parametrize("how", ["kubectl apply -k", "helm upgrade"])
def test_an_upgrade_from_0_2_0_leaves_only_grants_named_for_their_account(control_plane, tmp_path, how):
    """0.2.0 installed (with spare-vms), then this release: with kustomize, the apply and the
    `kubectl delete` lines of docs/operations.md; with Helm, the upgrade alone. The old names are
    gone, the keeper keeps its Lease, its state and the Setting."""
    control_plane.kubectl("create", "namespace", LONGHORN, check=False)
    old = tree_at(RELEASE_0_2_0, tmp_path / "0.2.0")
    applied = []
    try:
        if how == "helm upgrade":
            upgraded_with_helm(control_plane, old / "charts" / "kubevirt-colocate")
        else:
            for manifests in (old / "manifests", ROOT / "manifests"):
                applied.append(applied_with_spare_vms(control_plane, tmp_path / f"overlay-{len(applied)}", manifests))
            assert ("Role", NS, NS) in namespaced_grants(control_plane)  # what the apply left behind
            for command in upgrade_step():
                control_plane.kubectl(*command.words[1:])
        assert namespaced_grants(control_plane) == OURS
        assert keeper_may(control_plane, "update", "leases/kubevirt-colocate-keeper", NS)
        assert keeper_may(control_plane, "update", "configmaps/kubevirt-colocate-keeper-state", NS)
        assert keeper_may(control_plane, "patch", "settings.longhorn.io/"
                          "blacklist-for-auto-delete-pod-when-volume-detached-unexpectedly", LONGHORN)
    finally:  # the Namespace stays: without kube-controller-manager nothing would finish deleting it
        if how == "helm upgrade":
            uninstall_with_helm(control_plane)
        for rendered in applied:
            rest = [o for o in yaml.safe_load_all(rendered) if o and o["kind"] != "Namespace"]
            control_plane.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-",
                                  input=yaml.safe_dump_all(rest), check=False)


def test_a_rollback_to_0_2_0_with_kustomize_leaves_only_its_grants(control_plane, tmp_path):
    """This release applied (with spare-vms), then 0.2.0's manifests and the delete lines of
    docs/operations.md, Rolling back: 0.2.0's grants alone, the keeper's Lease and Setting rights
    as 0.2.0 gave them, and no right on the record this release's keeper wrote."""
    control_plane.kubectl("create", "namespace", LONGHORN, check=False)
    old = tree_at(RELEASE_0_2_0, tmp_path / "0.2.0")
    applied = []
    try:
        for manifests in (ROOT / "manifests", old / "manifests"):
            applied.append(applied_with_spare_vms(control_plane, tmp_path / f"overlay-{len(applied)}", manifests))
        for command in deletes(ROLLING_BACK):
            control_plane.kubectl(*command.words[1:])
        assert namespaced_grants(control_plane) == {
            ("Role", NS, NS), ("RoleBinding", NS, NS), ("Role", LONGHORN, f"{NS}-spare-vms"),
            ("RoleBinding", LONGHORN, f"{NS}-spare-vms"), ("Role", NS, f"{NS}-certs"), ("RoleBinding", NS, f"{NS}-certs")}
        assert keeper_may(control_plane, "update", "leases/kubevirt-colocate-keeper", NS)
        assert not keeper_may(control_plane, "get", "configmaps/kubevirt-colocate-keeper-state", NS)
    finally:
        for rendered in applied:
            rest = [o for o in yaml.safe_load_all(rendered) if o and o["kind"] != "Namespace"]
            control_plane.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-",
                                  input=yaml.safe_dump_all(rest), check=False)


def test_the_keeper_reads_its_pause_with_its_own_account(control_plane, tmp_path):
    """docs/operations.md, Pausing the keeper: the annotation on its Deployment, read with the
    keeper's token, holds it to report; removed, it migrates again."""
    rendered = control_plane.kubectl("kustomize", str(ROOT / "manifests")).stdout
    control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=rendered)
    try:
        own = KeeperSettings(keep="migrate")
        kubeconfig = control_plane.token_kubeconfig(NS, KEEPER_SA)

        async def read():
            async with api_client(kubeconfig) as api:
                return await read_mode(ClusterStore(api), own, NS)

        control_plane.kubectl("-n", NS, "annotate", f"deployment/{KEEPER_SA}", f"{PAUSE}=report", "--overwrite")
        held = asyncio.run(read())
        assert held.mode is KeepMode.REPORT and "is annotated" in held.why, held
        control_plane.kubectl("-n", NS, "annotate", f"deployment/{KEEPER_SA}", f"{PAUSE}-")
        assert asyncio.run(read()).mode is KeepMode.MIGRATE
    finally:
        rest = [o for o in yaml.safe_load_all(rendered) if o and o["kind"] != "Namespace"]
        control_plane.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", input=yaml.safe_dump_all(rest),
                              check=False)
