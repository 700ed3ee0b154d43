"""What the keeper's decision for one VM is made of, gathered from a store: where the VM runs
against where its disks are served, the stretch it has been apart (`stretch.py`), whether its
storage node can take it, the migrations in flight, and whether targeted migration works
(`probe.py`). The keeper's passes and `status` both decide through `decide` here, so an admin
sees the very answer the keeper acts on.
"""
from __future__ import annotations

import collections
import dataclasses
from datetime import datetime
from typing import Any

from ..cluster.resolve import resolve_disks
from ..cluster.store import Store, StoreError
from ..config import Settings
from ..deadline import Deadline
from ..kinds import NODE
from ..rules.keeping.apart import APART, Locality, locality, UNRESOLVED
from ..rules.placement.facts import Fact
from ..rules.keeping.keep import decide_keep, Hold, KeepDecision, Limits, Mode
from ..rules.keeping.migrations import (
    attempts,
    last_migration_end,
    last_move,
    migrating,
    Migration,
    migration_manifest,
    MIGRATION_PRIORITY,
)
from ..rules.shared.reading import Skipped
from ..rules.keeping.running import VmiView
from .probe import TargetedMigration
from .stretch import Stretches


@dataclasses.dataclass
class Budget:
    """Migrations in flight as a pass goes: what it creates counts at once."""

    ours: int
    everyone: int
    outbound: collections.Counter[str]  # by the node they leave


async def where(store: Store, settings: Settings, vmi: VmiView, timeout: float) -> tuple[Locality, list[Fact]]:
    """Co-located, apart, split or unresolved; a disk the API could not tell about makes it unresolved."""
    facts = await resolve_disks(store, settings, vmi.namespace, list(vmi.claims), Deadline.after(timeout, 0))
    unknown = [f.reason for f in facts if not f.known]
    if unknown:
        return Locality(UNRESOLVED, vmi.node, why="; ".join(unknown)), facts
    return locality(vmi.node, facts), facts


async def manifest(store: Store, vmi: VmiView, decision: KeepDecision, *, priority: bool,
                   timeout: float) -> dict[str, Any] | Skipped:
    """The migration that moves the VM to `decision.target`, with spec.priority when `priority`."""
    target = decision.target or ""
    try:
        node = await store.get(NODE, None, target, timeout=timeout)
    except StoreError as exc:
        return Skipped(f"node {target}", str(exc))
    if node is None:
        return Skipped(f"node {target}", "not found")
    return migration_manifest(vmi, node, decision.reason, MIGRATION_PRIORITY if priority else None)


async def decide(stretches: Stretches, targeted: TargetedMigration, vmi: VmiView, where: Locality,
                 facts: list[Fact], now: datetime, history: list[Migration], budget: Budget, *, limits: Limits,
                 mode: Mode, lease: bool = True, incomplete: str = "",
                 refused: tuple[int, datetime] | None = None) -> KeepDecision:
    """The VM's decision (`rules.keeping.keep.decide_keep`, as it is); `history` holds its own migrations
    only. When whether the cluster keeps spec.addedNodeSelector is due to be (re)checked and
    nothing else would hold the VM, the dry run is made and the VM decided again with its answer."""
    apart_since: datetime | None = None
    target_unfit: str | None = None
    if where.state is APART and where.target and vmi.kept:  # reads for the move only when it may come to one
        apart = await stretches.of(vmi, where, facts, history, now)
        apart_since = apart.since
        target_unfit = apart.problem or await stretches.target_unfit(vmi, where.target, apart.pod or {})
    settling = [f.reason for f in facts if f.volume and f.node is None]
    moved = last_move(vmi, history)

    def decision(available: bool | None) -> KeepDecision:
        return decide_keep(vmi, where, now=now, apart_since=apart_since, limits=limits,
                           history=attempts(vmi, history), in_flight_ours=budget.ours, in_flight_all=budget.everyone,
                           outbound=budget.outbound[vmi.node or ""],
                           vmi_migrating=migrating(vmi, history, now), last_end=last_migration_end(vmi, history),
                           descheduled=moved if moved is not None and moved.descheduled else None,
                           target_unfit=target_unfit, targeted=available, targeted_note=targeted.note,
                           settling=settling, refused=refused, incomplete=incomplete, mode=mode, lease=lease)

    due = targeted.due()
    decided = decision(True if due else targeted.available)
    if due and (decided.act or decided.hold in (Hold.REPORT_ONLY, Hold.NO_LEASE)):
        probe = await manifest(stretches.store, vmi, decided, priority=True, timeout=stretches.timeout)
        if not isinstance(probe, Skipped):
            await targeted.check(probe)
        decided = decision(targeted.available)
    return decided
