"""What a pass (or `status`) observes of the cluster: reads only, nothing written. Each running
opted-in VM as its decision needs it (`VmFacts`: where it runs against where its disks are served,
its migrations, whether its NFS mount is stale, the refusals of its actions from the keeper's
state), the migrations of ours whose target pod cannot be placed (`Stuck`), and what the whole pass
goes by (`PassFacts`). The keeper and `status` observe here and both hand the result to the one
plan (`rules.keeping.plan`), so an admin sees the very answer the keeper acts on.
"""
from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Collection, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from ..lookup.resolve import migration_source, resolve_disks
from ..stores.store import Store, StoreError
from ..config import Settings
from ..deadline import Deadline
from .. import kinds
from ..kinds import LONGHORN_VOLUME, MIGRATION_JOB_LABEL, NODE, PAUSED_IO_ERROR, POD
from ..rules.keeping.apart import APART, CO_LOCATED, Locality, locality, UNRESOLVED
from ..rules.shared.facts import Fact
from ..rules.shared.times import parse_time
from ..rules.keeping.keep import Limits, next_read, PassFacts, VmFacts
from ..rules.keeping.migrations import (
    attempts,
    in_flight_counts,
    last_migration_end,
    last_move,
    migrating,
    Migration,
    outbound_counts,
)
from ..rules.keeping.plan import Stuck
from ..rules.keeping.recovery import cannot_finish, failed_recovery, FAULTED, Mount, stale_since
from ..rules.keeping.running import VmiView
from ..rules.keeping.state import Action, KeeperState
from ..rules.placement.stranded import unschedulable_since
from .observed import Observed
from .targeted import TargetedMigration
from .apart_spans import Launchers, ApartSpan, ApartSpans, started

VIA_CANDIDATES = 8  # other nodes checked, by name, for the recovery of a stale VM beside its NFS server


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


async def where_it_runs(store: Store, settings: Settings, vmi: VmiView, timeout: float) -> tuple[Locality, list[Fact]]:
    """Co-located, apart, split or unresolved; a disk the API could not tell about makes it unresolved."""
    facts = await resolve_disks(store, settings, vmi.namespace, list(vmi.claims), Deadline.after(timeout, 0))
    unknown = [f.reason for f in facts if not f.known]
    if unknown:
        return Locality(state=UNRESOLVED, node=vmi.node, why="; ".join(unknown)), facts
    return locality(vmi.node, facts), facts


MOUNT_KEPT = timedelta(minutes=2)  # a mount read is used again this long while what it depends on stays


class Mounts:
    """What each VM's mount was read as (its pod's start, its Volumes' remount requests), kept a while
    across passes: while its pod and its NFS servers stay the same, the pod and the Volumes are not
    read again every pass. Within MOUNT_KEPT, shorter than the keeper's wait after a remount request
    (`recovery.RETRY_WAIT`), so a request Longhorn records a moment after its share-manager restarted
    delays no recovery."""

    def __init__(self) -> None:
        self._read: dict[str, tuple[tuple[Any, ...], datetime, Mount]] = {}

    def recall(self, uid: str, evidence: tuple[Any, ...], now: datetime) -> Mount | None:
        found = self._read.get(uid)
        if found is None or found[0] != evidence or now - found[1] >= MOUNT_KEPT:
            return None
        return found[2]

    def keep(self, uid: str, evidence: tuple[Any, ...], now: datetime, mount: Mount) -> None:
        self._read = {k: v for k, v in self._read.items() if now - v[1] < MOUNT_KEPT}
        self._read[uid] = (evidence, now, mount)


