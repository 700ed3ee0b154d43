"""After placement: whether to move a VM apart from its storage back to it with one targeted live migration, or
what holds it. Pure: from one VM's facts (`VmFacts`) and the whole pass's (`PassFacts`).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from datetime import datetime, timedelta
from sys import intern

from ... import kinds
from ...config import duration_text, KeepMode, Settings
from .apart import APART, CO_LOCATED, Locality, VmState
from .migrations import backoff, Migration
from .recovery import Mount, ROUND_TRIP, Sighting
from .record import Refusal
from .running import VmiView
from ..shared import declared
from ..shared.alone import Alone
from ..shared.times import ago, EPOCH, rfc3339, whole_seconds

DAY = timedelta(hours=24)
MOST_RECOVERIES = 3  # migrations of ours to take a VM off one stale mount: then it needs a restart
# The VM asks that nothing evict it (KubeVirt's documented way out of the descheduler, set on the VM
# template and carried to the VMI; its presence counts, not its value): the keeper leaves it too.
NO_EVICTION = declared.VMI_NO_EVICTION


@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    """The keeper's bounds (--keep-*) and KubeVirt's parallel migrations per cluster and outbound per node."""

    after: timedelta = timedelta(seconds=600)
    after_descheduled: timedelta = timedelta(hours=6)  # since the descheduler's migration of the VM ended
    max_inflight: int = 2
    max_cluster_inflight: int = 5
    max_per_day: int = 2
    max_outbound_per_node: int = 2  # KubeVirt's parallelOutboundMigrationsPerNode (its default)

    @classmethod
    def of(cls, settings: Settings) -> Limits:
        """The bounds the settings give (the keeper's and `status`'s alike)."""
        return cls(after=timedelta(seconds=settings.keep_after),
                   after_descheduled=timedelta(seconds=settings.keep_after_descheduled),
                   max_inflight=settings.keep_max_inflight, max_per_day=settings.keep_max_per_day,
                   max_outbound_per_node=settings.keep_max_outbound_per_node)


@dataclasses.dataclass(frozen=True, slots=True)
class VmFacts:
    """What one VM's decision goes by, observed once a pass."""

    vmi: VmiView
    where: Locality
    apart_since: datetime | None = None  # when it became apart (None: not known, counted as now)
    target_unfit: str | None = None  # why its storage node cannot take it now (the never-strand checks)
    history: tuple[Migration, ...] = ()  # our migrations of it, oldest first (`migrations.attempts`)
    migrating: bool = False  # a migration of it is in flight
    last_end: datetime | None = None  # when its latest migration of any origin ended
    descheduled: Migration | None = None  # what moved it here for a descheduler's eviction (`migrations.last_move`)
    settling: tuple[str, ...] = ()  # its disks whose share-manager is not running
    refused: Refusal | None = None  # the API refused its last migration: its words, and when to retry (`state`)
    stale: str | None = None  # why its NFS mount is stale (`recovery.judge`): a migration recovers it
    via: str | None = None  # beside its NFS server on a stale mount: the other node its recovery goes through
    mount: Mount | None = None  # its pod's start, volumes and share-managers: of a VM paused on an I/O error
    unpause_refused: Refusal | None = None  # the API refused or failed its last unpause (`state`)
    unpaused: bool = False  # this leader unpaused it a moment ago: the watch may not show it yet
    moved_in: str = ""  # the name of the migration that brought it where it runs, when known
    cannot_finish: str | None = None  # why no live migration of it can finish (`recovery.cannot_finish`)
    stale_since: datetime | None = None  # Longhorn's remount request its stale mount dates from (read with `stale`)
    retry: str | None = None  # an I/O error of a disk whose share-manager restarted: what it waits for (`recovery.judge`)
    unpauses: int = 0  # the keeper's unpauses of it in the pod it runs in (`resume.MOST_UNPAUSES`)
    stale_last: datetime | None = None  # the I/O error that showed its mount stale (read with `stale`)
    full: str | None = None  # paused because a disk is full, in KubeVirt's words (`recovery.full`): never unpaused
    seen: tuple[tuple[str, Sighting], ...] = ()  # pauses after a new share-manager served (`recovery.sighted`)
    probe: str | None = None  # why it is resumed once to see whether its mount works again (`recovery.probe`)
    waits_for_storage: str | None = None  # a share-manager that does not serve again within a bound (`recovery`)


