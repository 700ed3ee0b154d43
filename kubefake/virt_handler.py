"""What virt-handler and virt-controller write when a VM's domain pauses on a disk I/O error or is
resumed, played on kubefake's apiserver at the moments a test gives (kubefake.io_error_retry says
when KubeVirt resumes it).

KubeVirt v1.9.0: virt-handler (`pkg/virt-handler/vm.go`, `updatePausedConditions`) adds a Paused
condition when it sees the domain paused and the VMI has none (`calculatePausedCondition`: reason
PausedIOError, "VMI was paused, low-level IO error detected", lastProbeTime and lastTransitionTime
the moment it sees it), and removes it whenever it sees the domain running; the VMI stays in phase
Running throughout. virt-controller mirrors the condition on the launcher pod
(`pkg/virt-controller/watch/vmi/lifecycle.go`, `syncPausedConditionToPod`): the pod condition
`kubevirt.io/virtual-machine-unpaused` False (Paused) while the VMI is paused, True (NotPaused)
otherwise, its lastTransitionTime when it changes.
"""
from __future__ import annotations

import datetime
from typing import Any

import kmock

from .objects import stamp

VMIS = kmock.resource("kubevirt.io", "v1", "virtualmachineinstances")
PAUSED = "Paused"
UNPAUSED = "kubevirt.io/virtual-machine-unpaused"
MESSAGES = {"PausedByUser": "VMI was paused by user", "PausedIOError": "VMI was paused, low-level IO error detected",
            "PausedByMigrationMonitor": "VMI was paused by the migration monitor"}


def paused(vmi: dict[str, Any]) -> bool:
    """Whether the VMI has a Paused condition (virt-api looks at its presence alone)."""
    return any(c.get("type") == PAUSED for c in (vmi.get("status") or {}).get("conditions") or [])


def pause_condition(reason: str = "PausedByUser", at: datetime.datetime | None = None) -> dict[str, Any]:
    """The condition virt-handler adds (`calculatePausedCondition`) for `reason`, seen at `at` (now)."""
    when = stamp(at)
    return {"type": PAUSED, "status": "True", "lastProbeTime": when, "lastTransitionTime": when,
            "reason": reason, "message": MESSAGES.get(reason, "VMI was paused")}


def unpaused_condition(is_paused: bool, at: datetime.datetime | None = None) -> dict[str, Any]:
    """The launcher pod's condition as virt-controller sets it."""
    when = stamp(at)
    if is_paused:
        return {"type": UNPAUSED, "status": "False", "reason": "Paused", "message": "the virtual machine is paused",
                "lastProbeTime": when, "lastTransitionTime": when}
    return {"type": UNPAUSED, "status": "True", "reason": "NotPaused", "message": "the virtual machine is not paused",
            "lastProbeTime": when, "lastTransitionTime": when}


def launcher_pods(apiserver: Any, vmi: dict[str, Any]) -> list[tuple[Any, dict[str, Any]]]:
    """The VMI's live launcher pods (key, object): created by it (label or owner), not finished."""
    meta = vmi.get("metadata") or {}
    found = []
    for key, obj in list(apiserver.objects.items()):
        if getattr(key[0], "plural", None) != "pods" or getattr(key[0], "group", None) != "" or obj.deleted:
            continue
        pod = obj.raw
        pod_meta = pod.get("metadata") or {}
        owned = (pod_meta.get("labels") or {}).get("kubevirt.io/created-by") == meta.get("uid") or any(
            o.get("uid") == meta.get("uid") for o in pod_meta.get("ownerReferences") or [])
        if owned and key[1] == meta.get("namespace") and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            found.append((key, pod))
    return found


async def sync_launcher_pods(apiserver: Any, vmi: dict[str, Any], at: datetime.datetime | None = None) -> None:
    """virt-controller's `syncPausedConditionToPod` on each live launcher pod of the VMI (under the lock)."""
    is_paused = paused(vmi)
    for key, pod in launcher_pods(apiserver, vmi):
        conditions = list((pod.get("status") or {}).get("conditions") or [])
        now = next((c for c in conditions if c.get("type") == UNPAUSED), None)
        if now is not None and (now.get("status") == "False") == is_paused:
            continue
        conditions = [c for c in conditions if c.get("type") != UNPAUSED] + [unpaused_condition(is_paused, at)]
        await apiserver.merge(key, {"status": {"conditions": conditions},
                                    "metadata": {"resourceVersion": str(next(apiserver.versions))}})


