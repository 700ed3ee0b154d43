"""What a pass (or `status`) observes, reads only: each VM's `VmFacts`, our unplaced migrations (`Stuck`) and
the pass's `PassFacts`, for the one plan (`rules.keeping.plan`) both make."""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import zlib
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime
from typing import Any

from ..lookup.resolve import migration_source, migration_target_pod, obstacle_on, resolve_disks
from ..stores.store import Store, StoreError
from ..config import Settings
from ..deadline import Deadline
from .. import kinds
from ..kinds import HOSTNAME_LABEL, LONGHORN_VOLUME, MIGRATION_JOB_LABEL, NODE, PAUSED_IO_ERROR, POD
from ..rules.keeping.apart import APART, apart_since, CO_LOCATED, Locality, locality, UNRESOLVED
from ..rules.shared.facts import Fact
from ..rules.shared.times import parse_time
from ..rules.keeping.keep import Limits, next_read, PassFacts, VmFacts
from ..rules.keeping.migrations import (
    target_hostname,
    attempts,
    last_migration_end,
    last_move,
    migrating,
    Migration,
    flying,
)
from ..rules.keeping.plan import Stuck
from ..rules.keeping.recovery import (cannot_finish, DiskError, failed_recovery, FAULTED, full, judge, Mount, probe,
                                      Server, sighted, Stale, storage_wait)
from ..rules.keeping.running import VmiView, vm_pods
from ..rules.kubevirt.target import TargetUnknown, lacking
from ..rules.keeping.io_errors import Cause, IoError
from ..rules.keeping.record import Action, KeeperState, VmKey
from ..rules.fit.memo import Memo
from ..rules.fit.checks import node_unschedulable
from ..rules.fit.tainttoleration import blocking_taint
from ..rules.placement.stranded import unschedulable_since
from .observed import Observed
from .targeted import TargetedMigration

NODES_MOST = 5000  # Kubernetes' limit: the nodes whose CPU a pass keeps at most
VIA_CHECKS = 64  # other nodes checked a pass for the recovery of a stale VM beside its NFS server
# A storage-node check kept is judged again at least every this many passes (each VM in a pass of its own,
# spread evenly): what its nodes' record of changes does not say (another node's pod anti-affinity by zone).
VERDICT_PASSES = 20


Launchers = Callable[[str, str], list[dict[str, Any]] | None]  # (namespace, VMI uid) -> its pods, None: not known
LauncherRead = Callable[[], tuple[dict[str, Any] | None, str | None]]  # a VM's launcher pod, or why it is not known


@dataclasses.dataclass(frozen=True, slots=True)
class ApartSpan:
    """One span of a VM apart from its storage: when it began (no pod kept: the caches hold it)."""

    uid: str  # of the VMI: a VM started again is a new span
    node: str
    target: str
    since: datetime
    problem: str | None = None  # why the launcher pod is not known
    derived: bool = True  # `since` read from the cluster; False: when this reader first saw it apart


def started(obj: dict[str, Any] | None) -> datetime | None:
    """When a pod started (else when it was created)."""
    if not obj:
        return None
    return parse_time(kinds.status(obj).get("startTime")) or parse_time(kinds.meta(obj).get("creationTimestamp"))


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    """A VM's storage-node check: of which VMI view, at which position of `View.nodes_changed`, in which pass. No
    node is kept: verdicts of many passes would hold a copy of a node from each (at 5,000 nodes, 100 MiB a pass)."""

    vmi: VmiView
    target: str
    position: int
    turn: int
    unfit: str | None


class Verdicts:
    """Each apart VM's storage-node check, kept by the keeper across passes: taken again while its VMI is the same
    object, neither its node nor the storage node changed since (a pod bound or gone, the node updated) and its
    pass to be judged again (VERDICT_PASSES) has not come. A later pass costs what changed, not 1 ms a VM."""

    def __init__(self) -> None:
        self.held: dict[VmKey, Verdict] = {}
        self.position: int | None = None  # of the pass under way, taken before its first check

    def begin(self, view: Any) -> None:
        """A new pass: the position it judges at (None: the caches keep no record, each VM judged afresh)."""
        self.position = view.nodes_changed(None)[0] if view is not None else None

    def taken(self, key: VmKey, vmi: VmiView, target: str, view: Any, turn: int) -> Verdict | None:
        held = self.held.get(key)
        if held is None or held.vmi is not vmi or held.target != target or view is None or \
                (turn + zlib.crc32(vmi.uid.encode())) % VERDICT_PASSES == 0:
            return None
        changed = view.changes_among((vmi.node or "", target), held.position)
        return held if changed is not None and not changed[0] else None

    def kept(self, key: VmKey, turn: int) -> bool:
        """Whether the VM's check was taken from an earlier pass than `turn`."""
        return (held := self.held.get(key)) is not None and held.turn != turn


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


