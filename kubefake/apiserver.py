"""What a real apiserver does on writes and kmock leaves out, mixed into a kmock emulator.

kmock's public `KubernetesEmulator` stores a created object before any reaction sees the
request, keyed by the name it was sent with, and knows only PATCH: generated names, dry runs,
creates turned away whole and PUT with optimistic concurrency cannot be expressed as
reactions. `ApiserverWrites` answers those writes itself, through the emulator's request
handler, before kmock does.
"""
from __future__ import annotations

import copy
import itertools
import secrets
import uuid
from typing import Any

import kmock
from aiohttp import web

from .objects import stamp

__all__ = ["ApiserverWrites", "stamp"]


class ApiserverWrites:
    """Names from generateName, uid, creationTimestamp and resourceVersion on create; `dryRun=All`
    creates answered but never stored; a create `refuse` turns away as a whole (an admission
    webhook, a conflict: nothing stored); PUT replacing an object (the Lease), 409 when its
    resourceVersion is stale. Mixed into a `kmock.KubernetesEmulator`, before it."""

    _versions = itertools.count(1000)
    refuse: Any = None  # request -> kmock.KubernetesError | None

    async def _write(self, request: Any) -> Any:
        """The answer to a write kmock would answer otherwise, or None to let kmock answer."""
        if request.resource is not None and request.method == "POST" and isinstance(request.data, dict):
            metadata = request.data.setdefault("metadata", {})
            if not metadata.get("name") and metadata.get("generateName"):
                metadata["name"] = metadata["generateName"] + secrets.token_hex(3)[:5]
            metadata.setdefault("uid", str(uuid.uuid4()))
            metadata.setdefault("creationTimestamp", stamp())
            metadata["resourceVersion"] = str(next(self._versions))
            if request.params.get("dryRun") == "All":
                return await kmock.RawHandler._handle(self, request)  # answered, never stored
            if self.refuse is not None and (error := self.refuse(request)) is not None:
                return await self._render_error(error)
        if request.resource is not None and request.method == "PUT" and request.name:
            return await self._replace(request)
        return None

    async def _serve_create(self, request: Any) -> Any:
        if request.params.get("dryRun") == "All":
            return request.data
        return await super()._serve_create(request)

    async def _replace(self, request: Any) -> Any:
        key = (request.resource, request.namespace, request.name)
        async with self._lock:
            if key not in self.objects or self.objects[key].deleted:
                return await self._render_error(kmock.KubernetesError(404, "NotFound", f"{request.name} not found"))
            stored = self.objects[key].raw
            sent = (request.data.get("metadata") or {}).get("resourceVersion")
            if sent and sent != (stored.get("metadata") or {}).get("resourceVersion"):
                return await self._render_error(kmock.KubernetesError(
                    409, "Conflict", "the object has been modified; please apply your changes to the latest version"))
            new = copy.deepcopy(request.data)
            new.setdefault("metadata", {})["resourceVersion"] = str(next(self._versions))
            self.objects[key] = new
            await self._buses[request.resource].put({"type": "MODIFIED", "object": new})
        return web.json_response(new)
