"""KubeVirt objects the keeper reads and writes: VMIs and migrations, watched and created.

VirtualMachineInstances and VirtualMachineInstanceMigrations are listed and watched cluster
wide with the same Informer/Reflector machinery as the admission caches, trimmed to what
the keeper's rules read (shapes.py, from what the readers declare: rules/shared/declared.py). Migrations are
created here, dry-run created to learn whether the cluster keeps `spec.addedNodeSelector`
(KubeVirt >= 1.6; older CRD schemas prune it, kubevirt/kubevirt
`staging/src/kubevirt.io/api/core/v1/types.go`) and `spec.priority`, and deleted to cancel them,
by uid: never another object that took the same name. A VM the keeper recovered is unpaused
through virt-api's subresource (`unpause_vmi`).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import orjson

from .. import kinds
from ..config import Settings
from ..kinds import VMI, VMIM
from ..cluster.client import ApiUnreachable, request
from ..cluster.informer import Informer, Informers
from ..cluster.table import Watcher
from ..stores.shapes import shapes
from ..cluster.reflector import Timing


class KubeVirtWatch(Informers):
    """VMIs and migrations of the whole cluster, listed and watched while the keeper leads; each change
    to a VMI told to `watchers` as it comes."""

    task_prefix = "keeper"

    def __init__(self, api: Any, settings: Settings, timing: Timing = Timing(), watchers: tuple[Watcher, ...] = ()):
        shape = shapes(settings)
        self.vmis = Informer(VMI, shape[VMI.kind], watchers=watchers)
        self.migrations = Informer(VMIM, shape[VMIM.kind])
        super().__init__(api, timing, (self.vmis, self.migrations))

    def all_vmis(self) -> Iterator[dict[str, Any]]:
        """One decoded VMI at a time: a pass over 20k VMIs never holds them all decoded at once."""
        return _decoded(self.vmis)

    def all_migrations(self) -> Iterator[dict[str, Any]]:
        return _decoded(self.migrations)


def _decoded(informer: Informer) -> Iterator[dict[str, Any]]:
    table = informer.table
    return (table.decode(key, blob) for key, blob in list(table.objects.items()))


# --------------------------------------------------------------------------- creating migrations


@dataclasses.dataclass(frozen=True)
class Created:
    """The API's answer to a create or a delete: the object as stored (or as it would be, for a
    dry run), or why there is none."""

    status: int  # 0 when no HTTP answer came
    obj: dict[str, Any] | None
    error: str = ""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300 and self.obj is not None


async def create_migration(api: Any, manifest: dict[str, Any], *, timeout: float, dry_run: bool = False) -> Created:
    """POST one VirtualMachineInstanceMigration. A dry run asks for strict field validation, so
    a schema that does not know a field answers 400 rather than dropping it silently."""
    namespace = kinds.meta(manifest).get("namespace")
    query = [("dryRun", "All"), ("fieldValidation", "Strict")] if dry_run else []
    return await _call(api, "POST", VMIM.path(namespace), query=query, body=manifest, timeout=timeout)


def delete_options(uid: str) -> dict[str, Any]:
    """The body of a DELETE that removes only the object with this uid: the apiserver answers 409
    Conflict when the name now holds another one (ours deleted, someone's re-created under it)."""
    return {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}


async def delete_migration(api: Any, namespace: str, name: str, *, uid: str, timeout: float) -> Created:
    """DELETE one migration, the one with `uid` only: what `virtctl migrate-cancel` does; KubeVirt
    aborts it."""
    return await _call(api, "DELETE", VMIM.path(namespace, name), body=delete_options(uid), timeout=timeout)


# virt-api's subresources of a VMI (kubevirt/kubevirt `pkg/virt-api/rest/lifecycle.go`)
VMI_SUBRESOURCES = dataclasses.replace(VMI, group="subresources.kubevirt.io")


async def unpause_vmi(api: Any, namespace: str, name: str, *, timeout: float) -> Created:
    """PUT `.../virtualmachineinstances/NAME/unpause` (`subresources.kubevirt.io/v1`), what
    `virtctl unpause vmi` does (RBAC: `update` on `virtualmachineinstances/unpause`). virt-api answers
    200 with no body, and 409 Conflict for a VMI that is not running or has no Paused condition.
    `obj` is {} on success."""
    done = await _call(api, "PUT", f"{VMI_SUBRESOURCES.path(namespace, name)}/unpause", body={}, timeout=timeout)
    return Created(done.status, {}) if 200 <= done.status < 300 else done


async def _call(api: Any, method: str, path: str, *, query: list[tuple[str, str]] | tuple[()] = (), body: Any = None,
                timeout: float) -> Created:
    try:
        status, raw = await request(api, method, path, query=query, body=body, timeout=timeout)
    except ApiUnreachable as exc:
        return Created(0, None, f"no answer within {timeout:g}s" if exc.timed_out else str(exc))
    try:
        answer = orjson.loads(raw) if raw else None
    except ValueError:
        answer = None
    if 200 <= status < 300:
        if not isinstance(answer, dict):
            return Created(status, None, f"API answered {status} without an object")
        return Created(status, answer)
    return Created(status, None, answered(status, raw))


def answered(status: int, raw: bytes) -> str:
    """A failed answer in words: its status and the API's own message (a Status object's)."""
    try:
        answer = orjson.loads(raw) if raw else None
    except ValueError:
        answer = None
    message = answer.get("message") if isinstance(answer, dict) else None
    return f"API answered {status}" + (f": {str(message)[:300]}" if message else "")
