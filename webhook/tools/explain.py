"""`explain NAMESPACE/VM`: where a VM's disks are served from, where it runs, and what we would do now."""
from __future__ import annotations

from typing import Any

from .. import kinds
from ..admission.admit import admit
from ..admission.review import AdmissionRequest
from ..cluster.direct import ClusterStore
from ..cluster.resolve import resolve_disks
from ..config import Settings
from ..deadline import Deadline
from ..kinds import MIGRATION_JOB_LABEL, POD, VM, VMI
from ..rules.facts import claims_of
from ..rules.patch import as_created


async def explain(store: ClusterStore, settings: Settings, namespace: str, name: str, deadline: Deadline) -> dict[str, Any]:
    vm = await store.get(VM, namespace, name, timeout=deadline.remaining())
    vmi = await store.get(VMI, namespace, name, timeout=deadline.remaining())
    if vm is None and vmi is None:
        raise LookupError(f"no VirtualMachine or VirtualMachineInstance {namespace}/{name}")
    template = ((vm or {}).get("spec") or {}).get("template") or {}
    volumes = ((vmi or {}).get("spec") or {}).get("volumes") if vmi else (template.get("spec") or {}).get("volumes")
    claims = claims_of({"spec": {"volumes": volumes}})
    facts = await resolve_disks(store, settings, namespace, claims, deadline)
    running_on = ((vmi or {}).get("status") or {}).get("nodeName")
    pods = await store.list(POD, namespace, {kinds.VIRT_LAUNCHER[0]: kinds.VIRT_LAUNCHER[1], kinds.VM_NAME_LABELS[0]: name},
                            timeout=deadline.remaining())
    launcher = next((p for p in pods if (p.get("spec") or {}).get("nodeName") == running_on
                     and MIGRATION_JOB_LABEL not in ((p.get("metadata") or {}).get("labels") or {})), None)
    opted_in = ((template.get("metadata") or {}).get("annotations") or {}).get(settings.opt_in_annotation) == "true"
    if launcher is not None:
        opted_in = ((launcher.get("metadata") or {}).get("annotations") or {}).get(settings.opt_in_annotation) == "true"
    served = {f.node for f in facts if f.node}
    report: dict[str, Any] = {
        "vm": f"{namespace}/{name}",
        "running_on": running_on,
        "launcher_pod": (launcher or {}).get("metadata", {}).get("name"),
        "opted_in": opted_in,
        "disks": [{"claim": f.subject, "volume": f.volume, "share_manager_node": f.node, "why": f.reason} for f in facts],
        "co_located": bool(running_on) and bool(served) and served == {running_on},
    }
    if launcher is not None:
        outcome = await admit(AdmissionRequest.for_pod(as_created(launcher, settings), namespace), store, settings, deadline)
        decision = outcome.decision
        report["would"] = ({"decision": decision.outcome, "node": decision.node, "nodes": decision.nodes, "reason": decision.reason}
                           if decision else {"decision": "untouched", "reason": outcome.skipped})
    else:
        report["would"] = {"decision": "unknown", "reason": "the VM is not running: no launcher pod to evaluate"}
    return report


def render(report: dict[str, Any]) -> str:
    lines = [f"VM {report['vm']}: " + (f"running on {report['running_on']} (pod {report['launcher_pod']})"
                                       if report["running_on"] else "not running")
             + f", opted in: {'yes' if report['opted_in'] else 'no'}"]
    if not report["disks"]:
        lines.append("  no PVC disks")
    for disk in report["disks"]:
        lines.append(f"  disk {disk['claim']}: share-manager on {disk['share_manager_node'] or '-'} ({disk['why']})")
    if report["running_on"]:
        lines.append(f"co-located: {'yes' if report['co_located'] else 'no'}")
    would = report["would"]
    target = would.get("node") or ",".join(would.get("nodes") or []) or "-"
    lines.append(f"the webhook would now: {would['decision']} {target if would['decision'] != 'untouched' else ''}".rstrip()
                 + f" ({would['reason']})")
    return "\n".join(lines)
