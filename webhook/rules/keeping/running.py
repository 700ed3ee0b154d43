"""Where a VM runs: its launcher pods (each carries `kubevirt.io/created-by: <VMI uid>`), and its VMI as the keeper
reads it (`status.nodeName`, `status.migrationState`; KubeVirt's `staging/src/kubevirt.io/api/core/v1/types.go`).
"""
from __future__ import annotations

import dataclasses
from sys import intern
from collections.abc import Hashable, Iterable, Mapping
from datetime import datetime
from typing import Any

from ... import kinds
from ...config import Settings
from ...kinds import SPEC_MACHINE, STATUS_MACHINE
from ..shared import declared
from ..shared.alone import Alone
from ..shared.classify import opted_in, running_exemption
from ..shared.facts import claims_of
from ..shared.reading import Malformed, read_identity
from ..shared.times import EPOCH, parse_time

DECLARED = "declared"  # `Alike`'s key of whether a VMI's annotation is declared: one test for all of them


# --------------------------------------------------------------------------- where a VM runs: pods


@dataclasses.dataclass(frozen=True, slots=True)
class VmPods:
    """Launcher pods that say where their VMs run now (one per VMI), and why the others do not."""

    running: list[dict[str, Any]]
    skipped: list[tuple[dict[str, Any], Alone]]


def _newest_last(pod: dict[str, Any]) -> tuple[datetime, str]:
    metadata = kinds.meta(pod)
    name = metadata.get("name")
    return parse_time(metadata.get("creationTimestamp")) or EPOCH, name if isinstance(name, str) else ""


def vm_pods(pods: Iterable[dict[str, Any]], settings: Settings, *, any_vm: bool = False) -> VmPods:
    """Which launcher pods are where their VMs run now: of a VMI's pods that run, scheduled and not terminating, the
    newest (a scheduled migration target is newer than its source). Only opted-in VMs count, unless `any_vm`."""
    groups: dict[tuple[str, str] | int, list[dict[str, Any]]] = {}
    skipped: list[tuple[dict[str, Any], Alone]] = []
    seen: set[tuple[str, str]] = set()
    for pod in pods:
        metadata = kinds.meta(pod)
        name, namespace = metadata.get("name"), metadata.get("namespace") or ""
        if isinstance(name, str) and name:
            if (namespace, name) in seen:
                continue
            seen.add((namespace, name))
        why = running_exemption(pod, settings, any_vm=any_vm)
        if why is not None:
            skipped.append((pod, why))
            continue
        uid = kinds.labels(pod).get(kinds.CREATED_BY_LABEL)
        key: tuple[str, str] | int = (namespace, uid) if isinstance(uid, str) and uid else id(pod)
        groups.setdefault(key, []).append(pod)
    running: list[dict[str, Any]] = []
    for group in groups.values():
        group.sort(key=_newest_last)
        running.append(group[-1])
        skipped += [(pod, Alone.SUPERSEDED) for pod in group[:-1]]
    return VmPods(running, skipped)


# --------------------------------------------------------------------------- where a VM runs: the VMI


@dataclasses.dataclass(frozen=True, slots=True)
class VmiMigration:
    """The VMI's latest migration as KubeVirt reports it (`status.migrationState`)."""

    source_node: str | None
    target_node: str | None
    target_pod: str | None
    ended: datetime | None
    completed: bool
    failed: bool
    migration_uid: str | None = None  # the uid of the VirtualMachineInstanceMigration
    failure_reason: str = ""  # why it failed under way (libvirt's words), when it did

    @property
    def in_flight(self) -> bool:
        return not self.completed and not self.failed and self.ended is None


