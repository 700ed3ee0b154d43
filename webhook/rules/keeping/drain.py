"""Pure: what draining a node does to the opted-in VMs, from what `status` observed and Longhorn's Settings
(`rules.shared.longhorn.restarts_vms`): KubeVirt evacuates each VM; Longhorn re-creates each share-manager
elsewhere and reboots the VMs it served unless it spares them; the keeper recovers a spared VM's stale mount.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from ...config import KeepMode
from ..shared.longhorn import Answer, Restarts
from .recovery import ROUND_TRIP


@dataclasses.dataclass(frozen=True)
class RunningVm:
    """A running opted-in VM as `status` read it: where it runs, where its disks are served; what the drain of
    `drained` does to it (it runs there, or its NFS server does) follows."""

    namespace: str
    name: str
    node: str | None
    storage: tuple[str, ...]
    migratable: bool = True  # live-migratable
    why_not: str = ""  # why not, when it is not
    cannot_finish: str | None = None  # why no migration off a stale mount of it can finish (`recovery.cannot_finish`)
    evacuation: str = ""  # where `--aim-evacuations on` would aim its evacuation, or why not ("": the aim is off)
    drained: str = ""
    restarts: Restarts = Restarts(Answer.CANNOT_TELL, "not read")  # what Longhorn's Settings make of a share-manager restart
    keep: KeepMode = KeepMode.MIGRATE  # the keeper's mode

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
    def spared(self) -> bool:
        """Its NFS server restarts and Longhorn spares it: it keeps its mount, which may go stale."""
        return self.storage_restarts and self.rebooted == str(Answer.NO)

    @property
    def recovery(self) -> int:
        """The keeper's migrations at most if its mount goes stale (none: nothing can recover it, or the keeper is off)."""
        if not self.spared or self.cannot_finish or self.keep is KeepMode.OFF or (self.leaves and not self.migratable):
            return 0
        return ROUND_TRIP

    @property
    def if_stale(self) -> str:
        """What happens to it if its mount goes stale, in words ("": Longhorn does not spare it)."""
        if not self.spared:
            return ""
        if self.cannot_finish:
            return f"if its mount goes stale, it needs a restart: {self.cannot_finish}"
        if self.keep is KeepMode.OFF:
            return "if its mount goes stale, nothing recovers it (the keeper is off): `virtctl migrate` it, then `virtctl unpause` it"
        way = (f"1 migration to its NFS server's node, {ROUND_TRIP} if its evacuation lands beside it" if self.leaves else
               f"away and back beside its NFS server, {ROUND_TRIP} migrations")
        verb = "recovers" if self.keep is KeepMode.MIGRATE else "would recover (--keep report: it only says so)"
        return f"if its mount goes stale (paused on I/O errors), the keeper {verb} it without a reboot: {way}, then unpauses it"

    @property
    def goes(self) -> str:
        """Where it is expected to go, in words."""
        steps = []
        if self.migrates:
            steps.append(f"live-migrated off by KubeVirt's evacuation: {self.evacuation}" if self.evacuation else
                         "live-migrated off by KubeVirt's evacuation, where kube-scheduler puts its target pod")
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
        return "; ".join(steps + ([self.if_stale] if self.if_stale else []))

    def to_json(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "name": self.name, "node": self.node, "storage": list(self.storage),
                "leaves": self.leaves, "migrates": self.migrates, "cannot_move": self.cannot_move,
                "evacuation": self.evacuation or None,
                "storage_restarts": self.storage_restarts, "rebooted": self.rebooted, "goes": self.goes,
                "if_stale": self.if_stale or None, "recovery_migrations": self.recovery}


@dataclasses.dataclass(frozen=True)
class DrainPreview:
    node: str
    vms: tuple[RunningVm, ...]
    restarts: Restarts

    @property
    def migrations(self) -> int:
        return sum(vm.migrates for vm in self.vms)

    @property
    def share_managers(self) -> int:
        """Share-managers of the VMs' disks that the drain restarts (one per VM's disk on the node)."""
        return sum(vm.storage_restarts for vm in self.vms)

    @property
    def recoveries(self) -> tuple[int, int]:
        """(VMs, keeper migrations at most) of the keeper's recovery, if the spared VMs' mounts go stale."""
        costs = [vm.recovery for vm in self.vms if vm.recovery]
        return len(costs), sum(costs)

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "migrations": self.migrations, "nfs_servers_restarting": self.share_managers,
                "stale_recovery": {"vms": [f"{vm.namespace}/{vm.name}" for vm in self.vms if vm.recovery],
                                   "migrations": self.recoveries[1]},
                "rebooted": [f"{vm.namespace}/{vm.name}" for vm in self.vms if vm.rebooted == str(Answer.YES)],
                "cannot_move": {f"{vm.namespace}/{vm.name}": vm.cannot_move for vm in self.vms if vm.cannot_move},
                "longhorn": {"answer": str(self.restarts.answer), "why": self.restarts.warning() or self.restarts.why},
                "vms": [vm.to_json() for vm in self.vms]}

    def lines(self) -> list[str]:
        vms, migrations = self.recoveries
        said = [f"draining {self.node}: {self.migrations} live migration(s) by KubeVirt's evacuation, "
                f"{self.share_managers} VM(s) whose NFS server restarts"
                + (f"; if their mounts go stale, the keeper's recovery of {vms} spared VM(s) without a reboot: up to "
                   f"{migrations} migration(s)" + (" (--keep report: it makes none)" if self.vms[0].keep is KeepMode.REPORT
                                                   else "") if vms else "")]
        for vm in self.vms:
            said.append(f"  {vm.namespace}/{vm.name}: {vm.goes}")
        if self.restarts.answer is not Answer.NO:
            said.append(f"  {self.restarts.warning()}")
        return said


def preview(node: str, vms: Iterable[RunningVm], restarts: Restarts, keep: KeepMode = KeepMode.MIGRATE) -> DrainPreview:
    """What draining `node` does to `vms` (each running opted-in VM), Longhorn and the keeper as they are set."""
    touched = (dataclasses.replace(vm, drained=node, restarts=restarts, keep=keep) for vm in vms)
    return DrainPreview(node, tuple(vm for vm in touched if vm.leaves or vm.storage_restarts), restarts)
