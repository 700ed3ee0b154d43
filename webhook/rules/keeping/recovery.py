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
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from ... import kinds
from ..shared.times import EPOCH, rfc3339, whole_seconds
from .migrations import Migration, of_vmi
from .running import VmiView

# virt-handler's `io-error-retry` (KubeVirt v1.9.0 `pkg/virt-handler/vm.go`: `NewFailRetryManager("io-error-retry",
# 10*time.Second, 3*time.Minute, 30*time.Second)`, `retry_manager.go`): a VM paused on an I/O error is resumed at
# once, then, while each resume fails, after 10 s, doubling to at most 3 min; a pause more than 30 s after the last
# resume is a new failure, resumed at once. Each pause is an `IOerror` Event of virt-launcher's naming the disk and
# its cause (`pkg/virt-launcher/notify-client/client.go`), repeats folded by client-go's recorder into `count` and
# `lastTimestamp`. A VM whose NFS client recovered is resumed by the first retry after it did and runs on: only a
# retry that fails once the new NFS server serves shows a stale mount.
# How long a healthy NFS client may take to reach the new server once it serves: NFS-Ganesha runs graceless behind
# the same Service IP (longhorn-share-manager `pkg/server/nfs/nfs_server.go`), and the Linux client reconnects on
# its next request after a TCP reconnect delay that starts at 3 s and doubles while the server was away
# (`xs_tcp_set_connect_timeout`, from 3 s): a share-manager down for 20-60 s leaves it at 12-24 s. A pause within
# this of the server serving is not yet evidence.
RECONNECT = timedelta(seconds=30)
SEEN_WITHIN = timedelta(seconds=10)  # a retry that brought the VM back shows on its VMI within this
# A disk that ran this long after a pause without another I/O error works: longer than a soft NFS request takes
# to fail (Longhorn's default RWX mount options, `timeo=600,retrans=5`: 60 s a try) and than KubeVirt's longest
# wait. Pauses further apart are separate failures, and evidence older than this with the VM running ends.
PROVEN = timedelta(minutes=10)
# Longhorn asked for a remount this long ago and the share-manager still does not serve: the VM waits for its
# storage, said as such (no migration can mount what is not served).
STORAGE_WAIT = timedelta(minutes=10)
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
class DiskError:
    """KubeVirt's own words on one disk of a VM: virt-launcher's `IOerror` Event for the VMI volume `disk`
    (served by Longhorn volume `volume`), its cause (an I/O error, or not enough space), and its pauses as
    client-go's recorder folds them: how many, the first and the last."""

    disk: str
    volume: str
    no_space: bool
    count: int
    first: datetime
    last: datetime


@dataclasses.dataclass(frozen=True, slots=True)
class Stale:
    """A VM on a stale mount: why, in words, the remount request of Longhorn's it dates from, and the last
    I/O error that showed it (the evidence ends once the VM has run PROVEN past it)."""

    words: str
    requested: datetime
    last: datetime


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


def proven(paused: bool, last: datetime, now: datetime) -> bool:
    """The disk works: KubeVirt's retry lifted the pause at `last` and the VM has run PROVEN since."""
    return not paused and now - last >= PROVEN


def _retry_failed(error: DiskError, settled: datetime, paused: bool, now: datetime,
                  seen: datetime | None) -> str | None:
    """How KubeVirt's words show a retry of its own that failed after `settled`, None when they do not: two
    pauses after it, close enough to be one failure; or still paused past the retry after a repeated pause
    (KubeVirt resumes a new failure at once); or a pause after the one the keeper saw after it."""
    first, last, count = error.first, error.last, error.count
    if first >= settled and count >= 2 and last - first <= (count - 1) * PROVEN:
        return f"paused {count} times on I/O errors of disk {error.disk} from {rfc3339(first)} to {rfc3339(last)}"
    if paused and count >= 2 and now >= last + SEEN_WITHIN:
        return f"paused on an I/O error of disk {error.disk} at {rfc3339(last)} and still paused"
    if seen is not None and settled <= seen < last <= seen + PROVEN:
        return (f"paused on an I/O error of disk {error.disk} at {rfc3339(last)}, after KubeVirt resumed it from the "
                f"one at {rfc3339(seen)}")
    return None


