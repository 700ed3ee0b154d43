"""`explain NAMESPACE/VM`: where a VM's disks are served from, where it runs, and what we would do now."""
from __future__ import annotations

import copy
from typing import Any

from . import admission, affinity, longhorn, mutate
from .config import Settings
from .deadline import Deadline
from .placement import MIGRATION_JOB_LABEL
from .store import POD, Resource, Store

VM = Resource("VirtualMachine", "kubevirt.io", "v1", "virtualmachines", True)
VMI = Resource("VirtualMachineInstance", "kubevirt.io", "v1", "virtualmachineinstances", True)


def as_created(pod: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """The launcher pod as KubeVirt would create it again: unbound, without what we added to it.

    Only what our annotations say we added is removed (the user's own terms stay).
    """
    pod = copy.deepcopy(pod)
    spec = pod.setdefault("spec", {})
    spec.pop("nodeName", None)
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    ours = [n for n in str(annotations.get(settings.node_annotation) or "").split(",") if n]
    for key in (settings.decision_annotation, settings.node_annotation, settings.reason_annotation):
        annotations.pop(key, None)
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    added = [affinity.node_requirement(node) for node in ours]
    selector = node_affinity.get(affinity.REQUIRED) or {}
    terms = selector.get("nodeSelectorTerms") if isinstance(selector, dict) else None
    if isinstance(terms, list):
        kept = []
        for term in terms:
            if isinstance(term, dict) and isinstance(term.get("matchFields"), list):
                term["matchFields"] = [f for f in term["matchFields"] if f not in added]
                if not term["matchFields"]:
                    del term["matchFields"]
                    if not term.get("matchExpressions"):
                        continue  # a term we created: dropping it restores "no required affinity"
            kept.append(term)
        if kept:
            selector["nodeSelectorTerms"] = kept
        else:
            del node_affinity[affinity.REQUIRED]
    preferred = node_affinity.get(affinity.PREFERRED)
    if isinstance(preferred, list):
        ours_preferred = [{"matchFields": [r]} for r in added]
        node_affinity[affinity.PREFERRED] = [
            t for t in preferred if not (isinstance(t, dict) and t.get("preference") in ours_preferred)
        ]
    return pod


async def explain(store: Store, settings: Settings, namespace: str, name: str, deadline: Deadline) -> dict[str, Any]:
    vm = await store.get(VM, namespace, name, timeout=deadline.remaining())
    vmi = await store.get(VMI, namespace, name, timeout=deadline.remaining())
    if vm is None and vmi is None:
        raise LookupError(f"no VirtualMachine or VirtualMachineInstance {namespace}/{name}")
    template = ((vm or {}).get("spec") or {}).get("template") or {}
    volumes = ((vmi or {}).get("spec") or {}).get("volumes") if vmi else (template.get("spec") or {}).get("volumes")
    claims = longhorn.claims_of({"spec": {"volumes": volumes}})
    facts = await longhorn.resolve_disks(store, settings, namespace, claims, deadline)
    running_on = ((vmi or {}).get("status") or {}).get("nodeName")
    pods = await store.list(POD, namespace, {"kubevirt.io": "virt-launcher", "vm.kubevirt.io/name": name},
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
        request = admission.parse_review(admission.review_for_pod(as_created(launcher, settings), namespace))
        outcome = await mutate.admit(request, store, settings, deadline)
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
