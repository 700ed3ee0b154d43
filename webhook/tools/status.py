"""`status`: every running opted-in VM, where it runs and its disks are served, what the keeper will do about it
and its last action, under the facts the keeper goes by; observed and planned by the keeper's own code
(`keeper.observe`, `rules.keeping.plan`), so a VM shows the answer the keeper acts on.
"""
from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from .. import kinds
from ..stores.direct import ClusterStore
from ..stores.snapshot import SnapshotStore
from ..stores.store import Store, StoreError
from ..config import duration_text, KeepMode, Settings
from ..rules.shared.longhorn import Answer, Restarts, restarts_vms
from ..keeper.observe import Launchers, Nodes, Observer, pass_facts, stuck
from ..keeper.observed import Observed
from ..keeper.records import state_name, StateStore, StateUnavailable
from ..keeper.targeted import TargetedMigration
from ..keeper.kubevirt_api import read_io_errors
from ..lookup.replicas import Longhorn, read_longhorn, read_settings
from ..kinds import POD, PV, PVC, SHARE_MANAGER, VMI, VMIM
from ..rules.keeping.apart import APART, VmState
from ..rules.keeping.keep import OFF, KeepDecision, PassFacts, next_step, VmFacts
from ..rules.keeping.plan import plan, VmPlan
from ..rules.keeping.record import Action, KeeperState, with_kept
from ..rules.keeping.migrations import (attempts, backoff, Migration, MIGRATION_PRIORITY, migrating, migration_manifest, of_vmi)
from ..rules.keeping.drain import DrainPreview, preview, RunningVm
from ..rules.keeping.recovery import cannot_finish, hotplugged
from ..rules.keeping.resume import paused_note, resume_step
from ..rules.keeping.iopath import DiskPath, loopback_note, path_note
from ..rules.keeping.running import VmiView
from ..rules.keeping.listed import read_kubevirt
from .deployed import KEEPER_NAMESPACE, leader
from ..rules.shared.times import ago, rfc3339

PAUSED_ON_IO = ("paused on a disk I/O error (PausedIOError); if its NFS server restarted and Longhorn spared it, its "
                "mount may be stale: a live migration's target pod mounts the volume afresh (docs/operations.md)")
PROBES = 3  # dry runs, of VMs of as many namespaces, while their answers prove nothing
CONCURRENCY = 8  # VMs resolved at once (a few GETs each without the lists), each within its own deadline
COLUMNS = ("NAMESPACE/NAME", "NODE", "STORAGE", "STATE", "SINCE", "NEXT", "LAST ACTION")
# The VMI a made-up migration names when no opted-in VM runs: `default` exists in every cluster.
DRY_RUN_NAMESPACE, DRY_RUN_VMI = "default", "kubevirt-colocate-dry-run"
DRY_RUN_REASON = "dry run of kubevirt-colocate status: are spec.addedNodeSelector and spec.priority kept?"


@dataclasses.dataclass(frozen=True)
class VmStatus:
    """One running opted-in VM as the keeper sees it, and what it will do about it."""

    namespace: str
    name: str
    facts: VmFacts  # as observed: its VMI as read, where its storage is, a stale mount and a retry awaited
    state: VmState
    since: datetime | None  # apart since (None: not apart, or unknown)
    why: str
    last_action: str
    last_migration: Migration | None  # our latest migration of the VM
    decision: KeepDecision
    next: str  # the decision in words: when it moves, or what holds it
    disks: tuple[DiskPath, ...] = ()  # each Longhorn disk's I/O path
    # whether a restart of a share-manager serving it reboots the VM (yes, no, cannot tell); None: none serves it
    rebooted_by_storage_restart: str | None = None
    # whether a share-manager restart deletes its hotplugged disks' attachment pods (yes, no, cannot tell);
    # None: it has none. The blacklist cannot spare them (their owner, the launcher pod, has no group).
    attachment_pods_deleted_by_storage_restart: str | None = None
    cannot_finish: str | None = None  # why no migration off a stale mount of it could finish (its disks' cache modes)
    loopback: str = ""  # a disk with cache writeback served beside it (loopback NFS), and what to do

    @property
    def hotplugged_disks(self) -> list[str]:
        """What a share-manager restart does to each of its hotplugged Longhorn disks, a line each."""
        volumes = {disk.claim: disk.volume for disk in self.disks}
        return [hotplugged(claim, volumes.get(claim), self.attachment_pods_deleted_by_storage_restart)
                for claim in self.facts.vmi.hotplugged if volumes.get(claim) or not self.disks]

    def to_json(self) -> dict[str, Any]:
        last = self.last_migration
        return {
            "namespace": self.namespace,
            "name": self.name,
            "node": self.facts.vmi.node,
            "storage": list(self.facts.where.storage),
            "state": str(self.state),
            "since": rfc3339(self.since) if self.since else None,
            "why": self.why,
            "last_action": self.last_action,
            "last_migration": None if last is None else {
                "name": last.name, "target": last.target, "phase": last.phase or None,
                "created": rfc3339(last.created), "ended": rfc3339(last.ended) if last.ended else None},
            "keep": self.facts.vmi.may_move,
            "moves": self.decision.act,
            "hold": str(self.decision.hold) if self.decision.hold is not None else None,
            "decision": self.decision.reason,
            "next": self.next,
            "disks": [disk.to_json() for disk in self.disks],
            "note": path_note(self.disks) or None,
            "rebooted_by_storage_restart": self.rebooted_by_storage_restart,
            "paused": self.facts.vmi.paused or None,
            "hotplugged": list(self.facts.vmi.hotplugged),
            "attachment_pods_deleted_by_storage_restart": self.attachment_pods_deleted_by_storage_restart,
            "hotplugged_disks": self.hotplugged_disks,
            "stale_mount": self.facts.stale or None,
            "stale_since": rfc3339(self.facts.stale_since) if self.facts.stale_since else None,
            "waiting_for_retry": self.facts.retry or None,
            "loopback_writeback": self.loopback or None,
        }


