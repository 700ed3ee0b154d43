"""Longhorn's Volumes, Replicas and settings, read for the whole I/O path of a VM's disks in `explain` and `status`:
listed once from the Longhorn namespace with the admin's credentials (get/list on `volumes.longhorn.io`,
`replicas.longhorn.io` and `settings.longhorn.io`; no watch), judged by `rules.keeping.iopath`."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from .. import kinds
from ..stores.direct import ClusterStore
from ..stores.store import StoreError
from ..config import Settings
from ..kinds import LONGHORN_REPLICA, LONGHORN_SETTING, LONGHORN_VOLUME
from ..rules.shared.facts import Fact
from ..rules.keeping.iopath import disk_path, DiskPath


@dataclasses.dataclass(frozen=True)
class Longhorn:
    """Longhorn's Volumes by name and every Replica, or why they could not be read."""

    volumes: dict[str, dict[str, Any]] | None
    replicas: list[dict[str, Any]] | None
    unknown: str = ""

    def paths(self, facts: Iterable[Fact]) -> list[DiskPath]:
        """The I/O path of each disk that names a Longhorn volume (the others have none to tell)."""
        return [disk_path(f, (self.volumes or {}).get(f.volume or ""), self.replicas, self.unknown)
                for f in facts if f.volume is not None]


async def read_longhorn(store: ClusterStore, settings: Settings, timeout: float) -> Longhorn:
    namespace = settings.longhorn_namespace
    try:
        volumes = await store.list(LONGHORN_VOLUME, namespace, timeout=timeout)
        replicas = await store.list(LONGHORN_REPLICA, namespace, timeout=timeout)
    except StoreError as exc:
        return Longhorn(None, None, f"Longhorn volumes and replicas not read: {exc}")
    return Longhorn({kinds.meta(v).get("name") or "": v for v in volumes}, replicas)


async def read_settings(store: ClusterStore, settings: Settings, timeout: float) -> dict[str, str] | None:
    """Longhorn's settings by name (their `value`), or None when they cannot be read."""
    try:
        found = await store.list(LONGHORN_SETTING, settings.longhorn_namespace, timeout=timeout)
    except StoreError:
        return None
    return {name: str(obj.get("value") or "") for obj in found
            if isinstance(obj, dict) and isinstance(name := kinds.meta(obj).get("name"), str)}
