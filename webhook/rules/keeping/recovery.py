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

# What the keeper takes as proof that a disk's mount is stale (docs/keeper.md, "What the keeper takes as proof").
# virt-handler's `io-error-retry` (KubeVirt v1.9.0 `pkg/virt-handler/vm.go`, `retry_manager.go`) resumes a VM paused
# on an I/O error at once, then, while each resume fails within 30 s, after 10 s doubling to 3 min. virt-launcher
# sends its `IOerror` Event for each disk with an error on *every* domain callback while the domain is paused
# (`pkg/virt-launcher/notify-client/client.go`, `eventCallback`; callbacks come from lifecycle events, guest-agent
# updates, reconnects and metadata changes, every 15 s with access credentials), so an Event's `count` and
# `lastTimestamp` say how often it was told, not how often the VM paused; QEMU forgets a disk's error when the VM is
# resumed (`qmp_cont` resets each block device's io-status), so an Event sent after a resume names the disk that
# failed after it. The keeper therefore reads a pause after a resume, never a count: a resume (the keeper's own
# unpause, or the VM seen running after a pause of that disk) and then an Event of that disk, sent RACE after it and
# within FAILS_WITHIN of it.
# How long a healthy NFS client may take to reach the new server once it serves: NFS-Ganesha runs graceless behind
# the same Service IP (longhorn-share-manager `pkg/server/nfs/nfs_server.go`), and the Linux client reconnects on
# its next request after a TCP reconnect delay that starts at 3 s and doubles while the server was away
# (`xs_tcp_set_connect_timeout`, from 3 s): a share-manager down for 20-60 s leaves it at 12-24 s. A pause within
# this of the server serving is not yet evidence.
RECONNECT = timedelta(seconds=30)
SEEN_WITHIN = timedelta(seconds=10)  # paused this long, KubeVirt is not resuming it at once: the keeper tries once
RACE = timedelta(seconds=5)  # an Event of a callback before a resume is recorded within this of it
# A resume the disk fails again within this has failed: longer than a soft NFS request takes to fail after it
# (Longhorn's default RWX mount options `timeo=600,retrans=5`: 60 s a try), shorter than the minutes between two
# pauses each lifted for good.
FAILS_WITHIN = timedelta(minutes=3)
# A disk that ran this long after its last I/O error works: the evidence of a stale mount ends.
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
    (served by Longhorn volume `volume`), its cause (an I/O error, or not enough space), when it was first and
    last told (not how often the VM paused: it is told on every callback while paused); `combined`: client-go
    folded it with other messages, so its times are not this disk's alone."""

    disk: str
    volume: str
    no_space: bool
    first: datetime
    last: datetime
    combined: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Sighting:
    """A pause of a volume's disk after its new share-manager served, as the keeper saw it: the last time
    KubeVirt's Event told of it (`paused`) and when the keeper then saw the VM running (`ran`, None: not yet)."""

    paused: datetime
    ran: datetime | None = None


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


def _settled(mount: Mount) -> dict[str, tuple[Server, datetime]]:
    """By Longhorn volume asked to remount after the pod started and served again: its server, and when its NFS
    clients have had their time (RECONNECT) to reach it."""
    return {s.volume: (s, max(s.served, s.requested or EPOCH) + RECONNECT) for s in _late(mount) if s.served}


def _told(errors: Iterable[DiskError], volume: str) -> DiskError | None:
    """The latest I/O error (not "not enough space", not folded with others) KubeVirt told of a disk on `volume`."""
    return max((e for e in errors if e.volume == volume and not e.no_space and not e.combined),
               key=lambda e: e.last, default=None)


def _failed(error: DiskError, settled: datetime, seen: Sighting | None, resumed: Iterable[datetime]) -> str | None:
    """How a resume after `settled` shows failed, None when none does: an Event of the disk sent RACE after the
    keeper's own resume and within FAILS_WITHIN of it; or after the VM was seen running again, within FAILS_WITHIN of
    the pause before."""
    last = error.last
    for at in sorted(resumed, reverse=True):
        if settled <= at and at + RACE < last <= at + FAILS_WITHIN:
            return f"paused on an I/O error of disk {error.disk} at {rfc3339(last)}, after the keeper resumed it at {rfc3339(at)}"
    if seen is not None and seen.ran is not None and seen.ran + RACE < last <= seen.paused + FAILS_WITHIN:
        return (f"paused on an I/O error of disk {error.disk} at {rfc3339(last)}, {whole_seconds(last - seen.paused)}s "
                f"after the pause KubeVirt's retry lifted (the VM was running at {rfc3339(seen.ran)})")
    return None


