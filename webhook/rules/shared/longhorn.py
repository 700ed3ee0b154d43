"""Pure: Longhorn settings that undo co-location without anyone seeing it.

With a storage network for RWX volumes (`endpoint-network-for-rwx-volume`, Longhorn 1.11; before
it `storage-network` with `storage-network-for-rwx-volume-enabled`), a share-manager that moves
gets a new address, and longhorn-manager deletes the workload pods of the volume so that they
remount it (controller/volume_controller.go, handlePodDeletionIfVolumeRequestRemount), when
`auto-delete-pod-when-volume-detached-unexpectedly` is on (the default) and the pod's owner kind
is not in `blacklist-for-auto-delete-pod-when-volume-detached-unexpectedly` (empty by default).
A virt-launcher pod deleted is a VM stopped: every share-manager move, a drain's or a failover's,
is then a restart of its VMs, live migration or not.
"""
from __future__ import annotations

from collections.abc import Mapping

ENDPOINT_NETWORK = "endpoint-network-for-rwx-volume"
STORAGE_NETWORK = "storage-network"
STORAGE_NETWORK_FOR_RWX = "storage-network-for-rwx-volume-enabled"
AUTO_DELETE = "auto-delete-pod-when-volume-detached-unexpectedly"
BLACKLIST = "blacklist-for-auto-delete-pod-when-volume-detached-unexpectedly"
VMI_KIND = "kubevirt.io/VirtualMachineInstance"  # a launcher pod's owner, as the blacklist names kinds
SETTINGS = (ENDPOINT_NETWORK, STORAGE_NETWORK, STORAGE_NETWORK_FOR_RWX, AUTO_DELETE, BLACKLIST)


def rwx_network(values: Mapping[str, str]) -> str | None:
    """The network RWX volumes are served on when it is not the cluster network, in words."""
    endpoint = (values.get(ENDPOINT_NETWORK) or "").strip()
    if endpoint:
        return f"{ENDPOINT_NETWORK} is {endpoint}"
    storage = (values.get(STORAGE_NETWORK) or "").strip()
    if storage and (values.get(STORAGE_NETWORK_FOR_RWX) or "").strip().lower() == "true":
        return f"{STORAGE_NETWORK} {storage} serves RWX volumes ({STORAGE_NETWORK_FOR_RWX})"
    return None


def restart_hazard(values: Mapping[str, str]) -> str | None:
    """One line when moving a share-manager restarts its VMs, with the fix; None when it does not."""
    network = rwx_network(values)
    if network is None or (values.get(AUTO_DELETE) or "true").strip().lower() != "true":
        return None
    listed = [kind.strip() for kind in (values.get(BLACKLIST) or "").split(";")]
    if VMI_KIND in listed:
        return None
    return (f"Longhorn restarts VMs when their share-manager moves: {network} and {AUTO_DELETE} is on, so "
            f"longhorn-manager deletes the pods of a volume whose NFS server moved; add {VMI_KIND} to {BLACKLIST} "
            f"(docs/operations.md)")
