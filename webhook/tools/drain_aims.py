"""`status --drain NODE --aim-evacuations on`: where each VM's evacuation would be aimed, or why it
would be left as KubeVirt makes it, worked out by the webhook's own rule (`admission.evacuation`) over
the cluster as the drain makes it: the node cordoned, its VMIs marked for evacuation, the
share-managers on it gone (Longhorn creates them again only after their pods are). Each admission plans
the whole drain, so the answers are those of KubeVirt's evacuations created at once."""
from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from typing import Any

from .. import kinds
from ..admission.admit import admit
from ..admission.review import AdmissionRequest
from ..config import Settings
from ..deadline import Deadline
from ..kinds import NODE, POD, PV, PVC, SHARE_MANAGER, VMI, VMIM
from ..stores.direct import ClusterStore
from ..stores.snapshot import SnapshotStore
from ..stores.store import StoreError

DRAIN_TAINT = {"key": "kubevirt.io/drain", "value": "draining", "effect": "NoSchedule"}


async def drain_aims(store: ClusterStore, settings: Settings, node: str, vms: Sequence[tuple[str, str]],
                     timeout: float) -> dict[tuple[str, str], str]:
    """By (namespace, VM): where its evacuation would be aimed, or why not, in words."""
    try:
        # Everything the rule reads, listed once.
        objects = as_drained(await store.listed(((NODE, None), (POD, None), (PVC, None), (PV, None),
                                                 (SHARE_MANAGER, settings.longhorn_namespace), (VMI, None), (VMIM, None)),
                                                timeout=timeout), node, settings)
    except StoreError as exc:
        return {vm: f"where its evacuation would be aimed cannot be told ({exc})" for vm in vms}
    aiming = dataclasses.replace(settings, aim_evacuations=True)
    said: dict[tuple[str, str], str] = {}
    for number, (namespace, name) in enumerate(sorted(vms)):
        migration = evacuation(namespace, name, node)
        request = AdmissionRequest(uid=f"drain-{number}", kind=VMIM.kind, group=VMIM.group, operation="CREATE",
                                   namespace=namespace, name="", object=migration, dry_run=True,
                                   user=f"system:serviceaccount:{settings.kubevirt_namespace}:{kinds.VIRT_CONTROLLER_ACCOUNT}")
        outcome = await admit(request, SnapshotStore(objects), aiming, Deadline.after(timeout, 0))
        decision, detail = outcome.decision, f" ({outcome.detail})" if outcome.detail else ""
        said[namespace, name] = f"its evacuation would be left as KubeVirt makes it: {outcome.skipped}{detail}" \
            if decision is None else f"its evacuation would be aimed at {decision.node}: {decision.reason}"
    return said


def evacuation(namespace: str, vmi: str, node: str) -> dict[str, Any]:
    """The migration KubeVirt's evacuation controller creates for the VMI (`GenerateNewMigration`)."""
    return {"apiVersion": VMIM.api_version, "kind": VMIM.kind,
            "metadata": {"generateName": kinds.EVACUATION_PREFIX, "namespace": namespace,
                         "annotations": {kinds.EVACUATION_ANNOTATION: node}},
            "spec": {"vmiName": vmi, "priority": kinds.DRAIN_PRIORITY}}


def as_drained(objects: list[dict[str, Any]], node: str, settings: Settings) -> list[dict[str, Any]]:
    """The cluster once `node` is cordoned and tainted, its VMIs marked (virt-api's answer to their
    launcher pods' eviction) and its share-manager pods evicted and gone."""
    drained: list[dict[str, Any]] = []
    leaving: set[str] = set()
    for obj in objects:
        meta = kinds.meta(obj)
        if obj["kind"] == NODE.kind and meta.get("name") == node:
            obj = copy.deepcopy(obj)
            obj["spec"] = {**kinds.spec(obj), "unschedulable": True,
                           "taints": [*(kinds.spec(obj).get("taints") or []), DRAIN_TAINT]}
        elif obj["kind"] == POD.kind and meta.get("namespace") == settings.longhorn_namespace and \
                kinds.labels(obj).get(kinds.SHARE_MANAGER_VOLUME_LABEL) and kinds.spec(obj).get("nodeName") == node:
            leaving.add(kinds.labels(obj)[kinds.SHARE_MANAGER_VOLUME_LABEL])
            continue
        elif obj["kind"] == VMI.kind and kinds.status(obj).get("nodeName") == node:
            obj = {**obj, "status": {**kinds.status(obj), "evacuationNodeName": node}}
        drained.append(obj)
    for i, obj in enumerate(drained):
        if obj["kind"] == SHARE_MANAGER.kind and kinds.meta(obj).get("name") in leaving:
            drained[i] = {**obj, "status": {"state": "error", "ownerID": node}}
    return drained
