"""Recovering a VM stopped on a stale NFS mount without a reboot. Pure.

A VM that Longhorn spared (its launcher pod's owner kind on the blacklist) keeps the NFS mount of the
share-manager that went away; on it QEMU stops the VM on an I/O error (Paused, reason PausedIOError). A
live migration mounts its disks afresh in the target pod. KubeVirt (kubevirt/kubevirt):
- the migration target keeps a paused VM paused (`pkg/virt-launcher/virtwrap/live-migration-target.go`:
  any Paused condition puts it in the paused set, `SyncVMI` resumes only outside it), and virt-handler
  sets the condition only where there is none (`pkg/virt-handler/vm.go`): the VMI keeps its reason and
  lastTransitionTime; virt-handler's I/O-error retry acts on the domain's own pause reason, no longer an
  I/O error there: the VM stays paused until `PUT .../NAME/unpause` (`pkg/virt-api/rest/lifecycle.go`);
- a migration target pod has a required anti-affinity to the VMI's own pods
  (`createMigrationPodAntiAffinityRule`): a VM beside its NFS server goes through another node, and the
  keeper's usual return brings it back: two migrations (`ROUND_TRIP`).
Whether such a migration can finish is one answer, `cannot_finish` (docs/operations.md): the switchover
flushes once on the old mount (QEMU's `migration_completion_precopy` -> `vm_stop_force_state` ->
`bdrv_flush_all`), which with KubeVirt's cache `none` on NFS has nothing to send; virtio-blk carries the
failed requests over (`virtio_blk_save_device`) and re-issues them on the target's mount. A hotplugged
disk too: the target pod gets its own attachment pod, a fresh mount (`migration.go`, `createAttachmentPod`).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta

from ... import kinds
from ..shared.times import EPOCH, rfc3339, whole_seconds
from .migrations import Migration, of_vmi
from .running import VmiView

# virt-handler's `io-error-retry` (KubeVirt v1.9.0 `pkg/virt-handler/vm.go`: `NewFailRetryManager("io-error-retry",
# 10*time.Second, 3*time.Minute, 30*time.Second)`, `retry_manager.go`): a VM paused on an I/O error is resumed at
# once, then, while each resume fails, after 10 s, doubling to at most 3 min; a pause more than 30 s after the last
# resume is a new failure, resumed at once. A VM whose NFS client recovered is resumed by the first retry after it
# did and runs on: only a retry that fails once the new NFS server serves shows a stale mount.
FIRST_RETRY = timedelta(seconds=10)
LONGEST_RETRY = timedelta(minutes=3)
SAME_FAILURE = timedelta(seconds=30)
# How long a healthy NFS client may take to reach the new server once it serves: NFS-Ganesha runs graceless behind
# the same Service IP (longhorn-share-manager `pkg/server/nfs/nfs_server.go`), and the Linux client reconnects on
# its next request after a TCP reconnect delay that starts at 3 s and doubles while the server was away
# (`xs_tcp_set_connect_timeout`, from 3 s): a share-manager down for 20-60 s leaves it at 12-24 s. A pause within
# this of the server serving is not yet evidence.
RECONNECT = timedelta(seconds=30)
SEEN_WITHIN = timedelta(seconds=10)  # a retry that brought the VM back shows on its VMI within this
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
    """(name, libvirt's words) of our recovery migration of the VM that failed under way after the remount
    request `since`, as the VMI names it; one that never got a target says nothing of the disk."""
    state = vmi.migration
    if state is None or not state.failed or not state.failure_reason or not state.migration_uid:
        return None
    attempt = next((m for m in of_vmi(migrations, vmi) if m.uid == state.migration_uid), None)
    if attempt is None or not attempt.ours or attempt.recovers != kinds.RECOVERS_STALE_MOUNT or attempt.created < since:
        return None
    return attempt.name, state.failure_reason


@dataclasses.dataclass(frozen=True, slots=True)
class Server:
    """One Longhorn volume of a VM's disks: its latest remount request (`status.remountRequestedAt`, None:
    none) and its share-manager pod, by name and node, serving since `served` (None: not serving)."""

    volume: str
    requested: datetime | None = None
    served: datetime | None = None
    pod: str = ""
    node: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class Mount:
    """What says whether a VM's NFS mounts are fresh: when the pod it runs in started (None: not
    known), each of its Longhorn volumes (`Server`), and its volumes Longhorn reports faulted."""

    pod_started: datetime | None
    servers: tuple[Server, ...] = ()
    faulted: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class Pauses:
    """The I/O-error pauses of one VMI the keeper saw (each Paused condition's lastTransitionTime, the
    re-stamps of KubeVirt's retries included, oldest first), since when it has watched the VMI, and when
    this leader unpaused it."""

    at: tuple[datetime, ...] = ()
    watched_since: datetime | None = None
    unpaused: tuple[datetime, ...] = ()

    def unpauses(self, pod_started: datetime | None) -> int:
        """This leader's unpauses of the VMI since its pod started."""
        return sum(1 for at in self.unpaused if pod_started is None or at >= pod_started)


@dataclasses.dataclass(frozen=True, slots=True)
class Stale:
    """A VM on a stale mount: why, in words, and the remount request of Longhorn's it dates from."""

    words: str
    requested: datetime


def _late(mount: Mount) -> list[Server]:
    """The volumes whose latest remount request came after the VM's pod started: the pod may have kept a
    mount of an NFS server that went away. Longhorn stamps the request on every reconcile while a
    share-manager is in Error or Unknown, on the same node or elsewhere, so this alone proves nothing."""
    started = mount.pod_started
    return [s for s in mount.servers if started is not None and s.requested is not None and started < s.requested]


def not_fresh(mount: Mount | None) -> str | None:
    """Why the VM's pod is not known to have mounted its disks afresh, None when it has: it started
    after each of its Longhorn volumes' remount requests."""
    if mount is None or mount.pod_started is None:
        return "when its launcher pod started is not known"
    late = max(_late(mount), key=lambda s: s.requested or EPOCH, default=None)
    return None if late is None else (f"its pod started {rfc3339(mount.pod_started)}, before Longhorn asked for "
                                      f"volume {late.volume} to be remounted ({rfc3339(late.requested or EPOCH)})")


def retries(first: datetime) -> Iterator[datetime]:
    """When virt-handler resumes a VM that paused at `first` and pauses again at once after each resume."""
    at, wait = first, FIRST_RETRY
    yield at
    while True:
        at += wait
        yield at
        wait = min(wait * 2, LONGEST_RETRY)


def retry_after(pauses: Pauses, since: datetime, settled: datetime) -> datetime:
    """By when virt-handler has surely retried, after `settled`, a VM paused since `since` ever since. From
    the first pause of its failure as seen (the pauses before `since` less than a longest wait apart),
    the latest answer any of them gives; where the keeper may have missed an earlier one (it watched
    the VMI for less than that), a longest wait after `settled`."""
    chain = [since]
    for at in sorted((t for t in pauses.at if t < since), reverse=True):
        if chain[0] - at > LONGEST_RETRY + SAME_FAILURE:
            break
        chain.insert(0, at)
    if pauses.watched_since is None or pauses.watched_since > chain[0] - LONGEST_RETRY - SAME_FAILURE:
        return max(settled, since) + LONGEST_RETRY
    return max(next(at for at in retries(first) if at >= settled) for first in chain)


def judge(mount: Mount, pauses: Pauses, paused_since: datetime | None, now: datetime,
          kept: Stale | None = None) -> Stale | str | None:
    """Whether the VM is on a stale mount: its pod started before a remount request of one of its volumes,
    and KubeVirt's own retry failed once that volume's new share-manager served: the VM paused on an I/O
    error well after it served (RECONNECT), or, paused on one since before (`paused_since`), it is still
    paused after virt-handler's retry that came after; or the keeper found so before (`kept`, a pause its
    watch saw that no object shows now) and that request is still the latest. `Stale`; else, for a VM paused on an I/O error whose
    retry is still to come, what it waits for; else None: nothing says its mount is stale."""
    waits: list[str] = []
    for server in sorted(_late(mount), key=lambda s: s.volume):
        if kept is not None and server.requested == kept.requested:
            return kept
        requested = server.requested or EPOCH
        if server.served is None:
            waits.append(f"share-manager {server.pod or server.volume} does not serve yet")
            continue
        served = max(server.served, requested)
        settled, where = served + RECONNECT, f"share-manager {server.pod} served again on {server.node}"
        late = sorted(t for t in (*pauses.at, paused_since) if t is not None and t >= settled)
        if late:
            return Stale(f"paused on an I/O error at {rfc3339(late[0])}, {whole_seconds(late[0] - served)}s after "
                         f"{where} at {rfc3339(served)}: KubeVirt's retry did not bring it back", requested)
        if paused_since is None:
            continue
        due = retry_after(pauses, paused_since, settled)
        if now >= due + SEEN_WITHIN:
            return Stale(f"paused on an I/O error since {rfc3339(paused_since)}, still paused after KubeVirt's retry "
                         f"due by {rfc3339(due)}, {whole_seconds(due - served)}s after {where}: its retry did not bring "
                         f"it back", requested)
        waits.append(f"paused on an I/O error since {rfc3339(paused_since)}: {where} at {rfc3339(served)}; KubeVirt "
                     f"retries by {rfc3339(due)}, and the keeper recovers it if that retry fails")
    return "; ".join(waits) if paused_since is not None and waits else None


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
