"""Migrations: ours and everyone's, in flight or ended, the backoff after a failure of ours, and the one we create
(KubeVirt `pkg/virt-controller/watch/migration/migration.go`: `spec.addedNodeSelector` from 1.6 narrows its target
pod's nodeSelector; `parallelMigrationsPerCluster` 5 and `parallelOutboundMigrationsPerNode` 2 run, the rest queue).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from ... import kinds
from ...kinds import clip_reason
from ..shared import declared
from ..shared.reading import Malformed, read_identity
from .running import VmiView
from ..shared.times import EPOCH

STALE_AFTER = timedelta(hours=1)  # unfinished this long: no longer in flight (not deleted)
UNSEEN_FOR = timedelta(minutes=5)  # succeeded: in flight until the VMI shows it, this long at most
BACKOFF_FIRST, BACKOFF_CAP = timedelta(minutes=30), timedelta(hours=24)  # after a failed one of ours, doubling
NAME_INFIX = "-colocate-"  # generateName of our migrations: <vmi>-colocate-
UNPLACEABLE_SECONDS = 60  # a target pod of ours unschedulable this long is given up (KubeVirt's default: 5 min)
MIGRATION_PRIORITY = "system-maintenance"  # ours queue after drains and users (KubeVirt 1.7+)


SUCCEEDED, FAILED = "Succeeded", "Failed"  # the final phases; the others (Pending ... Running, unknown) are unfinished
FINAL_PHASES = frozenset({SUCCEEDED, FAILED})


@dataclasses.dataclass(frozen=True, slots=True)
class Migration:
    """What the keeper reads from a VirtualMachineInstanceMigration."""

    namespace: str
    name: str
    vmi: str  # spec.vmiName
    phase: str  # "" until virt-controller reports one; unknown phases (decentralized) are unfinished
    ours: bool  # labelled app.kubernetes.io/managed-by: kubevirt-colocate
    created: datetime
    ended: datetime | None  # set once final
    target: str | None = None  # the node we asked for (our annotation)
    uid: str = ""  # what the VMI's status.migrationState.migrationUid names
    evacuated: str | None = None  # a drain's or an eviction's: the node it evacuates (KubeVirt's annotation)
    priority: str = ""  # spec.priority, set by virt-controller alone (KubeVirt >= 1.7)
    recovers: str = ""  # ours, made to recover the VM from a stale NFS mount (our annotation: RECOVERS_STALE_MOUNT)

    @property
    def final(self) -> bool:
        return self.phase in FINAL_PHASES

    @property
    def succeeded(self) -> bool:
        return self.phase == SUCCEEDED

    @property
    def failed(self) -> bool:
        return self.phase == FAILED

    def in_flight(self, now: datetime) -> bool:
        """Not final and younger than an hour: a stuck one stops holding the queue back."""
        return not self.final and now - self.created < STALE_AFTER

    @property
    def descheduled(self) -> bool:
        """An evacuation for the descheduler's eviction: system-maintenance (a drain's is system-critical)."""
        return self.evacuated is not None and self.priority == kinds.DESCHEDULER_PRIORITY


def _ended(status: dict[str, Any], phase: str, created: datetime) -> datetime | None:
    """When a final migration ended: its final transition, migrationState's end, its latest transition, creation."""
    final_at, any_at = list[datetime](), list[datetime]()
    for entry in declared.TRANSITIONS.items(status):
        if not isinstance(entry, dict):
            raise Malformed("status.phaseTransitionTimestamps holds a non-object")
        at = declared.TRANSITION_AT.time(entry)
        if at is None:
            continue
        any_at.append(at)
        if declared.TRANSITION_PHASE.value(entry) in FINAL_PHASES:
            final_at.append(at)
    state_end = declared.VMIM_ENDED.time(declared.VMIM_STATE.obj(status))
    if phase not in FINAL_PHASES:
        return None
    return max(final_at, default=None) or state_end or max(any_at, default=created)