@dataclasses.dataclass(frozen=True, slots=True)
class VmiView:
    """What the keeper reads from a VMI."""

    namespace: str
    name: str
    uid: str
    phase: str
    node: str | None  # status.nodeName: where the VM runs
    opted_in: bool  # the opt-in annotation reached the VMI from the VM template
    may_move: bool  # False when annotated kubevirt-scheduler/keep: "false"
    live_migratable: bool  # condition LiveMigratable is "True"
    not_migratable: str  # why not, from the condition, when it is not
    migration: VmiMigration | None
    claims: tuple[str, ...] = ()
    node_selector: dict[str, Any] = dataclasses.field(default_factory=dict)  # the VMI's own spec.nodeSelector
    cpu_model: str = ""  # spec.domain.cpu.model (virt-api sets host-model by default)
    machine_type: str = ""  # as virt-controller reads it for the VM's next pod (`_machine_type`)
    machine_from: str = ""  # STATUS_MACHINE, SPEC_MACHINE or ""
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)  # those `declared.VMI` names
    paused: str = ""  # the reason of its Paused condition when it is paused (PausedIOError, PausedByUser, ...)
    paused_since: datetime | None = None  # its Paused condition's lastTransitionTime (a migration keeps it)
    hotplugged: tuple[str, ...] = ()  # the claims of its hotplugged volumes (mounted by attachment pods)
    caches: tuple[tuple[str, str], ...] = ()  # (claim, cache mode) of each disk on a claim whose cache is set
    disks: tuple[tuple[str, str], ...] = ()  # (VMI volume name, claim) of each volume on a claim

    @property
    def running(self) -> bool:
        return self.phase == "Running" and bool(self.node)


def _paused(status: dict[str, Any]) -> tuple[str, datetime | None]:
    """Why the VM is paused (its Paused condition's reason), "" when it is not; and since when."""
    for condition in declared.VMI_CONDITIONS.items(status):
        if (isinstance(condition, dict) and declared.CONDITION_TYPE.value(condition) == kinds.PAUSED
                and declared.CONDITION_STATUS.value(condition) == "True"):
            return str(declared.CONDITION_REASON.value(condition) or "Paused"), declared.CONDITION_SINCE.time(condition)
    return "", None


def _live_migratable(status: dict[str, Any]) -> tuple[bool, str]:
    for condition in declared.VMI_CONDITIONS.items(status):
        if isinstance(condition, dict) and declared.CONDITION_TYPE.value(condition) == kinds.LIVE_MIGRATABLE:
            state = declared.CONDITION_STATUS.value(condition)
            if state == "True":
                return True, ""
            detail = ": ".join(str(part) for part in (declared.CONDITION_REASON.value(condition),
                                                      declared.CONDITION_MESSAGE.value(condition)) if part)
            return False, detail or f"{kinds.LIVE_MIGRATABLE} is {state!r}"
    return False, f"no {kinds.LIVE_MIGRATABLE} condition"


def _vmi_migration(status: dict[str, Any]) -> VmiMigration | None:
    state = declared.VMI_MIGRATION.obj(status)
    if not state:
        return None
    return VmiMigration(source_node=_interned(declared.SOURCE_NODE.text(state) or None),
                        target_node=_interned(declared.TARGET_NODE.text(state) or None),
                        target_pod=declared.TARGET_POD.text(state) or None, ended=declared.ENDED.time(state),
                        completed=declared.COMPLETED.flag(state), failed=declared.FAILED.flag(state),
                        migration_uid=declared.MIGRATION_UID.text(state) or None,
                        failure_reason=declared.FAILURE_REASON.text(state))


