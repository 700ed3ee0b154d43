"""`status`: every running opted-in VM, where it runs, where its disks are served from, and
the keeper's last action for it.

Read directly with the admin's credentials and judged with the keeper's own pure rules
(`rules.running.read_vmi`, `rules.apart`, `rules.migrations.read_migration`), so a VM shows here in
the state the keeper sees it in; "since" is derived from the cluster, not remembered, so it
agrees with the keeper's to within seconds (pods' creation here, their start there).
"""
from __future__ import annotations

import asyncio
import collections
import dataclasses
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from .. import kinds
from ..cluster.direct import ClusterStore
from ..cluster.resolve import resolve_disks
from ..cluster.snapshot import SnapshotStore
from ..cluster.store import Store, StoreError
from ..config import Settings
from ..deadline import Deadline
from ..kinds import POD, PV, PVC, SHARE_MANAGER, VMI, VMIM
from ..rules.facts import Fact
from ..rules.apart import APART, apart_since, locality, VmState
from ..rules.migrations import attempts, backoff, Migration, of_vmi, read_migration
from ..rules.reading import Skipped
from ..rules.running import read_vmi, VmiView
from ..rules.times import parse_time, rfc3339

CONCURRENCY = 8  # VMs resolved at once (a few GETs each without the lists), each within its own deadline
COLUMNS = ("NAMESPACE/NAME", "NODE", "STORAGE", "STATE", "SINCE", "WHY", "LAST ACTION")


@dataclasses.dataclass(frozen=True)
class VmStatus:
    """One running opted-in VM as the keeper sees it."""

    namespace: str
    name: str
    node: str | None
    storage: tuple[str, ...]
    state: VmState
    since: datetime | None  # apart since (None: not apart, or unknown)
    why: str
    last_action: str
    last_migration: Migration | None  # our latest migration of the VM
    kept: bool

    def to_json(self) -> dict[str, Any]:
        last = self.last_migration
        return {
            "namespace": self.namespace,
            "name": self.name,
            "node": self.node,
            "storage": list(self.storage),
            "state": str(self.state),
            "since": rfc3339(self.since) if self.since else None,
            "why": self.why,
            "last_action": self.last_action,
            "last_migration": None if last is None else {
                "name": last.name, "target": last.target, "phase": last.phase or None,
                "created": rfc3339(last.created), "ended": rfc3339(last.ended) if last.ended else None},
            "keep": self.kept,
        }


@dataclasses.dataclass(frozen=True)
class Report:
    now: datetime
    vms: list[VmStatus]
    skipped: list[str]  # objects of unexpected shape, left out

    def summary(self) -> dict[str, int]:
        counts = collections.Counter(vm.state for vm in self.vms)
        return {"total": len(self.vms), **{str(state): counts[state] for state in VmState}}

    def to_json(self) -> dict[str, Any]:
        return {"as_of": rfc3339(self.now), "vms": [vm.to_json() for vm in self.vms], "summary": self.summary(),
                "skipped": self.skipped}


async def status(store: ClusterStore, settings: Settings, now: datetime, *, timeout: float) -> Report:
    """Every running opted-in VM with its state. Raises StoreError when the VMIs or our
    migrations cannot be listed; a disk that cannot be read leaves its VM unresolved, saying why."""
    vmis = await store.list(VMI, timeout=timeout)
    ours = await store.list(VMIM, labels={kinds.MANAGED_BY_LABEL: kinds.COMPONENT}, timeout=timeout)
    skipped: list[str] = []
    migrations: list[Migration] = []
    for obj in ours:
        migration = read_migration(obj)
        if isinstance(migration, Skipped):
            skipped.append(str(migration))
        else:
            migrations.append(migration)
    running: list[tuple[VmiView, datetime | None]] = []
    for obj in vmis:
        view = read_vmi(obj, settings)
        if isinstance(view, Skipped):
            skipped.append(str(view))
        elif view.running and view.opted_in:
            running.append((view, parse_time(kinds.meta(obj).get("creationTimestamp"))))
    disks = await _disk_objects(store, settings, {view.namespace for view, _ in running}, timeout) if running else store
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(view: VmiView, created: datetime | None) -> VmStatus:
        async with gate:
            return await _vm_status(disks, settings, view, created, migrations, now, Deadline.after(timeout, 0))

    vms = await asyncio.gather(*(one(view, created) for view, created in running))
    return Report(now, sorted(vms, key=lambda vm: (vm.namespace, vm.name)), skipped)


