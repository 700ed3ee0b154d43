"""`spare-vms` (and `--spare-vms on`): `kubevirt.io/VirtualMachineInstance` in Longhorn's Setting
`blacklist-for-auto-delete-pod-when-volume-detached-unexpectedly`, so that a share-manager restart no
longer deletes launcher pods (rebooting their VMs); `--undo` takes it out. The price (docs/operations.md):
a VM whose NFS server moved keeps its mount, which that deletion refreshes (longhorn/longhorn#12986).
The JSON patch tests the resourceVersion just read: a concurrent change is read again, never overwritten.
"""
from __future__ import annotations

from typing import Any

from ..kinds import LONGHORN_SETTING
from ..rules.shared.longhorn import BLACKLIST, VMI_KIND, sparing
from ..cluster import client
from ..cluster.events import identity, new_event
from ..cluster.client import JSON_PATCH, Api, KubeError, failure

ATTEMPTS = 5  # refused because the Setting changed under us: read again and retry


def _event(setting: dict[str, Any], before: str, after: str, spare: bool, by: str) -> dict[str, Any]:
    meta = setting.get("metadata") or {}
    involved = {"apiVersion": LONGHORN_SETTING.api_version, "kind": LONGHORN_SETTING.kind, "name": BLACKLIST,
                "namespace": meta.get("namespace"), "uid": meta.get("uid", "")}
    if spare:
        what = (f"added {VMI_KIND}: Longhorn no longer deletes a VM's launcher pod (rebooting it) when the "
                f"share-manager of its volume restarts")
    else:
        what = f"took {VMI_KIND} out: Longhorn deletes launcher pods again when their share-manager restarts"
    return new_event(involved, "VMsSpared" if spare else "VMsNoLongerSpared",
                     f"{by}{'' if spare else ' --undo'} {what} (was {before!r}, now {after!r})",
                     identity())


async def change(api: Api, namespace: str, spare: bool, *, by: str = "kubevirt-colocate spare-vms") -> str:
    """The Setting changed if it has to be: one line saying what was done. KubeError when it cannot be."""
    path = LONGHORN_SETTING.path(namespace, BLACKLIST)
    for _ in range(ATTEMPTS):
        status, setting = await api.request("GET", path)
        if status == 404:
            raise KubeError(f"Longhorn has no Setting {BLACKLIST} in namespace {namespace} (Longhorn 1.4 or newer "
                            f"there? see --longhorn-namespace)")
        if status != 200 or not isinstance(setting, dict):
            raise failure(status, setting, f"reading Setting {namespace}/{BLACKLIST}")
        before = str(setting.get("value") or "")
        try:
            after = sparing(before, spare)
        except ValueError as exc:
            raise KubeError(f"nothing changed: {exc}; correct it by hand first") from None
        if after == before:
            state = "already has" if spare else "does not have"
            return f"Setting {namespace}/{BLACKLIST} {state} {VMI_KIND}: nothing changed ({before!r})"
        version = (setting.get("metadata") or {}).get("resourceVersion")
        patch = [{"op": "test", "path": "/metadata/resourceVersion", "value": version},
                 {"op": "add", "path": "/value", "value": after}]
        status, answer = await api.request("PATCH", path, patch, JSON_PATCH)
        if status in (409, 422):  # changed since it was read: read it again
            continue
        if status != 200:
            raise failure(status, answer, f"patching Setting {namespace}/{BLACKLIST}")
        said = f"Setting {namespace}/{BLACKLIST}: {before!r} -> {after!r}"
        status, _ = await api.request("POST", f"/api/v1/namespaces/{namespace}/events",
                                      _event(answer if isinstance(answer, dict) else setting, before, after, spare, by))
        return said if 200 <= status < 300 else f"{said} (its Event not created: API answered {status})"
    raise KubeError(f"Setting {namespace}/{BLACKLIST} kept changing under us ({ATTEMPTS} times); run again")


async def run(*, namespace: str, spare: bool, kubeconfig: str | None, context: str | None = None,
              timeout: float | None = None) -> str:
    api = Api(await client.connect(kubeconfig, context), timeout=timeout or 30.0)
    try:
        return await change(api, namespace, spare)
    finally:
        await api.close()