@dataclasses.dataclass(frozen=True, slots=True)
class PassFacts:
    """What each decision of a pass goes by: the moment, bounds, targeted migration (None: not known), in flight."""

    now: datetime
    limits: Limits
    mode: KeepMode  # only migrate creates; report (and off, for `status`) decide as a report
    targeted: bool | None
    targeted_note: str = ""
    in_flight_ours: int = 0
    in_flight_all: int = 0
    outbound: Mapping[str, int] = dataclasses.field(default_factory=dict)  # in flight by the node they leave
    incomplete: str = ""
    lease: bool = True
    # Each migration in flight (the node it leaves, namespace/name, ours), then each VM this pass moves.
    flying: tuple[tuple[str, str, bool], ...] = ()
    # VMs whose namespace's requests failed in this pass for a cause they may share: why they wait for the next.
    deferred: Mapping[tuple[str, str], str] = dataclasses.field(default_factory=dict)

    def after_create(self, source: str | None, vm: str = "") -> PassFacts:
        """The same pass after one more migration of ours, of `vm` (namespace/name), leaving `source`."""
        outbound = dict(self.outbound)
        outbound[source or ""] = outbound.get(source or "", 0) + 1
        return dataclasses.replace(self, in_flight_ours=self.in_flight_ours + 1, in_flight_all=self.in_flight_all + 1,
                                   outbound=outbound,
                                   flying=(*self.flying, (source or "", f"{vm} (moved in this pass)", True)))


@dataclasses.dataclass(frozen=True, slots=True)
class KeepDecision:
    """Move the VM back to its storage (act), or why not: `hold` names the condition."""

    act: bool
    reason: str
    state: VmState
    hold: Alone | None = None
    source: str | None = None  # where the VM runs
    target: str | None = None  # where its disks are served, when apart
    stale: str | None = None  # why its NFS mount is stale (`VmFacts.stale`): the migration recovers it
    round_trip: bool = False  # stale beside its NFS server: it goes to `target` and comes back (`recovery.ROUND_TRIP`)


def _apart_for(vm: VmFacts, now: datetime) -> timedelta:
    return now - (vm.apart_since or now)


def _descheduled_until(vm: VmFacts, limits: Limits) -> datetime | None:
    moved = vm.descheduled
    return None if moved is None else (moved.ended or moved.created) + limits.after_descheduled


def _descheduled(vm: VmFacts, p: PassFacts) -> str:
    moved, until = vm.descheduled, _descheduled_until(vm, p.limits)
    assert moved is not None and until is not None
    off = f" off {moved.evacuated}" if moved.evacuated else ""
    return (f"moved{off} by the descheduler (migration {moved.name} ended {rfc3339(moved.ended or moved.created)}): "
            f"not moved back before {rfc3339(until)}")


def _backoff_words(vm: VmFacts, p: PassFacts) -> str:
    state = backoff(vm.history)
    failed = "1 failed migration" if state.failures == 1 else f"{state.failures} failed migrations in a row"
    return f"backing off until {rfc3339(state.until or p.now)} after {failed}"


def _today(vm: VmFacts, p: PassFacts) -> int:
    """Its drift migrations of the last 24h: recoveries have their own bound (`_unrecoverable`)."""
    return sum(1 for a in vm.history if not a.recovers and p.now - a.created < DAY) if vm.history else 0


def _unrecoverable(vm: VmFacts) -> str | None:
    """Why no migration off a stale mount is tried again: none can finish, or MOST_RECOVERIES of ours did not."""
    if vm.cannot_finish is not None:
        return vm.cannot_finish
    since = vm.stale_since or EPOCH
    tried = sum(1 for a in vm.history if a.recovers and a.created >= since)
    if tried >= MOST_RECOVERIES:
        return (f"{tried} recovery migrations of the keeper's since Longhorn's remount request at {rfc3339(since)} did "
                f"not take it off that mount")
    return None


def _beside(vm: VmFacts) -> bool:
    """On a stale mount beside its NFS server: its recovery goes through another node."""
    return bool(vm.stale) and vm.where.state is CO_LOCATED


def _outbound(vm: VmFacts, p: PassFacts) -> int:
    return p.outbound.get(vm.where.node or "", 0)


