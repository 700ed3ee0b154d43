"""The admission rules end to end: request → facts → decision → patch → response.

Whatever happens in here, the answer is `allowed: true`; a patch is only returned after it
has been applied to the very object it was made for.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any

import jsonpatch

from . import affinity, longhorn, patching, placement
from .admission import AdmissionRequest, AdmissionResponse, allowed, patched
from .config import Settings
from .deadline import Deadline
from .store import Store

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """A response plus what the rules saw, for logs, metrics and the CLI."""

    response: AdmissionResponse
    rule: str  # "vm", "share-manager" or "none"
    decision: placement.Decision | None = None
    skipped: str | None = None  # why the pod was left untouched


async def admit(request: AdmissionRequest, store: Store, settings: Settings, deadline: Deadline) -> Outcome:
    uid = request.uid
    if request.kind != "Pod" or request.group != "" or request.operation != "CREATE":
        return Outcome(allowed(uid), "none", skipped="not a pod creation")
    pod = request.object
    if not isinstance(pod, dict) or not isinstance(pod.get("metadata", {}), dict):
        return Outcome(allowed(uid, ["co-location skipped: the object is not a Pod manifest"]), "none",
                       skipped="object is not a Pod")
    try:
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
    decision = placement.decide(facts)
    return Outcome(_patched(request, pod, decision, settings), "vm", decision=decision)


def _patched(request: AdmissionRequest, pod: dict[str, Any], decision: placement.Decision, settings: Settings) -> AdmissionResponse:
    ops = affinity.patch_for(pod, decision, settings.decision_prefix)
    try:
        patching.apply(pod, ops)  # never hand the apiserver a patch that does not apply
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
        log.error("dropping a patch that does not apply: %s", exc)
        return allowed(request.uid, [f"co-location skipped: patch did not apply ({exc})"])
    return patched(request.uid, ops, decision.warnings)


def _pod_name(pod: dict[str, Any]) -> str:
    metadata = pod.get("metadata") or {}
    return metadata.get("name") or metadata.get("generateName") or "?"
