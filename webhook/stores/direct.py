"""A Store that reads the live cluster directly: plain GETs, each within its timeout."""
from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import orjson

from .. import kinds, metrics
from ..kinds import NODE, POD, PV, PVC, VMI, VMIM, Resource
from ..cluster import client
from ..rules import fit
from .store import Store, StoreError, using, volume_handle


class ClusterStore(Store):
    """Direct reads with kubernetes-asyncio; an answer is never older than the request."""

    def __init__(self, api_client: Any):
        self._api = api_client

    async def _read(self, resource: Resource, namespace: str | None, name: str | None, query: list[tuple[str, str]],
                    timeout: float | None) -> dict[str, Any] | None:
        try:
            path = resource.path(namespace, name)
        except kinds.BadName as exc:
            raise StoreError(str(exc)) from None
        try:
            if timeout is not None and timeout <= 0:
                raise StoreError(f"no time left to read {path}")
            try:
                status, body = await client.request(self._api, "GET", path, query=query, timeout=timeout)
            except client.ApiUnreachable as exc:
                raise StoreError(f"timed out after {timeout or 0:.1f}s reading {path}" if exc.timed_out
                                 else str(exc)) from None
            if status == 404:
                return None
            if not 200 <= status < 300:
                raise StoreError(f"API answered {status} for {path}")
            try:
                return orjson.loads(body)
            except ValueError:
                raise StoreError(f"API sent a body that is not JSON for {path}") from None
        except StoreError:
            metrics.API_ERRORS.labels(resource.plural).inc()
            raise

    async def get(self, resource, namespace, name, *, timeout=None):
        return await self._read(resource, namespace, name, [], timeout)

    async def list(self, resource: Resource, namespace: str | None = None, labels: dict[str, str] | None = None,
                   *, timeout: float | None = None) -> list[dict[str, Any]]:
        query = [("labelSelector", ",".join(f"{k}={v}" for k, v in labels.items()))] if labels else []
        body = await self._read(resource, namespace, None, query, timeout)
        if body is None:
            raise StoreError(f"API has no {resource.plural} resource")
        items = body.get("items") or []
        # Lists omit apiVersion/kind on items; the rules don't need them. Filter client-side too.
        return [item for item in items if kinds.labels_match(item, labels)]

    async def listed(self, scopes: Iterable[tuple[Resource, str | None]], *, timeout: float | None) -> list[dict[str, Any]]:
        """Every object of each (resource, namespace or None: all) listed once, with its apiVersion, kind and
        namespace: list items may omit them (their namespace too, in some servers' answers)."""
        objects: list[dict[str, Any]] = []
        for resource, namespace in scopes:
            for obj in await self.list(resource, namespace, timeout=timeout):
                obj["apiVersion"], obj["kind"] = resource.api_version, resource.kind
                if namespace is not None:
                    obj.setdefault("metadata", {}).setdefault("namespace", namespace)
                objects.append(obj)
        return objects

    async def fit_view(self, namespace, *, timeout=None):
        """Read once what the checks need: an admin's one-off question (`explain`)."""
        try:
            async with asyncio.timeout(timeout):
                nodes = await self.list(NODE, timeout=timeout)
                pods = [p for p in await self.list(POD, timeout=timeout) if not kinds.finished(p)]
                claims = await self.listed(((PVC, namespace),), timeout=timeout)
                volumes = await self.list(PV, timeout=timeout)
        except (StoreError, TimeoutError):
            return None
        return fit.StaticView(nodes, pods, claims, volumes)

    async def pvs_by_volume_handle(self, handle, *, timeout=None):
        return [pv for pv in await self.list(PV, timeout=timeout) if volume_handle(pv) == handle]

    async def migrations(self, *, timeout=None):
        body = await self._read(VMIM, None, None, [], timeout)
        return [] if body is None else list(body.get("items") or [])  # no such resource: no migrations

    async def pods_by_claim(self, namespace, claim, *, timeout=None):
        pods = await self.list(POD, namespace, dict([kinds.VIRT_LAUNCHER]), timeout=timeout)
        vmis = await self.list(VMI, namespace, timeout=timeout)
        return using(pods, vmis, claim)

    async def close(self) -> None:
        await self._api.close()