def _named(p: PassFacts, count: int, *, ours: bool = False, node: str | None = None) -> str:
    """": ns/name, …", the migrations in flight that hold a limit (ours; those leaving `node`), when all are known."""
    names = [name for source, name, mine in p.flying if (mine or not ours) and node in (None, source)]
    return f": {', '.join(names)}" if names and len(names) == count else ""


def _refused(vm: VmFacts, p: PassFacts) -> str | None:
    """Why a refusal holds the VM: its own, or its namespace's failures in this pass."""
    if vm.refused is not None and p.now < vm.refused.retry:
        return vm.refused.in_words()
    return p.deferred.get((vm.vmi.namespace, vm.vmi.name))


@dataclasses.dataclass(frozen=True, slots=True)
class Check:
    """A condition that holds a VM: `needs`, the facts it reads; `own`, it reads nothing of the pass (`next_read`)."""

    hold: Alone
    holds: Callable[[VmFacts, PassFacts], bool]
    words: Callable[[VmFacts, PassFacts], str]
    needs: tuple[str, ...] = ()
    own: bool = False


# The VM's own conditions first, then cluster-wide ones, then what makes the moment wrong, then the mode and
# the lease: a report shows the first thing that would stop a migration.
CHECKS: tuple[Check, ...] = (
    Check(hold=Alone.NOT_OPTED_IN,
          holds=lambda vm, p: not vm.vmi.opted_in, words=lambda vm, p: "not opted in", needs=("vmi",), own=True),
    Check(hold=Alone.OPTED_OUT, holds=lambda vm, p: not vm.vmi.may_move,
          words=lambda vm, p: f'annotated {kinds.KEEP_ANNOTATION}: "false"', needs=("vmi",), own=True),
    Check(hold=Alone.NO_EVICTION,
          holds=lambda vm, p: NO_EVICTION.name() in vm.vmi.annotations,
          words=lambda vm, p: f"annotated {NO_EVICTION.name()}: nothing is to evict it",
          needs=("vmi",), own=True),
    Check(hold=Alone.NOT_RUNNING,
          holds=lambda vm, p: not vm.vmi.running,
          words=lambda vm, p: f"VMI is {vm.vmi.phase or 'without a phase'}, not running on a node",
          needs=("vmi",), own=True),
    # (Whether its mount is stale is read here, of every VM, for `status` to say it of one that stays.)
    Check(hold=Alone.DISK_FULL, holds=lambda vm, p: vm.full is not None,
          words=lambda vm, p: vm.full or "", needs=("stale", "full"), own=True),
    Check(hold=Alone.NOT_APART,
          holds=lambda vm, p: not _beside(vm) and (vm.where.state is not APART or vm.where.target is None),
          words=lambda vm, p: f"{vm.where.state}: {vm.where.why}", needs=("where", "stale"), own=True),
    # The one answer on whether a migration of a VM on a stale mount can finish (`recovery.cannot_finish`).
    Check(hold=Alone.NEEDS_RESTART, holds=lambda vm, p: bool(vm.stale) and _unrecoverable(vm) is not None,
          words=lambda vm, p: f"{vm.stale}, and it cannot be moved to a fresh mount: {_unrecoverable(vm)}; a restart "
                              f"mounts the volume afresh (`virtctl restart`)",
          needs=("stale", "cannot_finish", "stale_since", "history"), own=True),
    Check(hold=Alone.TARGET_UNFIT, holds=lambda vm, p: vm.target_unfit is not None or (_beside(vm) and vm.via is None),
          words=lambda vm, p: f"no other node can take it for its recovery: {vm.target_unfit or 'none was checked'}"
          if _beside(vm) else f"cannot move to {vm.where.target}: {vm.target_unfit}",
          needs=("target_unfit", "stale", "where", "via"), own=True),
    Check(hold=Alone.NOT_MIGRATABLE, holds=lambda vm, p: not vm.vmi.live_migratable,
          words=lambda vm, p: f"not live-migratable: {vm.vmi.not_migratable}", needs=("vmi",), own=True),
    Check(hold=Alone.MIGRATING,
          holds=lambda vm, p: vm.migrating, words=lambda vm, p: "a migration of this VMI is in flight",
          needs=("migrating",), own=True),
    # A VM on a stale mount is frozen: no drift limit below holds it (its recoveries have their own bound).
    Check(hold=Alone.DESCHEDULED,
          holds=lambda vm, p: not vm.stale and p.now < (_descheduled_until(vm, p.limits) or p.now),
          words=_descheduled, needs=("descheduled", "stale")),
    Check(hold=Alone.APART_BRIEFLY, holds=lambda vm, p: not vm.stale and _apart_for(vm, p.now) < p.limits.after,
          words=lambda vm, p: f"apart for {whole_seconds(_apart_for(vm, p.now))}s of {whole_seconds(p.limits.after)}s",
          needs=("apart_since", "stale")),
    Check(hold=Alone.MIGRATED_RECENTLY, holds=lambda vm, p: not vm.stale and vm.last_end is not None
                              and p.now - vm.last_end < p.limits.after,
          words=lambda vm, p: f"last migration ended {whole_seconds(p.now - (vm.last_end or p.now))}s ago "
                              f"(wait {whole_seconds(p.limits.after)}s)", needs=("last_end", "stale")),
    Check(hold=Alone.BACKING_OFF, holds=lambda vm, p: not vm.stale and p.now < (backoff(vm.history).until or p.now),
          words=_backoff_words, needs=("history", "stale")),
    # One more migration would pass --keep-max-per-day.
    Check(hold=Alone.DAILY_LIMIT, holds=lambda vm, p: not vm.stale and _today(vm, p) >= p.limits.max_per_day,
          words=lambda vm, p: f"migrated {_today(vm, p)} times in the last 24h (limit {p.limits.max_per_day})",
          needs=("history", "stale")),
    Check(hold=Alone.SETTLING, holds=lambda vm, p: bool(vm.settling),
          words=lambda vm, p: f"waiting for its storage to settle: {'; '.join(vm.settling)}",
          needs=("settling",), own=True),
    # Before the limits: a limit is said only of a VM it holds alone.
    Check(hold=Alone.REFUSED, holds=lambda vm, p: _refused(vm, p) is not None,
          words=lambda vm, p: _refused(vm, p) or "", needs=("refused", "vmi")),
    Check(hold=Alone.UNTARGETED, holds=lambda vm, p: p.targeted is not True,
          words=lambda vm, p: (p.targeted is not False and p.targeted_note)
          or "targeted migration unavailable (spec.addedNodeSelector needs KubeVirt 1.6)"),
    Check(hold=Alone.SOURCE_BUSY, holds=lambda vm, p: _outbound(vm, p) >= p.limits.max_outbound_per_node,
          words=lambda vm, p: f"{_outbound(vm, p)} migrations in flight from {vm.where.node} (KubeVirt runs "
                              f"{p.limits.max_outbound_per_node} per source node)"
                              f"{_named(p, _outbound(vm, p), node=vm.where.node)}: its slots are left to them",
          needs=("where",)),
    # A recovery has a slot of ours beyond --keep-max-inflight: a frozen VM never waits behind our drift.
    Check(hold=Alone.OUR_LIMIT, holds=lambda vm, p: p.in_flight_ours >= p.limits.max_inflight + bool(vm.stale),
          words=lambda vm, p: f"{p.in_flight_ours} of our migrations in flight (limit {p.limits.max_inflight}"
                              f"{' and the one kept for recoveries' if vm.stale else ''})"
                              f"{_named(p, p.in_flight_ours, ours=True)}", needs=("stale",)),
    Check(hold=Alone.CLUSTER_LIMIT, holds=lambda vm, p: p.in_flight_all >= p.limits.max_cluster_inflight,
          words=lambda vm, p: f"{p.in_flight_all} migrations in flight cluster-wide "
                              f"(limit {p.limits.max_cluster_inflight}){_named(p, p.in_flight_all)}"),
    Check(hold=Alone.VIEW_INCOMPLETE, holds=lambda vm, p: bool(p.incomplete),
          words=lambda vm, p: f"not acting on an incomplete view: {p.incomplete}"),
    Check(hold=Alone.REPORT_ONLY, holds=lambda vm, p: p.mode is not KeepMode.MIGRATE,
          words=lambda vm, p: f"report only: would migrate {_move_of(vm, p)}"),
    Check(hold=Alone.NO_LEASE, holds=lambda vm, p: not p.lease,
          words=lambda vm, p: "not acting: the lease might run out before the migration is created"),
)