@dataclasses.dataclass(frozen=True)
class Cluster:
    """The facts the keeper goes by, as read now."""

    facts: PassFacts  # its mode, its limits, targeted migration's availability, the migrations in flight
    leader: str  # the Lease's holder, in words
    targeted: TargetedMigration  # what its dry run said of targeted migration and of priority
    settings_from: str = ""  # where the keeper's settings were read, in words ("": as given to `status`)
    # whether Longhorn's Settings make a share-manager's restart reboot its VMs (yes, no, cannot tell), why, the fix
    restarts: Restarts = Restarts(Answer.CANNOT_TELL, "Longhorn's Settings were not read")
    state: str = ""  # where the keeper's record was read from, or why not
    state_warning: str = ""  # what of the record was lost, lately or as read here
    io_errors: str = ""  # why KubeVirt's IOerror Events could not be read ("": they were)

    def lines(self) -> list[str]:
        facts, limits = self.facts, self.facts.limits
        source = f" ({self.settings_from})" if self.settings_from else ""
        (said, why), (priority_said, priority_why) = self.answers()
        return [
            f"keeper: {facts.mode}{source}, leader {self.leader}, --keep-after {duration_text(limits.after.total_seconds())}",
            f"targeted migration: {said}: {why}",
            f"migration priority: {priority_said}: {priority_why}",
            f"migrations in flight: {facts.in_flight_ours} ours (limit {limits.max_inflight}), "
            f"{facts.in_flight_all} in all (limit {limits.max_cluster_inflight})",
            *([f"warning: keeper record {self.state}"] if self.state.startswith("not read") else []),
            *([f"warning: keeper record {self.state_warning}"] if self.state_warning else []),
            *([f"warning: {self.io_errors}"] if self.io_errors else []),
            *([f"warning: {warning}"] if (warning := self.restarts.warning()) else []),
        ]

    def to_json(self) -> dict[str, Any]:
        facts, limits = self.facts, self.facts.limits
        (said, why), (priority_said, priority_why) = self.answers()
        return {"mode": str(facts.mode), "settings_from": self.settings_from or "as given", "leader": self.leader,
                "limits": {"keep_after_seconds": limits.after.total_seconds(),
                           "keep_after_descheduled_seconds": limits.after_descheduled.total_seconds(),
                           "max_inflight": limits.max_inflight,
                           "max_cluster_inflight": limits.max_cluster_inflight, "max_per_day": limits.max_per_day,
                           "max_outbound_per_node": limits.max_outbound_per_node},
                "targeted_migration": {"available": facts.targeted, "answer": said, "why": why,
                                       "priority": self.targeted.priority, "priority_answer": priority_said,
                                       "priority_why": priority_why},
                "in_flight": {"ours": facts.in_flight_ours, "all": facts.in_flight_all},
                "state": self.state or None, "state_warning": self.state_warning or None,
                "io_errors_unread": self.io_errors or None,
                "longhorn_restarts_vms": self.restarts.warning(),
                "longhorn_restarts_vms_answer": str(self.restarts.answer)}

    def answers(self) -> tuple[tuple[str, str], tuple[str, str]]:
        """What the dry run said of targeted migration and of priority, each as (answer, why): available,
        unavailable, could not check (the error), or not checked (the keeper is off)."""
        targeted = self.targeted
        if self.facts.mode is KeepMode.OFF:
            return ("not checked", OFF), ("not checked", OFF)
        if not targeted.checked:
            return ("not checked", targeted.note), ("not checked", targeted.priority_note)

        def answer(value: bool | None, note: str, unknown: str) -> tuple[str, str]:
            return ("could not check", unknown) if value is None else ("available" if value else "unavailable", note)

        return (answer(targeted.available, targeted.note, targeted.error),
                answer(targeted.priority, targeted.priority_note,
                       targeted.error or "the dry run's answer said nothing of spec.priority"))


