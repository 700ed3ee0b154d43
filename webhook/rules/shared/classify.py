"""Which pods the rules act on, and why not: a fixed phrase for each pod left untouched."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ... import kinds
from ...config import Settings
from .alone import Alone


def is_share_manager_pod(pod: dict[str, Any], namespace: str, settings: Settings) -> bool:
    key, value = kinds.SHARE_MANAGER_COMPONENT
    return namespace == settings.longhorn_namespace and kinds.labels(pod).get(key) == value


def opted_in(annotations: Mapping[str, Any], settings: Settings) -> bool:
    """The opt-in, read in this one place: the pod's, VMI's or VM template's annotation
    `--opt-in-annotation` is exactly "true" (as the webhook configuration's matchConditions test it)."""
    return annotations.get(settings.opt_in_annotation) == "true"


def opted_in_launcher(pod: dict[str, Any], settings: Settings) -> Alone | None:
    """Why the pod is not an opted-in VM's launcher pod, or None when it is."""
    if not kinds.is_launcher(pod):
        return Alone.NOT_LAUNCHER
    if not opted_in(kinds.annotations(pod), settings):
        return Alone.NOT_OPTED_IN
    return None


def vm_exemption(pod: dict[str, Any], settings: Settings) -> Alone | None:
    """Why this pod is left untouched by the VM rule at its creation, or None when we act on it.
    Migration targets always are: pinned beside the source's share-manager one would fight its
    anti-affinity, and a preference moved share-managers where evacuations did not follow
    (docs/operations.md, "Migration targets")."""
    if (why := opted_in_launcher(pod, settings)) is not None:
        return why
    if kinds.MIGRATION_JOB_LABEL in kinds.labels(pod):
        return Alone.MIGRATION_TARGET
    if kinds.annotations(pod).get(kinds.EPHEMERAL_PROVISIONING) == "true":
        return Alone.EPHEMERAL
    if kinds.spec(pod).get("nodeName"):
        return Alone.ALREADY_BOUND
    return None


def running_exemption(pod: dict[str, Any], settings: Settings, *, any_vm: bool = False) -> Alone | None:
    """Why a launcher pod cannot be where its VM runs now, or None when it can (a completed
    migration's target counts: KubeVirt never removes kubevirt.io/migrationJobUID). `any_vm`
    counts VMs that are not opted in too (`explain` answers for any VM)."""
    why = opted_in_launcher(pod, settings)
    if why is Alone.NOT_LAUNCHER or (why is not None and not any_vm):
        return why
    if kinds.annotations(pod).get(kinds.EPHEMERAL_PROVISIONING) == "true":
        return Alone.EPHEMERAL
    if kinds.terminating(pod):
        return Alone.TERMINATING
    if kinds.finished(pod):
        return Alone.FINISHED
    if not kinds.spec(pod).get("nodeName"):
        return Alone.NOT_SCHEDULED
    return None
