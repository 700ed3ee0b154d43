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
  two migrations (`ROUND_TRIP`).
Whether such a migration can finish at all is one answer, `cannot_finish` (docs/operations.md):
the switchover flushes the disk once on the old mount (QEMU's `migration_completion_precopy` ->
`vm_stop_force_state` -> `bdrv_flush_all`), which with KubeVirt's cache `none` on NFS has nothing
to send; virtio-blk carries the failed requests over (`virtio_blk_save_device`) and re-issues them
on the target's mount once the VM runs. A hotplugged disk is the same: the target pod gets its own
attachment pod, with a fresh mount (`migration.go`, `createAttachmentPod`).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from datetime import datetime, timedelta

from ... import kinds
from ..shared.times import rfc3339
from .migrations import Migration, of_vmi
from .running import VmiView

# virt-handler retries a VM paused on an I/O error every 10 s doubling to 3 min (`io-error-retry`,
# pkg/virt-handler/vm.go) and resumes it if its mount recovered, as it does in Longhorn's usual case
# (the same Service IP, NFSv4.1 state reclaimed). The keeper moves a VM still on the old mount this
# long after Longhorn's remount request: counted from that request, never from the Paused
# condition, which each retry removes and the next pause stamps anew.
RETRY_WAIT = timedelta(minutes=5)
ROUND_TRIP = 2  # migrations the recovery of a VM beside its NFS server costs: away, and back
ONE = 1  # and of a VM apart from it: to its storage node


# Cache modes with which QEMU fails every flush after one failed (`block/file-posix.c`,
# `handle_aiocb_flush`: "make bdrv_flush() fail permanently", not with O_DIRECT): the final flush of
# a migration off a stale mount then fails. Unset, KubeVirt picks `none` (O_DIRECT) on NFS.
LASTING_FLUSH_FAILURE = frozenset({"writethrough", "writeback"})
FAULTED = "faulted"  # a Longhorn Volume's status.robustness when no replica serves it


def cannot_finish(caches: Iterable[tuple[str, str]], failed: tuple[str, str] | None,
                  faulted: Iterable[str]) -> str | None:
    """Why no live migration of a VM on a stale NFS mount can finish, None when one can: the one
    answer the keeper's recovery goes by (docs/operations.md says why, with its sources). Under
    KubeVirt's settings (error policy stop, cache none on NFS, no abort-on-error) QEMU carries the
    failed requests over and its one flush of the old mount at the switchover succeeds; it cannot
    with a disk in a cache mode of LASTING_FLUSH_FAILURE (`caches`: claim, mode), after a recovery
    migration of ours failed under way (`failed`: its name, libvirt's words), or onto a volume
    Longhorn reports faulted (`faulted`): the VM would pause again on the target."""
    for claim, cache in caches:
        if cache in LASTING_FLUSH_FAILURE:
            return (f"its disk {claim} uses cache mode {cache}, with which QEMU fails every flush after the first "
                    f"failed one, so a live migration can never finish")
    if failed is not None:
        return (f"QEMU must flush the disk on the old mount before handing it over, and that failed "
                f"({failed[0]}: {failed[1]})")
    for volume in sorted(faulted):
        return f"its Longhorn volume {volume} is faulted: on another node it would pause again"
    return None


def needs_restart(stale: str, why: str) -> str:
    """What `status` says of a VM on a stale mount that no migration can recover."""
    return f"{stale}, and it cannot be moved to a fresh mount: {why}; a restart mounts the volume afresh (`virtctl restart`)"


def failed_recovery(vmi: VmiView, migrations: Iterable[Migration], since: datetime) -> tuple[str, str] | None:
    """Our recovery migration of the VM that failed under way on this stale mount (created after the
    remount request `since`; the VMI names it, with libvirt's words): (its name, why). A migration that
    never got a target says nothing of the disk."""
    state = vmi.migration
    if state is None or not state.failed or not state.failure_reason or not state.migration_uid:
        return None
    attempt = next((m for m in of_vmi(migrations, vmi) if m.uid == state.migration_uid), None)
    if attempt is None or not attempt.ours or attempt.recovers != kinds.RECOVERS_STALE_MOUNT:
        return None
    if attempt.created < since:
        return None
    return attempt.name, state.failure_reason