_QUIET = logging.getLogger("webhook.status")  # the header says what the keeper logs
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


def dry_run_manifests(running: Sequence[VmiView], migrations: Sequence[Migration], now: datetime,
                      state: KeeperState) -> list[dict[str, Any]]:
    """The dry runs of the keeper's kind of migration, one per namespace, of the first running opted-in VM virt-api
    would admit one of (live-migratable, none in flight) not held for a refusal, else of any, else of DRY_RUN_VMI."""
    def refused(view: VmiView) -> bool:
        held = state.refusal(view.namespace, view.name, Action.MIGRATE)
        return not view.live_migratable or migrating(view, migrations, now) or (held is not None and now < held.retry)

    ranked = sorted(running, key=lambda view: (refused(view), view.namespace, view.name))
    firsts: dict[str, VmiView] = {}
    for view in ranked:
        firsts.setdefault(view.namespace, view)
    made = []
    for vmi in list(firsts.values()) or [VmiView(
            namespace=DRY_RUN_NAMESPACE, name=DRY_RUN_VMI, uid="", phase="", node=None, opted_in=False, may_move=False,
            live_migratable=False, not_migratable="", migration=None)]:
        node = vmi.node or DRY_RUN_VMI
        made.append(migration_manifest(vmi, {"metadata": {"name": node, "labels": {kinds.HOSTNAME_LABEL: node}}},
                                       DRY_RUN_REASON, MIGRATION_PRIORITY))
    assert all(isinstance(manifest, dict) for manifest in made)  # the node has its hostname label
    return made


@dataclasses.dataclass(frozen=True)
class Report:
    now: datetime
    vms: list[VmStatus]
    skipped: list[str]  # objects of unexpected shape, left out
    cluster: Cluster
    cancels: list[str]  # migrations of ours the keeper cancels, and why

    def drain(self, node: str, aims: dict[tuple[str, str], str]) -> DrainPreview:
        """What draining `node` will do to these VMs (`rules.keeping.drain`); `aims`: where each VM's
        evacuation would be aimed, or why not (`tools.drain_aims`), when the aim is on."""
        return preview(node, (RunningVm(namespace=vm.namespace, name=vm.name, node=vm.facts.vmi.node,
                                        storage=vm.facts.where.storage, migratable=vm.facts.vmi.live_migratable,
                                        why_not=vm.facts.vmi.not_migratable,
                                        cannot_finish=vm.cannot_finish, evacuation=aims.get((vm.namespace, vm.name), ""))
                                for vm in self.vms), self.cluster.restarts, self.cluster.facts.mode)

    def summary(self) -> dict[str, int]:
        counts = collections.Counter(vm.state for vm in self.vms)
        return {"total": len(self.vms), **{str(state): counts[state] for state in VmState}}

    def to_json(self) -> dict[str, Any]:
        return {"as_of": rfc3339(self.now), "cluster": self.cluster.to_json(),
                "vms": [vm.to_json() for vm in self.vms], "summary": self.summary(), "skipped": self.skipped,
                "cancels": self.cancels}


