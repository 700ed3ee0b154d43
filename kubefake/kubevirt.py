"""KubeVirt's VMI subresources (`subresources.kubevirt.io/v1`) as virt-api answers them, over the
apiserver's stored VMIs: `pause` and `unpause`, with KubeVirt's refusals; and virt-api out of
reach for a test's next requests (`unavailable`).

virt-api v1.9.0 (`pkg/virt-api/rest/lifecycle.go`; messages from `pkg/virt-api/rest/subresource.go`)
reads the VMI (404 `virtualmachineinstance.kubevirt.io "NAME" not found`: `FetchVirtualMachineInstance`),
then refuses, each as `Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io "NAME": ...`:
- `PauseVMIRequestHandler`: 409 "VM is not running" (sic: `vmNotRunning`) for a phase other than
  Running; 403 "Pausing VMIs with a non-GuestAgentPing LivenessProbe is not supported" for a
  livenessProbe without guestAgentPing (1.8: any livenessProbe, "Pausing VMIs with LivenessProbe is
  currently not supported"); 409 "VMI is already paused" for one with a Paused condition.
- `UnpauseVMIRequestHandler`: first the VirtualMachine of that name, if there is one: 409 "VM
  snapshot is in progress" (on `virtualmachine.kubevirt.io`) while its status.snapshotInProgress is
  set; then 409 "VMI is not running" for a phase other than Running, 409 "VMI is not paused" for one
  without a Paused condition, whatever the condition's reason (PausedByUser, PausedIOError,
  PausedByMigrationMonitor alike: virt-api refuses nothing for a migration in flight).
It then asks virt-handler and answers 200 with no body; virt-handler sets or removes the condition
once the domain's state changes (`pkg/virt-handler/vm.go`, `updatePausedConditions`), here at once.
A VMI that a migration moves keeps its conditions as they were (kubefake.migration).
"""
from __future__ import annotations

import re
from typing import Any

import kmock

from .virt_handler import PAUSED, VMIS, pause_condition, paused, sync_launcher_pods

__all__ = ["GROUP", "PAUSED", "VMIS", "VMS", "answer", "changed", "conflict", "is_kubevirt_subresource", "pause_condition",
           "paused", "unavailable"]

GROUP = "subresources.kubevirt.io"
VMS = kmock.resource("kubevirt.io", "v1", "virtualmachines")


def conflict(name: str, why: str, resource: str = "virtualmachineinstance") -> kmock.KubernetesError:
    return kmock.KubernetesError(409, "Conflict", f'Operation cannot be fulfilled on {resource}.kubevirt.io "{name}": {why}',
                                 {"name": name, "group": "kubevirt.io", "kind": resource})


def forbidden(name: str, why: str) -> kmock.KubernetesError:
    return kmock.KubernetesError(403, "Forbidden", f'virtualmachineinstance.kubevirt.io "{name}" is forbidden: {why}',
                                 {"name": name, "group": "kubevirt.io", "kind": "virtualmachineinstance"})


def is_kubevirt_subresource(call: Any) -> bool:
    return getattr(call.resource, "group", None) == GROUP and getattr(call, "subresource", None) is not None


def refused_pause(vmi: dict[str, Any], name: str) -> kmock.KubernetesError | None:
    if (vmi.get("status") or {}).get("phase") != "Running":
        return conflict(name, "VM is not running")
    probe = (vmi.get("spec") or {}).get("livenessProbe")
    if probe is not None and probe.get("guestAgentPing") is None:
        return forbidden(name, "Pausing VMIs with a non-GuestAgentPing LivenessProbe is not supported")
    return conflict(name, "VMI is already paused") if paused(vmi) else None


def refused_unpause(vmi: dict[str, Any], name: str, vm: dict[str, Any] | None) -> kmock.KubernetesError | None:
    if vm is not None and (vm.get("status") or {}).get("snapshotInProgress") is not None:
        return conflict(name, "VM snapshot is in progress", "virtualmachine")
    if (vmi.get("status") or {}).get("phase") != "Running":
        return conflict(name, "VMI is not running")
    return None if paused(vmi) else conflict(name, "VMI is not paused")


def changed(vmi: dict[str, Any], subresource: str, vm: dict[str, Any] | None = None) -> dict[str, Any]:
    """The VMI's new conditions after `subresource` (pause or unpause), or KubeVirt's refusal; `vm`
    the VirtualMachine of the same name, if there is one."""
    name = (vmi.get("metadata") or {}).get("name") or ""
    conditions = list((vmi.get("status") or {}).get("conditions") or [])
    if subresource == "unpause":
        if (refused := refused_unpause(vmi, name, vm)) is not None:
            raise refused
        return {"status": {"conditions": [c for c in conditions if c.get("type") != PAUSED]}}
    if subresource == "pause":
        if (refused := refused_pause(vmi, name)) is not None:
            raise refused
        return {"status": {"conditions": [*conditions, pause_condition()]}}
    raise kmock.KubernetesEndpointNotFoundError()


async def answer(apiserver: Any, call: Any) -> dict[str, Any]:
    """A PUT on a VMI's subresource: the VMI changed as virt-handler would change it (its launcher
    pod's condition after it), and an empty answer, as virt-api gives."""
    method = str(getattr(call.method, "value", call.method)).upper()
    if method != "PUT" or call.name is None:
        raise kmock.KubernetesEndpointNotFoundError()
    key = (VMIS, call.namespace, call.name)
    async with apiserver.lock:
        stored = apiserver.stored(key)
        if stored is None:
            raise kmock.KubernetesError(404, "NotFound", f'virtualmachineinstance.kubevirt.io "{call.name}" not found')
        vm = apiserver.stored((VMS, call.namespace, call.name))
        change = changed(stored.raw, call.subresource, vm.raw if vm is not None else None)
        version = str(next(apiserver.versions))
        await apiserver.merge(key, {**change, "metadata": {"resourceVersion": version}})
        await sync_launcher_pods(apiserver, apiserver.stored(key).raw)
    return {}


def unavailable(kmock_api: Any, count: int, subresource: str = "unpause", *, namespace: str | None = None,
                name: str | None = None, status: int = 503) -> Any:
    """The next `count` `subresource` requests (of the VMI `name` in `namespace`, any when not said)
    answered `status` (503: virt-api out of reach, as the apiserver's aggregator says it) by
    kmock's reaction, before the emulator sees them: nothing changes. The reaction (its requests
    are those it failed)."""
    path = re.compile(rf"/apis/{re.escape(GROUP)}/v1/namespaces/{re.escape(namespace) if namespace else '[^/]+'}"
                      rf"/virtualmachineinstances/{re.escape(name) if name else '[^/]+'}/{re.escape(subresource)}")
    seen = len(kmock_api[kmock.method.PUT, path])
    message = "the server is currently unable to handle the request"
    return kmock_api[kmock.method.PUT, path][seen:seen + count] << status << {
        "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure", "message": message,
        "reason": "ServiceUnavailable", "code": status}