def sightings(mount: Mount, errors: Iterable[DiskError]) -> dict[str, datetime]:
    """By Longhorn volume, the last I/O error after its new share-manager served and the client had its time:
    what the keeper's record keeps, so that a later pause shows a retry that failed."""
    settled = {s.volume: max(s.served, s.requested or EPOCH) + RECONNECT for s in _late(mount) if s.served}
    found: dict[str, datetime] = {}
    for e in errors:
        if not e.no_space and e.volume in settled and e.last >= settled[e.volume]:
            found[e.volume] = max(e.last, found.get(e.volume, e.last))
    return found


def full(errors: Iterable[DiskError], paused: bool) -> str | None:
    """Paused because a disk is full, in KubeVirt's words (its latest I/O error was "not enough space"): a
    migration cannot free space, nor an unpause; None otherwise."""
    latest = max(errors, key=lambda e: e.last, default=None)
    if not paused or latest is None or not latest.no_space:
        return None
    return (f"paused because its disk {latest.disk} is full (KubeVirt: not enough space on volume {latest.disk}, at "
            f"{rfc3339(latest.last)}): a migration cannot free space; free space in the guest or grow the volume")


def _waiting(server: Server, errors: Iterable[DiskError], now: datetime) -> str | None:
    """What a VM waits for while its share-manager does not serve: since its first I/O error on that volume (or
    Longhorn's request), for STORAGE_WAIT, the share-manager; then its storage, not the keeper."""
    since = min([server.requested or now, *(e.first for e in errors if e.volume == server.volume and not e.no_space)])
    if server.served is not None:
        return None
    if now - since < STORAGE_WAIT:
        return f"share-manager {server.pod or server.volume} does not serve yet"
    return (f"waiting for its storage, not for the keeper: share-manager {server.pod or server.volume} has not served "
            f"since {rfc3339(since)} ({whole_seconds(now - since) // 60} min)")


def storage_wait(mount: Mount, errors: Iterable[DiskError], now: datetime) -> str | None:
    """A share-manager of the VM's that has not served again for STORAGE_WAIT since its disk failed: the VM waits
    for its storage, not for the keeper (said once, an Event); None otherwise."""
    errors = list(errors)
    waits = [w for s in _late(mount) if (w := _waiting(s, errors, now)) and w.startswith("waiting")]
    return "; ".join(waits) or None


def judge(mount: Mount, errors: Iterable[DiskError], paused: str, now: datetime,
          seen: Mapping[str, datetime] | None = None, kept: Stale | None = None) -> Stale | str | None:
    """Whether the VM is on a stale mount, on KubeVirt's own words: an I/O error (never "not enough space") on a
    disk whose Longhorn volume was asked to remount after the VM's pod started, and a retry of KubeVirt's that
    failed once the new share-manager served and the NFS client had its time (RECONNECT) — `_retry_failed`;
    `seen`: what the keeper saw before (`sightings`). Or the keeper found so before (`kept`), that request still
    the latest and the disk not proven since. A pause of any other reason (the user's) always wins. `Stale`;
    else what a VM with an I/O error waits for; else None: nothing says its mount is stale."""
    if paused and paused != kinds.PAUSED_IO_ERROR:
        return None
    errors, io, notes = list(errors), paused == kinds.PAUSED_IO_ERROR, []
    for server in sorted(_late(mount), key=lambda s: s.volume):
        requested, failing = server.requested or EPOCH, [e for e in errors if e.volume == server.volume and not e.no_space]
        last = max((e.last for e in failing), default=None)
        if kept is not None and kept.requested == requested and not proven(io, max(kept.last, last or kept.last), now):
            return kept
        if server.served is None:
            notes += [_waiting(server, errors, now) or ""] if failing or io else []
            continue
        served = max(server.served, requested)
        settled, where = served + RECONNECT, f"share-manager {server.pod} served again on {server.node} at {rfc3339(served)}"
        for error in (e for e in failing if e.last >= settled and not proven(io, e.last, now)):
            shown = _retry_failed(error, settled, io, now, (seen or {}).get(server.volume))
            if shown is not None:
                return Stale(f"{shown}, {whole_seconds(error.last - served)}s after {where}: KubeVirt's retry did not "
                             f"bring it back", requested, error.last)
            notes.append(f"an I/O error of disk {error.disk} at {rfc3339(error.last)}, {whole_seconds(error.last - served)}s "
                         f"after {where}: KubeVirt retries it, and the keeper recovers it if that retry fails")
        if io and failing and last is not None and last < settled:
            notes.append(f"paused on an I/O error of disk {failing[0].disk} at {rfc3339(last)}, before {where} and its "
                         f"clients had {whole_seconds(RECONNECT)}s: KubeVirt retries it, and the keeper recovers it if "
                         f"that retry fails")
    return "; ".join(notes) or None


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
