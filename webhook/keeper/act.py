"""What the keeper does to the cluster, and nothing else: a plan (`rules.keeping.plan`) in its order (cancels,
unpauses, creates), each an Event on the VMI, a log line and a metric, each asking the Lease just before. A
write that fails holds its VM alone, or its namespace (`writes.py`), and the plan is made again.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from .. import metrics
from ..cluster.events import Events, vmi_reference
from .kubevirt_api import create_migration, delete_migration, unpause_vmi
from .probe import landed, launch, room, waits_for_a_slot
from ..config import KeepMode
from ..rules.keeping.migrations import Migration, read_migration
from ..rules.keeping.keep import PassFacts, VmFacts
from ..rules.keeping.plan import Cancel, Plan, VmPlan
from ..rules.keeping.record import Action, KeeperState, VmKey
from .records import Records
from .observed import manifest, Observed
from .writes import about_the_object, failed, Result, WEBHOOK_BOUND, Writes

log = logging.getLogger("webhook.keeper")
NOT_PAUSED = "VMI is not paused"  # virt-api's 409 when there is nothing left to unpause


@dataclasses.dataclass
class Turn:
    """One pass's plan as carried out: each plan made again gives back what a failed step had counted."""

    observed: Mapping[VmKey, Observed]
    plan_with: Callable[[list[VmFacts], PassFacts], Plan]  # the pure plan, over the pass's stuck migrations
    writes: Writes
    remember: Callable[[Result], KeeperState]  # a result into the keeper's record, which it returns
    held: dict[VmKey, VmFacts] = dataclasses.field(default_factory=dict)  # as their failures left them
    done: set[VmKey] = dataclasses.field(default_factory=set)  # acted on: never held by their namespace's failures
    results: list[Result] = dataclasses.field(default_factory=list)
    stopped: str = ""  # why the pass stopped writing: what it did not try is held for it
    moved: dict[VmKey, VmPlan] = dataclasses.field(default_factory=dict)  # created: counted first, reported as planned

    async def plan(self, facts: PassFacts) -> Plan:
        """The pure plan, on a thread (seconds at 75,000 VMs: the Lease's renewals go on), over frozen inputs."""
        deferred = self.writes.deferred
        waiting = {key: deferred.get(key[0], self.stopped) for key in self.observed if key not in self.done and (
            self.stopped or key[0] in deferred)}
        for key, step in self.moved.items():  # ours in flight: no VM a dry run's answer puts back takes their slots
            facts = facts.after_create(step.decision.source, "/".join(key))
        made = await asyncio.to_thread(self.plan_with, [self.held.get(key, vm.facts) for key, vm in self.observed.items()],
                                       dataclasses.replace(facts, deferred=waiting))
        return dataclasses.replace(made, vms=tuple(self.moved.get(vm.key, vm) for vm in made.vms))

    def came(self, result: Result) -> None:
        """What a write or a dry run came to (counted by `writes` first), for the plans made after it."""
        state, key = self.remember(result), result.key
        self.results.append(result)
        if result.done:
            self.done.add(key)
        elif result.holds and (vm := self.observed.get(key)) is not None:
            self.held[key] = dataclasses.replace(vm.facts, refused=state.refusal(*key, Action.MIGRATE),
                                                 unpause_refused=state.refusal(*key, Action.UNPAUSE))


def _steps(plan: Plan) -> list[tuple[Any, Cancel | VmPlan]]:
    """The plan's writes in its order, each with what tells it from the others."""
    return [*((("cancel", c.migration.uid), c) for c in plan.cancels),
            *((vm.key, vm) for vm in plan.vms if vm.move or vm.unpause)]