async def _disk_objects(store: ClusterStore, settings: Settings, namespaces: Iterable[str],
                        timeout: float) -> Store:
    """What the VMs' disks are resolved against, listed once: the claims of their namespaces,
    every volume, the pods and ShareManagers of the Longhorn namespace. When a list fails, the
    store itself: a few GETs per disk, each failure then said on its own VM."""
    longhorn = settings.longhorn_namespace
    scopes = [(PV, None), *((PVC, namespace) for namespace in sorted(namespaces)), (POD, longhorn),
              (SHARE_MANAGER, longhorn)]
    objects: list[dict[str, Any]] = []
    try:
        for resource, namespace in scopes:
            for obj in await store.list(resource, namespace, timeout=timeout):
                # List items may omit apiVersion and kind, and in some servers' answers the namespace.
                obj["apiVersion"], obj["kind"] = resource.api_version, resource.kind
                if namespace is not None:
                    obj.setdefault("metadata", {}).setdefault("namespace", namespace)
                objects.append(obj)
    except StoreError:
        return store
    return SnapshotStore(objects)


async def _vm_status(store: Store, settings: Settings, view: VmiView, created: datetime | None,
                     migrations: Sequence[Migration], now: datetime, deadline: Deadline) -> VmStatus:
    facts = await resolve_disks(store, settings, view.namespace, view.claims, deadline)
    where = locality(view.node, facts)
    since = None
    if where.state is APART:
        served = await _share_manager_created(store, settings, facts, where.target, deadline)
        since = apart_since(view, served, created)
    why = where.why
    if view.migration is not None and view.migration.in_flight:
        why += f"; migrating to {view.migration.target_node or '?'}"
    text, last = last_action(view, migrations, now)
    return VmStatus(view.namespace, view.name, view.node, where.storage, where.state, since, why, text, last, view.kept)


async def _share_manager_created(store: Store, settings: Settings, facts: Sequence[Fact], node: str | None,
                                 deadline: Deadline) -> datetime | None:
    """When the share-manager pods serving the VM from `node` were created (the latest), or
    None when one of them cannot be read or is not (or no longer) on that node."""
    times: list[datetime] = []
    for fact in facts:
        if fact.node != node or fact.volume is None:
            continue
        try:
            pod = await store.get(POD, settings.longhorn_namespace, kinds.SHARE_MANAGER_POD_PREFIX + fact.volume,
                                  timeout=deadline.remaining())
        except StoreError:
            return None
        when = parse_time(kinds.meta(pod).get("creationTimestamp"))
        if when is None or kinds.spec(pod).get("nodeName") != node:
            return None
        times.append(when)
    return max(times, default=None)


def last_action(view: VmiView, migrations: Sequence[Migration], now: datetime) -> tuple[str, Migration | None]:
    """Our latest migration of the VM in a few words, e.g. "migrated to node-b 2h ago: Succeeded"."""
    mine = [m for m in of_vmi(migrations, view) if m.ours]
    if not mine:
        text, last = "none", None
    else:
        last = max(mine, key=lambda m: (m.created, m.name))
        to = f"to {last.target or '?'}"
        if last.succeeded:
            text = f"migrated {to} {ago(now - (last.ended or last.created))} ago: Succeeded"
        elif last.failed:
            text = f"migration {to} {ago(now - (last.ended or last.created))} ago: Failed"
            failures = backoff(attempts(view, migrations)).failures
            if failures > 1:
                text += f" ({failures} in a row)"
        elif last.in_flight(now):
            text = f"migration {to} running for {ago(now - last.created)} ({last.phase or 'no phase yet'})"
        else:
            text = f"migration {to} unfinished after {ago(now - last.created)} ({last.phase or 'no phase'})"
    if not view.kept:
        text += " (keep disabled)"
    return text, last


def ago(span: timedelta) -> str:
    """A duration as people read it in a table: 45s, 12m, 5h, 3d."""
    seconds = max(0, int(span.total_seconds()))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    if seconds < 48 * 3600:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def summary_line(counts: dict[str, int]) -> str:
    total = counts["total"]
    states = ", ".join(f"{counts[str(state)]} {state}" for state in VmState)
    return f"{total} VM{'' if total == 1 else 's'}: {states}"


def render(report: Report) -> str:
    """An aligned table, one row per VM, then the counts per state and what was left out."""
    rows = [COLUMNS]
    for vm in report.vms:
        since = "-" if vm.state is not APART else f"{ago(report.now - vm.since)} ago" if vm.since else "?"
        rows.append((f"{vm.namespace}/{vm.name}", vm.node or "-", ",".join(vm.storage) or "-", str(vm.state), since,
                     vm.why, vm.last_action))
    lines = []
    if report.vms:
        widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS) - 1)]
        lines = ["  ".join([*(cell.ljust(width) for cell, width in zip(row, widths)), row[-1]]) for row in rows]
    lines.append(summary_line(report.summary()))
    lines += [f"skipped {what}" for what in report.skipped]
    return "\n".join(lines)