@dataclasses.dataclass(frozen=True)
class Observer:
    """The reads of one pass: disks through `store`, nodes once each, the spans apart."""

    store: Store
    settings: Settings
    spans: ApartSpans
    nodes: Nodes
    timeout: float
    keep_disks: bool = False  # keep each VM's disk facts (`status` shows their I/O path; a pass needs none)
    mounts: Mounts | None = None  # the keeper's: mounts read in earlier passes (`status` reads each once)

    async def vm(self, vmi: VmiView, history: Sequence[Migration], now: datetime,
                 state: KeeperState = KeeperState(), unpaused: Collection[str] = ()) -> Observed:
        """What the VM's decision needs; `history` holds its own migrations only, `state` the refusals
        of its actions, `unpaused` the uids of VMIs this reader unpaused a moment ago. What
        the checks need of it beyond what comes with it (`keep.ON_DEMAND`: its mount, its span
        apart, its storage node's answer) is read as the hold table reaches it (`keep.next_read`): a
        VM an earlier check holds is read no further, but for the mount of a VM paused on an I/O
        error (whether to unpause it)."""
        where, disks = await where_it_runs(self.store, self.settings, vmi, self.timeout)
        if where.state is not APART:
            self.spans.forget((vmi.namespace, vmi.name))
        moved = last_move(vmi, history)
        facts = VmFacts(vmi=vmi, where=where, history=tuple(attempts(vmi, history)),
                        migrating=migrating(vmi, history, now), last_end=last_migration_end(vmi, history),
                        descheduled=moved if moved is not None and moved.descheduled else None,
                        settling=tuple(f.reason for f in disks if f.volume and f.node is None),
                        refused=state.refusal(vmi.namespace, vmi.name, Action.MIGRATE),
                        unpause_refused=state.refusal(vmi.namespace, vmi.name, Action.UNPAUSE),
                        unpaused=vmi.uid in unpaused, moved_in=moved.name if moved is not None else "")
        read: set[str] = set()
        span: ApartSpan | None = None
        node, unfit = None, None
        while (need := next_read(facts, read)) is not None:
            read.add(need)
            if need == "stale":
                facts = await self._stale(facts, disks, history, now)
                continue
            if need == "target_unfit" and facts.stale and where.state is CO_LOCATED:
                node, unfit, via = await self._via(vmi)
                facts = dataclasses.replace(facts, target_unfit=unfit, via=via)
                continue
            if where.state is not APART or not where.target:
                continue  # nothing to read: the VM is not apart
            if span is None:  # how long it has been apart comes with it
                span = await self.spans.of(vmi, where, disks, facts.last_end, now)
                read.add("apart_since")
            if need == "target_unfit":
                node, unfit = await self._target(vmi, where.target, span)
            facts = dataclasses.replace(facts, apart_since=span.since, target_unfit=unfit)
        if "stale" not in read and vmi.paused == PAUSED_IO_ERROR:
            facts = await self._stale(facts, disks, history, now)
        return Observed(facts=facts, disks=tuple(disks) if self.keep_disks else (), target_node=node,
                        derived=span is not None and span.derived)

    async def _stale(self, facts: VmFacts, disks: Sequence[Fact], history: Sequence[Migration],
                     now: datetime) -> VmFacts:
        """The VM's mount (`recovery.Mount`), read of a VM whose storage started again after its pod
        or that is paused on a disk I/O error, and from it whether its NFS mount is stale, since when
        (Longhorn's remount request) and whether a migration off it can finish. What cannot be read
        says nothing: the VM is left as it is (`status` notes it paused)."""
        vmi = facts.vmi
        evidence, restarted = self._evidence(vmi, disks)
        if vmi.paused != PAUSED_IO_ERROR and not restarted:
            return facts
        mount = self.mounts.recall(vmi.uid, evidence, now) if self.mounts is not None else None
        if mount is None:
            read = await self._mount(vmi, disks)
            if isinstance(read, str):
                return facts
            mount = read
            if self.mounts is not None:
                self.mounts.keep(vmi.uid, evidence, now, mount)
        stale = stale_since(mount)
        if stale is None:
            return dataclasses.replace(facts, mount=mount)
        failed = failed_recovery(vmi, history, stale[1])
        return dataclasses.replace(facts, mount=mount, stale=stale[0], stale_since=stale[1],
                                   cannot_finish=cannot_finish(vmi.caches, failed, mount.faulted))

    def _evidence(self, vmi: VmiView, disks: Sequence[Fact]) -> tuple[tuple[Any, ...], bool]:
        """What the VM's mount depends on, from memory: its pod's name and creation and those of the
        share-managers serving its Longhorn disks; and whether one of them started after the pod (only
        then may Longhorn have asked for a remount the pod never made). A share-manager not in memory
        counts as started after it: the volume itself is read."""
        pods = self.spans.launchers(vmi.namespace, vmi.uid) or []
        mine = sorted((started(p), kinds.pod_name(p)) for p in pods if kinds.spec(p).get("nodeName") == vmi.node
                      and started(p) is not None)
        if not mine:
            return (), False
        created, name = mine[-1]
        evidence: list[Any] = [name, created]
        restarted = False
        for volume in sorted({fact.volume for fact in disks if fact.volume}):
            known, server = self.store.peek(POD, self.settings.longhorn_namespace, kinds.SHARE_MANAGER_POD_PREFIX + volume)
            since = started(server) if known else None
            evidence.append((volume, since))
            restarted = restarted or not known or (since is not None and since > created)
        return tuple(evidence), restarted

    async def _mount(self, vmi: VmiView, disks: Sequence[Fact]) -> Mount | str:
        """When the VM's launcher pod started, each of its Longhorn volumes' remount request and
        those faulted; or why they cannot be read."""
        pod, problem = await self.spans.launcher_pod(vmi, vmi.node or "")
        if pod is None:
            return problem or "its launcher pod is not known"
        remounts, faulted = [], []
        for volume in sorted({fact.volume for fact in disks if fact.volume}):
            try:
                found = await self.spans.direct.get(LONGHORN_VOLUME, self.settings.longhorn_namespace, volume,
                                                        timeout=self.timeout)
            except StoreError as exc:
                return f"Longhorn volume {volume} could not be read ({exc})"
            remounts.append((volume, parse_time(kinds.status(found).get("remountRequestedAt")) if found else None))
            faulted += [volume] if found and kinds.status(found).get("robustness") == FAULTED else []
        return Mount(pod_started=started(pod), remounts=tuple(remounts), faulted=tuple(faulted))

    async def _via(self, vmi: VmiView) -> tuple[dict[str, Any] | None, str | None, str | None]:
        """For a stale VM beside its NFS server: the first other node, by name, that can take the
        pod KubeVirt will create to migrate it (the checks of a migration to its storage node), as
        read and by name; else why none can. At most VIA_CANDIDATES nodes are checked."""
        here = vmi.node or ""
        pod, problem = await self.spans.launcher_pod(vmi, here)
        view = await self.spans.store.fit_view(vmi.namespace, here, timeout=self.timeout) if pod else None
        if pod is None or view is None:
            return None, problem or "the nodes of the cluster are not loaded yet", None
        try:
            source = await self.nodes.get(here)
        except StoreError as exc:
            return None, f"cannot tell what its migration target needs: node {here} could not be read ({exc})", None
        launcher, whys = migration_source(pod, self.settings), []
        others = sorted(name for obj in view.nodes() if isinstance(name := kinds.meta(obj).get("name"), str) and name != here)
        for name in others[:VIA_CANDIDATES]:
            try:
                node = await self.nodes.get(name)
            except StoreError as exc:
                whys.append(f"{name}: could not be read ({exc})")
                continue
            unfit = await self.spans.target_unfit(vmi, launcher, source, name, node)
            if unfit is None:
                return node, None, name
            whys.append(f"{name}: {unfit}")
        return None, "; ".join(whys) or "the cluster has no other node", None

    async def _target(self, vmi: VmiView, target: str, span: ApartSpan) -> tuple[dict[str, Any] | None, str | None]:
        """The storage node as read, and why it cannot take the VM (None: it can)."""
        if span.pod is None:
            return None, span.problem or "its launcher pod is not known"
        try:
            source = await self.nodes.get(vmi.node or "")
            node = await self.nodes.get(target)
        except StoreError as exc:
            return None, f"cannot tell what its migration target needs: a node could not be read ({exc})"
        return node, await self.spans.target_unfit(vmi, span.pod, source, target, node)


