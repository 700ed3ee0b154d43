"""A few raw API calls for what writes settings to the cluster (`certs`, `spare-vms`, the keeper's
`--spare-vms`): through kubernetes-asyncio (its auth and TLS), JSON in and out, statuses judged by the caller."""
from __future__ import annotations

import json
from typing import Any

from . import client

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class KubeError(Exception):
    """The API refused or could not be reached; the message says what to check."""


class Api:
    """`timeout`: seconds to wait for each answer (`--request-timeout`)."""

    def __init__(self, api_client: Any, timeout: float = 30.0):
        self._api = api_client
        self.timeout = timeout

    async def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> tuple[int, Any]:
        try:
            status, raw = await client.request(self._api, method, path, body=body, content_type=content_type,
                                               timeout=self.timeout)
        except client.ApiUnreachable as exc:
            raise KubeError(str(exc)) from None
        try:
            return status, json.loads(raw) if raw else None
        except (ValueError, TypeError):
            return status, None

    async def close(self) -> None:
        await self._api.close()


def failure(status: int, body: Any, what: str) -> KubeError:
    message = body.get("message") if isinstance(body, dict) else None
    hint = {403: " (check the RBAC of this ServiceAccount)", 404: " (not found)"}.get(status, "")
    return KubeError(f"{what}: API answered {status}{hint}" + (f": {message}" if message else ""))
