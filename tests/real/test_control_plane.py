"""The real control plane itself, where KUBEBUILDER_ASSETS names one: what it is."""
from __future__ import annotations

import json


def test_the_real_apiserver_runs_here(control_plane):
    """Kubernetes 1.36 with KubeVirt's and Longhorn's CRDs: what the other real tests assume."""
    version = json.loads(control_plane.kubectl("version", "-o", "json").stdout)["serverVersion"]
    assert (version["major"], version["minor"].rstrip("+")) == ("1", "36")
    crds = control_plane.kubectl("get", "crd", "-o", "name").stdout.split()
    for name in ("virtualmachineinstances.kubevirt.io", "virtualmachineinstancemigrations.kubevirt.io",
                 "sharemanagers.longhorn.io", "volumes.longhorn.io", "replicas.longhorn.io"):
        assert f"customresourcedefinition.apiextensions.k8s.io/{name}" in crds

