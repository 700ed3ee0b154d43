"""What one pass of the keeper observes, and `status` with it: for each running opted-in VM a
record with everything its decision needs (`Observed`: where it runs against where its disks
are served, the stretch it has been apart (`stretch.py`), whether its storage node can take it,
its migrations), each node read once a pass (`Nodes`); and what the whole pass goes by
(`pass_facts`: the bounds, the mode, the migrations in flight, whether targeted migration
works, asked once before the decisions by `ask_targeted`). The keeper and `status` observe here and
decide with `rules.keeping.keep.decide_keep`, so an admin sees the very answer the keeper acts on.
"""
from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Collection, Iterable, Sequence
from datetime import datetime
from typing import Any

from ..lookup.resolve import migration_source, resolve_disks
from ..cluster.store import Store, StoreError
from ..config import Settings
from ..deadline import Deadline
from .. import kinds
from ..kinds import LONGHORN_VOLUME, NODE, PAUSED_IO_ERROR
from ..rules.keeping.apart import APART, CO_LOCATED, Locality, locality, UNRESOLVED
from ..rules.shared.facts import Fact
from ..rules.shared.longhorn import stale_mount
from ..rules.shared.times import parse_time
from ..rules.shared.alone import Alone
from ..rules.keeping.keep import decide_keep, KeepDecision, Limits, next_read, PassFacts, VmFacts
from ..rules.keeping.migrations import (
    attempts,
    in_flight_counts,
    last_migration_end,
    last_move,
    migrating,
    Migration,
    migration_manifest,
    MIGRATION_PRIORITY,
    outbound_counts,
)
from ..rules.keeping.recovery import cannot_finish, failed_recovery, FAULTED, not_afresh, recovered_by
from ..rules.keeping.running import VmiView
from .targeted import TargetedMigration
from .stretch import Stretch, Stretches, started

AWAY_CANDIDATES = 8  # other nodes checked, by name, for the recovery of a stale VM beside its NFS server
BREATHE = 0.002  # seconds of the event loop a pass takes before it gives the loop back (serve's deadlines share it)
PROBES = 3  # dry runs a pass while their answers prove nothing


class Breather:
    """Gives the event loop back once `every` seconds of it have gone to a pass: the caches
    answer from memory without yielding, and the deadlines `serve` sends and the reports to it
    must not wait a whole pass."""

    def __init__(self, every: float = BREATHE):
        self.every = every
        self._loop = asyncio.get_running_loop()
        self._since = self._loop.time()

    async def __call__(self) -> None:
        if self._loop.time() - self._since >= self.every:
            await asyncio.sleep(0)
            self._since = self._loop.time()


class Nodes:
    """Each node read once a pass (or a `status` run): the reads are shared, errors included."""

    def __init__(self, store: Store, timeout: float):
        self.store, self.timeout = store, timeout
        self._read: dict[str, asyncio.Future[dict[str, Any] | None]] = {}

    async def get(self, name: str) -> dict[str, Any] | None:
        """The node, None when there is none; raises StoreError when it cannot be read."""
        if name not in self._read:
            self._read[name] = asyncio.ensure_future(self.store.get(NODE, None, name, timeout=self.timeout))
        return await asyncio.shield(self._read[name])


@dataclasses.dataclass(frozen=True, slots=True)
class Observed:
    """One running opted-in VM as a pass saw it: what its decision goes by, its disks (when the
    observer keeps them), and its storage node as read (a migration there names the node's
    hostname label)."""

    facts: VmFacts
    disks: tuple[Fact, ...] = ()
    target_node: dict[str, Any] | None = None
    derived: bool = False  # `facts.apart_since` was read from the cluster, not first seen by this reader

    @property
    def vmi(self) -> VmiView:
        return self.facts.vmi

    @property
    def key(self) -> tuple[str, str]:
        return self.facts.vmi.namespace, self.facts.vmi.name


async def where_it_runs(store: Store, settings: Settings, vmi: VmiView, timeout: float) -> tuple[Locality, list[Fact]]:
    """Co-located, apart, split or unresolved; a disk the API could not tell about makes it unresolved."""
    facts = await resolve_disks(store, settings, vmi.namespace, list(vmi.claims), Deadline.after(timeout, 0))
    unknown = [f.reason for f in facts if not f.known]
    if unknown:
        return Locality(state=UNRESOLVED, node=vmi.node, why="; ".join(unknown)), facts
    return locality(vmi.node, facts), facts


