"""The real control plane itself: present wherever CI runs, and what it is."""
from __future__ import annotations

import json


def test_the_real_apiserver_runs_here(control_plane):
    """In CI the fixture fails rather than skips, so this test passing proves the real-apiserver
    tests ran; anywhere it runs it is Kubernetes 1.36 with KubeVirt's and Longhorn's CRDs."""
    version = json.loads(control_plane.kubectl("version", "-o", "json").stdout)["serverVersion"]
    assert (version["major"], version["minor"].rstrip("+")) == ("1", "36")
    crds = control_plane.kubectl("get", "crd", "-o", "name").stdout.split()
    for name in ("virtualmachineinstances.kubevirt.io", "virtualmachineinstancemigrations.kubevirt.io",
                 "sharemanagers.longhorn.io", "volumes.longhorn.io", "replicas.longhorn.io"):
        assert f"customresourcedefinition.apiextensions.k8s.io/{name}" in crds