def read_migration(obj: Any) -> Migration | Malformed:
    """The keeper's view of a migration (the fields `declared.VMIM` declares), or why it is skipped."""
    what = "VMIM"
    try:
        namespace, name, metadata = read_identity(obj, "VMIM")
        what = f"VMIM {namespace}/{name}"
        spec = declared.VMIM_SPEC.obj(obj)
        vmi = declared.VMI_NAME_OF.text(spec)
        if not kinds.valid_name(vmi):
            raise Malformed(f"spec.vmiName {vmi[:60]!r} is not a VMI name")
        created = declared.VMIM_CREATED.time(metadata)
        if created is None:
            raise Malformed("no metadata.creationTimestamp")
        status = declared.VMIM_STATUS.obj(obj)
        phase = declared.VMIM_PHASE.text(status)
        ours = declared.VMIM_MANAGED_BY.of(obj) == kinds.COMPONENT
        target, recovers = (declared.VMIM_TARGET.of(obj), declared.VMIM_RECOVERS.of(obj)) if ours else (None, None)
        uid, evacuated = declared.VMIM_UID.value(metadata), declared.VMIM_EVACUATION.of(obj)
        return Migration(namespace=namespace, name=name, vmi=vmi, phase=phase, ours=ours, created=created,
                         ended=_ended(status, phase, created),
                         target=target if isinstance(target, str) and target else None,
                         uid=uid if isinstance(uid, str) else "",
                         evacuated=evacuated if isinstance(evacuated, str) else None,
                         priority=declared.PRIORITY.text(spec), recovers=recovers if isinstance(recovers, str) else "")
    except Malformed as exc:
        return exc.of(what)


def flying(migrations: Iterable[Migration], vmis: Iterable[VmiView], now: datetime) -> tuple[tuple[str, str, bool], ...]:
    """Each migration in flight: the node it leaves ("" when not known), its namespace/name, whether it is ours."""
    migrations = [m for m in migrations if m.in_flight(now)]
    nodes: dict[tuple[str, str], str] = {}
    for vmi in vmis if migrations else ():  # most passes: none in flight, no VMI to look at
        state = vmi.migration
        node = state.source_node if state is not None and state.in_flight and state.source_node else vmi.node
        if node:
            nodes[vmi.namespace, vmi.name] = node
    return tuple((nodes.get((m.namespace, m.vmi), ""), f"{m.namespace}/{m.name}", m.ours) for m in migrations)


def of_vmi(migrations: Iterable[Migration], vmi: VmiView | tuple[str, str]) -> list[Migration]:
    namespace, name = vmi if isinstance(vmi, tuple) else (vmi.namespace, vmi.name)
    return [m for m in migrations if m.namespace == namespace and m.vmi == name]


def migrating(vmi: VmiView, migrations: Iterable[Migration], now: datetime) -> bool:
    """A migration of this VMI is in flight (the VMI, a migration, an unfinished one of ours, one not seen yet)."""
    if vmi.migration is not None and vmi.migration.in_flight:
        return True
    mine = of_vmi(migrations, vmi)
    return any(m.in_flight(now) or (m.ours and not m.final) for m in mine) or unseen_success(vmi, mine, now) is not None


def unseen_success(vmi: VmiView, migrations: Iterable[Migration], now: datetime) -> Migration | None:
    """The VMI's latest migration succeeded but the VMI seen does not name it yet: in flight, UNSEEN_FOR at most."""
    done = [m for m in of_vmi(migrations, vmi) if m.succeeded and m.uid and m.ended is not None]
    if not done:
        return None
    latest = max(done, key=lambda m: (m.ended or EPOCH, m.created))
    if latest.ended is None or now - latest.ended >= UNSEEN_FOR:
        return None
    shown = next((m for m in done if vmi.migration is not None and m.uid == vmi.migration.migration_uid), None)
    # Times have whole seconds: one that ended in the same second as the latest will do.
    return None if shown is not None and shown.ended == latest.ended else latest


def last_migration_end(vmi: VmiView, migrations: Iterable[Migration]) -> datetime | None:
    """When the VMI's latest migration of any origin ended (its own record too: the objects may be gone)."""
    ends = [m.ended for m in of_vmi(migrations, vmi) if m.ended is not None]
    if vmi.migration is not None and vmi.migration.ended is not None:
        ends.append(vmi.migration.ended)
    return max(ends, default=None)


