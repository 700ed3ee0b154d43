"""Whether to unpause a VM a migration carried, paused, onto a fresh NFS mount (KubeVirt's target keeps it paused
and virt-handler's I/O-error retry no longer applies), or to resume once a VM whose new share-manager serves
(`recovery.probe`). Pure, by what is true now: PausedIOError only, its pod started after every remount request,
never opted out, migrating, nor more than MOST_UNPAUSES times in one pod; a refused unpause backs off alone.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime

from ...config import KeepMode
from ...kinds import PAUSED_IO_ERROR
from ..shared.alone import Alone
from .keep import PassFacts, VmFacts
from .recovery import came_over, not_fresh, SEEN_WITHIN


@dataclasses.dataclass(frozen=True, slots=True)
class Resume:
    """Unpause the VM (act), or why not (`hold` names the condition, `reason` says it)."""

    act: bool
    reason: str
    hold: Alone | None = None


Check = tuple[Alone, Callable[[VmFacts, PassFacts], bool], Callable[[VmFacts, PassFacts], str]]
# Unpauses of a VM in one pod: one that pauses again at once on its fresh mount fails on this node too.
MOST_UNPAUSES = 2

# In order: the VM's own state, then the moment, then the mode and the lease.
HOLDS: tuple[Check, ...] = (
    (Alone.OPTED_OUT, lambda vm, p: not vm.vmi.may_move,
     lambda vm, p: "keep disabled on this VM: the keeper never unpauses it"),
    (Alone.NEEDS_RESTART, lambda vm, p: vm.unpauses >= MOST_UNPAUSES,
     lambda vm, p: f"paused again on its fresh mount after {vm.unpauses} unpauses by the keeper: its disk fails here too; "
                   f"a restart mounts the volume afresh (`virtctl restart`)"),
    (Alone.DISK_FULL, lambda vm, p: vm.full is not None, lambda vm, p: vm.full or ""),
    (Alone.NOT_RUNNING, lambda vm, p: not vm.vmi.running,
     lambda vm, p: f"VMI is {vm.vmi.phase or 'without a phase'}, not running"),
    (Alone.MIGRATING, lambda vm, p: vm.migrating, lambda vm, p: "a migration of this VMI is in flight"),
    (Alone.REFUSED, lambda vm, p: vm.unpause_refused is not None and p.now < vm.unpause_refused.retry,
     lambda vm, p: vm.unpause_refused.in_words() if vm.unpause_refused is not None else ""),
    (Alone.VIEW_INCOMPLETE, lambda vm, p: bool(p.incomplete),
     lambda vm, p: f"not acting on an incomplete view: {p.incomplete}"),
    (Alone.REPORT_ONLY, lambda vm, p: p.mode is not KeepMode.MIGRATE,
     lambda vm, p: f"report only: would unpause it ({why(vm, p.now)})"),
    (Alone.NO_LEASE, lambda vm, p: not p.lease, lambda vm, p: "not acting: the lease might run out before it is unpaused"),
)



def why(vm: VmFacts, now: datetime) -> str | None:
    """Why the VM is to be unpaused, in words; None: it is not."""
    if not carried_paused(vm):
        return probed(vm, now)
    moved = f"migration {vm.moved_in} moved it" if vm.moved_in else "it moved"
    return f"paused on a disk I/O error before {moved} onto a fresh NFS mount, where KubeVirt keeps it paused"


def carried_paused(vm: VmFacts) -> bool:
    """Paused on an I/O error that came over with a migration onto a fresh mount, no unpause of ours pending."""
    mount = vm.mount
    return (vm.vmi.paused == PAUSED_IO_ERROR and not (vm.unpaused and vm.unpauses) and mount is not None
            and not_fresh(mount) is None and came_over(vm.vmi, mount.pod_started))


def probed(vm: VmFacts, now: datetime) -> str | None:
    """Why the VM is resumed once (`recovery.probe`): paused in its pod for SEEN_WITHIN, nothing proven; else None."""
    since = vm.vmi.paused_since
    if vm.probe is None or vm.stale or vm.unpaused or vm.vmi.paused != PAUSED_IO_ERROR or vm.mount is None:
        return None
    return vm.probe if since is not None and now - since >= SEEN_WITHIN and not came_over(vm.vmi, vm.mount.pod_started) else None


def decide_resume(vm: VmFacts, p: PassFacts) -> Resume | None:
    """Unpause the VM, or why not; None for a VM that is not paused so (nothing to say)."""
    reason = why(vm, p.now)
    if reason is None:
        return None
    for hold, holds, words in HOLDS:
        if holds(vm, p):
            return Resume(act=False, reason=words(vm, p), hold=hold)
    return Resume(act=True, reason=f"unpausing: {reason}")


# `status`'s NEXT that says all of a paused VM: no migration can recover it, or its unpause.
WHOLE_STEPS = ("needs a restart: ", "unpaused at ", "stays paused: ")


def paused_note(stale: str, step: str, unknown: str) -> str:
    """`status`'s note on a VM paused on a disk I/O error: why its mount is stale and what recovers it."""
    if step.startswith(WHOLE_STEPS):
        return step
    return f"{stale}; a migration mounts it afresh: {step}" if stale else unknown


def resume_step(step: str, resume: Resume | None, *, off: bool = False) -> str:
    """`status`'s NEXT for a VM carried paused onto a fresh mount: its unpause or what holds it; else `step`."""
    if resume is None or off:
        return step
    if resume.act:
        return f"unpaused at the keeper's next pass ({resume.reason.removeprefix('unpausing: ')})"
    return f"{'needs a restart' if resume.hold is Alone.NEEDS_RESTART else 'stays paused'}: {resume.reason}"
