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

from . import affinity, longhorn, nodes, placement
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
    try:
        if placement.is_share_manager_pod(pod, request.namespace, settings):
            if not settings.share_manager_rule:
                return Outcome(allowed(uid), "share-manager", skipped="share-manager rule is off")
            return await _share_manager_rule(request, pod, store, settings, deadline)
        return await _vm_rule(request, pod, store, settings, deadline)
    except Exception as exc:  # a bug must never fail pod creation
        log.exception("rule failed for %s/%s", request.namespace, _pod_name(pod))
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
    check = await node_check(store, {f.node for f in facts if f.node}, pod, deadline, needs_kubevirt=True)
    decision = placement.decide(facts, check)
    return Outcome(_patched(request, pod, decision, settings), "vm", decision=decision, facts=tuple(facts))


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
        why = f"consumers of {volume} unknown: {exc or 'no answer before the deadline'}"
        return Outcome(allowed(request.uid, [f"co-location skipped: {why}"]), "share-manager",
                       skipped="consumers unknown", detail=why)
    if not facts:
        why = f"no running opted-in VM uses {volume}" + (f" ({'; '.join(others)})" if others else "")
        return Outcome(allowed(request.uid), "share-manager", skipped="no running consumer", detail=why)
    check = await node_check(store, {f.node for f in facts if f.node}, pod, deadline, needs_kubevirt=False)
    decision = placement.decide(facts, check, placement.CONSUMERS)
    return Outcome(_patched(request, pod, decision, settings), "share-manager", decision=decision, facts=tuple(facts))


async def node_check(
    store: Store, candidates: set[str], pod: dict[str, Any], deadline: Deadline, *, needs_kubevirt: bool
) -> placement.NodeCheck:
    """Read the one node we might pin to; a node we cannot read is a node we do not pin to."""
    if len(candidates) != 1:
        return lambda name: None  # several nodes: only preferences, nothing to strand on
    (name,) = candidates
    try:
        node = await store.get(NODE, None, name, timeout=deadline.remaining())
    except StoreError as exc:
        unknown = f"node {name} could not be checked ({exc})"
        return lambda _: unknown
    return lambda _: nodes.why_not(name, node, pod, needs_kubevirt=needs_kubevirt)


def _patched(request: AdmissionRequest, pod: dict[str, Any], decision: placement.Decision, settings: Settings) -> AdmissionResponse:
    ops = affinity.patch_for(pod, decision, settings.decision_prefix)
    try:
        jsonpatch.apply_patch(pod, ops)  # never hand the apiserver a patch that does not apply
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
        log.error("dropping a patch that does not apply: %s", exc)
        return allowed(request.uid, [f"co-location skipped: patch did not apply ({exc})"])
    return patched(request.uid, ops, decision.warnings)


def _pod_name(pod: dict[str, Any]) -> str:
    metadata = pod.get("metadata") or {}
    return metadata.get("name") or metadata.get("generateName") or "?"
