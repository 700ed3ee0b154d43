"""The real control plane itself, where KUBEBUILDER_ASSETS names one: what it is."""
from __future__ import annotations

import json

import pytest
from kubefake.envtest import Api
from tests.support.kube import node


def test_the_real_apiserver_runs_here(control_plane):
    """Kubernetes 1.36 with KubeVirt's and Longhorn's CRDs: what the other real tests assume."""
    version = json.loads(control_plane.kubectl("version", "-o", "json").stdout)["serverVersion"]
    assert (version["major"], version["minor"].rstrip("+")) == ("1", "36")
    crds = control_plane.kubectl("get", "crd", "-o", "name").stdout.split()
    for name in ("virtualmachineinstances.kubevirt.io", "virtualmachineinstancemigrations.kubevirt.io",
                 "sharemanagers.longhorn.io", "volumes.longhorn.io", "replicas.longhorn.io"):
        assert f"customresourcedefinition.apiextensions.k8s.io/{name}" in crds



async def test_a_fixture_that_fails_half_way_leaves_nothing_behind(control_plane):
    """What an owning Api created is removed when it closes on an error (a fixture that raises after
    creating a node and a ClusterRole): the next test finds neither, and no 409 follows."""
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "hygiene-role"},
            "rules": []}
    made = [node("hygiene-a"), role]
    with pytest.raises(RuntimeError):
        async with Api(control_plane, owns=True) as api:
            for obj in made:
                await api.create(obj)
            raise RuntimeError("half-way")
    async with Api(control_plane) as api:
        assert [await api.get(obj) for obj in made] == [None, None]
        for obj in made:  # and the same names can be made again
            await api.create(obj)
            await api.delete(obj)
