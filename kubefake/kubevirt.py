"""KubeVirt's VMI subresources (`subresources.kubevirt.io/v1`) as virt-api answers them, over the
apiserver's stored VMIs: `pause` and `unpause`, with KubeVirt's refusals.

virt-api (kubevirt/kubevirt `pkg/virt-api/rest/lifecycle.go`, `PauseVMIRequestHandler` and
`UnpauseVMIRequestHandler`) reads the VMI and refuses with 409 Conflict one whose phase is not
Running ("VMI is not running") and, for `unpause`, one without a `Paused` condition ("VMI is not
paused"), whatever the condition's reason; `pause`, one that has it ("VMI is already paused"). It
then asks virt-handler, and answers 200 with no body; virt-handler sets or removes the condition
once the domain's state changes (`pkg/virt-handler/vm.go`, `calculatePausedCondition`), here at once.
A VMI that a migration moves keeps its conditions as they were: the migration target keeps a paused
VM paused (`pkg/virt-launcher/virtwrap/live-migration-target.go`), and virt-handler recalculates
the condition only when there is none, so only `unpause` clears it.
"""
from __future__ import annotations

from typing import Any

import kmock

from .objects import stamp

GROUP = "subresources.kubevirt.io"
VMIS = kmock.resource("kubevirt.io", "v1", "virtualmachineinstances")
PAUSED = "Paused"


def conflict(name: str, why: str) -> kmock.KubernetesError:
    return kmock.KubernetesError(409, "Conflict",
                                 f'Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io "{name}": {why}')


def is_kubevirt_subresource(call: Any) -> bool:
    return getattr(call.resource, "group", None) == GROUP and getattr(call, "subresource", None) is not None


def paused(vmi: dict[str, Any]) -> bool:
    """Whether the VMI has a Paused condition (virt-api looks at its presence alone)."""
    return any(c.get("type") == PAUSED for c in (vmi.get("status") or {}).get("conditions") or [])


def pause_condition(reason: str = "PausedByUser") -> dict[str, Any]:
    """The condition virt-handler adds (`calculatePausedCondition`) for `reason`."""
    messages = {"PausedByUser": "VMI was paused by user", "PausedIOError": "VMI was paused, low-level IO error detected"}
    return {"type": PAUSED, "status": "True", "lastProbeTime": stamp(), "lastTransitionTime": stamp(),
            "reason": reason, "message": messages.get(reason, "VMI was paused")}


def changed(vmi: dict[str, Any], subresource: str) -> dict[str, Any]:
    """The VMI's new conditions after `subresource` (pause or unpause), or KubeVirt's refusal."""
    name = (vmi.get("metadata") or {}).get("name") or ""
    if (vmi.get("status") or {}).get("phase") != "Running":
        raise conflict(name, "VMI is not running")
    conditions = list((vmi.get("status") or {}).get("conditions") or [])
    if subresource == "unpause":
        if not paused(vmi):
            raise conflict(name, "VMI is not paused")
        return {"status": {"conditions": [c for c in conditions if c.get("type") != PAUSED]}}
    if subresource == "pause":
        if paused(vmi):
            raise conflict(name, "VMI is already paused")
        return {"status": {"conditions": [*conditions, pause_condition()]}}
    raise kmock.KubernetesEndpointNotFoundError()


async def answer(apiserver: Any, call: Any) -> dict[str, Any]:
    """A PUT on a VMI's subresource: the VMI changed as virt-handler would change it, and an empty
    answer, as virt-api gives."""
    method = str(getattr(call.method, "value", call.method)).upper()
    if method != "PUT" or call.name is None:
        raise kmock.KubernetesEndpointNotFoundError()
    key = (VMIS, call.namespace, call.name)
    async with apiserver.lock:
        stored = apiserver.stored(key)
        if stored is None:
            raise kmock.KubernetesError(404, "NotFound", f'virtualmachineinstance.kubevirt.io "{call.name}" not found')
        change = changed(stored.raw, call.subresource)
        version = str(next(apiserver.versions))
        await apiserver.merge(key, {**change, "metadata": {"resourceVersion": version}})
    return {}