@dataclasses.dataclass(frozen=True)
class Observer:
    """The reads of one pass: disks through `store`, nodes once each, the stretches apart."""

    store: Store
    settings: Settings
    stretches: Stretches
    nodes: Nodes
    timeout: float
    keep_disks: bool = False  # keep each VM's disk facts (`status` shows their I/O path; a pass needs none)

    async def vm(self, vmi: VmiView, history: Sequence[Migration], now: datetime,
                 refused: tuple[int, datetime] | None = None, unpaused: Collection[str] = ()) -> Observed:
        """What the VM's decision needs; `history` holds its own migrations only. What the checks
        need of it beyond what comes with it (`keep.ON_DEMAND`: its stretch apart, its storage
        node's answer) is read as the hold table reaches it (`keep.next_read`): a VM an earlier
        check holds is read no further. A VM paused since a recovery migration of ours (not one of
        `unpaused`, the uids of those the keeper unpaused after) is read for whether its pod mounted
        its disks afresh."""
        where, disks = await where_it_runs(self.store, self.settings, vmi, self.timeout)
        if where.state is not APART:
            self.stretches.forget((vmi.namespace, vmi.name))
        moved = last_move(vmi, history)
        recovered = recovered_by(vmi, history)
        facts = VmFacts(vmi=vmi, where=where, history=tuple(attempts(vmi, history)),
                        migrating=migrating(vmi, history, now), last_end=last_migration_end(vmi, history),
                        descheduled=moved if moved is not None and moved.descheduled else None,
                        settling=tuple(f.reason for f in disks if f.volume and f.node is None), refused=refused,
                        recovered=recovered if recovered is not None and recovered.uid not in unpaused else None)
        if facts.recovered is not None:
            facts = dataclasses.replace(facts, not_afresh=await self._afresh(vmi, disks))
        read: set[str] = set()
        stretch: Stretch | None = None
        node, unfit = None, None
        while (need := next_read(facts, read)) is not None:
            read.add(need)
            if need == "stale":
                stale, faulted, requested = await self._stale(vmi, disks)
                facts = dataclasses.replace(facts, stale=stale, cannot_finish=cannot_finish(
                    vmi.caches, failed_recovery(vmi, history), faulted) if stale else None,
                    stale_since=max((t for t in (vmi.paused_since, requested) if t is not None), default=None))
                continue
            if need == "target_unfit" and facts.stale and where.state is CO_LOCATED:
                node, unfit, away = await self._away(vmi)
                facts = dataclasses.replace(facts, target_unfit=unfit, away=away)
                continue
            if where.state is not APART or not where.target:
                continue  # nothing to read: the VM is not apart
            if stretch is None:  # how long it has been apart comes with it
                stretch = await self.stretches.of(vmi, where, disks, facts.last_end, now)
                read.add("apart_since")
            if need == "target_unfit":
                node, unfit = await self._target(vmi, where.target, stretch)
            facts = dataclasses.replace(facts, apart_since=stretch.since, target_unfit=unfit)
        return Observed(facts=facts, disks=tuple(disks) if self.keep_disks else (), target_node=node,
                        derived=stretch is not None and stretch.derived)

    async def _stale(self, vmi: VmiView, disks: Sequence[Fact]) -> tuple[str | None, list[str], datetime | None]:
        """Why the VM's NFS mount is stale (`stale_mount`), read only of a VM paused on a disk I/O
        error: its launcher pod's start, its Longhorn volumes' remount requests (and the latest);
        and its volumes Longhorn reports faulted. What cannot be read says nothing: the VM is left
        as it is (`status` notes it paused)."""
        if vmi.paused != PAUSED_IO_ERROR:
            return None, [], None
        mount = await self._mount(vmi, disks)
        if isinstance(mount, str):
            return None, [], None
        latest = max((t for t in mount[1].values() if t is not None), default=None)
        return stale_mount(vmi.paused, mount[0], mount[1]), mount[2], latest

    async def _afresh(self, vmi: VmiView, disks: Sequence[Fact]) -> str | None:
        """Why the VM's pod is not known to have mounted its disks afresh (`not_afresh`), None when it has."""
        mount = await self._mount(vmi, disks)
        return mount if isinstance(mount, str) else not_afresh(mount[0], mount[1])

    async def _mount(self, vmi: VmiView, disks: Sequence[Fact]) -> tuple[datetime | None, dict[str, datetime | None],
                                                                         list[str]] | str:
        """When the VM's launcher pod started, each of its Longhorn volumes' remount request and
        those faulted; or why they cannot be read."""
        pod, problem = await self.stretches.launcher_pod(vmi, vmi.node or "")
        remounts, faulted = {}, []
        for volume in sorted({fact.volume for fact in disks if fact.volume}):
            try:
                found = await self.stretches.direct.get(LONGHORN_VOLUME, self.settings.longhorn_namespace, volume,
                                                        timeout=self.timeout)
            except StoreError as exc:
                return f"Longhorn volume {volume} could not be read ({exc})"
            remounts[volume] = parse_time(kinds.status(found).get("remountRequestedAt")) if found else None
            faulted += [volume] if found and kinds.status(found).get("robustness") == FAULTED else []
        return (started(pod), remounts, faulted) if pod is not None or problem is None else problem

    async def _away(self, vmi: VmiView) -> tuple[dict[str, Any] | None, str | None, str | None]:
        """For a stale VM beside its NFS server: the first other node, by name, that can take the
        pod KubeVirt will create to migrate it (the checks of a migration to its storage node), as
        read and by name; else why none can. At most AWAY_CANDIDATES nodes are checked."""
        here = vmi.node or ""
        pod, problem = await self.stretches.launcher_pod(vmi, here)
        view = await self.stretches.store.fit_view(vmi.namespace, here, timeout=self.timeout) if pod else None
        if pod is None or view is None:
            return None, problem or "the nodes of the cluster are not loaded yet", None
        try:
            source = await self.nodes.get(here)
        except StoreError as exc:
            return None, f"cannot tell what its migration target needs: node {here} could not be read ({exc})", None
        launcher, whys = migration_source(pod, self.settings), []
        others = sorted(name for obj in view.nodes() if isinstance(name := kinds.meta(obj).get("name"), str) and name != here)
        for name in others[:AWAY_CANDIDATES]:
            try:
                node = await self.nodes.get(name)
            except StoreError as exc:
                whys.append(f"{name}: could not be read ({exc})")
                continue
            unfit = await self.stretches.target_unfit(vmi, launcher, source, name, node)
            if unfit is None:
                return node, None, name
            whys.append(f"{name}: {unfit}")
        return None, "; ".join(whys) or "the cluster has no other node", None

    async def _target(self, vmi: VmiView, target: str, stretch: Stretch) -> tuple[dict[str, Any] | None, str | None]:
        """The storage node as read, and why it cannot take the VM (None: it can)."""
        if stretch.pod is None:
            return None, stretch.problem or "its launcher pod is not known"
        try:
            source = await self.nodes.get(vmi.node or "")
            node = await self.nodes.get(target)
        except StoreError as exc:
            return None, f"cannot tell what its migration target needs: a node could not be read ({exc})"
        return node, await self.stretches.target_unfit(vmi, stretch.pod, source, target, node)


