"""Where a disk's I/O goes once the VM runs by its share-manager: the NFS hop is gone, and the block I/O
under it stays on the node only when a healthy replica sits there. Longhorn (longhorn-manager
`k8s/crds.yaml`, `types/types.go`): a Volume's `spec.dataLocality` (disabled, best-effort, strict-local);
a Replica's `spec.volumeName`, `spec.nodeID`, serving while `status.currentState` is running, failed once
`spec.failedAt` is set.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from ... import kinds
from ..shared.facts import Fact


@dataclasses.dataclass(frozen=True, slots=True)
class DiskPath:
    """One disk's I/O path: its share-manager's node, the volume's data locality, and whether a
    healthy replica is on that node (None: not known, with `unknown` saying why)."""

    claim: str
    volume: str | None
    share_manager_node: str | None
    data_locality: str | None = None
    local_replica: bool | None = None
    unknown: str = ""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"unknown": self.unknown or None}


def healthy_on(replica: dict[str, Any], volume: str, node: str) -> bool:
    """A replica of `volume` on `node` that serves: running and never failed."""
    spec, status = kinds.spec(replica), kinds.status(replica)
    return (spec.get("volumeName") == volume and spec.get("nodeID") == node and not spec.get("failedAt")
            and status.get("currentState") == "running")


def disk_path(fact: Fact, volume: dict[str, Any] | None, replicas: Iterable[dict[str, Any]] | None,
              unknown: str = "") -> DiskPath:
    """The I/O path of one resolved disk from its Longhorn Volume and the volume's Replicas
    (None: not read, `unknown` says why)."""
    node = fact.node
    if fact.volume is None or node is None:
        return DiskPath(claim=fact.subject, volume=fact.volume, share_manager_node=node, unknown=unknown or fact.reason)
    if volume is None or replicas is None:
        return DiskPath(claim=fact.subject, volume=fact.volume, share_manager_node=node,
                        unknown=unknown or f"Longhorn volume {fact.volume} not found")
    locality = kinds.spec(volume).get("dataLocality")
    local = any(healthy_on(r, fact.volume, node) for r in replicas)
    return DiskPath(claim=fact.subject, volume=fact.volume, share_manager_node=node,
                    data_locality=locality if isinstance(locality, str) else None, local_replica=local)


def path_note(paths: Iterable[DiskPath]) -> str:
    """One line when co-location removes only the NFS hop for some disk, else ""."""
    remote = [p for p in paths if p.local_replica is False]  # co-location removes only the NFS hop
    if not remote:
        return ""
    disks = ", ".join(f"{p.claim} (no healthy replica on {p.share_manager_node}, data locality "
                      f"{p.data_locality or '?'})" for p in remote)
    return f"co-location removes only the NFS hop for {disks}: its block I/O still crosses the network"


# Loopback NFS: beside its share-manager, a VM's disk is an NFS mount whose server (NFS-Ganesha in the
# share-manager pod) runs on the client's own node. Under memory pressure the kernel writes dirty NFS
# pages back through that server, which needs memory itself: Linux's NFS developers document the
# deadlock (LWN 595652, "Loopback NFS: theory and practice"; SUSE KB 000018709). KubeVirt's default
# cache mode `none` (O_DIRECT, which NFS takes) and `writethrough` leave no dirty page of the disk;
# `writeback` does.
DIRTY_CACHES = frozenset({"writeback"})


def loopback_note(caches: Iterable[tuple[str, str]], beside: Iterable[str]) -> str:
    """One line when a disk in a cache mode that leaves dirty pages (`caches`: claim, mode) is served by
    a share-manager on the VM's own node (`beside`: those claims), else ""."""
    here = set(beside)
    risky = [claim for claim, cache in caches if cache in DIRTY_CACHES and claim in here]
    if not risky:
        return ""
    return (f"{', '.join(risky)} uses cache: writeback and is served by an NFS server on the VM's own node: under "
            "memory pressure its dirty pages written back through it can deadlock the node (loopback NFS); set the "
            "disk's cache to none (KubeVirt's default) or writethrough, or opt the VM out (docs/operations.md)")
