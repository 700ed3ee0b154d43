"""The keeper's dry run on a real apiserver: KubeVirt 1.8's schema keeps `spec.addedNodeSelector`
and `spec.priority`; one from before KubeVirt 1.6, which knows neither, refuses them under strict
field validation, and the keeper then moves nothing."""
from __future__ import annotations

import asyncio
import copy

import yaml
from kubefake.envtest import FIXTURES, api_client
from tests.support.keeping import apart_vmi
from tests.support.kube import node

from webhook.keeper.targeted import TargetedMigration
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
