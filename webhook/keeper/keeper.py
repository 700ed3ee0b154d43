"""The keeper's passes: where each opted-in VM runs against where its disks are served, and
one targeted live migration for a VM that has been apart long enough.

Each pass observes (`observe.py`: a record per VM, each node read once, the pass-wide facts,
the dry run of targeted migration once when due), decides (`rules.keeping.keep.decide_keep`, pure),
acts (`act.py`: creates and cancels migrations) and records (`memory.py`), in the shape of a
controller's reconcile. Conservative by construction: a pass every `period` seconds; the
decision holds a VM for any of its reasons; a pass creates no more than the in-flight bounds
allow; nothing is created on an incomplete view of the cluster (a cache failing or not synced,
a disk the API could not tell about), without the lease, or before a dry run has shown that the
cluster keeps `spec.addedNodeSelector`. The storage node is judged with the pod KubeVirt will
create for the migration (`rules.kubevirt.target`), not the launcher pod; the VM's node must have a free
outbound migration slot; a migration of ours whose target pod stays unschedulable for a minute
is cancelled, so it never holds a slot a drain needs. Each action is an Event on the VMI and a
log line; each pass returns its report (the records with it), sets the metrics from it and logs
it at debug level. The passes run in `keep`'s process (`elected.py`), never on admission's
loop; a pass still gives its loop back every few milliseconds (`observe.Breather`), so that the
Lease is renewed and the probes answer during a long pass.
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from .. import metrics
from ..cluster.events import NO_EVENTS, Events
from .kubevirt_api import KubeVirtWatch
from ..cluster.reflector import Timing
from ..cluster.store import WatchedStore
from ..config import KeepMode, Settings
from ..rules.keeping.apart import APART, VmState
from ..rules.keeping.keep import HOLDS, decide_keep, PassFacts, pass_order
from ..rules.keeping.migrations import Migration, UNPLACEABLE_SECONDS
from ..rules.keeping.resume import decide_resume, Resume
from ..rules.keeping.running import VmiView
from ..rules.keeping.seen import read_kubevirt
from .act import Actor, ActionResult
from .follow import Follower
from .memory import Memory, VmRecord
from .observe import Breather, Nodes, Observed, Observer, pass_facts, ask_targeted
from .remount import Remount
from .targeted import TargetedMigration
from .stretch import Stretches

log = logging.getLogger("webhook.keeper")

HOUR = timedelta(hours=1)
__all__ = ["Keeper", "KeeperTiming", "PassReport", "VmRecord"]


@dataclasses.dataclass(frozen=True)
class KeeperTiming:
    period: float = 30.0  # between passes
    recheck_targeted: float = 600.0  # ask again whether spec.addedNodeSelector is kept
    request_timeout: float = 5.0  # each API call of a pass
    unplaceable: float = float(UNPLACEABLE_SECONDS)  # a target pod of ours unschedulable this long: cancel
    watch: Timing = Timing()  # the VMI and migration watches


@dataclasses.dataclass(frozen=True)
class PassReport:
    """What one pass did, and what it made of each VM (`vms`, by namespace and name)."""

    at: datetime
    created: tuple[str, ...] = ()  # namespace/name of the migrations created
    states: dict[str, int] = dataclasses.field(default_factory=dict)  # running opted-in VMs by state
    held: dict[str, int] = dataclasses.field(default_factory=dict)  # apart VMs by what holds them
    note: str = ""  # why the pass could not act on everything it saw, if so
    vms: tuple[VmRecord, ...] = ()  # each running opted-in VM as the pass left it

    @classmethod
    def of(cls, at: datetime, created: Iterable[str], note: str, vms: tuple[VmRecord, ...]) -> PassReport:
        """The report of a pass that left `vms`: the counts by state and by hold come from them."""
        states = collections.Counter(r.state for r in vms)
        held = collections.Counter(str(r.hold) for r in vms if r.state is APART and r.hold is not None)
        return cls(at, tuple(created), {str(state): states[state] for state in VmState}, dict(held), note, vms)


class PassTime(NamedTuple):
    began: float  # Unix time
    ended: float
    cpu: float  # seconds of the process's CPU


@dataclasses.dataclass(frozen=True)
class Sighting:
    """What one pass observed: the running opted-in VMs in the order they are decided (those
    not apart, then those apart the longest first: a pass may only have room for a few), and
    what the whole pass goes by."""

    vms: tuple[Observed, ...]
    facts: PassFacts


def show(report: PassReport) -> None:
    """The metrics of a pass, from its report: every state set, how long the VMs apart have been
    apart, and what holds them (every hold set, 0 for none)."""
    for state in VmState:
        metrics.VMS.labels(state).set(report.states.get(str(state), 0))
    for hold in HOLDS:
        metrics.VMS_HELD.labels(hold).set(report.held.get(str(hold), 0))
    apart = [report.at - r.since for r in report.vms if r.state is APART]
    metrics.VMS_APART_LONGEST.set(max(apart, default=timedelta(0)).total_seconds())
    metrics.VMS_APART_OVER_HOUR.set(sum(1 for span in apart if span > HOUR))


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
        for metric in metrics.KEEPER_METRICS:
            metrics.show(metric)
        self.targeted = TargetedMigration(api, recheck=timing.recheck_targeted, timeout=timing.request_timeout)
        self.follower = Follower(events)
        self.actor = Actor(api, store, self.follower, events=events, timeout=timing.request_timeout,
                           authority=authority)
        self.memory = Memory(Stretches(store, settings, timing.request_timeout, launchers=store.launcher_pods,
                                       direct=store.direct))
        self.remount = Remount(store.direct, settings, timing.request_timeout, api=api, authority=authority)
        self._watch: KubeVirtWatch | None = None
        self.passes = 0  # passes made over synced caches
        self.last_pass: PassTime | None = None

    @property
    def watch(self) -> KubeVirtWatch | None:
        """The VMI and migration watches while `watching()` runs."""
        return self._watch

    # ----------------------------------------------------------------- running

    @contextlib.asynccontextmanager
    async def watching(self) -> AsyncIterator[KubeVirtWatch]:
        """VMIs and migrations listed and watched for as long as the block runs."""
        watch = KubeVirtWatch(self.api, self.settings, self.timing.watch)
        self._watch = watch
        watch.start()
        try:
            yield watch
        finally:
            self._watch = None
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
                        self.memory.errors = [f"pass failed: {type(exc).__name__}: {exc}"]
                        log.exception("keeper pass failed")
                    await asyncio.sleep(max(0.0, self.timing.period - (loop.time() - started)))
        finally:
            show(PassReport(at=self.clock()))  # only the leader reports VMs

    def degraded(self) -> list[str]:
        """What keeps the keeper from seeing or acting on the whole cluster now (readiness notes)."""
        return (self._watch.degraded() if self._watch is not None else []) + list(self.memory.errors)

    # ----------------------------------------------------------------- one pass

    async def run_pass(self) -> PassReport:
        """Observe every running opted-in VM once, decide each, create what the decisions and
        bounds allow; record it all, and set the metrics from the pass's report."""
        now = self.clock()
        watch = self._watch
        if watch is None or not watch.synced() or not self.store.synced():
            return PassReport(at=now, note="waiting for the caches to sync")
        began, cpu = time.time(), time.process_time()
        report = await self._pass(watch, now)
        self.passes += 1  # when it ran and its CPU (the process's): for the benchmark
        self.last_pass = PassTime(began, time.time(), time.process_time() - cpu)
        return report

    async def _pass(self, watch: KubeVirtWatch, now: datetime) -> PassReport:
        errors: list[str] = []
        await self.remount.check()  # whether Longhorn reboots VMs when their NFS server restarts (--spare-vms: not)
        seen = await self._observe(watch, now, errors)
        facts, created = seen.facts, []
        breathe = Breather()
        for vm in seen.vms:
            await breathe()
            decision = decide_keep(vm.facts, facts)
            if decision.act and not self.authority(self.timing.request_timeout):
                facts = dataclasses.replace(facts, lease=False)  # asked again just before acting
                decision = decide_keep(vm.facts, facts)
            resume = decide_resume(vm.facts, facts)
            if resume is not None and (resume.act or not decision.act):  # what the keeper makes of it: its unpause
                decision = dataclasses.replace(decision, reason=resume.reason)
            self.memory.record(vm.facts, decision, now)
            if resume is not None and await self._resume(vm, resume, now, errors):  # not moved too
                if errors:  # the API itself is failing: act on nothing more this pass
                    facts = dataclasses.replace(facts, incomplete=facts.incomplete or errors[-1])
                continue
            if not decision.act:
                continue
            result = await self.actor.create(vm, decision, priority=bool(self.targeted.priority))
            self._remember(result, now)
            if result.created is not None:
                created.append(result.created)
                facts = facts.after_create(decision.source)
            elif result.error:  # the API itself is failing: create nothing more this pass
                errors.append(result.error)
                facts = dataclasses.replace(facts, incomplete=facts.incomplete or "a migration could not be created")
        self.memory.errors = errors
        report = PassReport.of(now, created, facts.incomplete, tuple(r for _, r in sorted(self.memory.records.items())))
        show(report)
        return report

    async def _observe(self, watch: KubeVirtWatch, now: datetime, errors: list[str]) -> Sighting:
        """Read the VMIs and migrations, follow ours (cancelling those that cannot be placed,
        on a complete view), observe each running opted-in VM, and the pass-wide facts; the
        targeted migration's dry run when due. API failures go to `errors`."""
        seen = read_kubevirt(watch.all_vmis(), watch.all_migrations(), self.settings)
        for malformed in seen.malformed:
            self.memory.skip(malformed)
        watched, vmis = seen.migrations, seen.views
        uids = {(v.namespace, v.name): v.uid for v in vmis}
        self.follower.observe(watched, now, uids)
        incomplete = "; ".join(watch.degraded() + self.store.degraded())
        history = self.follower.history(watched)
        # On a partial view KubeVirt's own timeout (our annotation) does it.
        if not incomplete:
            results = await self.actor.cancel_unplaceable(history, uids, now, self.timing.unplaceable)
            for result in results:
                self._remember(result, now)
                errors += [result.error] if result.error else []
            if any(result.action for result in results):  # a cancellation changes the history
                history = self.follower.history(watched)
        running = seen.running  # the others never touched, not counted
        self.memory.keep_only({(vmi.namespace, vmi.name) for vmi in running})
        observed = await self._observe_vms(running, history, now)
        order = pass_order(observed, lambda vm: vm.facts, lambda facts: self.memory.since(facts, now))
        lease = self.settings.keep is not KeepMode.MIGRATE or self.authority(self.timing.request_timeout)
        facts = pass_facts(self.settings, history, vmis, now, self.targeted, incomplete=incomplete, lease=lease)
        return Sighting(tuple(order), await ask_targeted(self.targeted, order, facts))

    async def _observe_vms(self, running: list[VmiView], history: list[Migration], now: datetime) -> list[Observed]:
        """Each VM observed once, with its own migrations; the loop given back every few milliseconds."""
        by_vmi: dict[tuple[str, str], list[Migration]] = {}
        for migration in history:
            by_vmi.setdefault((migration.namespace, migration.vmi), []).append(migration)
        observer = Observer(store=self.store, settings=self.settings, stretches=self.memory.stretches,
                            nodes=Nodes(self.store, self.timing.request_timeout), timeout=self.timing.request_timeout)
        breathe, observed, unpaused = Breather(), [], self.memory.done_unpausing(now)
        for vmi in running:
            await breathe()
            key = (vmi.namespace, vmi.name)
            observed.append(await observer.vm(vmi, by_vmi.get(key, []), now, self.memory.refused.get(key),
                                              unpaused))
        return observed

    async def _resume(self, vm: Observed, resume: Resume, now: datetime, errors: list[str]) -> bool:
        """Unpause the VM if the keeper recovered it and nothing holds that (`decide_resume`), asking
        for the lease just before; whether it was tried. Once per recovery migration: a refusal
        (not paused any more) ends it too, another failure is tried again after a backoff, and an
        error that any unpause would meet goes to `errors` (nothing more is acted on this pass)."""
        if not resume.act or not self.authority(self.timing.request_timeout):
            return False
        result, done = await self.actor.unpause(vm, resume)
        self._remember(result, now)
        self.memory.unpaused(resume.uid, now, done=done)
        errors += [result.error] if result.error else []
        return True

    def _remember(self, result: ActionResult, now: datetime) -> None:
        """An action's result in the VM's record, and its refusals."""
        if result.action:
            self.memory.acted(result.key, result.action, now)
        if result.refused:
            self.memory.refusal(result.key, now)
        elif result.created is not None:
            self.memory.created(result.key)