async def status(store: ClusterStore, settings: Settings, now: datetime, *, timeout: float, api: Any,
                 settings_from: str = "") -> Report:
    """Every running opted-in VM with its state and the keeper's decision; `api` makes the dry run. Raises
    StoreError when the VMIs or migrations cannot be listed."""
    listed = read_kubevirt(await store.list(VMI, timeout=timeout), await store.list(VMIM, timeout=timeout), settings)
    running = listed.running
    targeted = TargetedMigration(api, timeout=timeout)  # checked once up front: said in the header, not logged
    targeted.logger = _QUIET
    off = settings.keep is KeepMode.OFF
    state, state_note, state_warning = await _kept(api, settings, timeout)
    if off:
        targeted.note = f"targeted migration not checked: {OFF}"
    else:
        for manifest in dry_run_manifests(running, listed.migrations, now, state)[:PROBES]:
            await targeted.dry_run(manifest)
            if not targeted.error:
                break
    history = with_kept(listed.migrations, state.migrations, now)
    facts = pass_facts(settings, history, listed.views, now, targeted)
    observer, launchers, unread = await _observer(store, settings, running, timeout, api)
    longhorn = await read_longhorn(store, settings, timeout) if running else None
    gate, unpaused = asyncio.Semaphore(CONCURRENCY), state.just_unpaused(now)

    async def one(view: VmiView) -> Observed:
        async with gate:
            return await observer.vm(view, of_vmi(history, view), now, state, unpaused)

    seen = {observed.key: observed for observed in await asyncio.gather(*(one(view) for view in running))}
    uids = {(view.namespace, view.name): view.uid for view in listed.views}
    # The keeper's plan, made from the same facts: the same order, each migration using up what it takes.
    made = plan([o.facts for o in seen.values()], facts, stuck(history, uids, launchers, state))
    values = await read_settings(store, settings, timeout)
    restarts, attachments = restarts_vms(values), restarts_vms(values, blacklistable=False)
    vms = [_vm_status(seen[step.key], step, history, facts, off=off, longhorn=longhorn,
                      restarts=(str(restarts.answer), str(attachments.answer))) for step in made.vms]
    header = Cluster(facts=facts, leader=await leader(store, settings, now, timeout), targeted=targeted,
                     settings_from=settings_from, restarts=restarts, state=state_note, state_warning=state_warning,
                     io_errors=unread)
    return Report(now=now, vms=sorted(vms, key=lambda vm: (vm.namespace, vm.name)),
                  skipped=[str(m) for m in listed.malformed], cluster=header,
                  cancels=[f"{c.migration.namespace}/{c.migration.name}: {c.why}" for c in made.cancels])


async def _kept(api: Any, settings: Settings, timeout: float) -> tuple[KeeperState, str, str]:
    """The keeper's record, where it was read from (or why not), and what of it was lost."""
    namespace, name = settings.lease_namespace or KEEPER_NAMESPACE, state_name(settings)
    try:
        state, loss = await StateStore(api, namespace, name, timeout=timeout).read() or (KeeperState(), None)
    except StateUnavailable as exc:
        return KeeperState(), f"not read ({exc}): refused actions and garbage-collected migrations are not shown", ""
    lost = (f"rebuilt by the keeper at {rfc3339(state.lost[0])} ({state.lost[1]}): what that leader knew kept, "
            "the rest read from the cluster") if state.lost else ""
    said = f"{loss.kind}: {loss.why}: the keeper rebuilds it from the cluster at its next pass" if loss else lost
    return state, f"ConfigMap {namespace}/{name}", said


async def _observer(store: ClusterStore, settings: Settings, running: Sequence[VmiView],
                    timeout: float, api: Any) -> tuple[Observer, Launchers, str]:
    """The keeper's observation over the disks' objects, launcher pods and IOerror Events listed once (or why not)."""
    namespaces = {view.namespace for view in running}
    disks: Store = store
    if running:  # what the VMs' disks are resolved against, listed once; when a list fails, the store itself
        scopes = [(PV, None), *((PVC, namespace) for namespace in sorted(namespaces)),
                  (POD, settings.longhorn_namespace), (SHARE_MANAGER, settings.longhorn_namespace)]
        try:
            disks = SnapshotStore(await store.listed(scopes, timeout=timeout))
        except StoreError:
            pass
    # The launcher pods by (namespace, VMI uid), listed once, as the keeper's cache has them.
    pods: dict[tuple[str, str], list[dict[str, Any]]] = collections.defaultdict(list)
    for namespace in sorted(namespaces):
        try:
            for pod in await store.list(POD, namespace, labels=dict([kinds.VIRT_LAUNCHER]), timeout=timeout):
                pods[namespace, kinds.labels(pod).get(kinds.CREATED_BY_LABEL) or ""].append(pod)
        except StoreError:
            pass  # each VM apart then says its launcher pod is not known

    def launchers(namespace: str, uid: str) -> list[dict[str, Any]]:
        return pods.get((namespace, uid), [])

    errors = await read_io_errors(api, timeout) if running else {}
    found = errors if isinstance(errors, dict) else {}  # unread: no VM is taken for stale on what is not known
    return Observer(store=disks, cache=ViewedOnce(store), direct=store, launchers=launchers, settings=settings,
                    nodes=Nodes(store, timeout), timeout=timeout, keep_disks=True,
                    io_errors=lambda uid: found.get(uid, ())), launchers, "" if found is errors else (
        f"KubeVirt's IOerror Events could not be read ({errors}): no VM is shown on a stale mount or a full disk")


