"""The upgrade over an install whose admin chose report mode on the webhook's Deployment, applied
on the real kube-apiserver with `kubectl apply -k`: the README's patch of that release is refused
whole (nothing changes), and an overlay that still sets the keeper's mode there leaves the new
keeper, reading the stored Deployment with its own account, in report mode."""
from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
import yaml
from kubefake.envtest import api_client

from webhook.stores.direct import ClusterStore
from webhook.config import KeeperSettings, KeepMode
from webhook.keeper.upgrade import read_hold

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
