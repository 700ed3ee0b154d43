"""The keeper's one plan, pure, made by a pass and by `status` alike: which VMs move (each using up the limits of
those after it), which are unpaused, which of our migrations are cancelled, and why each other is left."""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime, timedelta

from ...config import KeepMode
from ..shared.times import whole_seconds
from .apart import APART
from .keep import decide_keep, KeepDecision, PassFacts, VmFacts
from .migrations import Migration, UNPLACEABLE_SECONDS
from .resume import carried_paused, decide_resume, Resume
from ..shared.alone import Alone
from .record import Refusal

UNPLACEABLE = timedelta(seconds=UNPLACEABLE_SECONDS)  # a target pod of ours unschedulable this long: cancel


@dataclasses.dataclass(frozen=True, slots=True)
class Stuck:
    """Our migration whose target pod is not placed: since when, the scheduler's words, an earlier cancel's refusal."""

    migration: Migration
    vmi_uid: str
    pod: str
    since: datetime
    message: str
    refused: Refusal | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Cancel:
    """Delete a migration of ours (what `virtctl migrate-cancel` does): it counts as failed, `why`."""

    migration: Migration
    vmi_uid: str
    why: str


@dataclasses.dataclass(frozen=True, slots=True)
class VmPlan:
    """One running opted-in VM in the plan: its decision and, paused so that one is for it, its unpause."""

    facts: VmFacts
    decision: KeepDecision
    resume: Resume | None = None

    @property
    def key(self) -> tuple[str, str]:
        return self.facts.vmi.namespace, self.facts.vmi.name

    @property
    def unpause(self) -> bool:
        return self.resume is not None and self.resume.act

    @property
    def move(self) -> bool:
        """A migration is created for it (never together with an unpause: that comes first)."""
        return self.decision.act and not self.unpause


@dataclasses.dataclass(frozen=True)
class Plan:
    """Everything one pass does and leaves, in its order: cancels, then each VM (its unpause or migration)."""

    vms: tuple[VmPlan, ...]
    cancels: tuple[Cancel, ...] = ()


def cancels(stuck: Sequence[Stuck], p: PassFacts, unplaceable: timedelta = UNPLACEABLE) -> tuple[Cancel, ...]:
    """Our migrations whose target pod could not be placed for `unplaceable` (they hold slots a drain needs), on a
    complete view, in migrate mode, past any refused cancel's backoff."""
    if p.incomplete or p.mode is not KeepMode.MIGRATE:
        return ()
    return tuple(Cancel(migration=s.migration, vmi_uid=s.vmi_uid,
                        why=f"its target pod {s.pod} could not be scheduled for {whole_seconds(p.now - s.since)}s: "
                            f"{s.message}")
                 for s in stuck if p.now - s.since >= unplaceable and (s.refused is None or p.now >= s.refused.retry))


def plan(vms: Sequence[VmFacts], p: PassFacts, stuck: Sequence[Stuck] = (),
         unplaceable: timedelta = UNPLACEABLE) -> Plan:
    """The VMs in the pass's order (frozen ones first, then those not apart as listed, then those apart the longest
    first, by name), each migration counting at once against the limits of those after it; and the cancels."""
    apart = sorted((vm for vm in vms if vm.where.state is APART), key=lambda vm: (vm.apart_since or p.now, vm.vmi.name))
    # Frozen first, in that order: stopped on a stale mount, or carried paused onto a fresh one (first to a slot).
    ordered = sorted([vm for vm in vms if vm.where.state is not APART] + apart,
                     key=lambda vm: not (vm.stale or carried_paused(vm)))
    cancelled = cancels(stuck, p, unplaceable)
    why = {(c.migration.namespace, c.migration.vmi): f"cancelling its migration {c.migration.name}: {c.why}"
           for c in cancelled}
    why.update({(s.migration.namespace, s.migration.vmi): s.refused.in_words() for s in stuck  # its cancel waits
                if s.refused is not None and p.now < s.refused.retry})
    planned, facts, alike = [], p, dict[KeepDecision, KeepDecision]()
    for vm in ordered:  # its decision and unpause as the pass stands when it is reached; equal decisions one object
        decision, resume = decide_keep(vm, facts), decide_resume(vm, facts)
        if resume is not None and resume.hold is Alone.NEEDS_RESTART:  # no unpause holds: nor would a migration
            decision = dataclasses.replace(decision, act=False, hold=Alone.NEEDS_RESTART, reason=resume.reason)
        elif resume is not None and (resume.act or not decision.act):  # what the keeper makes of it: its unpause
            decision = dataclasses.replace(decision, reason=resume.reason)
        one = VmPlan(facts=vm, decision=alike.setdefault(decision, decision), resume=resume)
        if one.move:
            facts = facts.after_create(one.decision.source, '/'.join(one.key))
        elif (key := (vm.vmi.namespace, vm.vmi.name)) in why:  # it backs off from the next pass on
            one = dataclasses.replace(one, decision=dataclasses.replace(one.decision, reason=why[key]))
        planned.append(one)
    return Plan(vms=tuple(planned), cancels=cancelled)
