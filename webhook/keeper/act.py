"""What the keeper does to the cluster, and nothing else: a plan (`rules.keeping.plan`) in its order
(cancels, unpauses, creates), each an Event on the VMI, a log line and a metric, each asking the Lease
just before. Whatever fails a write holds that VM alone (`writes.Result.holds`) and the plan goes on;
only the lease or the API lost (`writes.Writes`) stops it.
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from .. import metrics
from ..cluster.events import Events, vmi_reference
from .kubevirt_api import create_migration, delete_migration, unpause_vmi
from ..rules.keeping.migrations import Migration, read_migration
from ..rules.keeping.plan import Cancel, Plan, VmPlan
from ..rules.keeping.record import Action
from .records import Records
from .observed import manifest, Observed
from .writes import about_the_object, failed, Result, Writes

log = logging.getLogger("webhook.keeper")
NOT_PAUSED = "VMI is not paused"  # virt-api's 409 when there is nothing left to unpause


class Actor:
    """Carries out plans through `api`, within `timeout` each request; `authority` tells whether the
    lease surely lasts that long; `priority` whether our migrations carry spec.priority."""

    def __init__(self, api: Any, follower: Records, *, events: Events, timeout: float,
                 authority: Callable[[float], bool]):
        self.api, self.follower, self.events = api, follower, events
        self.timeout, self.authority = timeout, authority

    async def carry_out(self, plan: Plan, observed: dict[tuple[str, str], Observed], now: datetime, writes: Writes, *,
                        priority: bool) -> list[Result]:
        """The plan's cancels, unpauses and creates as `writes`' bucket lets them, until the API or lease is lost."""
        results: list[Result] = []
        steps: list[Any] = [*plan.cancels, *(vm for vm in plan.vms if vm.move or vm.unpause)]
        for step in steps:
            if not await writes.take() or not self.authority(self.timeout):
                break
            if isinstance(step, Cancel):
                result = await self.cancel(step, now)
            elif step.unpause:
                result = await self.unpause(observed[step.key], step)
            else:
                result = await self.create(observed[step.key], step, priority=priority)
            results.append(writes.came(result))
        return results

    async def create(self, vm: Observed, step: VmPlan, *, priority: bool) -> Result:
        """Create the migration the VM's decision calls for, with spec.priority when `priority`."""
        vmi, key, decision = vm.vmi, vm.key, step.decision
        made = manifest(vm, decision, priority=priority)
        if not isinstance(made, dict):  # the node went away
            return Result(key=key, action=Action.MIGRATE, words=f"no migration created: {made}")
        answer = await create_migration(self.api, made, timeout=self.timeout)
        migration = read_migration(answer.obj) if answer.ok else None
        if not isinstance(migration, Migration):
            if answer.ok:
                answer = dataclasses.replace(answer, status=0, error=f"the API answered with {migration}")
            metrics.KEEPER_MIGRATIONS.labels("error").inc()
            log.warning("keeper migration not created", extra={"fields": {
                "vm": f"{vmi.namespace}/{vmi.name}", "from": decision.source, "to": decision.target,
                "error": answer.error, "status": answer.status}})
            return failed(key, Action.MIGRATE, answer, "creating a migration failed")
        self.follower.created(migration)
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
        """`virtctl unpause`: virt-api's 409 "VMI is not paused" leaves nothing to do; its other 409s (not
        running, a snapshot under way) and any other failure hold the VM a short while."""
        vmi, key, name = vm.vmi, vm.key, f"{vm.vmi.namespace}/{vm.vmi.name}"
        reason = step.resume.reason if step.resume is not None else ""
        answer = await unpause_vmi(self.api, vmi.namespace, vmi.name, timeout=self.timeout)
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
        """Delete our migration whose target pod cannot be placed: failed, with the scheduler's message. By
        uid: a 404 or a 409 (the name holds another object) is done."""
        migration = cancel.migration
        key, vm = (migration.namespace, migration.vmi), f"{migration.namespace}/{migration.vmi}"
        answer = await delete_migration(self.api, migration.namespace, migration.name, uid=migration.uid,
                                        timeout=self.timeout)
        if not answer.ok and answer.status not in (404, 409):
            log.warning("keeper migration not cancelled", extra={"fields": {
                "vm": vm, "migration": migration.name, "error": answer.error, "why": cancel.why}})
            return failed(key, Action.CANCEL, answer, f"cancelling migration {migration.namespace}/{migration.name} failed")
        log.warning("keeper migration cancelled", extra={"fields": {
            "vm": vm, "migration": migration.name, "target": migration.target, "why": cancel.why}})
        self.follower.cancelled(migration, now, f"cancelled: {cancel.why}", cancel.vmi_uid)
        return Result(key=key, action=Action.CANCEL, words=f"cancelled migration {migration.name}: {cancel.why}",
                      done=True)