def stored_vmi(apiserver: Any, namespace: str, name: str) -> dict[str, Any]:
    obj = apiserver.stored((VMIS, namespace, name))
    if obj is None:
        raise LookupError(f"no VirtualMachineInstance {namespace}/{name}")
    return obj.raw


def resumable(vmi: dict[str, Any]) -> str | None:
    """Why virt-handler's retry would not resume the VMI, None when it would: it resumes a domain
    paused on an I/O error that is not in the launcher's paused set, which a migration target fills
    with a VM that came paused (`live-migration-target.go`, `prepareMigrationTarget`)."""
    status = vmi.get("status") or {}
    condition = next((c for c in status.get("conditions") or [] if c.get("type") == PAUSED), None)
    if condition is None:
        return "it is not paused"
    if condition.get("reason") != "PausedIOError":
        return f"it is paused for {condition.get('reason')}, not an I/O error"
    moved = status.get("migrationState") or {}
    if moved.get("completed") and not moved.get("failed") and \
            str(moved.get("endTimestamp") or "") >= str(condition.get("lastTransitionTime") or ""):
        return "a migration moved it paused: its target keeps it paused until an unpause"
    return None


async def io_error_pause(apiserver: Any, namespace: str, name: str, at: datetime.datetime) -> dict[str, Any]:
    """QEMU paused the VM on a disk I/O error at `at`: a new Paused condition (PausedIOError) since
    `at`, the launcher pod's condition after it. The VMI as stored. ValueError if it is paused
    already (virt-handler adds no second condition), LookupError without it."""
    async with apiserver.lock:
        vmi = stored_vmi(apiserver, namespace, name)
        if paused(vmi):
            raise ValueError(f"{namespace}/{name} is paused already")
        conditions = [*((vmi.get("status") or {}).get("conditions") or []), pause_condition("PausedIOError", at)]
        await apiserver.merge((VMIS, namespace, name), {"status": {"conditions": conditions},
                                                        "metadata": {"resourceVersion": str(next(apiserver.versions))}})
        vmi = stored_vmi(apiserver, namespace, name)
        await sync_launcher_pods(apiserver, vmi, at)
        return vmi


async def io_retry_resume(apiserver: Any, namespace: str, name: str, at: datetime.datetime) -> dict[str, Any]:
    """virt-handler's I/O error retry resumed the VM at `at`: its Paused condition gone (the VMI
    Running), the launcher pod's condition after it. The VMI as stored. ValueError when the retry
    would not resume it (`resumable`), LookupError without it."""
    async with apiserver.lock:
        vmi = stored_vmi(apiserver, namespace, name)
        if (why := resumable(vmi)) is not None:
            raise ValueError(f"virt-handler's retry does not resume {namespace}/{name}: {why}")
        conditions = [c for c in (vmi.get("status") or {}).get("conditions") or [] if c.get("type") != PAUSED]
        await apiserver.merge((VMIS, namespace, name), {"status": {"conditions": conditions, "phase": "Running"},
                                                        "metadata": {"resourceVersion": str(next(apiserver.versions))}})
        vmi = stored_vmi(apiserver, namespace, name)
        await sync_launcher_pods(apiserver, vmi, at)
        return vmi


async def play_io_errors(apiserver: Any, namespace: str, name: str,
                         pairs: list[tuple[datetime.datetime, datetime.datetime]], until: datetime.datetime, *,
                         seen: bool = True) -> dict[str, Any]:
    """Each (pause, resume) of `pairs` (`IoErrorRetry.fast_failing` or `slowly_failing`) up to
    `until`, in order: the VMI as virt-handler leaves it then. A resume that the next pause follows
    at the same instant is one virt-handler may never see (each domain event carries the state
    libvirt reports when virt-launcher handles it: `notify-client/client.go`, `eventCallback`,
    `GetState`): with `seen=False` it is left out, and the VMI keeps its Paused condition and its
    first lastTransitionTime; with `seen=True` each pause is a new condition."""
    for i, (pause, resume) in enumerate(pairs):
        if pause > until:
            break
        if seen or not i or pairs[i - 1][1] != pause:
            await io_error_pause(apiserver, namespace, name, pause)
        if resume > until:
            break
        if seen or i + 1 == len(pairs) or pairs[i + 1][0] != resume:
            await io_retry_resume(apiserver, namespace, name, resume)
    async with apiserver.lock:
        return stored_vmi(apiserver, namespace, name)
