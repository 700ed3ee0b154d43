"""Every answer the webhook can give, applied to the pods it is given for, is a pod the real
apiserver accepts: created (server-side dry run: validation, defaulting and the admission chain,
nothing stored) for each shape of decision on realistic launcher, migration-target and
share-manager pods, with and without required and preferred terms of their own."""
from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest
from kubefake.envtest import Api, Refused
from tests.support.kube import load, migration_target, required_terms, share_manager_pod, vm_pod

from webhook.config import Settings
from webhook.rules.placement.decide import AMONG, NOT_PINNED, PINNED, PREFERRED, Decision
from webhook.rules.placement.patch import as_created, patch_for

SETTINGS = Settings()
NODES = [f"node-{i:02d}" for i in range(16)]
STALE = {"weight": 100, "preference": {"matchFields": [{"key": "metadata.name", "operator": "NotIn",
                                                         "values": ["node-x"]}]}}


def fresh(pod: dict[str, Any]) -> dict[str, Any]:
    """A stored pod as its controller would create it again: no server-set fields, unbound."""
    pod = copy.deepcopy(pod)
    for key in ("uid", "resourceVersion", "creationTimestamp", "managedFields", "ownerReferences"):
        pod["metadata"].pop(key, None)
    pod["spec"].pop("nodeName", None)
    pod.pop("status", None)
    return pod


def kubevirt_18(name: str) -> dict[str, Any]:
    pod = fresh(load(f"kubevirt-1.8/{name}"))
    pod["metadata"].pop("name", None)
    pod["metadata"]["generateName"] = "virt-launcher-vm1-"
    return pod


def share_manager(*, zone: bool = False, stale: bool = False) -> dict[str, Any]:
    pod = share_manager_pod("pvc-d1", topology_zone="zone-a" if zone else None)
    if stale:  # longhorn-manager's fast failover keeps it off the node whose lease went stale
        affinity = pod["spec"].setdefault("affinity", {}).setdefault("nodeAffinity", {})
        affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [STALE]
    return pod


PODS = {
    "launcher": vm_pod,
    "launcher-kubevirt-1.8": lambda: kubevirt_18("launcher-pod.yaml"),
    "launcher-no-affinity": lambda: vm_pod(affinity=None),
    "migration-target": lambda: fresh(migration_target()),
    "migration-target-kubevirt-1.8": lambda: kubevirt_18("migration-target-pod-host-model.yaml"),
    "share-manager": share_manager,
    "share-manager-zoned": lambda: share_manager(zone=True),
    "share-manager-fast-failover": lambda: share_manager(stale=True),
}

DECISIONS = {
    "pinned": Decision(PINNED, node="node-00", preferences=(("node-00", 100),), reason="pinned"),
    "among-2": Decision(AMONG, preferences=(("node-01", 100),), reason="among", among=tuple(NODES[:2])),
    "among-3": Decision(AMONG, preferences=(("node-02", 100), ("node-00", 60)), reason="among", among=tuple(NODES[:3])),
    "among-many": Decision(AMONG, preferences=tuple((n, 100 - i) for i, n in enumerate(NODES[:3])), reason="among",
                           among=tuple(NODES)),
    "preferred": Decision(PREFERRED, preferences=(("node-00", 100),), reason="preferred"),
    "preferred-several": Decision(PREFERRED, preferences=(("node-00", 67), ("node-01", 33)), reason="spread"),
    "not-pinned": Decision(NOT_PINNED, reason="no disks to follow"),
}


@pytest.fixture
async def api(control_plane):
    async with Api(control_plane, owns=True) as api:
        for namespace in ("default", "vms"):  # the fixtures' own, and KubeVirt 1.8's objects' namespace
            await api.namespace(namespace)
        await api.longhorn()
        yield api


@pytest.mark.parametrize("decision", DECISIONS.values(), ids=DECISIONS.keys())
@pytest.mark.parametrize("make", PODS.values(), ids=PODS.keys())
async def test_the_apiserver_accepts_every_answer(api, make, decision):
    pod = make()
    answered = jsonpatch.apply_patch(pod, patch_for(pod, decision, SETTINGS))
    namespace = pod["metadata"].get("namespace") or "default"
    try:
        created = await api.create(answered, dry_run=True, namespace=namespace)
    except Refused as refused:
        pytest.fail(f"the apiserver refused the answer: {refused}")
    # What was required survives as sent (defaulting keeps it), and explain can still undo it.
    assert required_terms(created) == required_terms(answered)
    assert as_created(answered, SETTINGS)["spec"].get("affinity") == pod["spec"].get("affinity")
