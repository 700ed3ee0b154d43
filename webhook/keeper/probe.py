"""The pass's dry runs: of each VM to move while targeted migration is not known (`targeted.py`), then of
the first VM of a namespace not known to answer (`writes.Writes.answering`): one a namespace, several at once,
so a tenant's webhook that hangs costs its namespace one wait and no one else's VM, nor a recovery."""
from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping

from ..rules.keeping.keep import PassFacts
from ..rules.keeping.plan import Plan, VmPlan
from ..rules.keeping.record import Action, VmKey
from ..rules.shared.alone import Alone
from .kubevirt_api import Created
from .observed import manifest, Observed
from .targeted import TargetedMigration
from .writes import failed, Result, Writes

log = logging.getLogger("webhook.keeper")


def room(writes: Writes) -> int:
    """How many more dry runs may go: in flight, they hold at most half the bucket; creates keep the rest."""
    return max(1, writes.burst // 2) - len(writes.probes)


# Holds that only a free slot ends: a VM so held moves once one does.
SLOTS = frozenset({Alone.SOURCE_BUSY, Alone.OUR_LIMIT, Alone.CLUSTER_LIMIT})


def waits_for_a_slot(vm: VmPlan) -> bool:
    return not vm.unpause and vm.decision.hold in SLOTS


def _would_move(vm: VmPlan) -> bool:
    return vm.move or (not vm.unpause and vm.decision.hold in (Alone.REPORT_ONLY, Alone.NO_LEASE))


async def _answer(key: VmKey, request: Awaitable[Created | None], clock: Callable[[], float]) -> tuple[Result, float]:
    began = clock()
    answer = await request
    if answer is None or answer.ok:
        return Result(key=key, action=Action.MIGRATE, done=True, dry_run=True), clock() - began
    log.warning("keeper dry run failed", extra={"fields": {"vm": "/".join(key), "error": answer.error}})
    return failed(key, Action.MIGRATE, answer, "the dry run of its migration failed"), clock() - began


def launch(writes: Writes, key: VmKey, request: Awaitable[Created | None]) -> None:
    """A dry run of `key`'s migration in flight (its token taken), its namespace's other VMs waiting for it."""
    writes.deferred[key[0]] = f"waiting for the answer to the dry run of {key[1]}'s migration"
    writes.probes[asyncio.ensure_future(_answer(key, request, writes.clock))] = key[0]


async def landed(writes: Writes, hold: Callable[[Result], None]) -> bool:
    """The dry runs in flight that answered, counted (waiting for one if none has); False when none is in flight."""
    if not writes.probes:
        return False
    answered, _ = await asyncio.wait(writes.probes, return_when=asyncio.FIRST_COMPLETED)
    for task in answered:
        writes.deferred.pop(writes.probes.pop(task), None)
        if not (result := writes.came(*task.result())).done:
            hold(result)
    return True


async def ask_targeted(targeted: TargetedMigration, plan_of: Callable[[PassFacts], Awaitable[Plan]], facts: PassFacts,
                       observed: Mapping[VmKey, Observed], writes: Writes, hold: Callable[[Result], None]) -> PassFacts:
    """The pass's facts with the answer on targeted migration, when due: the dry runs of the plan's VMs that would
    move if it worked, one a namespace, until one answers; those still in flight then land while `act` writes.
    While no VM comes to that, decisions go as if it works."""
    if not targeted.due():
        return facts
    assumed, tried, settled = dataclasses.replace(facts, targeted=True), set[VmKey](), targeted.settled
    while targeted.settled == settled and not writes.lost:
        flying, wanted = set(writes.probes.values()), {}
        for vm in (await plan_of(assumed)).vms:
            if _would_move(vm) and vm.key[0] not in flying and vm.key[0] not in wanted and vm.key not in tried and \
                    isinstance(made := manifest(observed[vm.key], vm.decision, priority=True), dict):
                wanted.setdefault(vm.key[0], (vm.key, made))
        for key, made in list(wanted.values())[:room(writes)]:
            if not await writes.take():
                break
            launch(writes, key, targeted.dry_run(made))
            tried.add(key)
        if not await landed(writes, hold):  # only an answer changes the plan: none, no plan made again
            break
    if not tried or targeted.available is True:  # what the plan assumed: no second plan over every VM for a note
        return assumed  # it reads only while targeted migration does not work
    return dataclasses.replace(facts, targeted=targeted.available, targeted_note=targeted.note)
