"""After the keeper recovered a VM from a stale NFS mount: whether to unpause it. Pure.

KubeVirt's migration target keeps a paused VM paused, and virt-handler's I/O-error retry no longer
applies to it (`rules.keeping.recovery`): without an `unpause` the VM stays frozen on its fresh
mount. The keeper unpauses a VM once, and only one it recovered itself: its own recovery migration
(`VmFacts.recovered`, read from the cluster) succeeded while the VM stayed paused, and the pod it
runs in started after each of its volumes' remount requests (`VmFacts.not_afresh` is None). Never a
VM its user paused (reason PausedByUser), never while a migration of it is in flight, and only as
the keeper acts on anything: on a complete view, in migrate mode, with the lease.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ...config import KeepMode
from ...kinds import PAUSED_BY_USER
from .keep import PassFacts, VmFacts


@dataclasses.dataclass(frozen=True, slots=True)
class Resume:
    """Unpause the VM (act), or why not; `migration` names our recovery migration, `uid` its uid
    (an unpause is made once per recovery)."""

    act: bool
    reason: str
    migration: str
    uid: str


Hold = tuple[Callable[[VmFacts, PassFacts], bool], Callable[[VmFacts, PassFacts], str]]

# In order: the VM's own state, then the moment, then the mode and the lease.
HOLDS: tuple[Hold, ...] = (
    (lambda vm, p: vm.vmi.paused == PAUSED_BY_USER,
     lambda vm, p: "paused by its user (PausedByUser): the keeper never unpauses it"),
    (lambda vm, p: not vm.vmi.running, lambda vm, p: f"VMI is {vm.vmi.phase or 'without a phase'}, not running"),
    (lambda vm, p: vm.migrating, lambda vm, p: "a migration of this VMI is in flight"),
    (lambda vm, p: vm.not_afresh is not None,
     lambda vm, p: f"its disks are not known to be mounted afresh: {vm.not_afresh}"),
    (lambda vm, p: bool(p.incomplete), lambda vm, p: f"not acting on an incomplete view: {p.incomplete}"),
    (lambda vm, p: p.mode is not KeepMode.MIGRATE, lambda vm, p: f"report only: would unpause it ({_why(vm)})"),
    (lambda vm, p: not p.lease, lambda vm, p: "not acting: the lease might run out before it is unpaused"),
)


def _why(vm: VmFacts) -> str:
    recovered = vm.recovered
    assert recovered is not None
    return (f"still paused ({vm.vmi.paused}) after migration {recovered.name} recovered it from a stale NFS mount; "
            f"its pod mounted its disks afresh")


# `status`'s NEXT that says all of a paused VM: no migration can recover it, or its unpause.
WHOLE_STEPS = ("needs a restart: ", "unpaused at ", "stays paused: ")


def paused_note(stale: str, step: str, unknown: str) -> str:
    """`status`'s note on a VM paused on a disk I/O error: why its mount is stale and what recovers
    it, or its unpause; `unknown` when nothing says its mount is stale."""
    if step.startswith(WHOLE_STEPS):
        return step
    return f"{stale}; a migration mounts it afresh: {step}" if stale else unknown


def resume_step(step: str, resume: Resume | None, *, off: bool = False) -> str:
    """`status`'s NEXT for a VM the keeper recovered: its unpause, or what holds it; `step` (the
    keeper's decision in words) for any other VM, or when the keeper is off."""
    if resume is None or off:
        return step
    if resume.act:
        return f"unpaused at the keeper's next pass ({resume.reason.removeprefix('unpausing: ')})"
    return f"stays paused: {resume.reason}"


def decide_resume(vm: VmFacts, p: PassFacts) -> Resume | None:
    """Unpause a VM the keeper recovered, or why not; None for a VM it did not recover (or one not
    paused any more): nothing to say."""
    recovered = vm.recovered
    if recovered is None:
        return None
    for holds, words in HOLDS:
        if holds(vm, p):
            return Resume(act=False, reason=words(vm, p), migration=recovered.name, uid=recovered.uid)
    return Resume(act=True, reason=f"unpausing: {_why(vm)}", migration=recovered.name, uid=recovered.uid)
