"""longhorn-manager 1.12's share-manager restart and remount deletion, played on kubefake's apiserver.

While a volume's share-manager is in Error or Unknown (its pod deleted by a drain, its node down, its
fast-failover lease stale), longhorn-manager v1.12.1's volume controller (`controller/volume_controller.go`,
`ReconcileShareManagerState`) stamps the volume's `status.remountRequestedAt` with its "now" on every
reconcile, wherever the new share-manager comes back, the same node included; it stamps it again after an
auto-salvage and when a faulted volume comes back detached; it never clears it, and never sets it on a
first attach. `restart_share_manager` plays that. An NFS client usually recovers on its own behind the
same Service IP ("NFS clients can generally recover", `kubernetes_pod_controller.go`): whether a VM
pauses, and whether KubeVirt's retry resumes it, is virt_handler's to play, not Longhorn's.

When an RWX volume's share-manager restarts, Longhorn sets the volume's `status.remountRequestedAt`;
once the new share-manager has started after that moment and serves, longhorn-manager's pod
controller (`handlePodDeletionIfVolumeRequestRemount`) deletes each pod of the volume that started
before it and has a controller owner, when `auto-delete-pod-when-volume-detached-unexpectedly` is
true (the default) and the owner's `group/Kind` is not in
`blacklist-for-auto-delete-pod-when-volume-detached-unexpectedly` (`;`-separated; an owner of the
core group, `v1`, is never in it: its apiVersion has no group). A plain delete, not an eviction.
Written from Longhorn's behaviour, apart from the project's own reading of it
(`webhook.rules.shared.longhorn`), so that a test can hold one to the other.
"""
from __future__ import annotations

import datetime
from typing import Any

from .objects import LONGHORN_NS

AUTO_DELETE = "auto-delete-pod-when-volume-detached-unexpectedly"
BLACKLIST = "blacklist-for-auto-delete-pod-when-volume-detached-unexpectedly"


def _time(text: Any) -> datetime.datetime | None:
    try:
        return datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None


def _settings(apiserver: Any) -> dict[str, str]:
    return {(obj.raw.get("metadata") or {}).get("name"): str(obj.raw.get("value") or "")
            for (resource, namespace, _), obj in apiserver.objects.items()
            if getattr(resource, "plural", None) == "settings" and getattr(resource, "group", None) == "longhorn.io"
            and namespace == LONGHORN_NS and not obj.deleted}


def blacklisted(owner: dict[str, Any], settings: dict[str, str]) -> bool:
    group, slash, _ = str(owner.get("apiVersion", "")).partition("/")
    kinds = {kind.strip() for kind in settings.get(BLACKLIST, "").split(";") if kind.strip()}
    return bool(slash) and f"{group}/{owner.get('kind')}" in kinds


def doomed(pods: list[dict[str, Any]], claims: set[tuple[str, str]], requested: datetime.datetime,
           settings: dict[str, str]) -> list[dict[str, Any]]:
    """The pods longhorn-manager deletes for a remount requested at `requested` of the volume that
    `claims` (namespace, PVC) are bound to."""
    if settings.get(AUTO_DELETE, "true").strip().lower() != "true":
        return []
    found = []
    for pod in pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        mounts = {(meta.get("namespace"), (v.get("persistentVolumeClaim") or {}).get("claimName"))
                  for v in spec.get("volumes") or []}
        if not mounts & claims:
            continue
        started = _time((pod.get("status") or {}).get("startTime") or meta.get("creationTimestamp"))
        owner = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), None)
        if started is None or started >= requested or owner is None or blacklisted(owner, settings):
            continue
        found.append(pod)
    return found


def _rfc3339(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def request_remount(apiserver: Any, volume: str, requested: datetime.datetime) -> None:
    """One reconcile's stamp: the Volume's `status.remountRequestedAt`, where the Volume is stored."""
    async with apiserver.lock:
        for key, obj in list(apiserver.objects.items()):
            if getattr(key[0], "plural", None) == "volumes" and getattr(key[0], "group", None) == "longhorn.io" \
                    and key[2] == volume and not obj.deleted:
                await apiserver.merge(key, {"status": {"remountRequestedAt": _rfc3339(requested)}})


async def restart_share_manager(apiserver: Any, volume: str, node: str, *, down: datetime.datetime,
                                starts: datetime.datetime, serves: datetime.datetime,
                                reconcile: datetime.timedelta = datetime.timedelta(seconds=5)
                                ) -> tuple[datetime.datetime, list[str]]:
    """The share-manager of `volume` went away at `down` and its new pod, on `node` (the same node or
    another), started at `starts` and serves (Ready) from `serves`: the Volume stamped on each reconcile
    from `down` while the ShareManager was in Error or Unknown (until the new pod started), the last stamp
    kept; the new pod in place of the old one; then, the new pod serving, 1.12's deletion of the volume's
    pods that started before the request (`remount`). The last request, as the Volume keeps it, and the
    pods deleted."""
    stamps = [down]
    while stamps[-1] + reconcile < starts:
        stamps.append(stamps[-1] + reconcile)
    for at in stamps:
        await request_remount(apiserver, volume, at)
    async with apiserver.lock:
        for key, obj in list(apiserver.objects.items()):
            if getattr(key[0], "plural", None) != "pods" or key[1:] != (LONGHORN_NS, f"share-manager-{volume}") \
                    or obj.deleted:
                continue
            pod = {**obj.raw, "metadata": {k: v for k, v in (obj.raw.get("metadata") or {}).items()
                                            if k in ("name", "namespace", "labels")}}
            pod["spec"] = {**(pod.get("spec") or {}), "nodeName": node}
            pod["status"] = {"phase": "Running", "startTime": _rfc3339(starts), "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": _rfc3339(serves)}]}
            await apiserver.drop(key)
            await apiserver.insert(key, pod)
    return stamps[-1], await remount(apiserver, volume, stamps[-1])


async def remount(apiserver: Any, volume: str, requested: datetime.datetime) -> list[str]:
    """Longhorn's deletions once the share-manager of `volume` serves again after `requested`
    (recorded as the Volume's `status.remountRequestedAt` where the Volume is stored): the names of
    the pods deleted (`namespace/name`)."""
    claims = {((obj.raw.get("metadata") or {}).get("namespace"), (obj.raw.get("metadata") or {}).get("name"))
              for (resource, _, _), obj in apiserver.objects.items()
              if getattr(resource, "plural", None) == "persistentvolumeclaims" and not obj.deleted
              and (obj.raw.get("spec") or {}).get("volumeName") == volume}
    found = [(key, obj.raw) for key, obj in list(apiserver.objects.items())
             if getattr(key[0], "plural", None) == "pods" and getattr(key[0], "group", None) == "" and not obj.deleted]
    doomed_names = {(pod["metadata"].get("namespace"), pod["metadata"].get("name"))
                    for pod in doomed([pod for _, pod in found], claims, requested, _settings(apiserver))}
    deleted = []
    await request_remount(apiserver, volume, requested)
    async with apiserver.lock:
        for key, pod in found:
            if (pod["metadata"].get("namespace"), pod["metadata"].get("name")) in doomed_names:
                await apiserver.drop(key)
                deleted.append(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}")
    return deleted
