"""Does the cluster keep `spec.addedNodeSelector` (KubeVirt 1.6+) and `spec.priority` (1.7+)? The keeper dry-runs
the migration it is about to create (`dryRun=All`): an older schema answers 400 "unknown field" or prunes the
field. virt-api refuses the priority from others than virt-controller since 1.7 (`migration-create-admitter.go`):
then the dry run is made again without it. A dry run that proves nothing changes nothing: no migration.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from .. import kinds, metrics
from .kubevirt_api import create_migration, Created
from .writes import WEBHOOK_BOUND
from ..rules.keeping.keep import NEEDS

log = logging.getLogger("webhook.keeper")

FIELD = "addedNodeSelector"
PRIORITY = "priority"
WITHOUT = "our migrations are created without it and queue at KubeVirt's default priority, the lowest"
UNKNOWN_PRIORITY = f"the cluster rejects spec.priority as unknown (KubeVirt < 1.7): {WITHOUT}"


class TargetedMigration:
    """What the last conclusive dry run said, and when to ask again."""

    logger = log  # where a changed answer is said

    def __init__(self, api: Any, *, recheck: float = 600.0, timeout: float = 5.0):
        self._api, self.recheck, self.timeout = api, recheck, max(timeout, WEBHOOK_BOUND)  # as any write
        self.available: bool | None = None  # None: not known yet
        self.note = "not checked yet"
        self.priority: bool | None = None  # spec.priority kept; None: not known yet
        self.priority_note = "not checked yet"
        self.error = ""  # why the last dry run proved nothing ("": it did, or none was made)
        self._checked_at: float | None = None
        self.settled = 0  # conclusive answers so far

    @property
    def checked(self) -> bool:
        """A dry run has been made (conclusive or not)."""
        return self._checked_at is not None

    def due(self) -> bool:
        """Never checked, inconclusive, or `recheck` seconds old (so an upgrade of KubeVirt is noticed)."""
        if self._checked_at is None or self.available is None:
            return True
        return asyncio.get_running_loop().time() - self._checked_at >= self.recheck

    async def dry_run(self, manifest: dict[str, Any]) -> Created | None:
        """Dry-run `manifest` (a migration with spec.addedNodeSelector and spec.priority); its answer if it proved
        nothing. Dry runs go several at once (`probe.py`): one that proves nothing does not unsay an answer settled
        while it waited."""
        self._checked_at, settled = asyncio.get_running_loop().time(), self.settled
        spec = kinds.spec(manifest)
        wanted, priority = spec.get(FIELD), spec.get(PRIORITY)
        answer = await create_migration(self._api, manifest, timeout=self.timeout, dry_run=True)
        refused = answer.status in (400, 403, 422) and PRIORITY in answer.error and FIELD not in answer.error
        if refused and priority is not None:
            unknown = "unknown field" in answer.error
            self._settle_priority(False, UNKNOWN_PRIORITY if unknown else "KubeVirt refuses spec.priority from us "
                                                                         f"(only virt-controller may set it): {WITHOUT}")
            return await self.dry_run({**manifest, "spec": {k: v for k, v in spec.items() if k != PRIORITY}})
        if answer.ok:
            stored = kinds.spec(answer.obj)
            if stored.get(FIELD) == wanted:
                self._settle(True, "spec.addedNodeSelector is kept: targeted migration works")
            else:
                self._settle(False, f"the cluster prunes spec.addedNodeSelector ({NEEDS}): no migration is created")
            if priority is not None:
                if stored.get(PRIORITY) == priority:
                    self._settle_priority(True, f"spec.priority is kept: our migrations queue as {priority}")
                else:
                    self._settle_priority(False, f"the cluster prunes spec.priority (KubeVirt < 1.7): {WITHOUT}")
        elif answer.status == 400 and FIELD in answer.error:
            self._settle(False, f"the cluster rejects spec.addedNodeSelector as unknown ({NEEDS}): no migration is created")
            if priority is not None and f"spec.{PRIORITY}" in answer.error:
                self._settle_priority(False, UNKNOWN_PRIORITY)
        else:
            note = f"targeted migration could not be checked: {answer.error}"
            if note != self.note and settled == self.settled:
                self.logger.warning("targeted migration not checked", extra={"fields": {"error": answer.error}})
            if settled == self.settled:
                self.note, self.error = note, answer.error
            return answer
        return None

    def _settle_priority(self, honoured: bool, note: str) -> None:
        """Said once, in the log, when the answer changes; `status` shows the note."""
        changed = honoured != self.priority
        self.priority, self.priority_note = honoured, note
        if changed:
            self.logger.info("migration priority " + ("kept" if honoured else "not kept"), extra={"fields": {"why": note}})

    def _settle(self, available: bool, note: str) -> None:
        metrics.show(metrics.KEEPER_TARGETED).set(1 if available else 0)
        self.settled += 1
        changed = available != self.available
        self.available, self.note, self.error = available, note, ""
        if changed:
            (self.logger.info if available else self.logger.warning)(
                "targeted migration " + ("available" if available else "unavailable"), extra={"fields": {"why": note}})
