"""After placement: whether to move a VM that is apart from its storage back to it with one
targeted live migration, or what holds it. Pure: callers pass objects, counts and `now`.

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

import dataclasses
import enum
from collections.abc import Sequence
from datetime import datetime, timedelta

from ... import kinds
from .apart import APART, Locality, VmState
from .migrations import Attempt, backoff, Migration
from .running import VmiView
from ..shared.times import rfc3339, whole_seconds

DAY = timedelta(hours=24)


class Mode(enum.StrEnum):
    REPORT = "report"  # decide and report, create nothing
    MIGRATE = "migrate"


@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    """The keeper's bounds: --keep-after, --keep-after-descheduled, --keep-max-inflight,
    --keep-max-per-day, and KubeVirt's parallelMigrationsPerCluster and
    parallelOutboundMigrationsPerNode (its defaults, or --keep-max-outbound-per-node)."""

    after: timedelta = timedelta(seconds=600)
    after_descheduled: timedelta = timedelta(hours=6)  # since the descheduler's migration of the VM ended
    max_inflight: int = 2
    max_cluster_inflight: int = 5
    max_per_day: int = 2
    max_outbound_per_node: int = 2  # KubeVirt's parallelOutboundMigrationsPerNode (its default)


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
    # The descheduler moved it off a loaded node on purpose: not taken back for --keep-after-descheduled.
    DESCHEDULED = "moved by the descheduler"
    APART_BRIEFLY = "apart too briefly"
    MIGRATED_RECENTLY = "migrated recently"
    BACKING_OFF = "backing off"
    DAILY_LIMIT = "daily limit"
    UNTARGETED = "targeted migration unavailable"
    OUR_LIMIT = "our migrations in flight"
    CLUSTER_LIMIT = "migrations in flight cluster-wide"
    SOURCE_BUSY = "migrations in flight from its node"
    # A Longhorn disk of the VM whose share-manager is not running (starting, stopped): where it
    # comes back may change the answer, and "apart since" would not know when it began.
    SETTLING = "storage settling"
    REFUSED = "migration refused"  # the API refused this VM's last migration: it waits its backoff
    VIEW_INCOMPLETE = "view incomplete"  # a cache failing or not synced: nothing is acted on
    REPORT_ONLY = "report only"
    NO_LEASE = "lease not surely held"  # the lease might run out before the migration is created


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
    outbound: int = 0,
    vmi_migrating: bool,
    last_end: datetime | None,
    descheduled: Migration | None = None,
    target_unfit: str | None,
    targeted: bool | None,
    targeted_note: str = "",
    settling: Sequence[str] = (),
    refused: tuple[int, datetime] | None = None,
    incomplete: str = "",
    mode: Mode,
    lease: bool = True,
) -> KeepDecision:
    """Migrate an apart VM to its storage node, or say which condition holds it: the keeper's
    one decision, which it records and acts on as it is (and `status` shows).

    The VM's own conditions come first (opt-in, shape, state, target, migratability, its
    migrations, time), then cluster-wide ones (targeted migration, in-flight bounds), then
    what makes the moment wrong (storage settling, a refusal's backoff, an incomplete view),
    then the mode and the lease: a report shows the first thing that would stop a migration.
    `targeted` is whether the cluster keeps spec.addedNodeSelector (None: not known yet, and
    `targeted_note` says why); `settling` the disks whose share-manager is not running;
    `refused` (refusals in a row, retry after) for a VM whose last create the API refused;
    `incomplete` why the keeper's view is incomplete; `lease` whether the lease surely lasts.
    `target_unfit` is why the storage node cannot take the VM now (the pin's never-strand
    checks), `apart_since` when the keeper first saw it apart, `history` our migrations of it,
    `outbound` the migrations of any origin in flight from the VM's node: KubeVirt runs at most
    parallelOutboundMigrationsPerNode of them, and while they are taken a drain needs them.
    `descheduled` the migration that brought the VM where it runs when KubeVirt made it for a
    descheduler's eviction (`rules.keeping.migrations.last_move`): it was moved off a loaded node on
    purpose, and is not taken back for `limits.after_descheduled` after that migration ended.
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
    if descheduled is not None:
        ended = descheduled.ended or descheduled.created
        until = ended + limits.after_descheduled
        if now < until:
            off = f" off {descheduled.evacuated}" if descheduled.evacuated else ""
            return hold(Hold.DESCHEDULED, f"moved{off} by the descheduler (migration {descheduled.name} ended "
                                          f"{rfc3339(ended)}): not moved back before {rfc3339(until)}")
    after = whole_seconds(limits.after)
    apart_for = now - (apart_since or now)
    if apart_for < limits.after:
        return hold(Hold.APART_BRIEFLY, f"apart for {whole_seconds(apart_for)}s of {after}s")
    if last_end is not None and now - last_end < limits.after:
        return hold(Hold.MIGRATED_RECENTLY, f"last migration ended {whole_seconds(now - last_end)}s ago (wait {after}s)")
    state = backoff(history)
    if state.until is not None and now < state.until:
        failed = "1 failed migration" if state.failures == 1 else f"{state.failures} failed migrations in a row"
        return hold(Hold.BACKING_OFF, f"backing off until {rfc3339(state.until)} after {failed}")
    today = sum(1 for a in history if now - a.created < DAY)
    if today >= limits.max_per_day:
        return hold(Hold.DAILY_LIMIT, f"migrated {today} times in the last 24h (limit {limits.max_per_day})")
    if targeted is not True:
        return hold(Hold.UNTARGETED, "targeted migration unavailable (spec.addedNodeSelector needs KubeVirt 1.6)"
                    if targeted is False or not targeted_note else targeted_note)
    if in_flight_ours >= limits.max_inflight:
        return hold(Hold.OUR_LIMIT, f"{in_flight_ours} of our migrations in flight (limit {limits.max_inflight})")
    if in_flight_all >= limits.max_cluster_inflight:
        return hold(Hold.CLUSTER_LIMIT,
                    f"{in_flight_all} migrations in flight cluster-wide (limit {limits.max_cluster_inflight})")
    if outbound >= limits.max_outbound_per_node:
        return hold(Hold.SOURCE_BUSY, f"{outbound} migrations in flight from {source} (KubeVirt runs "
                                      f"{limits.max_outbound_per_node} per source node): its slots are left to them")
    if settling:
        return hold(Hold.SETTLING, f"waiting for its storage to settle: {'; '.join(settling)}")
    if refused is not None and now < refused[1]:
        return hold(Hold.REFUSED, f"its migration was refused {refused[0]} time(s) in a row; "
                                  f"retrying after {rfc3339(refused[1])}")
    if incomplete:
        return hold(Hold.VIEW_INCOMPLETE, f"not acting on an incomplete view: {incomplete}")
    why = f"{where.why}; apart for {whole_seconds(apart_for)}s"
    if mode is not Mode.MIGRATE:
        return hold(Hold.REPORT_ONLY, f"report only: would migrate from {source} to {target}: {why}")
    if not lease:
        return hold(Hold.NO_LEASE, "not acting: the lease might run out before the migration is created")
    return KeepDecision(True, f"migrating from {source} to {target}: {why}", where.state, None, source, target)
