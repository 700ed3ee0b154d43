"""`explain NAMESPACE/VM`: where a VM's disks are served from, where it runs, and what we would do now."""
from __future__ import annotations

import datetime
from typing import Any

from .. import kinds
from ..admission.admit import admit
from ..admission.review import AdmissionRequest
from ..stores.direct import ClusterStore
from ..lookup.resolve import resolve_disks
from ..config import Settings
from ..deadline import Deadline
from ..kinds import POD, VM, VMI, VMIM
from ..rules.shared.classify import opted_in
from ..rules.shared.facts import claims_of
from ..rules.keeping.iopath import loopback_note, path_note
from ..rules.kubevirt.pods import as_started
from ..rules.keeping.running import read_vmi, vm_pods, VmiMigration, VmiView
from ..rules.shared.times import rfc3339
from ..rules.placement.patch import as_created
from ..rules.placement import aim
from ..rules.placement.stranded import stranded
from ..stores.store import StoreError
from ..lookup.replicas import read_longhorn


async def explain(store: ClusterStore, settings: Settings, namespace: str, name: str, deadline: Deadline) -> dict[str, Any]:
    vm = await store.get(VM, namespace, name, timeout=deadline.remaining())
    vmi = await store.get(VMI, namespace, name, timeout=deadline.remaining())
    if vm is None and vmi is None:
        raise LookupError(f"no VirtualMachine or VirtualMachineInstance {namespace}/{name}")
    template = kinds.spec(vm).get("template") or {}
    facts = await resolve_disks(store, settings, namespace, claims_of(vmi or template), deadline)
    running_on = ((vmi or {}).get("status") or {}).get("nodeName")
    # The VMI's pods by its uid (never one of an earlier run): their vm.kubevirt.io/name label is its hostname.
    uid = kinds.meta(vmi).get("uid") if vmi else None
    selector = {kinds.CREATED_BY_LABEL: uid} if isinstance(uid, str) and uid else {kinds.VM_NAME_LABELS[0]: name}
    pods = await store.list(POD, namespace, {kinds.VIRT_LAUNCHER[0]: kinds.VIRT_LAUNCHER[1], **selector},
                            timeout=deadline.remaining())
    # The launcher pod where the VM runs now, as the rules see it; none without a VMI.
    launcher = next(iter(vm_pods(pods, settings, any_vm=True).running), None) if vmi else None
    said = opted_in(kinds.annotations(launcher if launcher is not None else template), settings)
    served = {f.node for f in facts if f.node}
    paths = (await read_longhorn(store, settings, deadline.remaining())).paths(facts)
    view = read_vmi(vmi, settings) if vmi else None
    report: dict[str, Any] = {
        "vm": f"{namespace}/{name}",
        "running_on": running_on,
        "launcher_pod": kinds.meta(launcher).get("name"),
        "launcher_node": kinds.spec(launcher).get("nodeName"),
        "migration": _migration(view.migration) if isinstance(view, VmiView) and view.migration else None,
        "opted_in": said,
        "disks": [{"claim": f.subject, "volume": f.volume, "share_manager_node": f.node, "why": f.reason} for f in facts],
        "io_path": [path.to_json() for path in paths],
        "io_note": path_note(paths) or None,
        "co_located": bool(running_on) and bool(served) and served == {running_on},
        "loopback_writeback": loopback_note(view.caches if view and said else (), (f.subject for f in facts if running_on
                                                                                     and f.node == running_on)) or None,
        "stranded": _stranded(pods, namespace, settings),
        "evacuations": await _evacuations(store, namespace, name, deadline),
    }
    if launcher is not None:
        pod = as_started(as_created(launcher, settings), kinds.spec(vmi).get("nodeSelector"))
        outcome = await admit(AdmissionRequest.for_pod(pod, namespace), store, settings, deadline)
        decision = outcome.decision
        report["would"] = ({"decision": decision.outcome, "node": decision.node, "nodes": decision.nodes, "reason": decision.reason}
                           if decision else {"decision": "untouched", "reason": outcome.skipped})
    else:
        report["would"] = {"decision": "unknown", "reason": "the VM is not running: no launcher pod to evaluate"}
    return report


