"""Pure: what draining a node will do to the opted-in VMs, as KubeVirt and Longhorn carry a drain
out, from what `status` observed and decided of each VM (the keeper's own reading) and what
Longhorn's Settings make of a share-manager restart (`rules.shared.longhorn.restarts_vms`).

A drain evicts every pod on the node. KubeVirt's evacuation live-migrates each live-migratable VMI
off it (one migration each; the others wait on their eviction strategy); Longhorn creates each
share-manager of the node again elsewhere within seconds, long before most evacuations have ended
(two leave a node at a time by default), and the webhook sends it where its VM can follow. Once the
new share-manager serves, Longhorn deletes each pod of the volume that started before: with
Longhorn's Settings as they are, each VM served from the node, on it or elsewhere, reboots, unless
its migration ended first.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from ..shared.longhorn import Answer, Restarts


@dataclasses.dataclass(frozen=True)
class DrainedVm:
    """A VM the drain of `drained` touches: it runs there, or its NFS server does; the rest follows."""

    namespace: str
    name: str
    node: str | None
    storage: tuple[str, ...]
    migratable: bool  # live-migratable
    why_not: str  # why not, when it is not
    drained: str
    restarts: Restarts  # what Longhorn's Settings make of a share-manager restart

    @property
    def leaves(self) -> bool:
        """It runs on the node: KubeVirt's evacuation moves it, or cannot."""
        return self.node == self.drained

    @property
    def migrates(self) -> bool:
        """One live migration of the drain."""
        return self.leaves and self.migratable

    @property
    def cannot_move(self) -> str:
        """Why the evacuation cannot move it ("": it can, or it is not on the node)."""
        return "" if not self.leaves or self.migratable else (self.why_not or "not live-migratable")

    @property
    def storage_restarts(self) -> bool:
        """Its NFS server runs on the node: Longhorn re-creates it elsewhere."""
        return self.drained in self.storage

    @property
    def rebooted(self) -> str:
        """yes, no, cannot tell: whether Longhorn's remount then deletes its launcher pod."""
        return str(self.restarts.answer) if self.storage_restarts else str(Answer.NO)

    @property
    def goes(self) -> str:
        """Where it is expected to go, in words."""
        steps = []
        if self.migrates:
            steps.append("live-migrated off by KubeVirt's evacuation, where kube-scheduler puts its target pod")
        elif self.leaves:
            steps.append(f"cannot be live-migrated ({self.cannot_move}): its eviction strategy decides "
                         f"(the drain waits for it, or it is shut down)")
        if self.storage_restarts:
            steps.append("its NFS server restarts elsewhere, where its VM can follow" if self.leaves else
                         f"its NFS server restarts elsewhere, near {self.node}")
            if self.rebooted == str(Answer.YES):
                steps.append("Longhorn then deletes its launcher pod: it reboots"
                             + (" (unless its migration ended before its NFS server is back)" if self.leaves else ""))
            elif self.rebooted == str(Answer.CANNOT_TELL):
                steps.append("whether Longhorn then reboots it cannot be told")
        return "; ".join(steps)

    def to_json(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "name": self.name, "node": self.node, "storage": list(self.storage),
                "leaves": self.leaves, "migrates": self.migrates, "cannot_move": self.cannot_move,
                "storage_restarts": self.storage_restarts, "rebooted": self.rebooted, "goes": self.goes}


@dataclasses.dataclass(frozen=True)
class DrainPreview:
    node: str
    vms: tuple[DrainedVm, ...]
    restarts: Restarts

    @property
    def migrations(self) -> int:
        return sum(vm.migrates for vm in self.vms)

    @property
    def share_managers(self) -> int:
        """Share-managers of the VMs' disks that the drain restarts (one per VM's disk on the node)."""
        return sum(vm.storage_restarts for vm in self.vms)

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "migrations": self.migrations, "nfs_servers_restarting": self.share_managers,
                "rebooted": [f"{vm.namespace}/{vm.name}" for vm in self.vms if vm.rebooted == str(Answer.YES)],
                "cannot_move": {f"{vm.namespace}/{vm.name}": vm.cannot_move for vm in self.vms if vm.cannot_move},
                "longhorn": {"answer": str(self.restarts.answer), "why": self.restarts.warning() or self.restarts.why},
                "vms": [vm.to_json() for vm in self.vms]}

    def lines(self) -> list[str]:
        said = [f"draining {self.node}: {self.migrations} live migration(s) by KubeVirt's evacuation, "
                f"{self.share_managers} VM(s) whose NFS server restarts"]
        for vm in self.vms:
            said.append(f"  {vm.namespace}/{vm.name}: {vm.goes}")
        if self.restarts.answer is not Answer.NO:
            said.append(f"  {self.restarts.warning()}")
        return said


def preview(node: str, vms: Iterable[tuple[str, str, str | None, tuple[str, ...], bool, str]],
            restarts: Restarts) -> DrainPreview:
    """`vms`: (namespace, name, node, storage nodes, live-migratable, why not) of each running opted-in VM."""
    touched = (DrainedVm(*vm, drained=node, restarts=restarts) for vm in vms)
    return DrainPreview(node, tuple(vm for vm in touched if vm.leaves or vm.storage_restarts), restarts)
