"""The keeper's one probe (`targeted.py`): a dry run between two plans, counted as a write (`writes.py`)."""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping

from ..rules.keeping.keep import PassFacts
from ..rules.keeping.plan import Plan, VmPlan
from ..rules.keeping.record import Action
from ..rules.shared.alone import Alone
from .kubevirt_api import Created
from .observed import manifest, Observed
from .targeted import TargetedMigration
from .writes import failed, Result, Writes

log = logging.getLogger("webhook.keeper")


def _would_move(vm: VmPlan) -> bool:
    return vm.move or (not vm.unpause and vm.decision.hold in (Alone.REPORT_ONLY, Alone.NO_LEASE))


async def ask_targeted(targeted: TargetedMigration, plan_of: Callable[[PassFacts], Awaitable[Plan]], facts: PassFacts,
                       observed: Mapping[tuple[str, str], Observed], writes: Writes,
                       hold: Callable[[Result], None]) -> PassFacts:
    """The pass's facts with the answer on targeted migration, when due: the dry run of the plan's first VM
    that would move if it worked. One that proves nothing holds that VM alone, as a failed create would
    (`hold`: its namespace too, after a few, `writes.Writes.deferred`), and the next plan names the next VM,
    until one answers or the API is lost. While no VM comes to that, decisions go as if it works."""
    if not targeted.due():
        return facts
    assumed, tried = dataclasses.replace(facts, targeted=True), set[tuple[str, str]]()
    while (found := next(((vm.key, made) for vm in (await plan_of(assumed)).vms if vm.key not in tried and _would_move(vm)
                          and isinstance(made := manifest(observed[vm.key], vm.decision, priority=True), dict)),
                         None)) is not None and await writes.take():
        tried.add(found[0])
        await targeted.check(found[1])
        if not targeted.error:
            writes.came(Result(key=found[0], action=Action.MIGRATE, done=True))
            break
        log.warning("keeper dry run failed", extra={"fields": {"vm": "/".join(found[0]), "error": targeted.error}})
        hold(writes.came(failed(found[0], Action.MIGRATE, Created(targeted.status, None, targeted.error),
                                "the dry run of its migration failed")))
    return assumed if not tried else dataclasses.replace(facts, targeted=targeted.available,
                                                         targeted_note=targeted.note)