# The reasons the keeper holds a VM for, in the order it checks them.
HOLDS: tuple[Alone, ...] = tuple(check.hold for check in CHECKS)

# What a pass reads of a VM only when a check reached in the table's order needs it: API reads of their own
# (the mount only of a VM paused on an I/O error); the other facts come with the VM and its migrations.
ON_DEMAND = frozenset({"stale", "apart_since", "target_unfit"})


# What an own check is given for the pass it does not read (`test_keep` holds them to that).
_UNREAD = PassFacts(now=EPOCH, limits=Limits(), mode=KeepMode.MIGRATE, targeted=None)


def next_read(vm: VmFacts, read: Collection[str]) -> str | None:
    """The next ON_DEMAND fact not yet `read` the decision may need, in `CHECKS` order; None once an own check holds."""
    for check in CHECKS:
        for need in check.needs:
            if need in ON_DEMAND and need not in read:
                return need
        if check.own and check.holds(vm, _UNREAD):
            return None
    return None


def _decision(vm: VmFacts, hold: Alone | None, reason: str) -> KeepDecision:
    where, beside = vm.where, _beside(vm)
    return KeepDecision(act=hold is None, reason=reason, state=where.state, hold=hold, source=where.node,
                        target=where.target or (vm.via if beside else None), stale=vm.stale, round_trip=beside)


