"""Sparing VMs on a real kube-apiserver, with Longhorn's own Setting CRD: the install option's Role
lets the keeper's ServiceAccount get and patch that one Setting and nothing else (the webhook's
not even that), and `spare-vms` changes it there as it does on the emulator (tests/keeper/test_spare.py): its JSON patch, which
tests the resourceVersion read, applied by the apiserver; run twice, once; `--undo` takes it out."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).parent.parent.parent
LONGHORN = "longhorn-system"
BLACKLIST = "blacklist-for-auto-delete-pod-when-volume-detached-unexpectedly"
SA = "system:serviceaccount:kubevirt-colocate:kubevirt-colocate-keeper"  # the keeper's, which patches it
WEBHOOK_SA = "system:serviceaccount:kubevirt-colocate:kubevirt-colocate"


def setting(control_plane) -> dict:
    return json.loads(control_plane.kubectl("get", "settings.longhorn.io", BLACKLIST, "-n", LONGHORN, "-o",
                                            "json").stdout)


def can(control_plane, verb: str, what: str, account: str = SA) -> bool:
    done = control_plane.kubectl("auth", "can-i", verb, what, "-n", LONGHORN, f"--as={account}", check=False)
    return done.stdout.strip() == "yes"


def spare_vms(control_plane, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    return subprocess.run([sys.executable, "-m", "webhook", "spare-vms", *args, "--kubeconfig",
                           str(control_plane.kubeconfig)], capture_output=True, text=True, timeout=60, env=env)


def test_the_install_option_lets_the_keepers_account_patch_that_one_setting(control_plane, tmp_path):
    control_plane.kubectl("create", "namespace", LONGHORN, check=False)
    overlay = ROOT / f".real-spare-{tmp_path.name}"  # next to manifests/, as an admin's overlay
    overlay.mkdir()
    try:
        (overlay / "kustomization.yaml").write_text(yaml.safe_dump(
            {"resources": ["../manifests"], "components": ["../manifests/spare-vms"]}))
        rendered = control_plane.kubectl("kustomize", str(overlay)).stdout
    finally:
        shutil.rmtree(overlay)
    mine = [o for o in yaml.safe_load_all(rendered) if o and o["metadata"].get("namespace") == LONGHORN]
    assert {o["kind"] for o in mine} == {"Role", "RoleBinding"}
    control_plane.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(mine))
    try:
        assert can(control_plane, "patch", f"settings.longhorn.io/{BLACKLIST}")
        assert can(control_plane, "get", f"settings.longhorn.io/{BLACKLIST}")
        assert not can(control_plane, "patch", "settings.longhorn.io/storage-network")
        assert not can(control_plane, "delete", f"settings.longhorn.io/{BLACKLIST}")
        assert not can(control_plane, "patch", f"settings.longhorn.io/{BLACKLIST}", WEBHOOK_SA)
    finally:
        control_plane.kubectl("delete", "-f", "-", "--ignore-not-found", input=yaml.safe_dump_all(mine))


def test_spare_vms_changes_longhorns_setting_once_and_undoes_only_it(control_plane):
    control_plane.kubectl("create", "namespace", LONGHORN, check=False)
    control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps({
        "apiVersion": "longhorn.io/v1beta2", "kind": "Setting", "value": "apps/StatefulSet",
        "metadata": {"name": BLACKLIST, "namespace": LONGHORN}}))
    try:
        done = spare_vms(control_plane)
        assert done.returncode == 0, done.stderr
        assert setting(control_plane)["value"] == "apps/StatefulSet;kubevirt.io/VirtualMachineInstance"
        version = setting(control_plane)["metadata"]["resourceVersion"]
        again = spare_vms(control_plane)
        assert again.returncode == 0 and "nothing changed" in again.stdout, again.stderr
        assert setting(control_plane)["metadata"]["resourceVersion"] == version
        events = json.loads(control_plane.kubectl("get", "events", "-n", LONGHORN, "-o", "json").stdout)["items"]
        assert [e["reason"] for e in events if e["involvedObject"]["name"] == BLACKLIST] == ["VMsSpared"]
        undone = spare_vms(control_plane, "--undo")
        assert undone.returncode == 0, undone.stderr
        assert setting(control_plane)["value"] == "apps/StatefulSet"
    finally:
        control_plane.kubectl("delete", "settings.longhorn.io", BLACKLIST, "-n", LONGHORN, "--ignore-not-found")
