"""AdmissionReview v1: a checked request in (else `BadReview`: 400; the object never fails it), one envelope out."""
from __future__ import annotations

import base64
import dataclasses
from typing import Any

import orjson

from ..kinds import clip_reason
from ..rules.placement.patch import audit_annotations
from .outcome import Outcome

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
# The apiserver shows at most this much of a warning; keep every one shorter.
MAX_WARNING = 119
MAX_WARNINGS = 10


class BadReview(ValueError):
    """The webhook request itself is malformed (not a problem of the pod or the cluster)."""


@dataclasses.dataclass(frozen=True)
class AdmissionRequest:
    uid: str
    kind: str  # request.kind.kind, e.g. "Pod"
    group: str
    operation: str
    namespace: str
    name: str
    object: Any
    dry_run: bool
    user: str = ""  # request.userInfo.username: who creates the object (a migration's creator)

    @classmethod
    def for_pod(cls, pod: Any, namespace: str, uid: str = "dry-run") -> AdmissionRequest:
        """A CREATE of a bare Pod manifest, as the apiserver would send it (`review`, `explain`)."""
        name = ((pod.get("metadata") or {}) if isinstance(pod, dict) else {}).get("name") or ""
        return cls(uid=uid, kind="Pod", group="", operation="CREATE", namespace=namespace,
                   name=name if isinstance(name, str) else "", object=pod, dry_run=True)


def build_response(uid: str, outcome: Outcome) -> dict[str, Any]:
    """The whole AdmissionReview v1 answer: always allowed; a patch only when there is one; warnings clipped."""
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if outcome.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(outcome.patch)).decode("ascii")
    if outcome.warnings:
        shown = [clip(w) for w in outcome.warnings[:MAX_WARNINGS]]
        if len(outcome.warnings) > MAX_WARNINGS:  # kubectl prints each: a pod of many disks must not flood it
            shown.append(f"and {len(outcome.warnings) - MAX_WARNINGS} more warnings")
        response["warnings"] = shown
    if outcome.decision is not None:
        response["auditAnnotations"] = audit_annotations(outcome.decision)
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}


def clip(text: str, limit: int = MAX_WARNING) -> str:
    return clip_reason(" ".join(str(text).split()), limit)


def parse_review(body: Any) -> AdmissionRequest:
    """Check the envelope of an AdmissionReview v1 request; raise BadReview with the reason."""
    if not isinstance(body, dict):
        raise BadReview("the body must be a JSON object (an AdmissionReview)")
    if body.get("apiVersion") != API_VERSION or body.get("kind") != KIND:
        raise BadReview(
            f"expected apiVersion {API_VERSION} and kind {KIND}, got "
            f"{body.get('apiVersion')!r} and {body.get('kind')!r}"
        )
    request = body.get("request")
    if not isinstance(request, dict):
        raise BadReview("the AdmissionReview has no request object")
    uid, kind, operation = request.get("uid"), request.get("kind"), request.get("operation")
    for key, right, what in (("uid", isinstance(uid, str) and uid, "a non-empty string"),
                             ("kind", isinstance(kind, dict) and isinstance(kind.get("kind"), str),
                              "an object with a string 'kind'"),
                             ("operation", isinstance(operation, str), "a string"),
                             ("namespace", isinstance(request.get("namespace"), str | None), "a string"),
                             ("name", isinstance(request.get("name"), str | None), "a string"),
                             ("dryRun", isinstance(request.get("dryRun"), bool | None), "a boolean")):
        if not right:
            raise BadReview(f"request.{key} must be {what}")
    user = (request.get("userInfo") or {}).get("username") if isinstance(request.get("userInfo"), dict) else None
    return AdmissionRequest(uid=uid, kind=kind["kind"], group=kind.get("group") or "", operation=operation,
                            namespace=request.get("namespace") or "", name=request.get("name") or "",
                            object=request.get("object"), dry_run=bool(request.get("dryRun")),
                            user=user if isinstance(user, str) else "")

