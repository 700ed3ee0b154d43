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

Each pause on an I/O error is also an Event, as virt-launcher sends it
(`pkg/virt-launcher/notify-client/client.go`, after `GetDiskErrors`): one Warning `IOerror` per disk
with an error, "VM Paused due to IO error at the volume: <VMI volume>" (`DOMAIN_DISK_ERROR_UNSPEC`)
or "VM Paused due to not enough space on volume: <VMI volume>" (`DOMAIN_DISK_ERROR_NO_SPACE`),
recorded on the VMI by virt-handler (`pkg/virt-handler/notify-server/server.go`, `HandleK8SEvent`)
through client-go's recorder with source `virt-handler` and host its node
(`cmd/virt-handler/virt-handler.go`): repeats folded, spam dropped (kubefake.recorder).
"""
from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

import kmock

from . import recorder
from .objects import stamp

VMIS = kmock.resource("kubevirt.io", "v1", "virtualmachineinstances")
PAUSED = "Paused"
UNPAUSED = "kubevirt.io/virtual-machine-unpaused"
MESSAGES = {"PausedByUser": "VMI was paused by user", "PausedIOError": "VMI was paused, low-level IO error detected",
            "PausedByMigrationMonitor": "VMI was paused by the migration monitor"}
# virt-launcher's words for each disk error libvirt reports, followed by the VMI volume's name.
IO_ERROR, NO_SPACE = "io-error", "no-space"
WORDS = {IO_ERROR: "VM Paused due to IO error at the volume: ", NO_SPACE: "VM Paused due to not enough space on volume: "}


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


def claimed_volumes(vmi: dict[str, Any], claim: str | None = None) -> list[str]:
    """The VMI's volumes backed by a PVC (`persistentVolumeClaim`, `dataVolume`), by `claim` only if given."""
    found = []
    for volume in (vmi.get("spec") or {}).get("volumes") or []:
        source = volume.get("persistentVolumeClaim") or volume.get("dataVolume") or {}
        backing = source.get("claimName") or source.get("name")
        if backing and (claim is None or backing == claim):
            found.append(volume.get("name"))
    return found


async def record_io_errors(apiserver: Any, vmi: dict[str, Any], at: datetime.datetime, *,
                           volumes: Sequence[str] | None = None, cause: str = IO_ERROR) -> list[dict[str, Any]]:
    """virt-launcher's IOerror Event for each of `volumes` (by default every volume backed by a PVC)
    with `cause` (IO_ERROR or NO_SPACE), recorded at `at` by virt-handler on the VMI's node (under the
    lock): the Events as stored, those the spam filter dropped left out."""
    meta, node = vmi.get("metadata") or {}, (vmi.get("status") or {}).get("nodeName") or ""
    involved = {"kind": "VirtualMachineInstance", "namespace": meta.get("namespace"), "name": meta.get("name"),
                "uid": meta.get("uid"), "apiVersion": vmi.get("apiVersion") or "kubevirt.io/v1",
                "resourceVersion": meta.get("resourceVersion")}
    source = {"component": "virt-handler", "host": node}
    told = apiserver.recorders.setdefault(f"virt-handler/{node}", recorder.Recorder())
    written = []
    for i, volume in enumerate(claimed_volumes(vmi) if volumes is None else volumes):
        event = recorder.make_event(involved, source, "Warning", "IOerror", WORDS[cause] + volume, at, later=i)
        if (stored := await recorder.record(apiserver, told, event, at)) is not None:
            written.append(stored)
    return written


async def io_error_pause(apiserver: Any, namespace: str, name: str, at: datetime.datetime, *,
                         volumes: Sequence[str] | None = None, cause: str = IO_ERROR) -> dict[str, Any]:
    """QEMU paused the VM on a disk I/O error at `at`: a new Paused condition (PausedIOError) since
    `at`, the launcher pod's condition after it, virt-launcher's IOerror Event for each of `volumes`
    with `cause` (`record_io_errors`). The VMI as stored. ValueError if it is paused already
    (virt-handler adds no second condition), LookupError without it."""
    async with apiserver.lock:
        vmi = stored_vmi(apiserver, namespace, name)
        if paused(vmi):
            raise ValueError(f"{namespace}/{name} is paused already")
        conditions = [*((vmi.get("status") or {}).get("conditions") or []), pause_condition("PausedIOError", at)]
        await apiserver.merge((VMIS, namespace, name), {"status": {"conditions": conditions},
                                                        "metadata": {"resourceVersion": str(next(apiserver.versions))}})
        vmi = stored_vmi(apiserver, namespace, name)
        await sync_launcher_pods(apiserver, vmi, at)
        await record_io_errors(apiserver, vmi, at, volumes=volumes, cause=cause)
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
                         seen: bool = True, volumes: Sequence[str] | None = None, cause: str = IO_ERROR) -> dict[str, Any]:
    """Each (pause, resume) of `pairs` (`IoErrorRetry.fast_failing` or `slowly_failing`) up to
    `until`, in order: the VMI as virt-handler leaves it then. A resume that the next pause follows
    at the same instant is one virt-handler may never see (each domain event carries the state
    libvirt reports when virt-launcher handles it: `notify-client/client.go`, `eventCallback`,
    `GetState`): with `seen=False` it is left out, and the VMI keeps its Paused condition and its
    first lastTransitionTime; with `seen=True` each pause is a new condition. Each pause sends its
    IOerror Events either way (`volumes`, `cause`: `record_io_errors`)."""
    for i, (pause, resume) in enumerate(pairs):
        if pause > until:
            break
        if seen or not i or pairs[i - 1][1] != pause:
            await io_error_pause(apiserver, namespace, name, pause, volumes=volumes, cause=cause)
        else:
            async with apiserver.lock:
                await record_io_errors(apiserver, stored_vmi(apiserver, namespace, name), pause,
                                       volumes=volumes, cause=cause)
        if resume > until:
            break
        if seen or i + 1 == len(pairs) or pairs[i + 1][0] != resume:
            await io_retry_resume(apiserver, namespace, name, resume)
    async with apiserver.lock:
        return stored_vmi(apiserver, namespace, name)