def last_move(vmi: VmiView, migrations: Iterable[Migration]) -> Migration | None:
    """The migration that brought the VM where it runs: the one the VMI names, else the latest that succeeded."""
    state = vmi.migration
    if state is None:
        return None
    moves = [m for m in of_vmi(migrations, vmi) if m.succeeded]
    if state.completed and not state.failed and state.migration_uid:
        return next((m for m in moves if m.uid == state.migration_uid), None)
    return max(moves, key=lambda m: (m.ended or m.created, m.created), default=None)


def attempts(vmi: VmiView | tuple[str, str], migrations: Iterable[Migration]) -> list[Migration]:
    """Our migrations of this VM, oldest first."""
    return sorted((m for m in of_vmi(migrations, vmi) if m.ours), key=lambda m: m.created)


# --------------------------------------------------------------------------- backoff


def doubled(first: timedelta, cap: timedelta, count: int) -> timedelta:
    """`first` after one failure, doubling with each in a row, at most `cap` (client-go's per-item rate limiter)."""
    return min(first * 2 ** min(max(count - 1, 0), 16), cap)


@dataclasses.dataclass(frozen=True, slots=True)
class Backoff:
    failures: int  # consecutive failures since the last success
    until: datetime | None


NO_BACKOFF = Backoff(0, None)


def backoff(history: Iterable[Migration]) -> Backoff:
    """Where a VM stands after our migrations of it: consecutive failures at the end; a success resets."""
    if not history:
        return NO_BACKOFF  # most VMs: none tried
    done = sorted((m for m in history if m.final), key=lambda m: m.ended or m.created)
    failures = 0
    for attempt in reversed(done):
        if attempt.succeeded:
            break
        failures += 1
    if not failures:
        return NO_BACKOFF
    last = done[-1]
    return Backoff(failures, (last.ended or last.created) + doubled(BACKOFF_FIRST, BACKOFF_CAP, failures))


def target_hostname(node: Any) -> str | None:
    """The node's own kubernetes.io/hostname label value (it can differ from the node name)."""
    value = kinds.labels(node).get(kinds.HOSTNAME_LABEL)
    return value if isinstance(value, str) and value else None


def migration_manifest(vmi: VmiView, node: dict[str, Any], reason: str = "",
                       priority: str | None = None, *, recovers: bool = False) -> dict[str, Any] | str:
    """The migration that moves the VM to `node` by its hostname label, or why not; its target pod unschedulable
    for UNPLACEABLE_SECONDS is deleted by KubeVirt (a drain needs the slot); one that `recovers` says so."""
    name = kinds.meta(node).get("name")
    shown = name if isinstance(name, str) and name else "(unnamed)"
    hostname = target_hostname(node)
    if hostname is None:
        return f"node {shown} has no {kinds.HOSTNAME_LABEL} label: cannot target it"
    annotations = {kinds.DEFAULT_DECISION_PREFIX + kinds.NODE_KEY: shown,
                   kinds.UNSCHEDULABLE_TIMEOUT_ANNOTATION: str(UNPLACEABLE_SECONDS)}
    if reason:
        annotations[kinds.DEFAULT_DECISION_PREFIX + kinds.REASON] = clip_reason(reason)
    if recovers:
        annotations[kinds.DEFAULT_DECISION_PREFIX + kinds.RECOVERS] = kinds.RECOVERS_STALE_MOUNT
    return {"apiVersion": kinds.VMIM.api_version, "kind": kinds.VMIM.kind,
            "metadata": {"generateName": f"{vmi.name}{NAME_INFIX}", "namespace": vmi.namespace,
                         "labels": {kinds.MANAGED_BY_LABEL: kinds.COMPONENT}, "annotations": annotations},
            "spec": {"vmiName": vmi.name, "addedNodeSelector": {kinds.HOSTNAME_LABEL: hostname}}
            | ({"priority": priority} if priority else {})}
