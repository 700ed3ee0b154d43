"""A VM's pods as virt-controller renders them (kubevirt/kubevirt `pkg/virt-controller/watch/migration/migration.go`):
all pods of one VMI carry `kubevirt.io/created-by: <VMI uid>`, and a migration target pod keeps
`kubevirt.io/migrationJobUID` for life."""
from __future__ import annotations

from typing import Any

from ... import kinds
from ...kinds import REQUIRED
from ..shared.prune import drop_empty, keep_or_drop


def own_pods(vmi_uid: str) -> dict[str, Any]:
    """The label selector of a VMI's own pods, which KubeVirt keeps a migration target apart from."""
    return {"matchLabels": {kinds.CREATED_BY_LABEL: vmi_uid}}


def as_started(pod: dict[str, Any], vmi_selector: Any = None) -> dict[str, Any]:
    """The VM's pod as KubeVirt creates it when the VM starts (or is migrated next), from a pod created as a migration
    target: without kubevirt.io/migrationJobUID, the anti-affinity to the VMI's own pods, and the hostname a targeted
    migration merged into its nodeSelector (unless the VMI's own names it)."""
    if kinds.MIGRATION_JOB_LABEL not in kinds.labels(pod):
        return pod
    # Copies along the paths changed below, the rest shared: the keeper renders a target for every
    # VM apart at every pass, and a whole copy of each pod was most of its work.
    labels = {k: v for k, v in kinds.labels(pod).items() if k != kinds.MIGRATION_JOB_LABEL}
    spec = dict(kinds.spec(pod))
    pod = {**pod, "metadata": {**kinds.meta(pod), "labels": labels}, "spec": spec}
    selector = spec.get("nodeSelector")
    own = vmi_selector if isinstance(vmi_selector, dict) else {}
    if isinstance(selector, dict) and kinds.HOSTNAME_LABEL in selector and kinds.HOSTNAME_LABEL not in own:
        spec["nodeSelector"] = {k: v for k, v in selector.items() if k != kinds.HOSTNAME_LABEL}
    vmi_uid = labels.get(kinds.CREATED_BY_LABEL)
    affinity = spec.get("affinity")
    anti = affinity.get("podAntiAffinity") if isinstance(affinity, dict) else None
    terms = anti.get(REQUIRED) if isinstance(anti, dict) else None
    if vmi_uid and isinstance(terms, list):
        mine = own_pods(vmi_uid)
        anti = dict(anti)  # type: ignore[arg-type]
        spec["affinity"] = {**affinity, "podAntiAffinity": anti}  # type: ignore[dict-item]
        keep_or_drop(anti, REQUIRED, [t for t in terms if not (isinstance(t, dict) and t.get("labelSelector") == mine)])
        drop_empty(spec, "affinity", "podAntiAffinity")
    return pod