@dataclasses.dataclass(frozen=True)
class Observer:
    """The reads of one pass: disks through `store`, pods and the nodes' view through `cache`, launcher pods by
    `launchers`, whole objects through `direct`, nodes once each, the spans apart."""

    store: Store
    cache: Store
    direct: Store  # what the caches keep trimmed, read whole
    launchers: Launchers
    settings: Settings
    nodes: Nodes
    timeout: float
    keep_disks: bool = False  # keep each VM's disk facts (`status` shows their I/O path; a pass needs none)
    # Each VM's span apart as last read, kept by the keeper across passes (`status`: none).
    spans: dict[VmKey, ApartSpan] = dataclasses.field(default_factory=dict)
    io_errors: Callable[[str], Sequence[IoError]] = lambda uid: ()  # KubeVirt's IOerror Events by VMI uid
    turn: int = 0  # the keeper's pass: where the search for a node to go through starts
    # Where each VM runs against its storage, one object for the VMs alike (all those co-located on a node).
    places: dict[Locality, Locality] = dataclasses.field(default_factory=dict)
    # What the nodes' CPU labels give a migration target, worked out once a node (`Nodes` reads each once).
    memo: Memo = dataclasses.field(default_factory=lambda: Memo(NODES_MOST))
    verdicts: Verdicts | None = None  # the storage-node checks kept across passes; None: each judged afresh
    view: Any = None  # the caches' view of the nodes' changes, with `verdicts`

    async def vm(self, vmi: VmiView, history: Sequence[Migration], now: datetime,
                 state: KeeperState = KeeperState(), unpaused: Collection[str] = ()) -> Observed:
        """What the VM's decision needs (`history`: its own migrations; `unpaused`: the uids unpaused a moment
        ago), `keep.ON_DEMAND` read only as the hold table reaches it (`keep.next_read`)."""
        where, disks = await where_it_runs(self.store, self.settings, vmi, self.timeout)
        where = self.places.setdefault(where, where)
        key = (vmi.namespace, vmi.name)
        if where.state is not APART:
            self.spans.pop(key, None)
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
        # Its launcher pod on its node, decoded once for the span and the storage-node check alike.
        launcher = functools.cache(functools.partial(self.cached_launcher, vmi, vmi.node or ""))
        node, unfit = None, None
        while (need := next_read(facts, read)) is not None:
            read.add(need)
            if need == "stale":
                facts = await self._stale(facts, disks, history, now, state)
                continue
            if need == "target_unfit" and facts.stale and where.state is CO_LOCATED:
                node, unfit, via = await self._via(vmi)
                facts = dataclasses.replace(facts, target_unfit=unfit, via=via)
                continue
            if where.state is not APART or not where.target:
                continue  # nothing to read: the VM is not apart
            if span is None:  # how long it has been apart comes with it
                span = self.spans[key] = await self._span(vmi, where, disks, facts.last_end, now, launcher)
                read.add("apart_since")
            if need == "target_unfit":
                node, unfit = await self._judged(key, vmi, where.target, span, launcher)
            if (facts.apart_since, facts.target_unfit) != (span.since, unfit):
                facts = dataclasses.replace(facts, apart_since=span.since, target_unfit=unfit)
        if "stale" not in read:
            facts = await self._stale(facts, disks, history, now, state)
        return Observed(facts=facts, disks=tuple(disks) if self.keep_disks else (), target_node=node,
                        derived=span is not None and span.derived)

    async def _span(self, vmi: VmiView, where: Locality, facts: list[Fact], last_end: datetime | None,
                    now: datetime, launcher: LauncherRead) -> ApartSpan:
        """When the VM became apart, so a new leader agrees: the latest of its last migration's end, its launcher
        pod's and share-managers' start (none known: when first seen apart, per the span last read)."""
        node, target, known = where.node or "", where.target or "", self.spans.get((vmi.namespace, vmi.name))
        same = known is not None and (known.uid, known.node, known.target) == (vmi.uid, node, target)
        if same and known.problem is None:
            return known
        first_seen = known.since if same else now
        pod, problem = launcher()
        moments = [last_end, started(pod)]
        for fact in facts:
            if fact.node == target and fact.volume:
                where = POD, self.settings.longhorn_namespace, kinds.SHARE_MANAGER_POD_PREFIX + fact.volume
                found, pod = self.cache.peek(*where)  # the cache's own copy, read only: no copy a VM a pass
                try:
                    moments.append(started(pod if found else await self.cache.get(*where, timeout=self.timeout)))
                except StoreError:
                    pass  # one moment fewer to go by
        derived = apart_since(moments, now)
        return ApartSpan(uid=vmi.uid, node=node, target=target, since=derived if derived is not None else first_seen,
                         problem=problem, derived=derived is not None)

    def cached_launcher(self, vmi: VmiView, node: str) -> tuple[dict[str, Any] | None, str | None]:
        """The VM's running launcher pod on `node` as the caches hold it, or why it is not known."""
        candidates = self.launchers(vmi.namespace, vmi.uid) or []
        running = [p for p in vm_pods(candidates, self.settings).running if kinds.spec(p).get("nodeName") == node]
        return (running[0], None) if running else (None, f"its launcher pod on {node} is not known")

    async def launcher_pod(self, vmi: VmiView, node: str) -> tuple[dict[str, Any] | None, str | None]:
        """The VM's launcher pod on `node`, read whole (the cache keeps a trimmed copy), or why not."""
        cached, problem = self.cached_launcher(vmi, node)
        if cached is None:
            return None, problem
        name = kinds.meta(cached).get("name")
        try:
            pod = await self.direct.get(POD, vmi.namespace, name, timeout=self.timeout)
        except StoreError as exc:
            return None, f"its launcher pod {name} could not be read ({exc})"
        if pod is None:
            return None, f"its launcher pod {name} is gone"
        return pod, None

    async def target_unfit(self, vmi: VmiView, launcher: dict[str, Any], source: dict[str, Any] | None,
                           target: str, node: dict[str, Any] | None) -> str | None:
        """Why `target` (read as `node`) cannot take the VM's migration target pod, or None: the hostname label
        KubeVirt selects on, then the never-strand checks."""
        hostname = target_hostname(node) if node is not None else None
        if node is not None and hostname is None:
            return f"node {target} has no {HOSTNAME_LABEL} label: cannot target it"
        built = migration_target_pod(launcher, vmi, source, {HOSTNAME_LABEL: hostname} if hostname else {},
                                     self.memo)
        if isinstance(built, TargetUnknown):
            return f"cannot tell what its migration target needs: {built}"
        return lacking(built, target, node) or await obstacle_on(
            self.cache, target, node, built.pod, vmi.namespace, Deadline.after(self.timeout, 0), needs_kubevirt=True)

    async def _stale(self, facts: VmFacts, disks: Sequence[Fact], history: Sequence[Migration], now: datetime,
                     state: KeeperState) -> VmFacts:
        """Of a VM paused on an I/O error, with IOerror Events, or found stale before: its mount, whether it is stale
        (`recovery.judge`) and whether a migration off it can finish. What cannot be read leaves it as it is."""
        vmi = facts.vmi
        io, events, kept = vmi.paused == PAUSED_IO_ERROR, self.io_errors(vmi.uid), state.vms.get((vmi.namespace, vmi.name))
        if not io and not events and (kept is None or kept.uid != vmi.uid or (kept.stale is None and not kept.seen)):
            return facts  # most VMs: nothing of a stale mount to look at (what another VMI of it left is not this one's)
        record = state.vm(vmi.namespace, vmi.name).of_vmi(vmi.uid)
        mount = await self._mount(vmi, disks)
        if isinstance(mount, str):
            return facts
        # KubeVirt's Events on its disks, each with the Longhorn volume that serves it (volume → claim → PV).
        claims, volumes = dict(vmi.disks), {f.subject: f.volume for f in disks if f.volume}
        errors = [DiskError(disk=e.volume, volume=volumes.get(claims.get(e.volume, ""), "") or "",
                            no_space=e.cause is Cause.NO_SPACE, first=e.first, last=e.last, combined=e.combined)
                  for e in events]
        seen, resumed = dict(record.seen), record.unpaused
        facts = dataclasses.replace(facts, mount=mount, unpauses=record.unpauses(mount.pod_started),
                                    full=full(errors, io) or (record.full if io else None) or None,
                                    seen=tuple(sorted(sighted(mount, errors, not vmi.paused, now, seen).items())),
                                    waits_for_storage=storage_wait(mount, errors, now) if io or errors else None)
        kept = record.stale
        judged = judge(mount, errors, vmi.paused, now, seen,
                       Stale(kept.words, kept.requested, kept.last) if kept is not None else None, resumed)
        if not isinstance(judged, Stale):
            return dataclasses.replace(facts, retry=facts.full or judged,
                                       probe=probe(mount, errors, now, resumed) if io and not facts.full else None)
        failed = failed_recovery(vmi, history, judged.requested)
        return dataclasses.replace(facts, stale=judged.words, stale_since=judged.requested, stale_last=judged.last,
                                   cannot_finish=cannot_finish(vmi.caches, failed, mount.faulted))

    async def _mount(self, vmi: VmiView, disks: Sequence[Fact]) -> Mount | str:
        """Its launcher pod's start, its volumes' remount requests and share-managers, those faulted; or why not."""
        pod, problem = await self.launcher_pod(vmi, vmi.node or "")
        if pod is None:
            return problem or "its launcher pod is not known"
        servers, faulted = [], []
        for volume in sorted({fact.volume for fact in disks if fact.volume}):
            name, namespace = kinds.SHARE_MANAGER_POD_PREFIX + volume, self.settings.longhorn_namespace
            try:
                found = await self.direct.get(LONGHORN_VOLUME, namespace, volume, timeout=self.timeout)
                server = await self.direct.get(POD, namespace, name, timeout=self.timeout)
            except StoreError as exc:
                return f"Longhorn volume {volume} or its share-manager could not be read ({exc})"
            servers.append(Server(volume=volume, requested=parse_time(kinds.status(found).get("remountRequestedAt"))
                                  if found else None, served=serving_since(server), pod=name,
                                  node=str(kinds.spec(server).get("nodeName") or "") if server else ""))
            faulted += [volume] if found and kinds.status(found).get("robustness") == FAULTED else []
        return Mount(pod_started=started(pod), servers=tuple(servers), faulted=tuple(faulted))

    async def _via(self, vmi: VmiView) -> tuple[dict[str, Any] | None, str | None, str | None]:
        """For a stale VM beside its NFS server: another node that can take its migration target pod, else why none
        can; nodes that take pods first, at most VIA_CHECKS a pass, each pass going on where the last stopped."""
        here = vmi.node or ""
        pod, problem = await self.launcher_pod(vmi, here)
        view = await self.cache.fit_view(vmi.namespace, timeout=self.timeout) if pod else None
        if pod is None or view is None:
            return None, problem or "the nodes of the cluster are not loaded yet", None
        try:
            source = await self.nodes.get(here)
        except StoreError as exc:
            return None, f"cannot tell what its migration target needs: node {here} could not be read ({exc})", None
        launcher, whys = migration_source(pod, self.settings), []
        named = ((obj, kinds.meta(obj).get("name")) for obj in view.nodes())
        others = [name for _, name in sorted((not takes_pods(obj), name) for obj, name in named
                                             if isinstance(name, str) and name != here)]
        start = self.turn * VIA_CHECKS % len(others) if len(others) > VIA_CHECKS else 0
        for name in (others[start:] + others[:start])[:VIA_CHECKS]:
            try:
                node = await self.nodes.get(name)
            except StoreError as exc:
                whys.append(f"{name}: could not be read ({exc})")
                continue
            unfit = await self.target_unfit(vmi, launcher, source, name, node)
            if unfit is None:
                return node, None, name
            whys.append(f"{name}: {unfit}")
        return None, "; ".join(whys) or "the cluster has no other node", None

    async def _judged(self, key: VmKey, vmi: VmiView, target: str, span: ApartSpan,
                      launcher: LauncherRead) -> tuple[dict[str, Any] | None, str | None]:
        """`_target`, or its verdict kept from an earlier pass where nothing it went by changed (`Verdicts`)."""
        verdicts = self.verdicts
        if verdicts is None or verdicts.position is None:
            return await self._target(vmi, target, span, launcher)
        held = verdicts.taken(key, vmi, target, self.view, self.turn)
        if held is not None:
            with contextlib.suppress(StoreError):  # the node as this pass reads it, else judged afresh
                return await self.nodes.get(target), held.unfit
        node, unfit = await self._target(vmi, target, span, launcher)
        verdicts.held[key] = Verdict(vmi=vmi, target=target, position=verdicts.position, turn=self.turn, unfit=unfit)
        return node, unfit

    async def _target(self, vmi: VmiView, target: str, span: ApartSpan,
                      launcher: LauncherRead) -> tuple[dict[str, Any] | None, str | None]:
        """The storage node as read, and why it cannot take the VM (None: it can)."""
        pod, problem = launcher()
        if pod is None:
            return None, span.problem or problem
        made = migration_source(pod, self.settings)
        try:
            source = await self.nodes.get(vmi.node or "")
            node = await self.nodes.get(target)
        except StoreError as exc:
            return None, f"cannot tell what its migration target needs: a node could not be read ({exc})"
        return node, await self.target_unfit(vmi, made, source, target, node)