def _move_of(vm: VmFacts, p: PassFacts) -> str:
    """The migration the VM comes to, in words: "from node-a to node-b: <why>; apart for 900s"."""
    where, beside = vm.where, _beside(vm)
    source, target = where.node, where.target or (vm.via if beside else None)
    if beside:
        return (f"from {source} to {target} and back ({ROUND_TRIP} migrations, its target pod cannot "
                f"land beside its own pod): {vm.stale}; {where.why}")
    if vm.stale:
        return f"from {source} to {target}: {vm.stale}; {where.why}"
    return f"from {source} to {target}: {where.why}; apart for {whole_seconds(_apart_for(vm, p.now))}s"


def decide_keep(vm: VmFacts, p: PassFacts) -> KeepDecision:
    """Migrate an apart VM to its storage node, or the first of `CHECKS` that holds it: the one decision."""
    for check in CHECKS:
        if check.holds(vm, p):  # the words of VMs held alike are one string (`sys.intern`): a report keeps each
            return _decision(vm, check.hold, intern(check.words(vm, p)))
    verb = "recovering a stale mount: migrating" if vm.stale else "migrating"
    return _decision(vm, None, f"{verb} {_move_of(vm, p)}")


OFF = "the keeper is off (--keep off)"
# Holds that end by themselves (time passes), after which the keeper checks targeted migration.
WAITS = (Alone.APART_BRIEFLY, Alone.MIGRATED_RECENTLY, Alone.BACKING_OFF, Alone.DAILY_LIMIT)
NEEDS = "spec.addedNodeSelector needs KubeVirt 1.6 or newer"  # targeted migration, when the cluster lacks it


def next_step(decision: KeepDecision, since: datetime | None, facts: PassFacts, *, off: bool = False) -> str:
    """The decision in words (`status`'s NEXT): "moves in 4m (…)", "stays: co-located", "held: <why>", "never: …"."""
    limits, now = facts.limits, facts.now
    if decision.hold is Alone.NOT_APART and decision.state is CO_LOCATED:
        return "stays: co-located"
    if decision.hold is Alone.NEEDS_RESTART:  # the keeper's mode changes nothing of it
        return f"needs a restart: {decision.reason}"
    if off:
        return f"nothing: {OFF}"
    if decision.act and decision.round_trip:
        return (f"moves to {decision.target} at the keeper's next pass and back to {decision.source} after "
                f"(stale mount beside its NFS server: {ROUND_TRIP} migrations, no reboot)")
    if decision.act:
        return f"moves to {decision.target} at the keeper's next pass" + (" (stale mount)" if decision.stale else "")
    if facts.targeted is False and decision.hold in WAITS:
        return f"never: {Alone.UNTARGETED} ({NEEDS})"
    if decision.hold is Alone.APART_BRIEFLY and since is not None:
        clock = since.strftime("%H:%M" if now - since < timedelta(hours=20) else "%Y-%m-%d %H:%M")  # else the date too
        return (f"moves in {ago(since + limits.after - now)} (apart since {clock} UTC, "
                f"--keep-after {duration_text(limits.after.total_seconds())})")
    if decision.hold is Alone.BACKING_OFF:
        return decision.reason
    if decision.hold is Alone.REPORT_ONLY:
        return f"{decision.reason.removeprefix('report only: ')} (the keeper only reports)"
    return f"held: {decision.reason}"
