"""The admission rules end to end: request → facts → decision → patch → response.

Whatever happens in here, the answer is `allowed: true`; a patch is only returned after it
has been applied to the very object it was made for.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

import jsonpatch

from . import affinity, longhorn, nodes, patching, placement
from .admission import AdmissionRequest, AdmissionResponse, allowed, patched
from .config import Settings
from .deadline import Deadline
from .store import NODE, Store, StoreError

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """A response plus what the rules saw, for logs, metrics and the CLI."""

    response: AdmissionResponse
    rule: str  # "vm", "share-manager" or "none"
    decision: placement.Decision | None = None
    skipped: str | None = None  # why the pod was left untouched: a short fixed phrase (a metric label)
    detail: str | None = None  # the specifics, for logs
    facts: tuple[placement.Fact, ...] = ()  # what the decision followed


async def admit(request: AdmissionRequest, store: Store, settings: Settings, deadline: Deadline) -> Outcome:
    uid = request.uid
    if request.kind != "Pod" or request.group != "" or request.operation != "CREATE":
        return Outcome(allowed(uid), "none", skipped="not a pod creation")
    pod = request.object
    if not isinstance(pod, dict) or not isinstance(pod.get("metadata", {}), dict):
        return Outcome(allowed(uid, ["co-location skipped: the object is not a Pod manifest"]), "none",
                       skipped="object is not a Pod")
    share_manager = placement.is_share_manager_pod(pod, request.namespace, settings)
    if share_manager and not settings.share_manager_rule:
        return Outcome(allowed(uid), "share-manager", skipped="share-manager rule is off")
    rule = _share_manager_rule if share_manager else _vm_rule
    try:
        # Answers from memory need no timer; every read that goes to the API is bounded by
        # the deadline where it is made (longhorn.resolve_io, pin_obstacle, consumers).
        return await rule(request, pod, store, settings, deadline)
    except Exception as exc:  # a bug must never fail pod creation
        log.exception("rule failed for %s/%s", request.namespace, pod_name(pod))
        return Outcome(allowed(uid, [f"co-location skipped: internal error ({type(exc).__name__})"]), "none",
                       skipped="internal error")


async def _vm_rule(
    request: AdmissionRequest, pod: dict[str, Any], store: Store, settings: Settings, deadline: Deadline
) -> Outcome:
    exemption = placement.vm_exemption(pod, settings)
    if exemption is not None:
        return Outcome(allowed(request.uid), "vm" if placement.is_vm_pod(pod) else "none", skipped=exemption)
    claims = longhorn.claims_of(pod)
    facts = await longhorn.resolve_disks(store, settings, request.namespace, claims, deadline)
    blocked = await pin_obstacle(store, {f.node for f in facts if f.node}, pod, deadline, needs_kubevirt=True)
    decision = placement.decide(facts, blocked)
    return _decided(request, pod, decision, settings, "vm", facts)


async def _share_manager_rule(
    request: AdmissionRequest, pod: dict[str, Any], store: Store, settings: Settings, deadline: Deadline
) -> Outcome:
    """Cold start: Longhorn starts the share-manager only after its first consumer is scheduled,
    so the share-manager follows the VM; every later VM start then follows the share-manager."""
    volume = placement.str_map(pod, "labels").get(placement.SHARE_MANAGER_VOLUME_LABEL)
    if not volume:
        return Outcome(allowed(request.uid), "share-manager", skipped="no volume label")
    if (pod.get("spec") or {}).get("nodeName"):
        # Some longhorn-manager releases create the pod with NodeName = ShareManager ownerID
        # (controller/share_manager_controller.go createPodManifest): the scheduler never sees
        # it, and a required affinity would only get it rejected by the kubelet, in a loop.
        return Outcome(allowed(request.uid), "share-manager", skipped="already bound to a node")
    try:
        facts, others = await asyncio.wait_for(
            longhorn.resolve_consumers(store, settings, volume, deadline), timeout=deadline.remaining()
        )
    except (StoreError, TimeoutError) as exc:
        why = f"consumers of {volume} unknown: {str(exc) or 'no answer before the deadline'}"
        return Outcome(allowed(request.uid, [f"co-location skipped: {why}"]), "share-manager",
                       skipped="consumers unknown", detail=why)
    if not facts:
        why = f"no running opted-in VM uses {volume}" + (f" ({'; '.join(others)})" if others else "")
        return Outcome(allowed(request.uid), "share-manager", skipped="no running consumer", detail=why)
    blocked = await pin_obstacle(store, {f.node for f in facts if f.node}, pod, deadline, needs_kubevirt=False)
    decision = placement.decide(facts, blocked, placement.CONSUMERS)
    return _decided(request, pod, decision, settings, "share-manager", facts)


async def pin_obstacle(
    store: Store, candidates: set[str], pod: dict[str, Any], deadline: Deadline, *, needs_kubevirt: bool
) -> str | None:
    """Why the one node we might pin to cannot take the pod now; a node we cannot read is one."""
    if len(candidates) != 1:
        return None  # several nodes: only preferences, nothing to strand on
    (name,) = candidates
    peek = getattr(store, "peek", None)
    known, node = peek(NODE, None, name) if peek is not None else (False, None)
    if not known:
        try:
            async with asyncio.timeout(deadline.remaining()):
                node = await store.get(NODE, None, name, timeout=deadline.remaining())
        except StoreError as exc:
            return f"node {name} could not be checked ({exc})"
        except TimeoutError:
            return f"node {name} could not be checked before the deadline"
    return nodes.why_not(name, node, pod, needs_kubevirt=needs_kubevirt)


def _decided(
    request: AdmissionRequest, pod: dict[str, Any], decision: placement.Decision, settings: Settings, rule: str,
    facts: list[placement.Fact],
) -> Outcome:
    ops = affinity.patch_for(pod, decision, settings)
    try:
        patching.apply(pod, ops)  # never hand the apiserver a patch that does not apply
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
        log.error("dropping a patch that does not apply: %s", exc)
        return Outcome(allowed(request.uid, [f"co-location skipped: patch did not apply ({exc})"]), rule,
                       skipped="internal error", detail=str(exc), facts=tuple(facts))
    response = patched(request.uid, ops, decision.warnings)
    response = dataclasses.replace(response, audit_annotations=affinity.audit_annotations(decision))
    return Outcome(response, rule, decision=decision, facts=tuple(facts))


def pod_name(pod: Any) -> str:
    metadata = placement.meta(pod) if isinstance(pod, dict) else {}
    name = metadata.get("name") or metadata.get("generateName")
    return name if isinstance(name, str) else "?"