@dataclasses.dataclass(frozen=True, slots=True)
class Mount:
    """What says whether a VM's NFS mounts are fresh: when the pod it runs in started (None: not
    known), each of its Longhorn volumes' latest remount request (`status.remountRequestedAt`, None:
    none), and its volumes Longhorn reports faulted."""

    pod_started: datetime | None
    remounts: tuple[tuple[str, datetime | None], ...] = ()
    faulted: tuple[str, ...] = ()


def stale_since(mount: Mount) -> tuple[str, datetime] | None:
    """Why the VM's mount is stale and since when, None when nothing says so: its pod started before
    Longhorn asked for a volume of its disks to be remounted (the share-manager serving it started
    again, elsewhere or afresh), so the pod kept the mount of an NFS server that went away. Whether
    KubeVirt shows the VM paused at this moment does not matter: its I/O-error retry resumes and
    re-pauses it. Since the latest such request (Longhorn's own record, never re-stamped by KubeVirt)."""
    if mount.pod_started is None:
        return None
    late = [(requested, volume) for volume, requested in mount.remounts
            if requested is not None and mount.pod_started < requested]
    if not late:
        return None
    requested, volume = max(late)
    return (f"its pod started {rfc3339(mount.pod_started)}, before Longhorn asked for volume {volume} to be "
            f"remounted ({rfc3339(requested)}): its NFS mount is stale"), requested


def not_fresh(mount: Mount | None) -> str | None:
    """Why the VM's pod is not known to have mounted its disks afresh, None when it has: it started
    after each of its Longhorn volumes' remount requests."""
    if mount is None or mount.pod_started is None:
        return "when its launcher pod started is not known"
    stale = stale_since(mount)
    return stale[0] if stale is not None else None


def came_over(vmi: VmiView, pod_started: datetime | None) -> bool:
    """Its pause is older than the pod it runs in: the pause came over with a migration (KubeVirt's
    target keeps a paused VM paused and the VMI keeps its condition), so no retry of virt-handler's
    will lift it. A re-stamp on the source before the switchover still counts: the pause is then no
    later than the migration's end the VMI records."""
    since = vmi.paused_since
    if since is None or pod_started is None:
        return False
    moved = vmi.migration
    ended = moved.ended if moved is not None and moved.completed and not moved.failed else None
    return since < pod_started or (ended is not None and since <= ended)


def retry_words(since: datetime) -> str:
    """Why a VM on a stale mount since `since` (Longhorn's remount request) is not moved yet."""
    return (f"on a stale mount since {rfc3339(since)}: it may recover by itself (KubeVirt's own retry then resumes "
            f"the VM); the keeper recovers it from {rfc3339(since + RETRY_WAIT)}")


def cost(beside: bool) -> int:
    """The migrations a VM's recovery costs: two beside its NFS server, one apart from it."""
    return ROUND_TRIP if beside else ONE


def hotplugged(claim: str, volume: str | None, attachment_deleted: str | None) -> str:
    """What a share-manager restart does to a hotplugged RWX disk of a VM, in one line (KubeVirt 1.8:
    virt-controller's `handleHotplugVolumes` makes a deleted attachment pod again on the same node,
    virt-handler's `mountFileSystemHotplugVolume` skips a target already mounted; QEMU keeps its file
    open): `attachment_deleted` says whether Longhorn deletes its attachment pod (yes, no, cannot tell)."""
    disk = f"hotplugged disk {volume or '?'} (PVC {claim})"
    pod = {"yes": "a share-manager restart deletes its attachment pod (Longhorn's blacklist cannot spare it: its owner "
                  "is the launcher Pod) and KubeVirt makes it again on the same node, but never refreshes the VM's mount",
           "no": "a share-manager restart leaves its attachment pod and never refreshes the VM's mount"}.get(
        attachment_deleted or "", "a share-manager restart never refreshes the VM's mount")
    return (f"{disk} stays on the NFS mount it was first attached with: {pod}; if that mount went stale the VM stays "
            f"paused until it is live-migrated (the keeper's recovery, whose target pod gets its own attachment pod and a "
            f"fresh mount) or restarted")