def serving_since(pod: dict[str, Any] | None) -> datetime | None:
    """Since when a share-manager pod serves: its Ready condition's last transition (no conditions: its
    start); None while it is not running and ready."""
    if not pod or kinds.meta(pod).get("deletionTimestamp") or kinds.status(pod).get("phase") != "Running":
        return None
    conditions = [c for c in kinds.status(pod).get("conditions") or () if isinstance(c, dict)]
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    if ready is None:
        return None if conditions else started(pod)
    return parse_time(ready.get("lastTransitionTime")) or started(pod) if ready.get("status") == "True" else None


def takes_pods(node: Any) -> bool:
    """Not cordoned and no taint that keeps pods off (kube-scheduler's filters, with no toleration)."""
    return node_unschedulable("", node) is None and blocking_taint(node, ()) is None


def pass_facts(settings: Settings, history: Iterable[Migration], vmis: Iterable[VmiView], now: datetime,
               targeted: TargetedMigration, *, incomplete: str = "", lease: bool = True) -> PassFacts:
    """What every decision of the pass goes by: the bounds, the migrations in flight, targeted migration."""
    moving = flying(history, vmis, now)  # KubeVirt counts parallelOutboundMigrationsPerNode by the node they leave
    return PassFacts(now=now, limits=Limits.of(settings), mode=settings.keep, targeted=targeted.available,
                     targeted_note=targeted.note, in_flight_ours=sum(ours for _, _, ours in moving),
                     in_flight_all=len(moving), outbound=Counter(node for node, _, _ in moving if node),
                     incomplete=incomplete, lease=lease, flying=moving)


def stuck(history: Iterable[Migration], uids: dict[tuple[str, str], str], launchers: Launchers,
          state: KeeperState) -> list[Stuck]:
    """Our unfinished migrations whose target pod is Unschedulable: since when, why, an earlier cancel's refusal."""
    found = []
    for migration in history:
        if not migration.ours or migration.final or not migration.uid:
            continue
        vmi_uid = uids.get((migration.namespace, migration.vmi))
        pods = launchers(migration.namespace, vmi_uid) if vmi_uid else None
        target = next((p for p in pods or () if kinds.labels(p).get(MIGRATION_JOB_LABEL) == migration.uid), None)
        if target is None or (unplaced := unschedulable_since(target)) is None:
            continue
        found.append(Stuck(migration=migration, vmi_uid=vmi_uid or "", pod=kinds.pod_name(target), since=unplaced[0],
                           message=unplaced[1], refused=state.refusal(migration.namespace, migration.vmi, Action.CANCEL)))
    return found