def sighted(mount: Mount, errors: Iterable[DiskError], running: bool, now: datetime,
            seen: Mapping[str, Sighting]) -> dict[str, Sighting]:
    """By Longhorn volume, the pause of its disk after its new share-manager served as the keeper now sees it:
    what the record keeps, so that a pause after the VM ran again shows a retry that failed."""
    errors, found = list(errors), {}
    for volume, (_, settled) in _settled(mount).items():
        error, old = _told(errors, volume), seen.get(volume)
        if error is None or error.last < settled:
            continue
        again = old is None or (old.ran is not None and error.last > old.ran + RACE)
        found[volume] = Sighting(error.last, now if running else None) if again or old.ran is None else old
    return found


def probe(mount: Mount, errors: Iterable[DiskError], now: datetime, resumed: Iterable[datetime]) -> str | None:
    """Why the keeper resumes a VM paused on an I/O error once itself (what KubeVirt's retry does, which may be
    minutes away): a disk of a volume whose new share-manager serves and whose clients had their time; its mount
    works again or fails again at once. None once the keeper did so since, or for no such disk."""
    errors, resumed = list(errors), list(resumed)
    for volume, (server, settled) in sorted(_settled(mount).items()):
        error = _told(errors, volume)
        if error is None or now < settled or any(at >= settled for at in resumed):
            continue
        return (f"paused on an I/O error of disk {error.disk} after share-manager {server.pod} served again on "
                f"{server.node} at {rfc3339(settled - RECONNECT)}: resumed once, as KubeVirt's retry would, to see "
                f"whether its mount works again")
    return None


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
          seen: Mapping[str, Sighting] | None = None, kept: Stale | None = None,
          resumed: Iterable[datetime] = ()) -> Stale | str | None:
    """Whether the VM is on a stale mount, on KubeVirt's own words: an I/O error (never "not enough space") of a
    disk whose Longhorn volume was asked to remount after the VM's pod started, after a resume that came once the
    new share-manager served and the NFS client had its time (RECONNECT) — `_failed`; `seen`: what the keeper saw
    before (`sighted`), `resumed`: its own unpauses of the VMI. Or the keeper found so before (`kept`), that
    request still the latest and the disk not proven since. A pause of any other reason (the user's) always wins.
    `Stale`; else what a VM with an I/O error waits for; else None: nothing says its mount is stale."""
    if paused and paused != kinds.PAUSED_IO_ERROR:
        return None
    errors, io, notes, resumed = list(errors), paused == kinds.PAUSED_IO_ERROR, [], list(resumed)
    settled_by = _settled(mount)
    for server in sorted(_late(mount), key=lambda s: s.volume):
        requested, error = server.requested or EPOCH, _told(errors, server.volume)
        if kept is not None and kept.requested == requested and not proven(io, max(kept.last, error.last if error else kept.last), now):
            return kept
        if server.volume not in settled_by:
            notes += [_waiting(server, errors, now) or ""] if error or io else []
            continue
        settled, where = settled_by[server.volume][1], f"share-manager {server.pod} served again on {server.node}"
        if error is None or proven(io, error.last, now) or (error.last < settled and not io):
            continue  # no I/O error, or one its NFS client has long recovered from
        shown = _failed(error, settled, (seen or {}).get(server.volume), resumed) if error.last >= settled else None
        if shown is not None:
            return Stale(f"{shown}, once {where} at {rfc3339(settled - RECONNECT)}: a resume did not bring it back",
                         requested, error.last)
        notes.append(f"an I/O error of disk {error.disk} at {rfc3339(error.last)}, {where} at "
                     f"{rfc3339(settled - RECONNECT)}: KubeVirt retries it (or the keeper resumes it once), and the "
                     f"keeper recovers it if it pauses again")
    return "; ".join(n for n in notes if n) or None


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
