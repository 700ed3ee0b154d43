"""What the caches keep of each kind (`shapes`): one spec per kind, everything else dropped on arrival."""
from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from .. import kinds
from ..config import Settings
from ..cluster.table import Shape
from ..kinds import NODE, POD, PV, PVC, REQUIRED, SHARE_MANAGER, VMI, VMIM
from ..rules import fit
from ..rules.shared import declared
from ..rules.shared.classify import is_share_manager_pod

Keep = Any  # True | dict[str, Keep] | list[Keep] (one spec for every item) | Callable[[str], bool]


def trim(value: Any, keep: Keep) -> Any:
    """`value` reduced to what `keep` lists (a one-element list: the spec of every item, empty items
    dropped; a callable: the keys it accepts); a value of an unexpected type is kept as it is."""
    if keep is True:
        return value
    if isinstance(keep, dict):
        if not isinstance(value, dict):
            return value
        return {key: trim(value[key], sub) for key, sub in keep.items() if value.get(key) is not None}
    if isinstance(keep, list):
        if not isinstance(value, list):
            return value
        return [item for item in (trim(v, keep[0]) for v in value) if item not in ({}, None)]
    if not isinstance(value, dict):
        return value
    return {key: v for key, v in value.items() if keep(key)}


# What kube-scheduler's filters (rules/fit/) read of a pod to place; of each volume, the claims the checks read
# (VolumeBinding) and every source the rules declare they read of a launcher's volumes, whole.
CONTAINER_TO_PLACE: Keep = [dict.fromkeys(("name", "resources", "ports", "restartPolicy"), True)]
SPEC_TO_PLACE: Keep = {**dict.fromkeys(("nodeName", "nodeSelector", "affinity", "tolerations", "overhead", "resources",
                                        "hostNetwork", "topologySpreadConstraints"), True),
                       "containers": CONTAINER_TO_PLACE, "initContainers": CONTAINER_TO_PLACE,
                       "volumes": [dict.fromkeys(("name", "persistentVolumeClaim", "ephemeral",
                                                  *declared.POD.keep(Settings())["spec"]["volumes"][0]), True)]}

PVC_KEPT: Keep = {"metadata": {"name": True, "namespace": True, "deletionTimestamp": True},
                  "spec": {"accessModes": True, "volumeName": True}, "status": {"phase": True}}

# Labels and nodeAffinity: which nodes can mount the volume (the scheduler's VolumeBinding, VolumeZone).
PV_KEPT: Keep = {"metadata": {"name": True, "labels": True},
                 "spec": {"csi": {"driver": True, "volumeHandle": True}, "claimRef": {"namespace": True, "name": True},
                          "nodeAffinity": True}}

SHARE_MANAGER_KEPT: Keep = {"metadata": {"name": True, "namespace": True}, "status": {"state": True, "ownerID": True}}

NODE_KEPT: Keep = {"metadata": {"name": True, "labels": True},
                   "spec": {"unschedulable": True, "taints": True},
                   "status": {"conditions": [{"type": True, "status": True}], "allocatable": True}}


def shapes(settings: Settings) -> dict[str, Shape]:
    """Each kind a cache holds, and how an object of it is reduced when it arrives."""
    return {
        PVC.kind: partial(trim, keep=PVC_KEPT),
        PV.kind: partial(trim, keep=PV_KEPT),
        SHARE_MANAGER.kind: partial(trim, keep=SHARE_MANAGER_KEPT),
        NODE.kind: partial(trim, keep=NODE_KEPT),
        POD.kind: shape_pod(settings),
        # As the rules declare what they read of them (the opt-in annotation a VMI keeps is a setting).
        VMI.kind: partial(trim, keep=declared.VMI.keep(settings)),
        VMIM.kind: partial(trim, keep=declared.VMIM.keep(settings)),
    }


def pod_read(settings: Settings) -> Shape:
    """A cached pod with its annotations guarded (`declaring.CachedAnnotations`): a rule reading one
    nobody declared fails with `Undeclared` rather than read nothing."""
    declared_keys = declared.POD.named("annotations", settings)
    return lambda pod: declared.POD.guarded(pod, declared_keys)


def shape_pod(settings: Settings) -> Shape:
    """A pod reduced to what the rules and the scheduler checks read: host ports only, conditions
    only while it waits for a node, claims only of launchers (every pod of the cluster is kept)."""
    keep_annotation = declared.POD.named("annotations", settings)  # the opt-in, our decisions, the provisioning mark

    def shape(pod: dict[str, Any]) -> dict[str, Any]:
        spec, status, launcher = kinds.spec(pod), kinds.status(pod), kinds.is_launcher(pod)
        kept_spec = _pod_spec(spec, launcher, leaving=share_manager_leaving(pod, settings))
        kept_status = _pod_status(pod, spec, status, kept_spec)
        if status.get("startTime") and (launcher or is_share_manager_pod(pod, kinds.meta(pod).get("namespace") or "",
                                                                         settings)):
            kept_status["startTime"] = status["startTime"]  # since when a VM's pod and its NFS server run (the keeper)
        return {"metadata": _pod_metadata(pod, launcher, settings, keep_annotation), "spec": kept_spec,
                "status": kept_status}

    return shape


