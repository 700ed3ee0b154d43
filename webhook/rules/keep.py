"""After placement: where a VM runs, whether it is apart from its storage, and whether to move
it back with one targeted live migration. Pure: callers pass objects, counts and `now`.

KubeVirt facts (kubevirt/kubevirt `pkg/virt-controller/watch/migration/migration.go`,
`staging/src/kubevirt.io/api/core/v1/types.go`):
- a migration target pod keeps `kubevirt.io/migrationJobUID` for life and is the VM's pod
  once the migration completes; all pods of one VMI carry `kubevirt.io/created-by: <VMI uid>`;
- VMI `status.nodeName` switches to the target when a migration completes;
  `status.migrationState` tells whether one is in flight and to where;
- VirtualMachineInstanceMigration `spec.addedNodeSelector` (KubeVirt >= 1.6) narrows the
  target pod's nodeSelector; older schemas prune it, and the migration would go anywhere;
- at most `parallelMigrationsPerCluster` (default 5) migrations run at once, the rest queue.
Longhorn: restarting a share-manager stalls the VM's disk I/O, so moving the VM is the fix.
"""
from __future__ import annotations

import collections
import copy
import dataclasses
import enum
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from .. import kinds
from ..config import Settings
from .classify import Skip, running_exemption
from .facts import Fact, claims_of
from .patch import REQUIRED, clip_reason

# A migration unfinished for this long stops counting as in flight (it is not deleted).
STALE_AFTER = timedelta(hours=1)
# A migration that succeeded counts as in flight until the VMI shows it, for at most this long.
UNSEEN_FOR = timedelta(minutes=5)
# Backoff after a failed migration of ours: 30 min, doubling per consecutive failure, capped.
BACKOFF_FIRST = timedelta(minutes=30)
BACKOFF_CAP = timedelta(hours=24)
DAY = timedelta(hours=24)
NAME_INFIX = "-colocate-"  # generateName of our migrations: <vmi>-colocate-
_EPOCH = datetime.min.replace(tzinfo=UTC)


@dataclasses.dataclass(frozen=True, slots=True)
class Skipped:
    """An object of unexpected shape, left alone: which one, and why."""

    what: str
    reason: str

    def __str__(self) -> str:
        return f"{self.what}: {self.reason}"


class _Malformed(ValueError):
    """Raised while reading an object; becomes a Skipped."""


# --------------------------------------------------------------------------- time


def parse_time(value: object) -> datetime | None:
    """An RFC 3339 timestamp as Kubernetes writes it; None when absent or unreadable.

    A time without a zone (or a bare date) is not RFC 3339 and reads as None.
    """
    if not isinstance(value, str) or "T" not in value.upper():
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _seconds(span: timedelta) -> int:
    return max(0, int(span.total_seconds()))


def _time(container: dict[str, Any], key: str, where: str) -> datetime | None:
    """A timestamp field: None when absent, _Malformed when present but unreadable."""
    value = container.get(key)
    if value is None or value == "":
        return None
    parsed = parse_time(value)
    if parsed is None:
        raise _Malformed(f"{where}.{key} {str(value)[:40]!r} is not an RFC 3339 time")
    return parsed


_KIND_NAMES = {dict: "an object", str: "a string", bool: "a boolean"}


def _typed(container: dict[str, Any], key: str, where: str, kind: type) -> Any:
    """A field of `kind` (dict, str or bool): its empty value when absent, _Malformed when of
    another type."""
    value = container.get(key)
    if value is None:
        return kind()
    if not isinstance(value, kind):
        raise _Malformed(f"{where}.{key} is a {type(value).__name__}, not {_KIND_NAMES[kind]}")
    return value


