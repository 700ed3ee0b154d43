"""kubernetes-asyncio's LeaseLock with each Lease call bounded in time and each outcome reported to the
Elector (`lease.py`). Held to the library by tests/keeper/test_leaselock.py: it overrides `get`, `create`
and `update`, reuses `update_lease`, `election_record` and `lease_reference`, and passes `_request_timeout` (the
client's own session timeout is overridden by every call's `aiohttp.ClientTimeout()`).
"""
from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable
from typing import Any

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.leaderelection.resourcelock.leaselock import LeaseLock

log = logging.getLogger("webhook.keeper")


def _api_error(status: int, reason: str) -> Any:
    """An ApiException the library can read: it decodes the body for the status code."""
    error = ApiException(status=status, reason=reason)
    error.body = json.dumps({"code": status, "message": reason})
    return error


class ReportingLeaseLock(LeaseLock):
    """The library's LeaseLock with timed calls, its outcomes reported to the Elector, and its
    writes without a traceback for a conflict."""

    def __init__(self, elector: Any):
        super().__init__(elector.name, elector.namespace, elector.identity, elector.api)
        self.elector, self.timeout = elector, elector.timing.request_timeout

    async def get(self, name, namespace):
        self.elector.reads += 1
        try:
            lease = await self.api_instance.read_namespaced_lease(name, namespace, _request_timeout=self.timeout)
        except ApiException as exc:
            self.elector.error = None if exc.status == 404 else f"reading the Lease: API answered {exc.status}"
            try:
                readable = isinstance(json.loads(exc.body or ""), dict)
            except ValueError:
                readable = False
            return False, exc if readable else _api_error(exc.status or 0, str(exc.reason))
        except Exception as exc:  # the library handles ApiException only
            self.elector.error = f"reading the Lease: {type(exc).__name__}: {exc}"
            return False, _api_error(0, f"{type(exc).__name__}: {exc}")
        self.lease_reference, record, self.elector.error = lease, self.election_record(lease), None
        self.elector.observed(record.holder_identity)
        return True, record

    # Writes as the library's, without its traceback for a conflict (two replicas racing is normal).
    async def create(self, name, namespace, election_record):
        body = k8s.V1Lease(metadata=k8s.V1ObjectMeta(name=name), spec=self.update_lease(election_record))
        return await self._write(self.api_instance.create_namespaced_lease(namespace, body,
                                                                           _request_timeout=self.timeout))

    async def update(self, name, namespace, updated_record):
        if self.lease_reference is None:
            return False
        self.lease_reference.spec = self.update_lease(updated_record, self.lease_reference.spec)
        return await self._write(self.api_instance.replace_namespaced_lease(name, namespace, self.lease_reference,
                                                                            _request_timeout=self.timeout))

    async def _write(self, call: Awaitable[Any]) -> bool:
        sent = asyncio.get_running_loop().time()  # the lease runs from no later than this
        try:
            await call
        except ApiException as exc:
            error = f"API answered {exc.status}"
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        else:
            self.elector.error = None
            self.elector.renewed_at = sent
            return True
        self.elector.error = f"writing the Lease: {error}"
        log.info("lease not written", extra={"fields": {"error": error}})
        return False
