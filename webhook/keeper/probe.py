"""The keeper's one probe: a server-side dry run of the migration it is about to create, to learn
whether the cluster keeps `spec.addedNodeSelector` and `spec.priority` (`targeted.py`). It writes
nothing (`dryRun=All`), but it is a request of its own, made between two plans, never while
observing."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from ..rules.keeping.keep import PassFacts
from ..rules.keeping.plan import Plan
from ..rules.shared.alone import Alone
from .observed import manifest, Observed
from .targeted import TargetedMigration

PROBES = 3  # dry runs a pass while their answers prove nothing


async def ask_targeted(targeted: TargetedMigration, plan_of: Callable[[PassFacts], Plan], facts: PassFacts,
                       observed: Mapping[tuple[str, str], Observed]) -> PassFacts:
    """The pass's facts with the answer on targeted migration. When it is due to be (re)checked,
    the dry run is made of the first VM of the plan that would move (or be held only by the mode or
    the lease) if it worked; an answer that proves nothing (a timeout, KubeVirt refusing that one
    VMI) tries the next such VM, up to PROBES a pass, so one VM cannot hold every other. While no VM
    comes to that, decisions go as if it works: what else holds them shows."""
    if not targeted.due():
        return facts
    assumed = dataclasses.replace(facts, targeted=True)
    tried = 0
    for vm in plan_of(assumed).vms:
        if not (vm.move or (not vm.unpause and vm.decision.hold in (Alone.REPORT_ONLY, Alone.NO_LEASE))):
            continue
        made = manifest(observed[vm.key], vm.decision, priority=True)
        if isinstance(made, str):
            continue
        await targeted.check(made)
        tried += 1
        if not targeted.error or tried >= PROBES:
            break
    return assumed if not tried else dataclasses.replace(facts, targeted=targeted.available,
                                                         targeted_note=targeted.note)
