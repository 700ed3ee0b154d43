"""Recovering a VM stopped on a stale NFS mount without a reboot, pure: a live migration mounts its disks afresh
in the target pod, which keeps a paused VM paused until unpaused; a VM beside its NFS server goes through another
node (`ROUND_TRIP`, KubeVirt's migration anti-affinity). Why, with KubeVirt's and QEMU's sources: docs/keeper.md
("What the keeper takes as proof") and docs/operations.md (whether a migration off a stale mount can finish).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from ... import kinds
from ..shared.times import EPOCH, rfc3339, whole_seconds
from .migrations import Migration, of_vmi
from .running import VmiView

# A pause after a resume is the proof, never an Event's `count` (virt-launcher repeats it on every callback while
# paused): docs/keeper.md. A healthy NFS client reaches the new server within this of it serving (the Linux client's
# TCP reconnect delay, from 3 s doubling: 12-24 s after 20-60 s away); a pause sooner is not yet evidence.
RECONNECT = timedelta(seconds=30)
SEEN_WITHIN = timedelta(seconds=10)  # paused this long, KubeVirt is not resuming it at once: the keeper tries once
RACE = timedelta(seconds=5)  # an Event of a callback before a resume is recorded within this of it
# A resume failed if the disk fails again within this: a soft NFS request fails in 60 s (Longhorn's `timeo=600`).
FAILS_WITHIN = timedelta(minutes=3)
PROVEN = timedelta(minutes=10)  # a disk that ran this long after its last I/O error works: the evidence ends
# A share-manager not serving this long after Longhorn's remount request: the VM waits for its storage, said so.
STORAGE_WAIT = timedelta(minutes=10)
ROUND_TRIP = 2  # migrations the recovery of a VM beside its NFS server costs: away, and back


# Cache modes with which QEMU fails every flush after one failed (`block/file-posix.c`, `handle_aiocb_flush`): a
# migration's final flush off a stale mount then fails. Unset, KubeVirt picks `none` (O_DIRECT) on NFS.
LASTING_FLUSH_FAILURE = frozenset({"writethrough", "writeback"})
FAULTED = "faulted"  # a Longhorn Volume's status.robustness when no replica serves it


def cannot_finish(caches: Iterable[tuple[str, str]], failed: tuple[str, str] | None,
                  faulted: Iterable[str]) -> str | None:
    """Why no live migration of a VM on a stale NFS mount can finish (docs/operations.md), None when one can: a disk
    of LASTING_FLUSH_FAILURE (`caches`: claim, mode), a recovery of ours failed under way (`failed`: its name,
    libvirt's words), or a volume Longhorn reports faulted."""
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


def failed_recovery(vmi: VmiView, migrations: Iterable[Migration], since: datetime) -> tuple[str, str] | None:
    """(name, libvirt's words) of our recovery since `since` that failed under way, as the VMI names it."""
    state = vmi.migration
    if state is None or not state.failed or not state.failure_reason or not state.migration_uid:
        return None
    attempt = next((m for m in of_vmi(migrations, vmi) if m.uid == state.migration_uid), None)
    if attempt is None or not attempt.ours or attempt.recovers != kinds.RECOVERS_STALE_MOUNT or attempt.created < since:
        return None
    return attempt.name, state.failure_reason


@dataclasses.dataclass(frozen=True, slots=True)
class Server:
    """One Longhorn volume of a VM's: its latest `remountRequestedAt` and share-manager pod, serving since `served`."""

    volume: str
    requested: datetime | None = None
    served: datetime | None = None
    pod: str = ""
    node: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class Mount:
    """Whether a VM's NFS mounts are fresh: its pod's start (None: not known), its volumes, those faulted."""

    pod_started: datetime | None
    servers: tuple[Server, ...] = ()
    faulted: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class DiskError:
    """virt-launcher's `IOerror` Event for the VMI volume `disk` (Longhorn volume `volume`): its cause, when first
    and last told (not how often it paused); `combined`: folded by client-go with others, its times not this disk's."""

    disk: str
    volume: str
    no_space: bool
    first: datetime
    last: datetime
    combined: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Sighting:
    """A pause after a new share-manager served: its Event's last time, and when the VM was then seen running."""

    paused: datetime
    ran: datetime | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Stale:
    """A VM on a stale mount: why, the remount request it dates from, the last I/O error that showed it."""

    words: str
    requested: datetime
    last: datetime


def _late(mount: Mount) -> list[Server]:
    """The volumes asked to remount after the VM's pod started: it may keep a mount of a server gone (Longhorn
    stamps the request on every reconcile of a failed share-manager: this alone proves nothing)."""
    started = mount.pod_started
    return [s for s in mount.servers if started is not None and s.requested is not None and started < s.requested]


def not_fresh(mount: Mount | None) -> str | None:
    """Why the VM's pod is not known to have mounted its disks afresh (started after each remount request)."""
    if mount is None or mount.pod_started is None:
        return "when its launcher pod started is not known"
    late = max(_late(mount), key=lambda s: s.requested or EPOCH, default=None)
    return None if late is None else (f"its pod started {rfc3339(mount.pod_started)}, before Longhorn asked for "
                                      f"volume {late.volume} to be remounted ({rfc3339(late.requested or EPOCH)})")


def proven(paused: bool, last: datetime, now: datetime) -> bool:
    """The disk works: KubeVirt's retry lifted the pause at `last` and the VM has run PROVEN since."""
    return not paused and now - last >= PROVEN


def _settled(mount: Mount) -> dict[str, tuple[Server, datetime]]:
    """By volume asked to remount and served again: its server, and when its clients had their time (RECONNECT)."""
    return {s.volume: (s, max(s.served, s.requested or EPOCH) + RECONNECT) for s in _late(mount) if s.served}


def _told(errors: Iterable[DiskError], volume: str) -> DiskError | None:
    """The latest I/O error (not "not enough space", not folded with others) KubeVirt told of a disk on `volume`."""
    return max((e for e in errors if e.volume == volume and not e.no_space and not e.combined),
               key=lambda e: e.last, default=None)


def _failed(error: DiskError, settled: datetime, seen: Sighting | None, resumed: Iterable[datetime]) -> str | None:
    """How a resume after `settled` failed: an Event of the disk RACE to FAILS_WITHIN after the keeper's resume, or
    after the VM was seen running again, within FAILS_WITHIN of the pause before; None: none did."""
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
    """By volume, its disk's pause after its new share-manager served (kept: a pause after a run is a failed retry)."""
    errors, found = list(errors), {}
    for volume, (_, settled) in _settled(mount).items():
        error, old = _told(errors, volume), seen.get(volume)
        if error is None or error.last < settled:
            continue
        again = old is None or (old.ran is not None and error.last > old.ran + RACE)
        found[volume] = Sighting(error.last, now if running else None) if again or old.ran is None else old
    return found


def probe(mount: Mount, errors: Iterable[DiskError], now: datetime, resumed: Iterable[datetime]) -> str | None:
    """Why the keeper resumes a VM paused on an I/O error once (as KubeVirt's retry, maybe minutes away, would): its
    new share-manager serves and the clients had their time. None once it did, or for no such disk."""
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
    """Paused on a full disk in KubeVirt's words (its latest error "not enough space"): no move or unpause helps."""
    latest = max(errors, key=lambda e: e.last, default=None)
    if not paused or latest is None or not latest.no_space:
        return None
    return (f"paused because its disk {latest.disk} is full (KubeVirt: not enough space on volume {latest.disk}, at "
            f"{rfc3339(latest.last)}): a migration cannot free space; free space in the guest or grow the volume")


def _waiting(server: Server, errors: Iterable[DiskError], now: datetime) -> str | None:
    """What a VM waits for while its share-manager does not serve: it, then (after STORAGE_WAIT) its storage."""
    since = min([server.requested or now, *(e.first for e in errors if e.volume == server.volume and not e.no_space)])
    if server.served is not None:
        return None
    if now - since < STORAGE_WAIT:
        return f"share-manager {server.pod or server.volume} does not serve yet"
    return (f"waiting for its storage, not for the keeper: share-manager {server.pod or server.volume} has not served "
            f"since {rfc3339(since)} ({whole_seconds(now - since) // 60} min)")


def storage_wait(mount: Mount, errors: Iterable[DiskError], now: datetime) -> str | None:
    """A share-manager not serving for STORAGE_WAIT since the disk failed: the VM waits for its storage, not us."""
    errors = list(errors)
    waits = [w for s in _late(mount) if (w := _waiting(s, errors, now)) and w.startswith("waiting")]
    return "; ".join(waits) or None


def judge(mount: Mount, errors: Iterable[DiskError], paused: str, now: datetime,
          seen: Mapping[str, Sighting] | None = None, kept: Stale | None = None,
          resumed: Iterable[datetime] = ()) -> Stale | str | None:
    """`Stale` when an I/O error of a disk asked to remount after the pod started follows a resume made once the new
    share-manager served (`_failed`; `seen`: `sighted` before, `resumed`: the keeper's unpauses), or as `kept`,
    not proven since; else what a VM with an I/O error waits for; None: nothing says so (a user's pause wins)."""
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
    """Its pause came over with a migration (older than its pod, or no later than the migration's end): KubeVirt's
    target keeps it paused and no retry of virt-handler's will lift it."""
    since = vmi.paused_since
    if since is None or pod_started is None:
        return False
    moved = vmi.migration
    ended = moved.ended if moved is not None and moved.completed and not moved.failed else None
    return since < pod_started or (ended is not None and since <= ended)


def hotplugged(claim: str, volume: str | None, attachment_deleted: str | None) -> str:
    """What a share-manager restart does to a hotplugged RWX disk (KubeVirt remakes a deleted attachment pod on the
    same node and skips a target already mounted); `attachment_deleted`: whether Longhorn deletes it (yes, no, ?)."""
    disk = f"hotplugged disk {volume or '?'} (PVC {claim})"
    pod = {"yes": "a share-manager restart deletes its attachment pod (Longhorn's blacklist cannot spare it: its owner "
                  "is the launcher Pod) and KubeVirt makes it again on the same node, but never refreshes the VM's mount",
           "no": "a share-manager restart leaves its attachment pod and never refreshes the VM's mount"}.get(
        attachment_deleted or "", "a share-manager restart never refreshes the VM's mount")
    return (f"{disk} stays on the NFS mount it was first attached with: {pod}; if that mount went stale the VM stays "
            f"paused until it is live-migrated (the keeper's recovery, whose target pod gets its own attachment pod and a "
            f"fresh mount) or restarted")