def _pod_metadata(pod: dict[str, Any], launcher: bool, settings: Settings,
                  keep_annotation: Callable[[str], bool]) -> dict[str, Any]:
    meta = kinds.meta(pod)
    kept = {k: meta[k] for k in ("name", "namespace", "labels", "deletionTimestamp") if meta.get(k)}
    annotations = meta.get("annotations")
    ours = {k: v for k, v in annotations.items() if keep_annotation(k)} if isinstance(annotations, dict) else {}
    if ours:
        kept["annotations"] = ours
    share_manager = meta.get("namespace") == settings.longhorn_namespace and str(meta.get("name") or "").startswith(
        kinds.SHARE_MANAGER_POD_PREFIX)
    if (launcher or share_manager or settings.decision_annotation in ours) and meta.get("creationTimestamp"):
        # Which pod of a VM is the newest; how long a pod we pinned has waited; whether a VM's NFS
        # server started again after the VM's pod (its mount may be stale).
        kept["creationTimestamp"] = meta["creationTimestamp"]
    owner = kinds.vmi_owner(pod) if launcher else None
    if owner is not None:  # the VMI an Event about the pod is about (its labels name the hostname)
        kept["ownerReferences"] = [{k: owner[k] for k in ("apiVersion", "kind", "name", "uid", "controller")
                                    if k in owner}]
    return kept


def share_manager_leaving(pod: dict[str, Any], settings: Settings) -> bool:
    """A share-manager pod on its way out (a drain evicted it): longhorn-manager creates it again, and
    its answer is prepared from it meanwhile (`admission.prepare`)."""
    return kinds.terminating(pod) and is_share_manager_pod(pod, kinds.meta(pod).get("namespace") or "", settings)


def _pod_spec(spec: dict[str, Any], launcher: bool, *, leaving: bool = False) -> dict[str, Any]:
    if launcher:
        # What the VM's migration target is rendered from (`lookup.resolve.migration_target_pod`):
        # a drain's share-manager rule judges nodes by it with no read of the pod from the API.
        return trim(spec, SPEC_TO_PLACE)
    host_network = spec.get("hostNetwork") is True
    kept: dict[str, Any] = {key: spec[key] for key in ("nodeName", "overhead", "resources", "hostNetwork")
                            if spec.get(key)}
    for key in ("containers", "initContainers"):
        if isinstance(spec.get(key), list):
            kept[key] = [_container(c, host_network) for c in spec[key]]
    affinity = spec.get("affinity") if isinstance(spec.get("affinity"), dict) else {}
    # Required node affinity only of a pod still waiting for a node: whether the pin its decision
    # annotation speaks of is ours (the stranded-pod report, rules/placement/stranded.py).
    for kind in ("podAntiAffinity",) if spec.get("nodeName") else ("podAntiAffinity", "nodeAffinity"):
        terms = affinity.get(kind)
        if isinstance(terms, dict) and terms.get(REQUIRED):
            kept.setdefault("affinity", {})[kind] = {REQUIRED: terms[REQUIRED]}
    if leaving:  # what the node-level checks read of the pod created again in its place (`fit.run_key`)
        kept.update({key: spec[key] for key in ("tolerations", "nodeSelector") if spec.get(key)})
        if isinstance(affinity.get("nodeAffinity"), dict):
            kept.setdefault("affinity", {})["nodeAffinity"] = affinity["nodeAffinity"]
    return kept


def _container(value: Any, host_network: bool) -> Any:
    """What a placed pod's container takes from its node: requests and limits, host ports
    (every port with the host's network), and whether an init container is a sidecar."""
    if not isinstance(value, dict):
        return value
    kept: dict[str, Any] = {}
    resources = value.get("resources")
    if isinstance(resources, dict):
        wanted = {k: resources[k] for k in ("requests", "limits") if resources.get(k)}
        if wanted:
            kept["resources"] = wanted
    ports = value.get("ports")
    if isinstance(ports, list):
        held = [p for p in ports if not isinstance(p, dict) or p.get("hostPort") or host_network]
        if held:
            kept["ports"] = held
    if value.get("restartPolicy"):
        kept["restartPolicy"] = value["restartPolicy"]
    return kept


def _pod_status(pod: dict[str, Any], spec: dict[str, Any], status: dict[str, Any],
                kept_spec: dict[str, Any]) -> dict[str, Any]:
    kept: dict[str, Any] = {"phase": status["phase"]} if status.get("phase") else {}
    resized = bool(spec.get("nodeName")) and _resized(pod)
    if resized:
        # An in-place resize under way: the scheduler counts the larger of spec, allocated and
        # actuated (fit.pod_requests), so what it reads stays (with the containers' names).
        for key in ("containerStatuses", "initContainerStatuses"):
            entries = [{k: e[k] for k in ("name", "resources", "allocatedResources") if k in e}
                       for e in status.get(key) or () if isinstance(e, dict)]
            if entries:
                kept[key] = entries
        for key in ("containers", "initContainers"):
            for container, whole in zip(kept_spec.get(key) or (), spec.get(key) or ()):
                if isinstance(container, dict) and isinstance(whole, dict) and whole.get("name") is not None:
                    container["name"] = whole["name"]
    # Whether a resize is pending; why the scheduler has not placed a pod that waits for a node.
    condition = "PodResizePending" if resized else None if spec.get("nodeName") else "PodScheduled"
    if condition is not None and isinstance(status.get("conditions"), list):
        found = [c for c in status["conditions"] if isinstance(c, dict) and c.get("type") == condition]
        if found:
            kept["conditions"] = found
    return kept


def _resized(pod: dict[str, Any]) -> bool:
    """Whether the pod's status makes it take more than its spec asks (an in-place resize)."""
    try:
        return fit.pod_requests(pod, running=True) != fit.pod_requests(pod)
    except ValueError:
        return False


def pod_to_place(pod: Any) -> Any:
    """A pod about to be placed, reduced to what kube-scheduler's filters (rules/fit/) read of it: the keeper keeps
    one per VM apart, and a launcher's environment, mounts and probes are most of its bytes."""
    return trim(pod, {"metadata": dict.fromkeys(("name", "namespace", "labels"), True), "spec": SPEC_TO_PLACE})
