"""KubeVirt objects the keeper reads and writes: VMIs, migrations and IOerror Events on VMIs watched cluster wide,
trimmed (`stores/shapes.py`); migrations created (dry-run first, `targeted.py`) and deleted by uid; a recovered VM
unpaused through virt-api's subresource.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import orjson

from .. import kinds
from ..config import Settings
from ..kinds import EVENT, VMI, VMIM
from ..cluster.client import ApiUnreachable, request
from ..cluster.informer import Informer, Informers
from ..stores.shapes import shapes, trim
from ..cluster.reflector import Timing
from ..rules.keeping import io_errors
from ..rules.keeping.io_errors import IoError


class KubeVirtWatch(Informers):
    """VMIs, migrations and IOerror Events, watched while leading; without Events only stale-mount recovery is off."""

    task_prefix = "keeper"

    def __init__(self, api: Any, settings: Settings, timing: Timing = Timing()):
        shape = shapes(settings)
        self.vmis = Informer(VMI, shape[VMI.kind])
        self.migrations = Informer(VMIM, shape[VMIM.kind])
        self.io_error_events = Informer(EVENT, lambda event: trim(event, io_errors.KEPT), fields=io_errors.FIELDS,
                                        wanted=lambda event: io_errors.read_io_error(event) is not None,
                                        indexers={"vmi": _involved_uid})
        super().__init__(api, timing, (self.vmis, self.migrations, self.io_error_events))

    def synced(self) -> bool:
        return self.vmis.synced and self.migrations.synced

    async def wait_synced(self) -> None:
        for informer in (self.vmis, self.migrations):
            await informer.synced_event.wait()

    def degraded(self) -> list[str]:
        """What keeps the keeper from seeing every VM and migration now (the Events' are `events_note`)."""
        return [note for note in super().degraded() if not note.startswith(f"{self.io_error_events.name}: ")]

    def events_note(self) -> list[str]:
        """Why KubeVirt's IOerror Events are not all seen, and what that turns off (a readiness note)."""
        events = self.io_error_events
        if events.error is None:  # listed, or being listed
            return []
        if not events.synced:
            return [f"stale-mount recovery is off: KubeVirt's IOerror Events cannot be listed ({events.error}); moves "
                    f"back to storage and unpauses of VMs moved onto a fresh mount go on"]
        return [f"KubeVirt's IOerror Events: {events.error}: stale-mount recovery goes by those last seen"]

    def io_errors(self, uid: str) -> tuple[IoError, ...]:
        """KubeVirt's I/O-error pauses of the VMI with this uid, per disk and cause, newest first."""
        return io_errors.by_vmi(self.io_error_events.table.lookup("vmi", uid)).get(uid, ())


def _involved_uid(event: dict[str, Any]) -> tuple[str, ...]:
    uid = (event.get("involvedObject") or {}).get("uid")
    return (uid,) if isinstance(uid, str) and uid else ()


async def read_io_errors(api: Any, timeout: float) -> dict[str, tuple[IoError, ...]] | str:
    """The IOerror Events on VMIs, read once (for `status`), by VMI uid newest first; or why they could not be."""
    events: list[Any] = []
    more = ""
    while True:
        query = [("fieldSelector", io_errors.FIELDS), ("limit", "500")] + ([("continue", more)] if more else [])
        listed = await _call(api, "GET", EVENT.path(), query=query, timeout=timeout)
        if listed.obj is None or not isinstance(listed.obj.get("items"), list):
            return f"Events: {listed.error or 'the API sent no list'}"
        events += listed.obj["items"]
        more = str(kinds.meta(listed.obj).get("continue") or "")
        if not more:
            return io_errors.by_vmi(events)


# --------------------------------------------------------------------------- creating migrations


@dataclasses.dataclass(frozen=True)
class Created:
    """The API's answer to a write: the object as stored (or would be, for a dry run), or why there is none."""

    status: int  # 0 when no HTTP answer came
    obj: dict[str, Any] | None
    error: str = ""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300 and self.obj is not None


async def create_migration(api: Any, manifest: dict[str, Any], *, timeout: float, dry_run: bool = False) -> Created:
    """POST one migration; a dry run asks for strict field validation: an unknown field is a 400, not dropped."""
    namespace = kinds.meta(manifest).get("namespace")
    query = [("dryRun", "All"), ("fieldValidation", "Strict")] if dry_run else []
    return await _call(api, "POST", VMIM.path(namespace), query=query, body=manifest, timeout=timeout)


def delete_options(uid: str) -> dict[str, Any]:
    """A DELETE of this uid only: the apiserver answers 409 when the name now holds another object."""
    return {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}


async def delete_migration(api: Any, namespace: str, name: str, *, uid: str, timeout: float) -> Created:
    """DELETE one migration, by uid: what `virtctl migrate-cancel` does; KubeVirt aborts it."""
    return await _call(api, "DELETE", VMIM.path(namespace, name), body=delete_options(uid), timeout=timeout)


async def unpause_vmi(api: Any, namespace: str, name: str, *, timeout: float) -> Created:
    """`virtctl unpause vmi`: virt-api answers 200 without a body (`obj` {}), 409 for a VMI not running or paused
    (virt-api's subresources of a VMI: kubevirt/kubevirt `pkg/virt-api/rest/lifecycle.go`)."""
    path = dataclasses.replace(VMI, group="subresources.kubevirt.io").path(namespace, name)
    done = await _call(api, "PUT", f"{path}/unpause", body={}, timeout=timeout)
    return Created(done.status, {}) if 200 <= done.status < 300 else done


async def _call(api: Any, method: str, path: str, *, query: list[tuple[str, str]] | tuple[()] = (), body: Any = None,
                timeout: float) -> Created:
    try:
        status, raw = await request(api, method, path, query=query, body=body, timeout=timeout)
    except ApiUnreachable as exc:
        return Created(0, None, f"no answer within {timeout:g}s" if exc.timed_out else str(exc))
    if not 200 <= status < 300:
        return Created(status, None, answered(status, raw))
    answer = _json(raw)
    if not isinstance(answer, dict):
        return Created(status, None, f"API answered {status} without an object")
    return Created(status, answer)


def _json(raw: bytes) -> Any:
    try:
        return orjson.loads(raw) if raw else None
    except ValueError:
        return None


def answered(status: int, raw: bytes) -> str:
    """A failed answer in words: its status and the API's own message (a Status object's)."""
    answer = _json(raw)
    message = answer.get("message") if isinstance(answer, dict) else None
    return f"API answered {status}" + (f": {str(message)[:300]}" if message else "")
