"""Where cluster facts come from: the Store protocol every source answers. `StoreError` when a Store
cannot tell (API error, timeout): the caller says why it found no node, never fails an admission."""
from __future__ import annotations

from typing import Any, Protocol

from .. import kinds
from ..kinds import Resource
from ..rules.fit import View
from ..rules.shared.facts import claims_of


class StoreError(Exception):
    """The store could not answer (API error, timeout): the fact is unknown, not absent."""


# Per cache: objects held, and when it was last listed or watched (Unix time).
Stats = dict[str, tuple[int, float | None]]


class Store(Protocol):
    """What every source answers; the defaults are those of a store with nothing in memory or the background.
    A list it answers is shared with its caches: never change it. StoreError when it cannot tell."""

    def peek(self, resource: Resource, namespace: str | None, name: str) -> tuple[bool, dict[str, Any] | None]:
        """From memory, without I/O: (True, object or None) when it can tell, (False, None) when only the API can."""
        return False, None

    async def get(self, resource: Resource, namespace: str | None, name: str, *,
                  timeout: float | None = None) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""

    async def pvs_by_volume_handle(self, handle: str, *, timeout: float | None = None) -> list[dict[str, Any]]:
        """PersistentVolumes whose spec.csi.volumeHandle is `handle` (a Longhorn volume)."""

    async def pods_by_claim(self, namespace: str, claim: str, *, timeout: float | None = None) -> list[dict[str, Any]]:
        """virt-launcher pods in `namespace` that mount PVC `claim`, or whose VMI has it as a volume (a
        hotplugged disk, in an attachment pod)."""

    async def migrations(self, *, timeout: float | None = None) -> list[dict[str, Any]]:
        """Every VirtualMachineInstanceMigration (what `--aim-evacuations` follows)."""
        return []

    async def fit_view(self, namespace: str, *, timeout: float | None = None) -> View | None:
        """What kube-scheduler's checks need to judge a pod of `namespace`; None when it cannot be had now."""

    def start(self) -> None:
        """Begin the watches; called once from the running loop."""

    def synced(self) -> bool:
        """Readiness: whether reads are answered from a complete view."""
        return True

    def degraded(self) -> list[str]:
        """Readiness notes: what is failing while the store serves what it has."""
        return []

    def stats(self) -> Stats:
        return {}

    async def close(self) -> None:
        pass


def using(launchers: list[dict[str, Any]], vmis: list[dict[str, Any]], claim: str) -> list[dict[str, Any]]:
    """The launcher pods that mount `claim`, and those of the VMIs that have it as a volume."""
    owners = {kinds.meta(vmi).get("uid") for vmi in vmis if claim in claims_of(vmi)} - {None, ""}
    return [pod for pod in launchers
            if claim in claims_of(pod) or kinds.labels(pod).get(kinds.CREATED_BY_LABEL) in owners]


def volume_handle(pv: dict[str, Any]) -> str | None:
    handle = (((pv.get("spec") or {}).get("csi")) or {}).get("volumeHandle")
    return handle if isinstance(handle, str) and handle else None