def pass_facts(settings: Settings, history: Iterable[Migration], vmis: Iterable[VmiView], now: datetime,
               targeted: TargetedMigration, *, incomplete: str = "", lease: bool = True) -> PassFacts:
    """What every decision of the pass goes by: the settings' bounds and mode, the migrations in
    flight (of any origin, `history`, against `vmis`), the last answer on targeted migration."""
    history = list(history)
    ours, everyone = in_flight_counts(history, now)
    return PassFacts(now=now, limits=Limits.of(settings), mode=settings.keep, targeted=targeted.available,
                     targeted_note=targeted.note, in_flight_ours=ours, in_flight_all=everyone,
                     outbound=outbound_counts(history, vmis, now), incomplete=incomplete, lease=lease)


def stuck(history: Iterable[Migration], uids: dict[tuple[str, str], str], launchers: Launchers,
          state: KeeperState) -> list[Stuck]:
    """Our unfinished migrations whose target pod the scheduler has not placed (condition
    PodScheduled False, reason Unschedulable), read from the cached launcher pods: since when and
    the scheduler's words, with the refusal of an earlier cancel."""
    found = []
    for migration in history:
        if not migration.ours or migration.final or not migration.uid:
            continue
        vmi_uid = uids.get((migration.namespace, migration.vmi))
        pods = launchers(migration.namespace, vmi_uid) if vmi_uid else None
        target = next((p for p in pods or () if kinds.labels(p).get(MIGRATION_JOB_LABEL) == migration.uid), None)
        unplaced = unschedulable_since(target) if target is not None else None
        if target is None or unplaced is None:
            continue
        found.append(Stuck(migration=migration, vmi_uid=vmi_uid or "", pod=kinds.pod_name(target), since=unplaced[0],
                           message=unplaced[1], refused=state.refusal(migration.namespace, migration.vmi, Action.CANCEL)))
    return found