async def _evacuations(store: ClusterStore, namespace: str, name: str, deadline: Deadline) -> list[dict[str, Any]]:
    """The VM's drain evacuations KubeVirt keeps, oldest first: off which node, where each was aimed
    (`--aim-evacuations on`; None: left as KubeVirt made it), how it went."""
    try:
        migrations = await store.list(VMIM, namespace, timeout=deadline.remaining())
    except StoreError:
        return []
    found = [aim.read_evacuation(m, namespace) for m in migrations if kinds.spec(m).get("vmiName") == name
             and kinds.annotations(m).get(kinds.EVACUATION_ANNOTATION)]
    return [{"name": e.name, "from": e.source, "aimed_at": e.aimed, "phase": e.phase or None}
            for e in sorted(found, key=lambda e: (e.created, e.name))]


def _stranded(pods: list[dict[str, Any]], namespace: str, settings: Settings) -> list[dict[str, Any]]:
    """Pods of the VM we pinned that kube-scheduler still cannot place (the safety net)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    found = [s for s in (stranded(p, namespace, settings, now) for p in pods) if s is not None]
    return [{"pod": s.pod, "node": s.node, "since": rfc3339(s.since), "message": s.message, "what": s.describe(now)}
            for s in found]


def _migration(state: VmiMigration) -> dict[str, Any]:
    done = "completed" if state.completed else "failed" if state.failed else "in flight" if state.in_flight else "ended"
    return {"source": state.source_node, "target": state.target_node, "target_pod": state.target_pod, "state": done,
            "ended": rfc3339(state.ended) if state.ended else None}


def render(report: dict[str, Any]) -> str:
    pod = report["launcher_pod"]
    if pod and report["launcher_node"] and report["launcher_node"] != report["running_on"]:
        pod += f" on {report['launcher_node']}"
    lines = [f"VM {report['vm']}: " + (f"running on {report['running_on']} (pod {pod})" if report["running_on"] else "not running")
             + f", opted in: {'yes' if report['opted_in'] else 'no'}"]
    migration = report["migration"]
    if migration:
        route = f"from {migration['source'] or '?'} to {migration['target'] or '?'}"
        if migration["state"] == "in flight":
            lines.append(f"  migrating {route} (target pod {migration['target_pod'] or '?'})")
        else:
            ended = f" at {migration['ended']}" if migration["ended"] else ""
            lines.append(f"  last migration {route}: {migration['state']}{ended}")
    if not report["disks"]:
        lines.append("  no PVC disks")
    paths = {path["claim"]: path for path in report["io_path"]}
    for disk in report["disks"]:
        lines.append(f"  disk {disk['claim']}: share-manager on {disk['share_manager_node'] or '-'} ({disk['why']})")
        path = paths.get(disk["claim"])
        if path is not None and path["share_manager_node"]:
            local = {True: "yes", False: "no", None: "?"}[path["local_replica"]]
            lines.append(f"    data locality {path['data_locality'] or '?'}, healthy replica on "
                         f"{path['share_manager_node']}: {local}" + (f" ({path['unknown']})" if path["unknown"] else ""))
    if report["io_note"]:
        lines.append(f"note: {report['io_note']}")
    if report["running_on"]:
        lines.append(f"co-located: {'yes' if report['co_located'] else 'no'}")
    if report["loopback_writeback"]:
        lines.append(f"note: {report['loopback_writeback']}")
    for evacuation in report.get("evacuations") or []:
        aimed = f"aimed at {evacuation['aimed_at']}" if evacuation["aimed_at"] else "not aimed (KubeVirt's own choice)"
        lines.append(f"  evacuation {evacuation['name']} off {evacuation['from']}: {aimed}, "
                     f"{evacuation['phase'] or 'no phase yet'}")
    for stuck in report["stranded"]:
        lines.append(f"STRANDED: pod {stuck['pod']} {stuck['what']}")
        lines.append("  make room on the node, or restart the VM with the webhook on --pin preferred")
    would = report["would"]
    target = would.get("node") or ",".join(would.get("nodes") or []) or "-"
    lines.append(f"the webhook would now: {would['decision']} {target if would['decision'] != 'untouched' else ''}".rstrip()
                 + f" ({would['reason']})")
    return "\n".join(lines)