class Actor:
    """Carries out plans through `api`, a write waiting WEBHOOK_BOUND (a webhook's longest) at least; `authority`:
    whether the lease surely lasts `timeout`."""

    def __init__(self, api: Any, records: Records, *, events: Events, timeout: float,
                 authority: Callable[[float], bool]):
        self.api, self.records, self.events = api, records, events
        self.timeout, self.authority, self.wait = timeout, authority, max(timeout, WEBHOOK_BOUND)

    async def carry_out(self, turn: Turn, facts: PassFacts, now: datetime, *, priority: bool) -> None:
        """The plan's cancels, unpauses and creates as the bucket lets them, until the API or lease is lost; a
        create in a namespace not known to answer after its dry run (`probe.py`). After a step that did not go
        through, the dry runs launched together, or a dry run's answer, the plan is made again."""
        writes = turn.writes
        if facts.mode is not KeepMode.MIGRATE or facts.incomplete or not facts.lease:
            while await landed(writes, turn.came):  # no plan has a step: the dry runs land, counted, and no plan
                pass  # is made again for each (seconds at 75,000 VMs)
            writes.stop()
            return
        made, done = await turn.plan(facts), set[Any]()
        while True:
            key, step = next(((key, step) for key, step in _steps(made) if key not in done), (None, None))
            probe = isinstance(step, VmPlan) and step.move and step.key[0] not in writes.answering
            if step is None or probe and room(writes) <= 0:
                if not await landed(writes, turn.came):
                    break
            elif not await writes.take() or not self.authority(self.timeout):
                turn.stopped = f"not tried in this pass: {writes.lost or 'the lease might run out'}"
                break
            elif probe and isinstance(one := manifest(turn.observed[key], step.decision, priority=priority), dict):
                launch(writes, key, create_migration(self.api, one, timeout=self.wait, dry_run=True))
                await self._probe_next(turn, made, done, priority=priority)
            else:
                done.add(key)
                result = await (self.cancel(step, now) if isinstance(step, Cancel) else self.unpause(
                    turn.observed[key], step) if step.unpause else self.create(turn.observed[key], step, priority=priority))
                turn.came(writes.came(result))
                if result.created:
                    turn.moved[key] = step
                    turn.held[key] = dataclasses.replace(step.facts, migrating=True)
                if result.done:
                    continue
            made = await turn.plan(facts)
        writes.stop()

    async def _probe_next(self, turn: Turn, made: Plan, done: set[Any], *, priority: bool) -> None:
        """The dry runs of the plan's next VMs, each in a namespace of its own not known to answer, those it moves and
        those only a slot holds (`waits_for_a_slot`), in its order up to a write of another kind: launched together,
        the plan made again once for them, not once each (at 75,000 VMs, seconds each)."""
        writes = turn.writes
        if any(("cancel", c.migration.uid) not in done for c in made.cancels):
            return  # its cancels come first
        for vm in made.vms:
            key = vm.key
            if key in done or key[0] in writes.deferred:
                continue  # done, or its namespace waits (for a dry run's answer): the next plan holds it
            if vm.unpause or vm.move and key[0] in writes.answering:
                return  # a write of another kind comes first, as the plan orders them
            if not (vm.move or waits_for_a_slot(vm)) or key[0] in writes.answering:
                continue
            if room(writes) <= 0:
                return
            if not isinstance(one := manifest(turn.observed[key], vm.decision, priority=priority), dict):
                continue  # its node went away: the next plan says so
            if not await writes.take() or not self.authority(self.timeout):
                return  # the next plan's loop says why
            launch(writes, key, create_migration(self.api, one, timeout=self.wait, dry_run=True))

    async def create(self, vm: Observed, step: VmPlan, *, priority: bool) -> Result:
        """Create the migration the VM's decision calls for, with spec.priority when `priority`."""
        vmi, key, decision = vm.vmi, vm.key, step.decision
        made = manifest(vm, decision, priority=priority)
        if not isinstance(made, dict):  # the node went away
            return Result(key=key, action=Action.MIGRATE, words=f"no migration created: {made}")
        answer = await create_migration(self.api, made, timeout=self.wait)
        migration = read_migration(answer.obj) if answer.ok else None
        if not isinstance(migration, Migration):
            if answer.ok:
                answer = dataclasses.replace(answer, status=0, error=f"the API answered with {migration}")
            metrics.KEEPER_MIGRATIONS.labels("error").inc()
            log.warning("keeper migration not created", extra={"fields": {
                "vm": f"{vmi.namespace}/{vmi.name}", "from": decision.source, "to": decision.target,
                "error": answer.error, "status": answer.status}})
            return failed(key, Action.MIGRATE, answer, "creating a migration failed")
        self.records.created(migration)
        metrics.KEEPER_MIGRATIONS.labels("created").inc()
        log.info("keeper migration created", extra={"fields": {
            "vm": f"{vmi.namespace}/{vmi.name}", "migration": migration.name, "from": decision.source,
            "to": decision.target, "reason": decision.reason}})
        self.events.emit_about(vmi_reference(vmi.namespace, vmi.name, vmi.uid),
                               "RecoveringStaleMount" if decision.stale else "MigratingToStorage",
                               f"{decision.reason} (migration {migration.name})")
        return Result(key=key, action=Action.MIGRATE, words=f"created migration {migration.name} to {decision.target}",
                      created=f"{migration.namespace}/{migration.name}", done=True)

    async def unpause(self, vm: Observed, step: VmPlan) -> Result:
        """`virtctl unpause`: 409 "VMI is not paused" is done; any other failure holds the VM a short while."""
        vmi, key, name = vm.vmi, vm.key, f"{vm.vmi.namespace}/{vm.vmi.name}"
        reason = step.resume.reason if step.resume is not None else ""
        answer = await unpause_vmi(self.api, vmi.namespace, vmi.name, timeout=self.wait)
        if not answer.ok:
            if answer.status == 409 and NOT_PAUSED in answer.error:
                return Result(key=key, action=Action.UNPAUSE, words="not unpaused: it is not paused any more", done=True)
            metrics.KEEPER_UNPAUSES.labels("refused" if about_the_object(answer.status) else "error").inc()
            log.warning("keeper unpause failed", extra={"fields": {"vm": name, "error": answer.error}})
            return failed(key, Action.UNPAUSE, answer, "unpausing failed")
        metrics.KEEPER_UNPAUSES.labels("unpaused").inc()
        log.info("keeper unpaused", extra={"fields": {"vm": name, "reason": reason}})
        self.events.emit_about(vmi_reference(vmi.namespace, vmi.name, vmi.uid), "UnpausedAfterRecovery", reason)
        return Result(key=key, action=Action.UNPAUSE, words="unpaused", done=True, uid=vmi.uid)

    async def cancel(self, cancel: Cancel, now: datetime) -> Result:
        """Delete, by uid, our migration whose target pod cannot be placed; a 404 or 409 (another object) is done."""
        migration = cancel.migration
        key, vm = (migration.namespace, migration.vmi), f"{migration.namespace}/{migration.vmi}"
        answer = await delete_migration(self.api, migration.namespace, migration.name, uid=migration.uid,
                                        timeout=self.wait)
        if not answer.ok and answer.status not in (404, 409):
            log.warning("keeper migration not cancelled", extra={"fields": {
                "vm": vm, "migration": migration.name, "error": answer.error, "why": cancel.why}})
            return failed(key, Action.CANCEL, answer, f"cancelling migration {migration.namespace}/{migration.name} failed")
        log.warning("keeper migration cancelled", extra={"fields": {
            "vm": vm, "migration": migration.name, "target": migration.target, "why": cancel.why}})
        self.records.cancelled(migration, now, f"cancelled: {cancel.why}", cancel.vmi_uid)
        return Result(key=key, action=Action.CANCEL, words=f"cancelled migration {migration.name}: {cancel.why}",
                      done=True)