def _disks(spec: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """(VMI volume name, claim) of each volume on a claim (a DataVolume's PVC has its name): IOerror Events name it."""
    found = []
    volumes = declared.VMI_SPEC_VOLUMES.value(spec)
    for volume in volumes if isinstance(volumes, list) else ():
        name = declared.VOLUME_NAME.value(volume) if isinstance(volume, dict) else None
        source = (volume.get("persistentVolumeClaim") or volume.get("dataVolume")) if isinstance(volume, dict) else None
        claim = (source.get("claimName") or source.get("name")) if isinstance(source, dict) else None
        if isinstance(name, str) and isinstance(claim, str):
            found.append((intern(name), claim))
    return tuple(found)


def _caches(spec: dict[str, Any], claims: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """(claim, cache mode) of each disk on a claim (`claims`, by volume name) whose `cache` is set."""
    disks = declared.DISKS.value(declared.DEVICES.obj(declared.DOMAIN.obj(spec)))
    return tuple((claims[name], intern(str(cache))) for disk in (disks if isinstance(disks, list) else ()) if isinstance(disk, dict)
                 and (name := declared.DISK_NAME.value(disk)) in claims and (cache := declared.DISK_CACHE.value(disk)))


def _machine_type(status: dict[str, Any], domain: dict[str, Any]) -> tuple[str, str]:
    """The machine type virt-controller selects nodes by (`services/template.go`, `newNodeSelectorRenderer`):
    status.machine.type, else spec.domain.machine.type, else none; and where from."""
    if found := declared.STATUS_MACHINE_TYPE.text(declared.STATUS_MACHINE.obj(status)):
        return found, STATUS_MACHINE
    found = declared.SPEC_MACHINE_TYPE.text(declared.SPEC_MACHINE.obj(domain))
    return (found, SPEC_MACHINE) if found else ("", "")


@dataclasses.dataclass(frozen=True, slots=True)
class TargetVmi:
    """What a VMI's migration target pod is rendered from (`rules.kubevirt.target.Vmi`), and no more."""

    uid: str
    node: str | None
    node_selector: dict[str, Any]
    cpu_model: str
    machine_type: str
    machine_from: str


def read_target_vmi(obj: Any) -> TargetVmi | Malformed:
    """`TargetVmi` of a VMI, or why it cannot be read."""
    what = "VMI"
    try:
        namespace, name, metadata = read_identity(obj, "VMI")
        what = f"VMI {namespace}/{name}"
        return _target_vmi(metadata, declared.VMI_STATUS.obj(obj), declared.VMI_SPEC.obj(obj))
    except Malformed as exc:
        return exc.of(what)


def _target_vmi(metadata: dict[str, Any], status: dict[str, Any], spec: dict[str, Any]) -> TargetVmi:
    domain = declared.DOMAIN.obj(spec)
    uid = declared.VMI_UID.value(metadata)
    machine_type, machine_from = _machine_type(status, domain)
    return TargetVmi(uid=uid if isinstance(uid, str) else "", node=declared.VMI_NODE.text(status) or None,
                     node_selector=dict(declared.VMI_NODE_SELECTOR.obj(spec)),
                     cpu_model=declared.CPU_MODEL.text(declared.CPU.obj(domain)), machine_type=machine_type,
                     machine_from=machine_from)


def _interned(text: str | None) -> str | None:
    return None if text is None else intern(text)


Alike = dict[Hashable, Any]  # what many VMIs carry alike, one object for all of them over one read of the VMIs


def _selector(selector: dict[str, Any], alike: Alike) -> dict[str, Any]:
    if not all(isinstance(value, str) for value in selector.values()):
        return selector
    return alike.setdefault(("nodeSelector", *selector.items()), selector)


def read_vmi(obj: Any, settings: Settings, alike: Alike | None = None) -> VmiView | Malformed:
    """The keeper's view of a VMI, or why it is skipped; what thousands of VMs share is one string (`sys.intern`)
    or one object (`alike`) for all of them: a pass holds the view of every VM at once."""
    what = "VMI"
    alike = {} if alike is None else alike
    try:
        namespace, name, metadata = read_identity(obj, "VMI")
        what = f"VMI {namespace}/{name}"
        status, spec = declared.VMI_STATUS.obj(obj), declared.VMI_SPEC.obj(obj)
        migratable, why = _live_migratable(status)
        target = _target_vmi(metadata, status, spec)
        paused, paused_since = _paused(status)
        named = alike.get(DECLARED) or alike.setdefault(DECLARED, declared.VMI.named("annotations", settings))
        annotations, disks = declared.VMI.annotations_of(obj, settings, named), _disks(spec)
        annotations = alike.setdefault(("annotations", *annotations.items()), annotations)
        return VmiView(namespace=intern(namespace), name=name, uid=target.uid, phase=intern(declared.VMI_PHASE.text(status)),
                       node=_interned(target.node), opted_in=opted_in(annotations, settings),  # declared.VMI_OPT_IN names the same key
                       may_move=annotations.get(declared.VMI_KEEP.name()) != "false", live_migratable=migratable,
                       not_migratable=intern(why), migration=_vmi_migration(status), claims=tuple(claims_of(obj)),
                       node_selector=_selector(target.node_selector, alike), cpu_model=intern(target.cpu_model),
                       machine_type=intern(target.machine_type), machine_from=target.machine_from,
                       annotations=annotations,
                       paused=intern(paused), paused_since=paused_since, hotplugged=tuple(claims_of(obj, hotplugged=True)),
                       caches=_caches(spec, dict(disks)), disks=disks)
    except Malformed as exc:
        return exc.of(what)
