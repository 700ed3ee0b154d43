"""Pure: what a pod follows: PVC → PV → Longhorn volume → the node of its share-manager.

longhorn-manager (controller/share_manager_controller.go): since 1.4 the share-manager pod
`share-manager-<volume>` is placed by kube-scheduler, and ShareManager `status.ownerID` follows its
node only while `status.state == running` (else it is stale). Migratable RWX block volumes have no
ShareManager at all (404 is normal). A disk that fails any step contributes no node.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ... import kinds
from . import declared
from ...config import Settings
from ...kinds import POD, PV, PVC, SHARE_MANAGER, Resource


@dataclasses.dataclass(frozen=True)
class Fact:
    """One thing a pod follows (a disk's share-manager, a consuming VM): its node, or why none."""

    subject: str  # what the fact is about: a PVC name, or a VM pod
    node: str | None
    reason: str
    volume: str | None = None
    known: bool = True  # False: the API could not tell (an error, no answer in time), not a finding


def claims_of(obj: dict[str, Any], *, hotplugged: bool = False) -> list[str]:
    """PVC names of a pod's (or VMI's) volumes, in order, once each: a `dataVolume` volume's PVC
    has the DataVolume's name. `hotplugged`: only a VMI's hotplugged ones (`hotpluggable: true` on the source)."""
    claims: dict[str, None] = {}  # ordered, and a set: a pod of 20,000 volumes is read in one pass
    volumes = kinds.spec(obj).get("volumes")
    if not isinstance(volumes, list):
        return []
    for volume in volumes:
        source = (volume.get("persistentVolumeClaim") or volume.get("dataVolume")) if isinstance(volume, dict) else None
        if source is None:
            continue  # most volumes: emptyDir, secret, ...
        name = (source.get("claimName") or source.get("name")) if isinstance(source, dict) else None
        if isinstance(name, str) and name and (not hotplugged or declared.VMI_HOTPLUGGABLE[0].value(source) is True):
            claims[name] = None
    return list(claims)


def disks_of(pod: dict[str, Any], vmi: dict[str, Any] | None) -> list[str]:
    """The claims a VM's pod follows: its own volumes', then those of its VMI that the pod does not
    mount: hotplugged ones, which KubeVirt mounts in an attachment pod on the VM's node once it runs
    (pkg/virt-controller/services/template.go, `RenderHotplugAttachmentPodTemplate`)."""
    claims = claims_of(pod)
    if vmi is not None:
        mounted = set(claims)
        claims += [claim for claim in claims_of(vmi) if claim not in mounted]
    return claims


def volume_of(
    namespace: str, claim: str, pvc: dict[str, Any] | None, pv: dict[str, Any] | None, driver: str
) -> tuple[str | None, str]:
    """The Longhorn volume behind a claim (PV spec.csi.volumeHandle), or None and why."""
    if pvc is None:
        return None, f"PVC {namespace}/{claim} not found"
    spec = pvc.get("spec") or {}
    if "ReadWriteMany" not in (spec.get("accessModes") or []):
        return None, f"PVC {namespace}/{claim} is not ReadWriteMany"
    pv_name = spec.get("volumeName")
    if not pv_name:
        return None, f"PVC {namespace}/{claim} is not bound yet"
    if pv is None:
        return None, f"PV {pv_name} not found"
    csi = (pv.get("spec") or {}).get("csi") or {}
    if csi.get("driver") != driver:
        return None, f"PV {pv_name} is not a {driver} volume"
    handle = csi.get("volumeHandle")
    if not handle:
        return None, f"PV {pv_name} has no volumeHandle"
    # The volume name is the handle: equal to the PV name only for dynamic provisioning.
    return handle, f"PVC {namespace}/{claim} is Longhorn volume {handle}"


def share_manager_node(
    volume: str, pod: dict[str, Any] | None, share_manager: dict[str, Any] | None
) -> tuple[str | None, str]:
    """Node of the volume's share-manager: the pod's node, else a *running* ShareManager's ownerID."""
    node = kinds.spec(pod).get("nodeName")
    if node and not kinds.terminating(pod) and not kinds.finished(pod):
        return node, f"share-manager of {volume} runs on {node}"
    if share_manager is None:
        return None, f"volume {volume} has no share-manager"
    status = share_manager.get("status") or {}
    state = status.get("state") or "unknown"
    if state != "running":
        # ownerID of a stopped/starting/stopping/error share-manager is stale: never use it.
        return None, f"share-manager of {volume} is {state}"
    owner = status.get("ownerID")
    if not owner:
        return None, f"share-manager of {volume} is running but names no node"
    return owner, f"share-manager of {volume} runs on {owner}"


Lookup = tuple[Resource, "str | None", str]
# Answers one look-up as a Store's `peek` does: (True, the object or None when it does not
# exist), or (False, None) when it cannot tell.
Peek = Callable[[Resource, "str | None", str], "tuple[bool, dict[str, Any] | None]"]


def disk_fact(settings: Settings, namespace: str, claim: str, peek: Peek) -> Fact | None:
    """The node one disk follows, from the objects `peek` answers: PVC, PV, the share-manager pod,
    and the ShareManager when the pod does not say; None as soon as `peek` cannot tell
    (lookup/resolve.py then reads that object elsewhere and asks again)."""
    if not kinds.valid_name(claim):  # the apiserver does not check claimName; we never put one in a path unchecked
        return Fact(claim, None, f"disk {claim[:60]!r} is not a valid PVC name")
    known, pvc = peek(PVC, namespace, claim)
    if not known:
        return None
    pv_name = ((pvc or {}).get("spec") or {}).get("volumeName")
    pv = None
    if pv_name:
        known, pv = peek(PV, None, pv_name)
        if not known:
            return None
    volume, why = volume_of(namespace, claim, pvc, pv, settings.csi_driver)
    if volume is None:
        return Fact(claim, None, why)
    known, pod = peek(POD, settings.longhorn_namespace, kinds.SHARE_MANAGER_POD_PREFIX + volume)
    if not known:
        return None
    node, why = share_manager_node(volume, pod, None)
    if node is None:  # the pod does not say where: the ShareManager may (it is not needed otherwise)
        known, share_manager = peek(SHARE_MANAGER, settings.longhorn_namespace, volume)
        if not known:
            return None
        node, why = share_manager_node(volume, pod, share_manager)
    return Fact(claim, node, why, volume=volume)
