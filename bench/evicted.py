"""`kubectl drain`'s eviction of a drained node's share-managers, before each storm of `bench.storm`.

A drain evicts the share-manager pods at once; each terminates on the node for a few seconds, and
longhorn-manager creates it again once it is gone (the new pod has its name). `serve` sees them
terminate, and prepares their answers meanwhile (webhook/admission/prepare.py). Before each storm
the bench plays that in the emulator: each pod created running on the drained node (held there by
Longhorn's finalizer, as kubefake's objects carry it), deleted (terminating), SECONDS later gone
(its finalizer dropped, as once the kubelet has confirmed its end); the storm is their re-creation.
`serve` is at rest before each step, so the storm is timed from a quiet `serve`, as each batch is.
"""
from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from kubefake import objects

from . import bodies
from .served import settled

SECONDS = 2.0  # evicted to gone: longhorn-manager creates each share-manager again a few seconds after its eviction
AT_ONCE = 32  # requests in flight to the emulator


def running(volume: str, node: str, i: int) -> dict[str, Any]:
    """The share-manager pod of `volume` as it ran on `node` until the drain: stored by the apiserver
    (its defaults and admission plugins' additions: `bodies.defaulted`), Longhorn's finalizer on it."""
    pod = bodies.defaulted(objects.share_manager_pod(volume), f"evicted{i}")
    pod["spec"]["nodeName"] = node
    pod["metadata"]["finalizers"] = ["longhorn.io"]
    return pod


class Eviction:
    """The evicted share-managers of `volumes` on `node`, played in the emulator at `api` (`__call__`)."""

    def __init__(self, api: str, volumes: list[str], node: str, seconds: float = SECONDS) -> None:
        self.api, self.node, self.seconds = api.rstrip("/"), node, seconds
        self.pods = [running(volume, node, i) for i, volume in enumerate(volumes)]

    async def __call__(self, serve_pid: int) -> None:
        """Each pod created, evicted, and `seconds` later gone, `serve` at rest after each step."""
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=AT_ONCE)) as session:
            url = f"{self.api}/api/v1/namespaces/{objects.LONGHORN_NS}/pods"
            await self._each(session, "POST", lambda pod: url, lambda pod: pod)
            await self._each(session, "DELETE", lambda pod: f"{url}/{pod['metadata']['name']}", lambda pod: None)
            await asyncio.sleep(self.seconds)
            await settled(serve_pid)
            await self._each(session, "PATCH", lambda pod: f"{url}/{pod['metadata']['name']}",
                             lambda pod: {"metadata": {"finalizers": None}})
        await settled(serve_pid)

    async def _each(self, session: aiohttp.ClientSession, method: str, url: Any, body: Any) -> None:
        async def one(pod: dict[str, Any]) -> None:
            headers = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else None
            async with session.request(method, url(pod), json=body(pod), headers=headers) as response:
                if response.status >= 300:
                    raise SystemExit(f"the emulator refused {method} of pod {pod['metadata']['name']}: "
                                     f"{response.status} {await response.text()}")

        await asyncio.gather(*(one(pod) for pod in self.pods))