def _dict(container: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    return _typed(container, key, where, dict)


def _str(container: dict[str, Any], key: str, where: str) -> str:
    return _typed(container, key, where, str)


def _bool(container: dict[str, Any], key: str, where: str) -> bool:
    return _typed(container, key, where, bool)


def _identity(obj: Any, kind: str) -> tuple[str, str, dict[str, Any]]:
    if not isinstance(obj, dict):
        raise _Malformed(f"a {kind} is a {type(obj).__name__}, not an object")
    metadata = _dict(obj, "metadata", kind)
    namespace, name = _str(metadata, "namespace", "metadata"), _str(metadata, "name", "metadata")
    if not kinds.valid_name(name) or not kinds.valid_name(namespace):
        raise _Malformed(f"metadata.namespace/name {namespace[:60]!r}/{name[:60]!r} is not a valid object name")
    return namespace, name, metadata


# --------------------------------------------------------------------------- where a VM runs: pods


@dataclasses.dataclass(frozen=True, slots=True)
class VmPods:
    """Launcher pods that say where their VMs run now (one per VMI), and why the others do not."""

    running: list[dict[str, Any]]
    skipped: list[tuple[dict[str, Any], Skip]]


def _newest_last(pod: dict[str, Any]) -> tuple[datetime, str]:
    metadata = kinds.meta(pod)
    name = metadata.get("name")
    return parse_time(metadata.get("creationTimestamp")) or _EPOCH, name if isinstance(name, str) else ""


def vm_pods(pods: Iterable[dict[str, Any]], settings: Settings, *, any_vm: bool = False) -> VmPods:
    """Which candidate launcher pods are where their VMs run now.

    Pods of one VMI (label kubevirt.io/created-by) are one VM: of those that run, scheduled
    and not terminating, the newest counts. During a migration the target is newer than its
    source, so the VM counts where it is going once the target is scheduled; a failed
    target (terminating or finished) drops out and the source counts again; after success
    the source finishes and the target (still labelled as one) is the VM's pod. A pod
    without the label stands alone. A pod passed twice counts once. Only opted-in VMs count,
    unless `any_vm`.
    """
    groups: dict[tuple[str, str] | int, list[dict[str, Any]]] = {}
    skipped: list[tuple[dict[str, Any], Skip]] = []
    seen: set[tuple[str, str]] = set()
    for pod in pods:
        metadata = kinds.meta(pod)
        name, namespace = metadata.get("name"), metadata.get("namespace") or ""
        if isinstance(name, str) and name:
            if (namespace, name) in seen:
                continue
            seen.add((namespace, name))
        why = running_exemption(pod, settings, any_vm=any_vm)
        if why is not None:
            skipped.append((pod, why))
            continue
        uid = kinds.labels(pod).get(kinds.CREATED_BY_LABEL)
        key: tuple[str, str] | int = (namespace, uid) if isinstance(uid, str) and uid else id(pod)
        groups.setdefault(key, []).append(pod)
    running: list[dict[str, Any]] = []
    for group in groups.values():
        group.sort(key=_newest_last)
        running.append(group[-1])
        skipped += [(pod, Skip.SUPERSEDED) for pod in group[:-1]]
    return VmPods(running, skipped)


# --------------------------------------------------------------------------- where a VM runs: the VMI


@dataclasses.dataclass(frozen=True, slots=True)
class VmiMigration:
    """The VMI's latest migration as KubeVirt reports it (`status.migrationState`)."""

    source_node: str | None
    target_node: str | None
    target_pod: str | None
    started: datetime | None
    ended: datetime | None
    completed: bool
    failed: bool
    migration_uid: str | None = None  # the uid of the VirtualMachineInstanceMigration

    @property
    def in_flight(self) -> bool:
        return not self.completed and not self.failed and self.ended is None


@dataclasses.dataclass(frozen=True, slots=True)
class VmiView:
    """What the keeper reads from a VMI."""

    namespace: str
    name: str
    uid: str
    phase: str
    node: str | None  # status.nodeName: where the VM runs
    opted_in: bool  # the opt-in annotation reached the VMI from the VM template
    kept: bool  # False when annotated kubevirt-scheduler/keep: "false"
    live_migratable: bool  # condition LiveMigratable is "True"
    not_migratable: str  # why not, from the condition, when it is not
    migration: VmiMigration | None
    claims: tuple[str, ...] = ()
    node_selector: dict[str, Any] = dataclasses.field(default_factory=dict)  # the VMI's own spec.nodeSelector

    @property
    def running(self) -> bool:
        return self.phase == "Running" and bool(self.node)


def _live_migratable(conditions: Any) -> tuple[bool, str]:
    if conditions is None:
        conditions = []
    if not isinstance(conditions, list):
        raise _Malformed(f"status.conditions is a {type(conditions).__name__}, not a list")
    for condition in conditions:
        if isinstance(condition, dict) and condition.get("type") == kinds.LIVE_MIGRATABLE:
            if condition.get("status") == "True":
                return True, ""
            detail = ": ".join(str(condition[k]) for k in ("reason", "message") if condition.get(k))
            return False, detail or f"{kinds.LIVE_MIGRATABLE} is {condition.get('status')!r}"
    return False, f"no {kinds.LIVE_MIGRATABLE} condition"


def _vmi_migration(status: dict[str, Any]) -> VmiMigration | None:
    state = _dict(status, "migrationState", "status")
    if not state:
        return None
    where = "status.migrationState"
    return VmiMigration(
        source_node=_str(state, "sourceNode", where) or None,
        target_node=_str(state, "targetNode", where) or None,
        target_pod=_str(state, "targetPod", where) or None,
        started=_time(state, "startTimestamp", where),
        ended=_time(state, "endTimestamp", where),
        completed=_bool(state, "completed", where),
        failed=_bool(state, "failed", where),
        migration_uid=_str(state, "migrationUid", where) or None,
    )


def read_vmi(obj: Any, settings: Settings) -> VmiView | Skipped:
    """The keeper's view of a VMI, or why it is skipped (an object of unexpected shape)."""
    what = "VMI"
    try:
        namespace, name, metadata = _identity(obj, "VMI")
        what = f"VMI {namespace}/{name}"
        status = _dict(obj, "status", "VMI")
        spec = _dict(obj, "spec", "VMI")
        migratable, why = _live_migratable(status.get("conditions"))
        annotations = kinds.annotations(obj)
        uid = metadata.get("uid")
        return VmiView(
            namespace=namespace,
            name=name,
            uid=uid if isinstance(uid, str) else "",
            phase=_str(status, "phase", "status"),
            node=_str(status, "nodeName", "status") or None,
            opted_in=annotations.get(settings.opt_in_annotation) == "true",
            kept=annotations.get(kinds.KEEP_ANNOTATION) != "false",
            live_migratable=migratable,
            not_migratable=why,
            migration=_vmi_migration(status),
            claims=tuple(claims_of(obj)),
            node_selector=dict(_dict(spec, "nodeSelector", "spec")),
        )
    except _Malformed as exc:
        return Skipped(what, str(exc))


# --------------------------------------------------------------------------- apart from storage


class VmState(enum.StrEnum):
    CO_LOCATED = "co-located"  # every resolved disk is served from the VM's node
    APART = "apart"  # all resolved disks are served from one other node
    SPLIT = "split"  # disks served from several nodes
    UNRESOLVED = "unresolved"  # not running, no disks, or no disk resolved


CO_LOCATED, APART, SPLIT, UNRESOLVED = VmState.CO_LOCATED, VmState.APART, VmState.SPLIT, VmState.UNRESOLVED


@dataclasses.dataclass(frozen=True, slots=True)
class Locality:
    """A VM's node against the nodes serving its disks."""

    state: VmState
    node: str | None  # where the VM runs
    storage: tuple[str, ...] = ()  # nodes serving resolved disks, most disks first
    why: str = ""

    @property
    def target(self) -> str | None:
        """The node to move the VM to: the one storage node of a VM that is apart."""
        return self.storage[0] if self.state is APART else None


def locality(node: str | None, facts: Sequence[Fact]) -> Locality:
    """Co-located, apart, split or unresolved, as the pin sees it: disks that did not resolve
    (not Longhorn, share-manager stopped, a read failed) are ignored when others did."""
    if not node:
        return Locality(UNRESOLVED, None, why="not running on a node")
    if not facts:
        return Locality(UNRESOLVED, node, why="no disks to follow")
    problems = [f.reason for f in facts if f.node is None]
    counts = collections.Counter(f.node for f in facts if f.node is not None)
    if not counts:
        return Locality(UNRESOLVED, node, why="; ".join(problems))
    storage = tuple(n for n, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    ignored = "".join(f"; ignored: {p}" for p in problems)
    if storage == (node,):
        return Locality(CO_LOCATED, node, storage, f"disks served from {node}, where the VM runs{ignored}")
    if len(storage) == 1:
        return Locality(APART, node, storage, f"disks served from {storage[0]}, the VM runs on {node}{ignored}")
    spread = ", ".join(f"{n} ({counts[n]})" for n in storage)
    return Locality(SPLIT, node, storage, f"disks served from {spread}, the VM runs on {node}{ignored}")


def apart_since(vmi: VmiView, share_manager_created: datetime | None,
                vmi_created: datetime | None = None) -> datetime | None:
    """Since when a VM that is apart has been apart, read from the cluster alone, so that every
    replica and `status` agree: the later of when the VM came to its node (its last
    migration's end, else the VMI's creation when it never migrated) and when the serving
    share-manager pod was created (the latest, for several disks). None when unknown: a
    migration in flight or without an end, or a creation time missing.
    """
    if share_manager_created is None:
        return None
    if vmi.migration is None:
        arrived = vmi_created
    else:
        arrived = None if vmi.migration.in_flight else vmi.migration.ended
    if arrived is None:
        return None
    return max(arrived, share_manager_created)


# --------------------------------------------------------------------------- migrations


class MigrationPhase(enum.StrEnum):
    PENDING = "Pending"
    SCHEDULING = "Scheduling"
    SCHEDULED = "Scheduled"
    PREPARING_TARGET = "PreparingTarget"
    TARGET_READY = "TargetReady"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


FINAL_PHASES = frozenset({MigrationPhase.SUCCEEDED, MigrationPhase.FAILED})


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

    @property
    def final(self) -> bool:
        return self.phase in FINAL_PHASES

    @property
    def succeeded(self) -> bool:
        return self.phase == MigrationPhase.SUCCEEDED

    @property
    def failed(self) -> bool:
        return self.phase == MigrationPhase.FAILED

    def in_flight(self, now: datetime) -> bool:
        """Not final and younger than an hour: a stuck one stops holding the queue back."""
        return not self.final and now - self.created < STALE_AFTER


def _ended(status: dict[str, Any], phase: str, created: datetime) -> datetime | None:
    """When a final migration ended: its final phase transition, else migrationState's end,
    else the latest transition we know of, else its creation."""
    transitions = status.get("phaseTransitionTimestamps")
    if transitions is None:
        transitions = []
    if not isinstance(transitions, list):
        raise _Malformed(f"status.phaseTransitionTimestamps is a {type(transitions).__name__}, not a list")
    final_at: list[datetime] = []
    any_at: list[datetime] = []
    for entry in transitions:
        if not isinstance(entry, dict):
            raise _Malformed("status.phaseTransitionTimestamps holds a non-object")
        at = _time(entry, "phaseTransitionTimestamp", "status.phaseTransitionTimestamps[]")
        if at is None:
            continue
        any_at.append(at)
        if entry.get("phase") in FINAL_PHASES:
            final_at.append(at)
    state_end = _time(_dict(status, "migrationState", "status"), "endTimestamp", "status.migrationState")
    if phase not in FINAL_PHASES:
        return None
    if final_at:
        return max(final_at)
    if state_end is not None:
        return state_end
    return max(any_at, default=created)


def read_migration(obj: Any) -> Migration | Skipped:
    """The keeper's view of a migration, or why it is skipped (an object of unexpected shape)."""
    what = "VMIM"
    try:
        namespace, name, metadata = _identity(obj, "VMIM")
        what = f"VMIM {namespace}/{name}"
        vmi = _str(_dict(obj, "spec", "VMIM"), "vmiName", "spec")
        if not kinds.valid_name(vmi):
            raise _Malformed(f"spec.vmiName {vmi[:60]!r} is not a VMI name")
        created = _time(metadata, "creationTimestamp", "metadata")
        if created is None:
            raise _Malformed("no metadata.creationTimestamp")
        status = _dict(obj, "status", "VMIM")
        phase = _str(status, "phase", "status")
        ours = kinds.labels(obj).get(kinds.MANAGED_BY_LABEL) == kinds.COMPONENT
        target = kinds.annotations(obj).get(kinds.DEFAULT_DECISION_PREFIX + kinds.NODE_KEY) if ours else None
        uid = metadata.get("uid")
        return Migration(namespace, name, vmi, phase, ours, created, _ended(status, phase, created),
                         target if isinstance(target, str) and target else None, uid if isinstance(uid, str) else "")
    except _Malformed as exc:
        return Skipped(what, str(exc))


def in_flight_counts(migrations: Iterable[Migration], now: datetime) -> tuple[int, int]:
    """(ours, all) migrations in flight, cluster-wide."""
    flying = [m for m in migrations if m.in_flight(now)]
    return sum(1 for m in flying if m.ours), len(flying)


def of_vmi(migrations: Iterable[Migration], vmi: VmiView | tuple[str, str]) -> list[Migration]:
    namespace, name = vmi if isinstance(vmi, tuple) else (vmi.namespace, vmi.name)
    return [m for m in migrations if m.namespace == namespace and m.vmi == name]


def migrating(vmi: VmiView, migrations: Iterable[Migration], now: datetime) -> bool:
    """A migration of this VMI is in flight: the VMI says so, or a migration object of it is
    (a queued one is not in the VMI's status yet), or one has succeeded that the VMI does not
    show yet (`unseen_success`). However old an unfinished one of ours is, it still holds its
    VM: it only stops counting against the in-flight limits after an hour, so that a second
    migration of the same VM is never created."""
    if vmi.migration is not None and vmi.migration.in_flight:
        return True
    mine = of_vmi(migrations, vmi)
    return any(m.in_flight(now) or (m.ours and not m.final) for m in mine) or unseen_success(vmi, mine, now) is not None


def unseen_success(vmi: VmiView, migrations: Iterable[Migration], now: datetime) -> Migration | None:
    """The VMI's latest migration succeeded, but the VMI as seen does not name it yet.

    KubeVirt marks a migration Succeeded once the VMI's migrationState shows it completed (its
    `migrationUid`), so such a VMI is older than the migration as seen: two watches, each with
    its own lag. It still shows the VM on its old node; until it catches up, the migration counts
    as in flight. For at most UNSEEN_FOR after the end: a VMI started again never names it.
    """
    done = [m for m in of_vmi(migrations, vmi) if m.succeeded and m.uid and m.ended is not None]
    if not done:
        return None
    latest = max(done, key=lambda m: (m.ended or _EPOCH, m.created))
    if latest.ended is None or now - latest.ended >= UNSEEN_FOR:
        return None
    shown = next((m for m in done if vmi.migration is not None and m.uid == vmi.migration.migration_uid), None)
    # Times have whole seconds: one that ended in the same second as the latest will do.
    return None if shown is not None and shown.ended == latest.ended else latest


def last_migration_end(vmi: VmiView, migrations: Iterable[Migration]) -> datetime | None:
    """When the VMI's latest migration of any origin ended (the VMI's own record included:
    migration objects may be gone)."""
    ends = [m.ended for m in of_vmi(migrations, vmi) if m.ended is not None]
    if vmi.migration is not None and vmi.migration.ended is not None:
        ends.append(vmi.migration.ended)
    return max(ends, default=None)


@dataclasses.dataclass(frozen=True, slots=True)
class Attempt:
    """One migration we created for a VM: when, and how it ended (None while unfinished)."""

    created: datetime
    ended: datetime | None = None
    succeeded: bool | None = None


def attempts(vmi: VmiView | tuple[str, str], migrations: Iterable[Migration]) -> list[Attempt]:
    """Our migrations of this VM, oldest first."""
    found = [Attempt(m.created, m.ended, m.succeeded if m.final else None)
             for m in of_vmi(migrations, vmi) if m.ours]
    return sorted(found, key=lambda a: a.created)


# --------------------------------------------------------------------------- backoff


def backoff_delay(failures: int) -> timedelta:
    """30 min after one failure, doubling per consecutive failure, at most 24 h."""
    if failures <= 0:
        return timedelta(0)
    return min(BACKOFF_FIRST * 2 ** min(failures - 1, 16), BACKOFF_CAP)


@dataclasses.dataclass(frozen=True, slots=True)
class Backoff:
    failures: int  # consecutive failures since the last success
    until: datetime | None


def backoff(history: Iterable[Attempt]) -> Backoff:
    """Where a VM stands after our attempts: consecutive failures at the end; a success resets."""
    done = sorted((a for a in history if a.succeeded is not None), key=lambda a: a.ended or a.created)
    failures = 0
    for attempt in reversed(done):
        if attempt.succeeded:
            break
        failures += 1
    if not failures:
        return Backoff(0, None)
    last = done[-1]
    return Backoff(failures, (last.ended or last.created) + backoff_delay(failures))


# --------------------------------------------------------------------------- the decision


class Mode(enum.StrEnum):
    REPORT = "report"  # decide and report, create nothing
    MIGRATE = "migrate"


@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    """The keeper's bounds: --keep-after, --keep-max-inflight, --keep-max-per-day, and
    KubeVirt's parallelMigrationsPerCluster (its default)."""

    after: timedelta = timedelta(seconds=600)
    max_inflight: int = 2
    max_cluster_inflight: int = 5
    max_per_day: int = 2


class Hold(enum.StrEnum):
    """What holds a VM where it is: short fixed phrases (a metric label, a log field), in the
    order the keeper checks them."""

    NOT_OPTED_IN = "not opted in"
    OPTED_OUT = "keep disabled"
    NOT_RUNNING = "not running"
    NOT_APART = "not apart"
    TARGET_UNFIT = "target unfit"
    NOT_MIGRATABLE = "not live-migratable"
    MIGRATING = "migration in flight"
    APART_BRIEFLY = "apart too briefly"
    MIGRATED_RECENTLY = "migrated recently"
    BACKING_OFF = "backing off"
    DAILY_LIMIT = "daily limit"
    UNTARGETED = "targeted migration unavailable"
    OUR_LIMIT = "our migrations in flight"
    CLUSTER_LIMIT = "migrations in flight cluster-wide"
    REPORT_ONLY = "report only"


@dataclasses.dataclass(frozen=True, slots=True)
class KeepDecision:
    """Move the VM back to its storage (act), or why not: `hold` names the condition."""

    act: bool
    reason: str
    state: VmState
    hold: Hold | None = None
    source: str | None = None  # where the VM runs
    target: str | None = None  # where its disks are served, when apart


def decide_keep(
    vmi: VmiView,
    where: Locality,
    *,
    now: datetime,
    apart_since: datetime | None,
    limits: Limits,
    history: Sequence[Attempt],
    in_flight_ours: int,
    in_flight_all: int,
    vmi_migrating: bool,
    last_end: datetime | None,
    target_unfit: str | None,
    targeted: bool,
    mode: Mode,
) -> KeepDecision:
    """Migrate an apart VM to its storage node, or say which condition holds it.

    The VM's own conditions come first (opt-in, shape, state, target, migratability, its
    migrations, time), then cluster-wide ones (targeted migration, in-flight bounds), then
    the mode: a report shows the first thing that would stop a migration.
    `target_unfit` is why the storage node cannot take the VM now (the pin's never-strand
    checks), `apart_since` when the keeper first saw it apart, `history` our migrations of it.
    """
    source, target = where.node, where.target

    def hold(why: Hold, reason: str) -> KeepDecision:
        return KeepDecision(False, reason, where.state, why, source, target)

    if not vmi.opted_in:
        return hold(Hold.NOT_OPTED_IN, "not opted in")
    if not vmi.kept:
        return hold(Hold.OPTED_OUT, f'annotated {kinds.KEEP_ANNOTATION}: "false"')
    if not vmi.running:
        return hold(Hold.NOT_RUNNING, f"VMI is {vmi.phase or 'without a phase'}, not running on a node")
    if where.state is not APART or target is None:
        return hold(Hold.NOT_APART, f"{where.state}: {where.why}")
    if target_unfit is not None:
        return hold(Hold.TARGET_UNFIT, f"cannot move to {target}: {target_unfit}")
    if not vmi.live_migratable:
        return hold(Hold.NOT_MIGRATABLE, f"not live-migratable: {vmi.not_migratable}")
    if vmi_migrating:
        return hold(Hold.MIGRATING, "a migration of this VMI is in flight")
    after = _seconds(limits.after)
    apart_for = now - (apart_since or now)
    if apart_for < limits.after:
        return hold(Hold.APART_BRIEFLY, f"apart for {_seconds(apart_for)}s of {after}s")
    if last_end is not None and now - last_end < limits.after:
        return hold(Hold.MIGRATED_RECENTLY, f"last migration ended {_seconds(now - last_end)}s ago (wait {after}s)")
    state = backoff(history)
    if state.until is not None and now < state.until:
        failed = "1 failed migration" if state.failures == 1 else f"{state.failures} failed migrations in a row"
        return hold(Hold.BACKING_OFF, f"backing off until {rfc3339(state.until)} after {failed}")
    today = sum(1 for a in history if now - a.created < DAY)
    if today >= limits.max_per_day:
        return hold(Hold.DAILY_LIMIT, f"migrated {today} times in the last 24h (limit {limits.max_per_day})")
    if not targeted:
        return hold(Hold.UNTARGETED, "targeted migration unavailable (spec.addedNodeSelector needs KubeVirt 1.6)")
    if in_flight_ours >= limits.max_inflight:
        return hold(Hold.OUR_LIMIT, f"{in_flight_ours} of our migrations in flight (limit {limits.max_inflight})")
    if in_flight_all >= limits.max_cluster_inflight:
        return hold(Hold.CLUSTER_LIMIT,
                    f"{in_flight_all} migrations in flight cluster-wide (limit {limits.max_cluster_inflight})")
    why = f"{where.why}; apart for {_seconds(apart_for)}s"
    if mode is not Mode.MIGRATE:
        return hold(Hold.REPORT_ONLY, f"report only: would migrate from {source} to {target}: {why}")
    return KeepDecision(True, f"migrating from {source} to {target}: {why}", where.state, None, source, target)


# --------------------------------------------------------------------------- the migration we create

def target_hostname(node: Any) -> str | None:
    """The node's own kubernetes.io/hostname label value (it can differ from the node name)."""
    value = kinds.labels(node).get(kinds.HOSTNAME_LABEL)
    return value if isinstance(value, str) and value else None


def migration_manifest(vmi: VmiView, node: dict[str, Any], reason: str = "") -> dict[str, Any] | Skipped:
    """The VirtualMachineInstanceMigration that moves the VM to `node`, or why it cannot.

    addedNodeSelector is label-based: the node is selected by its own hostname label value;
    a node without one cannot be targeted. The node name and the reason are recorded as
    annotations, and the managed-by label tells our migrations from others.
    """
    name = kinds.meta(node).get("name")
    shown = name if isinstance(name, str) and name else "(unnamed)"
    hostname = target_hostname(node)
    if hostname is None:
        return Skipped(f"node {shown}", f"node {shown} has no {kinds.HOSTNAME_LABEL} label: cannot target it")
    annotations = {kinds.DEFAULT_DECISION_PREFIX + kinds.NODE_KEY: shown}
    if reason:
        annotations[kinds.DEFAULT_DECISION_PREFIX + kinds.REASON] = clip_reason(reason)
    return {
        "apiVersion": kinds.VMIM.api_version,
        "kind": kinds.VMIM.kind,
        "metadata": {
            "generateName": f"{vmi.name}{NAME_INFIX}",
            "namespace": vmi.namespace,
            "labels": {kinds.MANAGED_BY_LABEL: kinds.COMPONENT},
            "annotations": annotations,
        },
        "spec": {"vmiName": vmi.name, "addedNodeSelector": {kinds.HOSTNAME_LABEL: hostname}},
    }


def as_started(pod: dict[str, Any], vmi_selector: Any = None) -> dict[str, Any]:
    """The VM's pod as KubeVirt creates it when the VM starts (or is migrated next), from a pod
    created as a migration target: without kubevirt.io/migrationJobUID, the required
    anti-affinity to the VMI's own pods that only targets get, and the node a targeted
    migration asked for (`spec.addedNodeSelector`, merged into the target's nodeSelector:
    kubernetes.io/hostname, unless the VMI's own `spec.nodeSelector` names it) (kubevirt/kubevirt
    pkg/virt-controller/watch/migration/migration.go). `explain` and the keeper judge the VM,
    not one migration target: after a targeted migration every other node would fail the
    target's own selector."""
    if kinds.MIGRATION_JOB_LABEL not in kinds.labels(pod):
        return pod
    pod = copy.deepcopy(pod)
    del pod["metadata"]["labels"][kinds.MIGRATION_JOB_LABEL]
    selector = kinds.spec(pod).get("nodeSelector")
    own = vmi_selector if isinstance(vmi_selector, dict) else {}
    if isinstance(selector, dict) and kinds.HOSTNAME_LABEL in selector and kinds.HOSTNAME_LABEL not in own:
        del selector[kinds.HOSTNAME_LABEL]
    vmi_uid = kinds.labels(pod).get(kinds.CREATED_BY_LABEL)
    affinity = kinds.spec(pod).get("affinity")
    anti = affinity.get("podAntiAffinity") if isinstance(affinity, dict) else None
    terms = anti.get(REQUIRED) if isinstance(anti, dict) else None
    if vmi_uid and isinstance(terms, list):
        own_pods = {"matchLabels": {kinds.CREATED_BY_LABEL: vmi_uid}}
        kept = [t for t in terms if not (isinstance(t, dict) and t.get("labelSelector") == own_pods)]
        if kept:
            anti[REQUIRED] = kept
        else:
            del anti[REQUIRED]
            if not anti:
                del affinity["podAntiAffinity"]
            if not affinity:
                del pod["spec"]["affinity"]
    return pod
