"""longhorn-manager 1.12's remount deletion, played on kubefake's apiserver.

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
    async with apiserver.lock:
        for key, obj in list(apiserver.objects.items()):  # the request, on the Volume where it is stored
            if getattr(key[0], "plural", None) == "volumes" and getattr(key[0], "group", None) == "longhorn.io" \
                    and key[2] == volume and not obj.deleted:
                stamp = requested.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                await apiserver.merge(key, {"status": {"remountRequestedAt": stamp}})
        for key, pod in found:
            if (pod["metadata"].get("namespace"), pod["metadata"].get("name")) in doomed_names:
                await apiserver.drop(key)
                deleted.append(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}")
    return deleted
