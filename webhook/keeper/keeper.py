"""The keeper's passes: where each opted-in VM runs against where its disks are served, and
one targeted live migration for a VM that has been apart long enough.

Conservative by construction: a pass every `period` seconds; the pure decision
(`rules.keeping.keep.decide_keep`) holds a VM for any of its reasons; a pass creates no more than the
in-flight bounds allow; nothing is created on an incomplete view of the cluster (a cache
failing or not synced, a disk the API could not tell about), without the lease, or before a
dry run has shown that the cluster keeps `spec.addedNodeSelector`. The storage node is judged
with the pod KubeVirt will create for the migration (`rules.keeping.target`), not the launcher pod;
the VM's node must have a free outbound migration slot; a migration of ours whose target pod
stays unschedulable for a minute is cancelled, so it never holds a slot a drain needs. Each
action is an Event on the VMI and a log line; each VM's state, since when, why, and the last
action are kept in a record, and each pass returns its report (the records with it) and logs it
at debug level.
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from .. import kinds, metrics
from ..cluster.events import NO_EVENTS, Events, vmi_reference
from ..cluster.kubevirt import KubeVirtWatch, create_migration, delete_migration
from ..cluster.reflector import Timing
from ..cluster.store import WatchedStore
from ..config import KeepMode, Settings
from ..kinds import MIGRATION_JOB_LABEL
from ..rules.placement.facts import Fact
from ..rules.keeping.apart import APART, Locality, VmState
from ..rules.keeping.keep import Hold, KeepDecision, Limits, Mode
from ..rules.keeping.migrations import (
    backoff_delay,
    in_flight_counts,
    Migration,
    outbound_counts,
    read_migration,
    UNPLACEABLE_SECONDS,
)
from ..rules.shared.reading import Skipped
from ..rules.keeping.running import read_vmi, VmiView
from ..rules.placement.stranded import unschedulable_since
from ..rules.shared.times import whole_seconds
from . import gather
from .follow import Follower
from .gather import Budget
from .stretch import Stretches
from .probe import TargetedMigration

log = logging.getLogger("webhook.keeper")

HOUR = timedelta(hours=1)
# Answers that refuse this one migration (KubeVirt's admission, a conflict), not every one: the VM
# backs off, the pass goes on with the others.
REFUSALS = (400, 409, 422)


@dataclasses.dataclass(frozen=True)
class KeeperTiming:
    period: float = 30.0  # between passes
    recheck_targeted: float = 600.0  # ask again whether spec.addedNodeSelector is kept
    request_timeout: float = 5.0  # each API call of a pass
    unplaceable: float = float(UNPLACEABLE_SECONDS)  # a target pod of ours unschedulable this long: cancel
    watch: Timing = Timing()  # the VMI and migration watches


@dataclasses.dataclass(frozen=True, slots=True)
class VmRecord:
    """What the keeper last made of one running opted-in VM. Frozen: a pass's report keeps the
    records as that pass left them."""

    namespace: str
    name: str
    state: VmState
    since: datetime  # in this state since (apart: derived from the cluster, see `stretch.py`)
    why: str  # where the VM runs and where its disks are served
    node: str | None = None
    target: str | None = None  # where its disks are served, when apart
    hold: Hold | None = None  # what holds it where it is
    decision: str = ""  # the decision, in words
    last_action: str = ""
    last_action_at: datetime | None = None


@dataclasses.dataclass(frozen=True)
class PassReport:
    """What one pass did, and what it made of each VM (`vms`, by namespace and name)."""

    at: datetime
    created: tuple[str, ...] = ()  # namespace/name of the migrations created
    states: dict[str, int] = dataclasses.field(default_factory=dict)  # running opted-in VMs by state
    held: dict[str, int] = dataclasses.field(default_factory=dict)  # apart VMs by what holds them
    note: str = ""  # why the pass could not act on everything it saw, if so
    vms: tuple[VmRecord, ...] = ()  # each running opted-in VM as the pass left it


def _now() -> datetime:
    return datetime.now(UTC)


def _log_pass(report: PassReport) -> None:
    """What a pass did, to explain the keeper after the fact; each VM has its own lines."""
    log.debug("keeper pass", extra={"fields": {"created": report.created, "states": report.states,
                                               "held": report.held, "note": report.note}})


class Keeper:
    """The passes. `run()` is what the elected replica runs. One pass on its own (a benchmark,
    a test): `async with keeper.watching(): report = await keeper.run_pass()`; `report.vms` says
    what it made of each VM."""

    def __init__(self, api: Any, store: WatchedStore, settings: Settings, *, events: Events = NO_EVENTS,
                 timing: KeeperTiming = KeeperTiming(), authority: Callable[[float], bool] = lambda within: True,
                 clock: Callable[[], datetime] = _now):
        if settings.keep is KeepMode.OFF:
            raise ValueError(f"the keeper runs in report or migrate mode, not {settings.keep.value!r}")
        self.api, self.store, self.settings, self.events = api, store, settings, events
        self.timing, self.authority, self.clock = timing, authority, clock
        self.mode = Mode(settings.keep)
        for metric in metrics.KEEPER_METRICS:
            metrics.show(metric)
        self.limits = Limits(after=timedelta(seconds=settings.keep_after),
                             after_descheduled=timedelta(seconds=settings.keep_after_descheduled),
                             max_inflight=settings.keep_max_inflight, max_per_day=settings.keep_max_per_day,
                             max_outbound_per_node=settings.keep_max_outbound_per_node)
        self.targeted = TargetedMigration(api, recheck=timing.recheck_targeted, timeout=timing.request_timeout)
        self.follower = Follower(events)
        self.watch: KubeVirtWatch | None = None
        self._records: dict[tuple[str, str], VmRecord] = {}
        self.stretches = Stretches(store, settings, timing.request_timeout)
        self._skipped: set[str] = set()
        self._refused: dict[tuple[str, str], tuple[int, datetime]] = {}  # VM -> (refusals in a row, retry after)
        self._errors: list[str] = []  # API failures of the last pass

    # ----------------------------------------------------------------- running

    @contextlib.asynccontextmanager
    async def watching(self) -> AsyncIterator[KubeVirtWatch]:
        """VMIs and migrations listed and watched for as long as the block runs."""
        watch = KubeVirtWatch(self.api, self.settings, self.timing.watch)
        self.watch = watch
        watch.start()
        try:
            yield watch
        finally:
            self.watch = None
            await watch.close()

    async def run(self) -> None:
        """Passes every `period` seconds, the first once the caches have synced (or after a period)."""
        loop = asyncio.get_running_loop()
        try:
            async with self.watching() as watch:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.timing.period):
                        await asyncio.gather(watch.wait_synced(), self.store.wait_synced())
                while True:
                    started = loop.time()
                    try:
                        _log_pass(await self.run_pass())  # not kept: its records would outlive the next pass's
                    except Exception as exc:  # a pass that fails reports and leaves the next one to try
                        self._errors = [f"pass failed: {type(exc).__name__}: {exc}"]
                        log.exception("keeper pass failed")
                    await asyncio.sleep(max(0.0, self.timing.period - (loop.time() - started)))
        finally:
            for state in VmState:
                metrics.VMS.labels(state).set(0)  # only the leader reports VMs
            metrics.VMS_APART_LONGEST.set(0)
            metrics.VMS_APART_OVER_HOUR.set(0)
            for hold in Hold:
                metrics.VMS_HELD.labels(hold).set(0)

    def degraded(self) -> list[str]:
        """What keeps the keeper from seeing or acting on the whole cluster now (readiness notes)."""
        return (self.watch.degraded() if self.watch is not None else []) + list(self._errors)

    # ----------------------------------------------------------------- one pass

    async def run_pass(self) -> PassReport:
        """Look at every running opted-in VM once; create what the decisions and bounds allow."""
        now = self.clock()
        watch = self.watch
        if watch is None or not watch.synced() or not self.store.synced():
            return PassReport(now, note="waiting for the caches to sync")
        self._errors = []
        watched = self._migrations(watch.all_migrations())
        vmis = self._vmis(watch.all_vmis())
        uids = {(v.namespace, v.name): v.uid for v in vmis}
        self.follower.observe(watched, now, uids)
        incomplete = "; ".join(watch.degraded() + self.store.degraded())
        history = self.follower.history(watched)
        # On a partial view KubeVirt's own timeout (our annotation) does it; a cancellation changes the history.
        if not incomplete and await self._cancel_unplaceable(history, uids, now):
            history = self.follower.history(watched)
        ours, everyone = in_flight_counts(history, now)
        budget = Budget(ours, everyone, outbound_counts(history, vmis, now))
        by_vmi: dict[tuple[str, str], list[Migration]] = {}  # each VM reads only its own migrations
        for migration in history:
            by_vmi.setdefault((migration.namespace, migration.vmi), []).append(migration)

        # A VM not apart is decided (held) at once; only the VMs apart are kept for the ordering.
        running: set[tuple[str, str]] = set()
        apart: list[tuple[VmiView, Locality, list[Fact]]] = []
        for vmi in vmis:
            if not vmi.opted_in or not vmi.running:
                continue  # never touched, not counted
            key = (vmi.namespace, vmi.name)
            running.add(key)
            where, facts = await self._where(vmi)
            if where.state is APART:
                apart.append((vmi, where, facts))
            else:
                self.stretches.forget(key)
                await self._decide(vmi, where, facts, now, by_vmi.get(key, []), budget, incomplete)
        del vmis
        for key in [k for k in self._records if k not in running]:
            del self._records[key]
        for key in [k for k in self._refused if k not in running]:
            del self._refused[key]
        self.stretches.keep_only(running)

        created: list[str] = []
        held: collections.Counter[str] = collections.Counter()
        # The VMs apart the longest go first: a pass may only have room for a few.
        order = sorted(apart, key=lambda s: (self._since(s[0], s[1], now), s[0].name))
        for vmi, where, facts in order:
            decision = await self._decide(vmi, where, facts, now, by_vmi.get((vmi.namespace, vmi.name), []),
                                          budget, incomplete)
            if decision.act:
                name, everywhere = await self._move(vmi, decision, now)
                if name is None:
                    if everywhere:  # the API itself is failing: create nothing more this pass
                        incomplete = incomplete or "a migration could not be created"
                else:
                    created.append(name)
                    budget.ours += 1
                    budget.everyone += 1
                    budget.outbound[decision.source or ""] += 1
            elif where.state is APART:
                held[str(self._records[(vmi.namespace, vmi.name)].hold)] += 1

        vms = tuple(r for _, r in sorted(self._records.items()))
        return PassReport(now, tuple(created), self._report_states(now), dict(held), incomplete, vms)

    def _migrations(self, objects: Iterable[dict[str, Any]]) -> list[Migration]:
        found = []
        for obj in objects:
            migration = read_migration(obj)
            if isinstance(migration, Skipped):
                self._skip(migration)
            else:
                found.append(migration)
        return found

    def _vmis(self, objects: Iterable[dict[str, Any]]) -> list[VmiView]:
        found = []
        for obj in objects:
            vmi = read_vmi(obj, self.settings)
            if isinstance(vmi, Skipped):
                if kinds.annotations(obj).get(self.settings.opt_in_annotation) == "true":
                    self._skip(vmi)
            else:
                found.append(vmi)
        return found

    def _skip(self, skipped: Skipped) -> None:
        """One log line per object of unexpected shape (and per new reason), not one per pass."""
        if str(skipped) not in self._skipped:
            self._skipped.add(str(skipped))
            log.warning("keeper skipped an object", extra={"fields": {"object": skipped.what, "why": skipped.reason}})

    async def _where(self, vmi: VmiView) -> tuple[Locality, list[Fact]]:
        return await gather.where(self.store, self.settings, vmi, self.timing.request_timeout)

    def _since(self, vmi: VmiView, where: Locality, now: datetime) -> datetime:
        record = self._records.get((vmi.namespace, vmi.name))
        apart = self.stretches.get((vmi.namespace, vmi.name))
        if where.state is APART and apart is not None:
            return apart.since
        if record is not None and record.state is where.state:
            return record.since
        return now

    async def _decide(self, vmi: VmiView, where: Locality, facts: list[Fact], now: datetime,
                      history: list[Migration], budget: Budget, incomplete: str) -> KeepDecision:
        """The VM's decision (`gather.decide`), recorded."""
        lease = self.mode is not Mode.MIGRATE or self.authority(self.timing.request_timeout)
        decision = await gather.decide(self.stretches, self.targeted, vmi, where, facts, now, history, budget,
                                       limits=self.limits, mode=self.mode, lease=lease, incomplete=incomplete,
                                       refused=self._refused.get((vmi.namespace, vmi.name)))
        self._record(vmi, where, decision, now)
        return decision

    async def _cancel_unplaceable(self, history: list[Migration], uids: dict[tuple[str, str], str],
                                  now: datetime) -> bool:
        """Delete each migration of ours whose target pod the scheduler has been unable to place
        for UNPLACEABLE_SECONDS (what `virtctl migrate-cancel` does): it counts as failed, with the
        scheduler's message, and the VM backs off. A 404 is done, and so is a 409 (the delete names the
        migration's uid: the name now holds another object, ours is gone); another failure is logged and
        the migration still counts, to be tried again next pass. (`timing.unplaceable`.) True when
        one was cancelled."""
        timeout = self.timing.request_timeout
        cancelled = False
        for migration in history:
            if not migration.ours or migration.final or not migration.uid or self.follower.is_cancelled(migration):
                continue
            vmi_uid = uids.get((migration.namespace, migration.vmi))
            pods = self.store.launcher_pods(migration.namespace, vmi_uid) if vmi_uid else None
            target = next((p for p in pods or () if kinds.labels(p).get(MIGRATION_JOB_LABEL) == migration.uid), None)
            stuck = unschedulable_since(target) if target is not None else None
            if stuck is None or (now - stuck[0]).total_seconds() < self.timing.unplaceable:
                continue
            if not self.authority(timeout):
                return cancelled
            why = f"its target pod {kinds.pod_name(target)} could not be scheduled for {whole_seconds(now - stuck[0])}s: {stuck[1]}"
            vm = f"{migration.namespace}/{migration.vmi}"
            answer = await delete_migration(self.api, migration.namespace, migration.name, uid=migration.uid,
                                            timeout=timeout)
            if not answer.ok and answer.status not in (404, 409):  # 409: the name holds another object now
                self._errors.append(f"cancelling migration {migration.namespace}/{migration.name}: {answer.error}")
                log.warning("keeper migration not cancelled", extra={"fields": {
                    "vm": vm, "migration": migration.name, "error": answer.error, "why": why}})
                continue
            log.warning("keeper migration cancelled", extra={"fields": {
                "vm": vm, "migration": migration.name, "target": migration.target, "why": why}})
            self.follower.cancelled(migration, now, f"cancelled: {why}", vmi_uid or "")
            self._acted((migration.namespace, migration.vmi), f"cancelled migration {migration.name}: {why}", now)
            cancelled = True
        return cancelled

    async def _move(self, vmi: VmiView, decision: KeepDecision, now: datetime) -> tuple[str | None, bool]:
        """Create the migration: its name, or None when it was not created and whether what went
        wrong would go wrong for any migration (the API) rather than for this VM."""
        key = (vmi.namespace, vmi.name)
        timeout = self.timing.request_timeout
        manifest = await gather.manifest(self.store, vmi, decision, priority=bool(self.targeted.priority),
                                         timeout=timeout)
        if isinstance(manifest, Skipped):  # the node went away since the decision
            self._acted(key, f"no migration created: {manifest}", now)
            return None, False
        answer = await create_migration(self.api, manifest, timeout=timeout)
        migration = read_migration(answer.obj) if answer.ok else None
        if not isinstance(migration, Migration):
            error = answer.error or f"the API answered with {migration}"
            metrics.KEEPER_MIGRATIONS.labels("error").inc()
            self._acted(key, f"creating a migration failed: {error}", now)
            log.warning("keeper migration not created", extra={"fields": {
                "vm": f"{vmi.namespace}/{vmi.name}", "from": decision.source, "to": decision.target, "error": error}})
            if answer.status in REFUSALS:  # this VM backs off; the others are still tried
                count = self._refused.get(key, (0, now))[0] + 1
                self._refused[key] = (count, now + backoff_delay(count))
                return None, False
            self._errors.append(f"creating a migration of {vmi.namespace}/{vmi.name}: {error}")
            return None, True
        self._refused.pop(key, None)
        self.follower.created(migration)
        metrics.KEEPER_MIGRATIONS.labels("created").inc()
        self._acted(key, f"created migration {migration.name} to {decision.target}", now)
        log.info("keeper migration created", extra={"fields": {
            "vm": f"{vmi.namespace}/{vmi.name}", "migration": migration.name, "from": decision.source,
            "to": decision.target, "reason": decision.reason}})
        self.events.emit_about(vmi_reference(vmi.namespace, vmi.name, vmi.uid), "MigratingToStorage",
                               f"{decision.reason} (migration {migration.name})")
        return f"{migration.namespace}/{migration.name}", False

    def _record(self, vmi: VmiView, where: Locality, decision: KeepDecision, now: datetime) -> None:
        """Keep the VM's record; one log line when its state or what holds it changes."""
        key = (vmi.namespace, vmi.name)
        old = self._records.get(key)
        since = self._since(vmi, where, now)
        record = VmRecord(vmi.namespace, vmi.name, where.state, since, where.why, where.node, where.target,
                          decision.hold, decision.reason, old.last_action if old else "", old.last_action_at if old else None)
        self._records[key] = record
        if old is None or (old.state, old.hold, old.node, old.target) != (record.state, record.hold, record.node,
                                                                        record.target):
            log.info("keeper decision", extra={"fields": {
                "vm": f"{vmi.namespace}/{vmi.name}", "state": str(where.state), "node": where.node,
                "target": where.target, "hold": str(decision.hold) if decision.hold is not None else None,
                "reason": decision.reason}})

    def _acted(self, key: tuple[str, str], action: str, now: datetime) -> None:
        """The VM's last action, in its record (if the VM still has one)."""
        record = self._records.get(key)
        if record is not None:
            self._records[key] = dataclasses.replace(record, last_action=action, last_action_at=now)

    def _report_states(self, now: datetime) -> dict[str, int]:
        """The metrics of a pass: every state set, how long the VMs apart have been apart, and
        what holds them (every hold set, 0 for none)."""
        counts = collections.Counter(r.state for r in self._records.values())
        for state in VmState:
            metrics.VMS.labels(state).set(counts[state])
        held = collections.Counter(r.hold for r in self._records.values() if r.state is APART and r.hold is not None)
        for hold in Hold:
            metrics.VMS_HELD.labels(hold).set(held[hold])
        apart = [now - r.since for r in self._records.values() if r.state is APART]
        metrics.VMS_APART_LONGEST.set(max(apart, default=timedelta(0)).total_seconds())
        metrics.VMS_APART_OVER_HOUR.set(sum(1 for span in apart if span > HOUR))
        return {str(state): counts[state] for state in VmState}