class ViewedOnce:
    """`store`, each object and each namespace's view for the checks (every node and pod listed) read once a run."""

    def __init__(self, store: Store):
        self._store, self._read = store, dict[Any, asyncio.Future[Any]]()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def _once(self, key: Any, read: Any) -> Any:  # the VMs observed together share each read
        return await asyncio.shield(self._read.get(key) or self._read.setdefault(key, asyncio.ensure_future(read())))

    async def fit_view(self, namespace: str, *, timeout: float | None = None) -> Any:
        return await self._once(namespace, lambda: self._store.fit_view(namespace, timeout=timeout))

    async def get(self, resource: Any, namespace: str | None, name: str, *, timeout: float | None = None) -> Any:
        return await self._once((resource.kind, namespace, name), lambda: self._store.get(resource, namespace, name,
                                                                                           timeout=timeout))


def _vm_status(observed: Observed, step: VmPlan, migrations: Sequence[Migration], facts: PassFacts, *,
               off: bool, longhorn: Longhorn | None, restarts: tuple[str, str]) -> VmStatus:
    """`restarts`: what a share-manager restart does to the VM and to its attachment pods (`restarts_vms`)."""
    view, where, decision = observed.vmi, observed.facts.where, step.decision
    since = observed.facts.apart_since if decision.state is APART and observed.derived else None
    why = where.why
    if view.migration is not None and view.migration.in_flight:
        why += f"; migrating to {view.migration.target_node or '?'}"
    text, last = last_action(view, migrations, facts.now)
    return VmStatus(namespace=view.namespace, name=view.name, facts=observed.facts,
                    state=decision.state, since=since, why=why, last_action=text, last_migration=last,
                    decision=decision, next=resume_step(next_step(decision, since, facts, off=off), step.resume, off=off),
                    cannot_finish=cannot_finish(view.caches, None, ()),
                    loopback=loopback_note(view.caches, (d.subject for d in observed.disks if d.node and d.node == view.node)),
                    disks=tuple(longhorn.paths(observed.disks)) if longhorn is not None else (),
                    rebooted_by_storage_restart=restarts[0] if where.storage else None,
                    attachment_pods_deleted_by_storage_restart=restarts[1] if where.storage and view.hotplugged else None)


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
    if not view.may_move:
        text += " (keep disabled)"
    return text, last


def render(report: Report) -> str:
    """The cluster facts, a row per VM, the counts per state and the notes."""
    rows = [COLUMNS]
    for vm in report.vms:
        since = "-" if vm.state is not APART else f"{ago(report.now - vm.since)} ago" if vm.since else "?"
        rows.append((f"{vm.namespace}/{vm.name}", vm.facts.vmi.node or "-", ",".join(vm.facts.where.storage) or "-",
                     str(vm.state), since, vm.next, vm.last_action))
    lines = report.cluster.lines() + [""]
    if report.vms:
        widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS) - 1)]
        lines += ["  ".join([*(cell.ljust(width) for cell, width in zip(row, widths)), row[-1]]) for row in rows]
    counts = report.summary()
    states = ", ".join(f"{counts[str(state)]} {state}" for state in VmState)
    lines.append(f"{counts['total']} VM{'' if counts['total'] == 1 else 's'}: {states}")
    lines += [f"note {vm.namespace}/{vm.name}: {note}" for vm in report.vms if (note := path_note(vm.disks))]
    lines += [f"note {vm.namespace}/{vm.name}: {paused_note(vm.facts.stale or '', vm.next, vm.facts.retry or PAUSED_ON_IO)}"
              for vm in report.vms if vm.facts.vmi.paused == kinds.PAUSED_IO_ERROR]
    lines += [f"note {vm.namespace}/{vm.name}: {line}" for vm in report.vms for line in vm.hotplugged_disks]
    lines += [f"note {vm.namespace}/{vm.name}: {vm.loopback}" for vm in report.vms if vm.loopback]
    lines += [f"cancels {what}" for what in report.cancels]
    lines += [f"skipped {what}" for what in report.skipped]
    return "\n".join(lines)
