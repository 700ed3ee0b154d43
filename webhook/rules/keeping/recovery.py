"""Recovering a VM stopped on a stale NFS mount without a reboot. Pure.

A VM that Longhorn spared (its launcher pod's owner kind is on the blacklist) keeps the NFS mount
of the share-manager that went away; on it QEMU stops the VM on an I/O error (condition Paused,
reason PausedIOError). A live migration mounts its disks afresh in the target pod. KubeVirt facts
(kubevirt/kubevirt):
- the migration target keeps a paused VM paused (`pkg/virt-launcher/virtwrap/live-migration-target.go`:
  any Paused condition puts it in the paused set, `SyncVMI` resumes only outside it), and virt-handler
  sets the Paused condition only where there is none (`pkg/virt-handler/vm.go`), so the VMI keeps
  the condition it had, with its reason and lastTransitionTime; virt-handler's I/O-error retry acts
  on the domain's own pause reason, which on the target is no longer an I/O error: the VM stays
  paused until `PUT .../virtualmachineinstances/NAME/unpause` (`pkg/virt-api/rest/lifecycle.go`,
  409 without a Paused condition);
- a migration target pod has a required anti-affinity to the VMI's own pods
  (`createMigrationPodAntiAffinityRule`): a VM beside its NFS server cannot migrate onto its own
  node. Its recovery goes through another node, and the keeper's usual return brings it back:
  two migrations (`HOP`).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from datetime import datetime

from ... import kinds
from ..shared.times import rfc3339
from .migrations import Migration, of_vmi
from .running import VmiView

HOP = 2  # migrations the recovery of a VM beside its NFS server costs: away, and back
ONE = 1  # and of a VM apart from it: to its storage node


@dataclasses.dataclass(frozen=True, slots=True)
class StaleMigration:
    """Whether a live migration of a VM paused on I/O errors of a stale NFS mount can finish under
    KubeVirt's disk settings (docs/operations.md says why, with its sources): the one answer the
    keeper's recovery goes by. When it cannot, the keeper migrates no such VM and `status` says it
    needs a restart, and why."""

    finishes: bool
    why: str


STALE_MIGRATION = StaleMigration(
    finishes=True,
    why="its target pod mounts the volume afresh; the migration carries the VM's paused state over",
)


def needs_restart(stale: str, answer: StaleMigration = STALE_MIGRATION) -> str:
    """Why a VM on a stale mount needs a restart, when no migration of it can finish."""
    return f"{stale}; no live migration of it can finish ({answer.why}): restart it (`virtctl restart`)"


def recovered_by(vmi: VmiView, migrations: Iterable[Migration]) -> Migration | None:
    """Our migration that recovered the VM from a stale mount while it stayed paused: ours, made to
    recover it (`kinds.RECOVERS`), succeeded, created after the VM was paused (the VMI keeps the
    Paused condition it had through a migration; a pause after it is a new one, not ours to lift).
    None when the VM is not paused or its condition says not since when. Read from the cluster
    alone, so that a keeper started again decides the same."""
    if not vmi.paused or vmi.paused_since is None:
        return None
    done = [m for m in of_vmi(migrations, vmi)
            if m.ours and m.recovers == kinds.RECOVERS_STALE_MOUNT and m.succeeded and m.created >= vmi.paused_since]
    return max(done, key=lambda m: (m.ended or m.created, m.created), default=None)


def not_afresh(pod_started: datetime | None, remounts: Mapping[str, datetime | None]) -> str | None:
    """Why the VM's pod is not known to have mounted its disks afresh, None when it has: it started
    after each of its Longhorn volumes' remount requests (`status.remountRequestedAt`, None: none)."""
    if pod_started is None:
        return "when its launcher pod started is not known"
    for volume, requested in sorted(remounts.items()):
        if requested is not None and pod_started < requested:
            return (f"its pod started {rfc3339(pod_started)}, before Longhorn asked for volume {volume} to be "
                    f"remounted ({rfc3339(requested)})")
    return None


def cost(beside: bool) -> int:
    """The migrations a VM's recovery costs: two beside its NFS server, one apart from it."""
    return HOP if beside else ONE
