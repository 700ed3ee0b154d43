"""A VM's span apart from its storage: since when, read from the cluster so that a new leader agrees;
its launcher pod, read whole; and whether its storage node can take the pod KubeVirt will create to
migrate it there (`lookup.resolve.migration_target_pod`, with the webhook's never-strand checks).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime
from typing import Any

from .. import kinds
from ..lookup.resolve import MigrationSource, migration_source, migration_target_pod, node_obstacle
from ..stores.store import Store, StoreError
from ..config import Settings
from ..deadline import Deadline
from ..kinds import HOSTNAME_LABEL, POD
from ..rules.keeping.apart import apart_since, Locality
from ..rules.shared.facts import Fact
from ..rules.keeping.migrations import target_hostname
from ..rules.keeping.running import VmiView, vm_pods
from ..rules.kubevirt.target import TargetUnknown, lacking
from ..rules.shared.times import parse_time

VmKey = tuple[str, str]  # a VM's namespace and name
Launchers = Callable[[str, str], list[dict[str, Any]] | None]  # (namespace, VMI uid) -> its pods, None: not known


@dataclasses.dataclass
class ApartSpan:
    """One span of a VM apart from its storage: when it began and what moving it needs."""

    uid: str  # of the VMI: a VM started again is a new span
    node: str
    target: str
    since: datetime
    pod: MigrationSource | None = None  # the launcher pod as its migration target is rendered from
    problem: str | None = None  # why the launcher pod is not known
    derived: bool = True  # `since` read from the cluster; False: when this reader first saw it apart


def started(obj: dict[str, Any] | None) -> datetime | None:
    """When a pod started (else when it was created)."""
    if not obj:
        return None
    return parse_time(kinds.status(obj).get("startTime")) or parse_time(kinds.meta(obj).get("creationTimestamp"))


class ApartSpans:
    """The reads of a VM's span apart; what is known of each span is the keeper's memory (`memory.Kept`)."""

    def __init__(self, store: Store, settings: Settings, timeout: float, *, launchers: Launchers, direct: Store):
        self.store, self.settings, self.timeout = store, settings, timeout
        self.launchers, self.direct = launchers, direct

    async def of(self, vmi: VmiView, where: Locality, facts: list[Fact], last_end: datetime | None,
                 now: datetime, known: ApartSpan | None = None) -> ApartSpan:
        """When the VM became apart, so a new leader agrees: the latest of its last migration's end, its launcher
        pod's start and its share-managers' (none known: when first seen apart, per `known`, the span as last
        read); and its launcher pod, whole: the migration target is built from it."""
        node, target = where.node or "", where.target or ""
        same = known is not None and (known.uid, known.node, known.target) == (vmi.uid, node, target)
        if same and known.pod is not None:
            return known
        first_seen = known.since if same else now
        timeout = self.timeout
        pod, problem = await self.launcher_pod(vmi, node)
        moments = [last_end, started(pod)]
        for fact in facts:
            if fact.node == target and fact.volume:
                try:
                    moments.append(started(await self.direct.get(
                        POD, self.settings.longhorn_namespace, kinds.SHARE_MANAGER_POD_PREFIX + fact.volume,
                        timeout=timeout)))
                except StoreError:
                    pass  # one moment fewer to go by
        derived = apart_since(moments, now)
        since = derived if derived is not None else first_seen
        launcher = migration_source(pod, self.settings) if pod is not None else None
        return ApartSpan(uid=vmi.uid, node=node, target=target, since=since, pod=launcher, problem=problem,
                         derived=derived is not None)

    async def launcher_pod(self, vmi: VmiView, node: str) -> tuple[dict[str, Any] | None, str | None]:
        """The VM's launcher pod on `node`, read whole (the cache keeps a trimmed copy), or why not."""
        candidates = self.launchers(vmi.namespace, vmi.uid) or []
        running = [p for p in vm_pods(candidates, self.settings).running if kinds.spec(p).get("nodeName") == node]
        if not running:
            return None, f"its launcher pod on {node} is not known"
        name = kinds.meta(running[0]).get("name")
        try:
            pod = await self.direct.get(POD, vmi.namespace, name, timeout=self.timeout)
        except StoreError as exc:
            return None, f"its launcher pod {name} could not be read ({exc})"
        if pod is None:
            return None, f"its launcher pod {name} is gone"
        return pod, None

    async def target_unfit(self, vmi: VmiView, launcher: MigrationSource, source: dict[str, Any] | None,
                           target: str, node: dict[str, Any] | None) -> str | None:
        """Why `target` (read as `node`) cannot take the VM's migration target pod from `source`, or None: the
        hostname label KubeVirt selects on, then the never-strand checks on that pod."""
        hostname = target_hostname(node) if node is not None else None
        if node is not None and hostname is None:
            return f"node {target} has no {HOSTNAME_LABEL} label: cannot target it"
        built = migration_target_pod(launcher, vmi, source, {HOSTNAME_LABEL: hostname} if hostname else {},
                                     self.settings)
        if isinstance(built, TargetUnknown):
            return f"cannot tell what its migration target needs: {built}"
        return lacking(built, target, node) or await node_obstacle(
            self.store, target, built.pod, vmi.namespace, Deadline.after(self.timeout, 0), needs_kubevirt=True)
