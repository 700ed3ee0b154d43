"""The keeper's passes, a controller's reconcile: observe (`observe.py`, reads only), plan (`rules.keeping.plan`,
pure, as `status` shows it), probe when due (`probe.py`), act (`act.py`, writes only), remember (`records.py`).
The loop is given back every few milliseconds (`process.pace.Pacer`): the Lease is renewed, the probes answer.
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from .. import metrics
from ..cluster.events import NO_EVENTS, Events
from .kubevirt_api import KubeVirtWatch
from ..cluster.reflector import Timing
from ..stores.cache import WatchedClusterStore
from ..config import KeepMode, Settings
from ..rules.keeping.apart import APART, VmState
from ..rules.keeping.keep import HOLDS, PassFacts, VmFacts
from ..rules.keeping.migrations import Migration, UNPLACEABLE_SECONDS
from ..rules.keeping.plan import Plan, plan, Stuck
from ..rules.keeping.running import Alike, VmiView
from ..rules.shared.reading import Malformed
from ..rules.keeping.listed import Listed, read_kubevirt
from ..rules.keeping.record import KeeperState
from .act import Actor, Turn
from .records import Records, StateStore, VmReport
from ..process import heap
from ..process.pace import Pacer
from ..rules.shared.times import rfc3339
from .observe import Nodes, Observer, pass_facts, stuck, Verdicts
from .observed import Observed
from .probe import ask_targeted
from .remount import Remount
from .targeted import TargetedMigration
from .writes import RATE, Result, Writes

log = logging.getLogger("webhook.keeper")

Again = Callable[[VmiView], Awaitable[Observed]]  # a VM observed again within the pass


@dataclasses.dataclass(frozen=True)
class KeeperTiming:
    period: float = 30.0  # between passes
    recheck_targeted: float = 600.0  # ask again whether spec.addedNodeSelector is kept
    request_timeout: float = 5.0  # each API call of a pass
    unplaceable: float = float(UNPLACEABLE_SECONDS)  # a target pod of ours unschedulable this long: cancel
    watch: Timing = Timing()  # the VMI and migration watches
    write_rate: float = RATE  # writes a second past the bucket's burst (`writes.py`)


@dataclasses.dataclass(frozen=True)
class PassReport:
    """What one pass did, and what it made of each VM (`vms`, by namespace and name)."""

    at: datetime
    created: tuple[str, ...] = ()  # namespace/name of the migrations created
    states: dict[str, int] = dataclasses.field(default_factory=dict)  # running opted-in VMs by state
    held: dict[str, int] = dataclasses.field(default_factory=dict)  # apart VMs by what holds them
    note: str = ""  # why the pass could not act on everything it saw, if so
    vms: tuple[VmReport, ...] = ()  # each running opted-in VM as the pass left it

    @classmethod
    def of(cls, at: datetime, created: Iterable[str], note: str, vms: tuple[VmReport, ...]) -> PassReport:
        """The report of a pass that left `vms`: the counts by state and by hold come from them."""
        states = collections.Counter(r.state for r in vms)
        held = collections.Counter(str(r.hold) for r in vms if r.state is APART and r.hold is not None)
        return cls(at, tuple(created), {str(state): states[state] for state in VmState}, dict(held), note, vms)


def show(report: PassReport) -> None:
    """The metrics of a pass, from its report: every state and hold set (0 for none), and the spans apart."""
    for state in VmState:
        metrics.VMS.labels(state).set(report.states.get(str(state), 0))
    for hold in HOLDS:
        metrics.VMS_HELD.labels(hold).set(report.held.get(str(hold), 0))
    apart = [report.at - r.since for r in report.vms if r.state is APART]
    metrics.VMS_APART_LONGEST.set(max(apart, default=timedelta(0)).total_seconds())
    metrics.VMS_APART_OVER_HOUR.set(sum(1 for span in apart if span > timedelta(hours=1)))


class Keeper:
    """The passes: `run()` for the elected replica; `async with keeper.watching(): await keeper.run_pass()` alone."""

    def __init__(self, api: Any, store: WatchedClusterStore, settings: Settings, *, events: Events = NO_EVENTS,
                 timing: KeeperTiming = KeeperTiming(), authority: Callable[[float], bool] = lambda within: True,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC), state: StateStore | None = None):
        if settings.keep is KeepMode.OFF:
            raise ValueError(f"the keeper runs in report or migrate mode, not {settings.keep.value!r}")
        self.api, self.store, self.settings, self.events = api, store, settings, events
        self.timing, self.authority, self.clock = timing, authority, clock
        for metric in metrics.KEEPER_METRICS:
            metrics.show(metric)
        self.targeted = TargetedMigration(api, recheck=timing.recheck_targeted, timeout=timing.request_timeout)
        self.records = Records(state, events)  # the keeper's memory; `state`: its ConfigMap (None: this process's)
        self.writes = Writes(rate=timing.write_rate)  # the bucket over every write, across passes
        self.actor = Actor(api, self.records, events=events, timeout=timing.request_timeout, authority=authority)
        self.remount = Remount(store.direct, settings, timing.request_timeout, api=api, authority=authority)
        self.held: KubeVirtWatch | None = None  # the watches the process holds across terms (`elected.py`), if so
        self.watch: KubeVirtWatch | None = None  # the VMI and migration watches while `watching()` runs
        self.passes = 0  # passes made over synced caches
        self._vmis: dict[str, tuple[bytes, VmiView | None, Malformed | None]] = {}  # each cached VMI as last read
        self.verdicts = Verdicts()  # each apart VM's storage-node check, judged again when what it went by changed

    # ----------------------------------------------------------------- running

    @contextlib.asynccontextmanager
    async def watching(self) -> AsyncIterator[KubeVirtWatch]:
        """VMIs and migrations listed and watched for as long as the block runs (those held: as they are)."""
        watch = self.held or KubeVirtWatch(self.api, self.settings, self.timing.watch)
        self.watch = watch
        if watch is not self.held:
            watch.start()
        try:
            yield watch
        finally:
            self.watch = None
            if watch is not self.held:
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
                    try:  # the report is not kept: its records would outlive the next pass's
                        report = await self.run_pass()
                        log.debug("keeper pass", extra={"fields": {"created": report.created, "states": report.states,
                                                                   "held": report.held, "note": report.note}})
                    except Exception as exc:  # a pass that fails reports and leaves the next one to try
                        self.records.errors = [f"pass failed: {type(exc).__name__}: {exc}"]
                        log.exception("keeper pass failed")
                    await asyncio.sleep(max(0.0, self.timing.period - (loop.time() - started)))
        finally:
            show(PassReport(at=self.clock()))  # only the leader reports VMs

    def degraded(self) -> list[str]:
        """What keeps the keeper from seeing or acting on the whole cluster now (readiness notes)."""
        lost = [f"the keeper's record was rebuilt at {rfc3339(self.state.lost[0])}: {self.state.lost[1]}"
                ] if self.state.lost else []
        watch = [*self.watch.degraded(), *self.watch.events_note()] if self.watch is not None else []
        return watch + list(self.records.errors) + lost

    # ----------------------------------------------------------------- one pass

    async def run_pass(self) -> PassReport:
        """One pass over synced caches; its report sets the metrics."""
        now = self.clock()
        watch = self.watch
        if watch is None or not watch.synced() or not self.store.synced():
            return PassReport(at=now, note="waiting for the caches to sync")
        if not self.passes:  # once synced (at 75,000 VMs, minutes after the first of them)
            heap.freeze(log, "the keeper's caches")
        began, cpu = time.monotonic(), time.process_time()
        report = await self._pass(watch, now)
        self.passes += 1
        metrics.KEEPER_PASS.labels("wall").set(time.monotonic() - began)
        metrics.KEEPER_PASS.labels("cpu").set(time.process_time() - cpu)
        return report

    async def _pass(self, watch: KubeVirtWatch, now: datetime) -> PassReport:
        """Observe, plan and act (`_act`), then record what came of it."""
        await self.remount.check()  # whether Longhorn reboots VMs when their NFS server restarts (--spare-vms: not)
        running, results, incomplete = await self._act(watch, now)
        writes = self.writes
        errors = [writes.lost] if writes.lost else []
        if writes.lost:
            log.warning("keeper pass stopped", extra={"fields": {"why": writes.lost}})
        for namespace, why in sorted(writes.deferred.items()):  # said: in a one-namespace cluster, the API lost
            log.warning("keeper namespace deferred", extra={"fields": {"namespace": namespace, "why": why}})
            errors += [f"namespace {namespace}: {why}"] if namespace not in writes.tenants else []  # a tenant's: not ours
        await self.records.write(now, running, errors, leads=self.authority(self.timing.request_timeout))
        self.records.errors = errors
        created = [result.created for result in results if result.created]
        reports = self.records.reports
        report = PassReport.of(now, created, incomplete or (errors[-1] if errors else ""),
                               tuple(reports[key] for key in sorted(reports)))
        show(report)
        return report

    async def _act(self, watch: KubeVirtWatch, now: datetime) -> tuple[dict[tuple[str, str], str], list[Result], str]:
        """Observe, then plan and act in turn (`act.Turn`); each VM's decision reported. The running opted-in VMs'
        VMI uids, what the writes came to, and why the view was incomplete, if so."""
        vms, observed_facts, unplaced, again = await self._observe(watch, now)
        writes = self.writes
        made: list[Any] = [None, None, None]  # the last plan and what it was made of: asked again alike, it is that one

        def plan_with(facts: list[VmFacts], p: PassFacts) -> Plan:
            if made[1] != p or len(made[0]) != len(facts) or any(a is not b for a, b in zip(made[0], facts)):
                made[:] = facts, p, plan(facts, p, unplaced, timedelta(seconds=self.timing.unplaceable))
            return made[2]  # type: ignore[no-any-return]

        turn = Turn(observed={vm.key: vm for vm in vms}, writes=writes, remember=lambda r: self.records.acted(r, now),
                    plan_with=plan_with)
        writes.begin()
        facts = await ask_targeted(self.targeted, turn.plan, observed_facts, turn.observed, writes, turn.came)
        await self._judge_movers(turn, facts, again)
        await self.actor.carry_out(turn, facts, now, priority=bool(self.targeted.priority))
        pace = Pacer()
        for vm in (await turn.plan(facts)).vms:
            self.records.reported(vm.facts, vm.decision, now)
            await pace()
        for result in turn.results:
            self.records.said(result, now)
        running = {key: vm.vmi.uid for key, vm in turn.observed.items()}  # once the plan is let go of
        return running, turn.results, facts.incomplete

    async def _judge_movers(self, turn: Turn, facts: PassFacts, again: Again) -> None:
        """A VM is moved on a storage-node check made in this pass: those the plan moves on one kept from an
        earlier pass (`Verdicts`) are observed again, and the plan made again, until none is."""
        limits = facts.limits
        if (facts.mode is not KeepMode.MIGRATE or facts.targeted is not True or facts.incomplete or not facts.lease
                or facts.in_flight_all >= limits.max_cluster_inflight):
            return  # nothing moves in this pass
        while kept := [vm.key for vm in (await turn.plan(facts)).vms if vm.move and self.verdicts.kept(vm.key, self.passes)]:
            for key in kept:
                self.verdicts.held.pop(key)
                turn.observed[key] = await again(turn.observed[key].vmi)  # type: ignore[index]

    async def _observe(self, watch: KubeVirtWatch, now: datetime) -> tuple[list[Observed], PassFacts, list[Stuck],
                                                                         Again]:
        """Each running opted-in VM, the pass-wide facts, our migrations that cannot be placed; how to observe a VM again."""
        seen = await self._read_kubevirt(watch)
        for malformed in seen.malformed:
            self.records.skip(malformed)
        watched, vmis = seen.migrations, seen.views
        named = {(m.namespace, m.vmi) for m in self.records.history(watched)}  # the VMIs of every migration counted
        uids = {key: v.uid for v in vmis if (key := (v.namespace, v.name)) in named}
        self.records.observe(watched, now, uids)
        state = await self.records.read(now)
        incomplete = "; ".join(watch.degraded() + self.store.degraded())
        history = self.records.history(watched)
        observed, again = await self._observe_vms(watch, seen.running, history, state, now)  # the others never touched
        lease = self.settings.keep is not KeepMode.MIGRATE or self.authority(self.timing.request_timeout)
        facts = pass_facts(self.settings, history, vmis, now, self.targeted, incomplete=incomplete, lease=lease)
        return observed, facts, stuck(history, uids, self.store.launcher_pods, state), again

    async def _read_kubevirt(self, watch: KubeVirtWatch) -> Listed:
        """The VMIs and migrations as `status` reads them (`read_kubevirt`); a VMI whose cached object is the one
        read last pass as it was read then: at 75,000 VMIs, reading all took most of a settled cluster's pass."""
        migrations = watch.migrations.table  # decoded one at a time: never all at once
        seen = read_kubevirt((), (migrations.decode(k, b) for k, b in list(migrations.objects.items())), self.settings)
        alike, pace = Alike(), Pacer()
        table, read = watch.vmis.table, dict[str, tuple[bytes, VmiView | None, Malformed | None]]()
        for key, blob in list(table.objects.items()):
            held = self._vmis.get(key)
            if held is None or held[0] is not blob:
                one = read_kubevirt((table.decode(key, blob),), (), self.settings, alike=alike)
                held = blob, next(iter(one.views), None), next(iter(one.malformed), None)
            read[key] = held
            seen.views.extend(held[1:2] if held[1] is not None else ())
            seen.malformed.extend(held[2:] if held[2] is not None else ())
            await pace()
        self._vmis = read
        return seen

    async def _observe_vms(self, watch: KubeVirtWatch, running: list[VmiView], history: list[Migration],
                           state: KeeperState, now: datetime) -> tuple[list[Observed], Again]:
        """Each VM observed once, with its own migrations; and how to observe one again."""
        by_vmi: dict[tuple[str, str], list[Migration]] = {}
        for migration in history:
            by_vmi.setdefault((migration.namespace, migration.vmi), []).append(migration)
        view = await self.store.fit_view("", timeout=self.timing.request_timeout)
        self.verdicts.begin(view)
        observer = Observer(store=self.store, cache=self.store, direct=self.store.direct,
                            launchers=self.store.launcher_pods, settings=self.settings,
                            nodes=Nodes(self.store, self.timing.request_timeout), timeout=self.timing.request_timeout,
                            spans=self.records.spans, turn=self.passes, io_errors=watch.io_errors,
                            verdicts=self.verdicts, view=view)
        pace, observed, unpaused = Pacer(), [], state.just_unpaused(now)

        def again(vmi: VmiView) -> Awaitable[Observed]:
            return observer.vm(vmi, by_vmi.get((vmi.namespace, vmi.name), []), now, state, unpaused)

        for vmi in running:
            await pace()
            observed.append(await again(vmi))
        running_keys = {(vmi.namespace, vmi.name) for vmi in running}
        self.verdicts.held = {key: v for key, v in self.verdicts.held.items() if key in running_keys}
        return observed, again

    @property
    def state(self) -> KeeperState:
        return self.records.state
