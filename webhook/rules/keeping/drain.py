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
    namespace: str
    name: str
    node: str | None
    storage: tuple[str, ...]
    leaves: bool  # it runs on the node: KubeVirt's evacuation moves it, or cannot
    migrates: bool  # one live migration of the drain (live-migratable, on the node)
    cannot_move: str  # why the evacuation cannot move it ("": it can, or it is not on the node)
    storage_restarts: bool  # its NFS server runs on the node: Longhorn re-creates it elsewhere
    rebooted: str  # yes, no, cannot tell: whether Longhorn's remount deletes its launcher pod
    goes: str  # where it is expected to go, in words

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"storage": list(self.storage)}


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
    found = []
    for namespace, name, runs_on, storage, migratable, why_not in vms:
        leaves, restarts_here = runs_on == node, node in storage
        if not leaves and not restarts_here:
            continue
        rebooted = str(restarts.answer) if restarts_here else str(Answer.NO)
        steps = []
        if leaves and migratable:
            steps.append("live-migrated off by KubeVirt's evacuation, where kube-scheduler puts its target pod")
        elif leaves:
            steps.append(f"cannot be live-migrated ({why_not or 'not live-migratable'}): its eviction strategy decides "
                         f"(the drain waits for it, or it is shut down)")
        if restarts_here:
            steps.append("its NFS server restarts elsewhere, where its VM can follow" if leaves else
                         f"its NFS server restarts elsewhere, near {runs_on}")
            if rebooted == str(Answer.YES):
                steps.append("Longhorn then deletes its launcher pod: it reboots"
                             + (" (unless its migration ended before its NFS server is back)" if leaves else ""))
            elif rebooted == str(Answer.CANNOT_TELL):
                steps.append("whether Longhorn then reboots it cannot be told")
        found.append(DrainedVm(namespace, name, runs_on, storage, leaves, leaves and migratable,
                               "" if not leaves or migratable else (why_not or "not live-migratable"), restarts_here,
                               rebooted, "; ".join(steps)))
    return DrainPreview(node, tuple(found), restarts)
