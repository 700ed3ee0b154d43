"""What the keeper does to the cluster: create the migration a decision calls for, cancel a
migration of ours whose target pod the scheduler cannot place, and unpause a VM it recovered from
a stale NFS mount (`rules.keeping.resume`); each said in an Event on the VMI, a log line and a metric. What came of it is returned (`ActionResult`): the keeper's memory
records it, the pass counts it.
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from .. import kinds, metrics
from ..cluster.events import Events, vmi_reference
from .kubevirt_api import create_migration, delete_migration, unpause_vmi
from ..cluster.store import WatchedStore
from ..kinds import MIGRATION_JOB_LABEL
from ..rules.keeping.keep import KeepDecision
from ..rules.keeping.migrations import Migration, read_migration
from ..rules.keeping.resume import Resume
from ..rules.placement.stranded import unschedulable_since
from ..rules.shared.times import whole_seconds
from .follow import Follower
from .observe import manifest, Observed
from .stretch import VmKey

log = logging.getLogger("webhook.keeper")

# Answers that refuse this one migration (KubeVirt's admission, a conflict), not every one: the VM
# backs off, the pass goes on with the others.
REFUSALS = (400, 409, 422)


@dataclasses.dataclass(frozen=True, slots=True)
class ActionResult:
    """What came of one action on a VM: its last action in words, the migration created
    (namespace/name), whether the API refused this VM's migration (it backs off), or what went
    wrong that would go wrong for any migration (`error`: nothing more is created this pass)."""

    key: VmKey
    action: str = ""
    created: str | None = None
    refused: bool = False
    error: str = ""


class Actor:
    """Creates and cancels migrations through `api`, within `timeout` each; `authority` tells
    whether the lease surely lasts that long."""

    def __init__(self, api: Any, store: WatchedStore, follower: Follower, *, events: Events, timeout: float,
                 authority: Callable[[float], bool]):
        self.api, self.store, self.follower, self.events = api, store, follower, events
        self.timeout, self.authority = timeout, authority

    async def create(self, vm: Observed, decision: KeepDecision, *, priority: bool) -> ActionResult:
        """Create the migration `decision` calls for, with spec.priority when `priority`."""
        vmi, key = vm.vmi, vm.key
        made = manifest(vm, decision, priority=priority)
        if not isinstance(made, dict):  # the node went away
            return ActionResult(key=key, action=f"no migration created: {made}")
        answer = await create_migration(self.api, made, timeout=self.timeout)
        migration = read_migration(answer.obj) if answer.ok else None
        if not isinstance(migration, Migration):
            error = answer.error or f"the API answered with {migration}"
            metrics.KEEPER_MIGRATIONS.labels("error").inc()
            log.warning("keeper migration not created", extra={"fields": {
                "vm": f"{vmi.namespace}/{vmi.name}", "from": decision.source, "to": decision.target, "error": error}})
            refused = answer.status in REFUSALS  # this VM backs off; the others are still tried
            return ActionResult(key=key, action=f"creating a migration failed: {error}", refused=refused,
                                error="" if refused else f"creating a migration of {vmi.namespace}/{vmi.name}: {error}")
        self.follower.created(migration)
        metrics.KEEPER_MIGRATIONS.labels("created").inc()
        log.info("keeper migration created", extra={"fields": {
            "vm": f"{vmi.namespace}/{vmi.name}", "migration": migration.name, "from": decision.source,
            "to": decision.target, "reason": decision.reason}})
        self.events.emit_about(vmi_reference(vmi.namespace, vmi.name, vmi.uid),
                               "RecoveringStaleMount" if decision.stale else "MigratingToStorage",
                               f"{decision.reason} (migration {migration.name})")
        return ActionResult(key=key, action=f"created migration {migration.name} to {decision.target}",
                            created=f"{migration.namespace}/{migration.name}")

    async def unpause(self, vm: Observed, resume: Resume) -> tuple[ActionResult, bool]:
        """`PUT .../virtualmachineinstances/NAME/unpause` (subresources.kubevirt.io) of a VM the keeper
        recovered; and whether that recovery is done with: unpaused, or virt-api's 409 (not paused
        or not running any more: nothing left to do). Another answer that refuses this VM (a 403:
        RBAC) is said and tried again later; one that any unpause would meet (`error`: no answer,
        a 5xx) stops the pass."""
        vmi, key, name = vm.vmi, vm.key, f"{vm.vmi.namespace}/{vm.vmi.name}"
        answer = await unpause_vmi(self.api, vmi.namespace, vmi.name, timeout=self.timeout)
        if not answer.ok:
            refused = 400 <= answer.status < 500
            metrics.KEEPER_UNPAUSES.labels("refused" if refused else "error").inc()
            log.warning("keeper unpause failed", extra={"fields": {
                "vm": name, "migration": resume.migration, "error": answer.error}})
            result = ActionResult(key=key, action=f"unpausing failed: {answer.error}",
                                  error="" if refused else f"unpausing {name}: {answer.error}")
            return result, answer.status == 409
        metrics.KEEPER_UNPAUSES.labels("unpaused").inc()
        log.info("keeper unpaused", extra={"fields": {"vm": name, "migration": resume.migration, "reason": resume.reason}})
        self.events.emit_about(vmi_reference(vmi.namespace, vmi.name, vmi.uid), "UnpausedAfterRecovery", resume.reason)
        return ActionResult(key=key, action=f"unpaused after migration {resume.migration}"), True

    async def cancel_unplaceable(self, history: Sequence[Migration], uids: dict[VmKey, str], now: datetime,
                                 unplaceable: float) -> list[ActionResult]:
        """Delete each migration of ours whose target pod the scheduler has been unable to place
        for `unplaceable` seconds (what `virtctl migrate-cancel` does): it counts as failed, with
        the scheduler's message, and the VM backs off. A 404 is done, and so is a 409 (the delete
        names the migration's uid: the name now holds another object, ours is gone); another
        failure is an error, and the migration still counts, to be tried again next pass."""
        results = []
        for migration in history:
            if not migration.ours or migration.final or not migration.uid or self.follower.is_cancelled(migration):
                continue
            vmi_uid = uids.get((migration.namespace, migration.vmi))
            pods = self.store.launcher_pods(migration.namespace, vmi_uid) if vmi_uid else None
            target = next((p for p in pods or () if kinds.labels(p).get(MIGRATION_JOB_LABEL) == migration.uid), None)
            stuck = unschedulable_since(target) if target is not None else None
            if stuck is None or (now - stuck[0]).total_seconds() < unplaceable:
                continue
            if not self.authority(self.timeout):
                break
            why = (f"its target pod {kinds.pod_name(target)} could not be scheduled for "
                   f"{whole_seconds(now - stuck[0])}s: {stuck[1]}")
            results.append(await self._cancel(migration, vmi_uid or "", why, now))
        return results

    async def _cancel(self, migration: Migration, vmi_uid: str, why: str, now: datetime) -> ActionResult:
        key, vm = (migration.namespace, migration.vmi), f"{migration.namespace}/{migration.vmi}"
        answer = await delete_migration(self.api, migration.namespace, migration.name, uid=migration.uid,
                                        timeout=self.timeout)
        if not answer.ok and answer.status not in (404, 409):  # 409: the name holds another object now
            log.warning("keeper migration not cancelled", extra={"fields": {
                "vm": vm, "migration": migration.name, "error": answer.error, "why": why}})
            return ActionResult(key=key, error=f"cancelling migration {migration.namespace}/{migration.name}: {answer.error}")
        log.warning("keeper migration cancelled", extra={"fields": {
            "vm": vm, "migration": migration.name, "target": migration.target, "why": why}})
        self.follower.cancelled(migration, now, f"cancelled: {why}", vmi_uid)
        return ActionResult(key=key, action=f"cancelled migration {migration.name}: {why}")