def pass_facts(settings: Settings, history: Iterable[Migration], vmis: Iterable[VmiView], now: datetime,
               targeted: TargetedMigration, *, incomplete: str = "", lease: bool = True) -> PassFacts:
    """What every decision of the pass goes by: the settings' bounds and mode, the migrations in
    flight (of any origin, `history`, against `vmis`), the last answer on targeted migration."""
    history = list(history)
    ours, everyone = in_flight_counts(history, now)
    return PassFacts(now=now, limits=Limits.of(settings), mode=settings.keep, targeted=targeted.available,
                     targeted_note=targeted.note, in_flight_ours=ours, in_flight_all=everyone,
                     outbound=outbound_counts(history, vmis, now), incomplete=incomplete, lease=lease)


def manifest(vm: Observed, decision: KeepDecision, *, priority: bool) -> dict[str, Any] | str:
    """The migration that moves the VM to its storage node (or, to recover a stale VM beside it, to
    another node), with spec.priority when `priority`; one that recovers a stale mount says so."""
    if vm.target_node is None:
        return f"node {decision.target} not found"
    return migration_manifest(vm.vmi, vm.target_node, decision.reason, MIGRATION_PRIORITY if priority else None,
                              recovers=bool(decision.stale))


async def ask_targeted(targeted: TargetedMigration, order: Sequence[Observed], facts: PassFacts) -> PassFacts:
    """The pass with the answer on targeted migration. When it is due to be (re)checked, the
    dry run is made of the first VM in `order` that would move (or be held only by the mode or
    the lease) if it worked; an answer that proves nothing (a timeout, KubeVirt refusing that
    one VMI) tries the next such VM, up to PROBES a pass, so one VM cannot hold every other.
    While no VM comes to that, decisions go as if it works: what else holds them shows."""
    if not targeted.due():
        return facts
    assumed = dataclasses.replace(facts, targeted=True)
    tried = 0
    for vm in order:
        decision = decide_keep(vm.facts, assumed)
        if not (decision.act or decision.hold in (Alone.REPORT_ONLY, Alone.NO_LEASE)):
            continue
        made = manifest(vm, decision, priority=True)
        if isinstance(made, str):
            continue
        await targeted.check(made)
        tried += 1
        if not targeted.error or tried >= PROBES:
            break
    return assumed if not tried else dataclasses.replace(facts, targeted=targeted.available,
                                                         targeted_note=targeted.note)
