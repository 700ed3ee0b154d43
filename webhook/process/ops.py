"""The plain-HTTP operations port: probes and metrics, kept off the TLS admission port (`serve`),
and the keeper's own (`keep`)."""
from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CollectorRegistry, Gauge

from .. import metrics

# Why the process is not ready; an empty list means ready.
Readiness = Callable[[], list[str]]
READINESS_KEY = web.AppKey("readiness", object)
DEGRADED_KEY = web.AppKey("degraded", object)
REGISTRY_KEY = web.AppKey("registry", CollectorRegistry)
READY_KEY = web.AppKey("ready", Gauge)


async def healthz(request: web.Request) -> web.Response:
    """Alive: the event loop answers. Never depends on the API server (no restart storms)."""
    return web.Response(text="ok\n")


async def readyz(request: web.Request) -> web.Response:
    reasons = request.app[READINESS_KEY]()
    request.app[READY_KEY].set(0 if reasons else 1)
    if reasons:
        return web.Response(status=503, text="not ready: " + "; ".join(reasons) + "\n")
    # A failing watch keeps serving what it has (all replicas going unready in an API outage
    # would only turn every answer into failurePolicy Ignore): ready, and say so.
    degraded = request.app[DEGRADED_KEY]()
    if degraded:
        return web.Response(text="ok, degraded: " + "; ".join(degraded) + "\n")
    return web.Response(text="ok\n")


async def metrics_page(request: web.Request) -> web.Response:
    return web.Response(body=metrics.render(request.app[REGISTRY_KEY]),
                        headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


def make_ops_app(readiness: Readiness, degraded: Readiness = list, registry: CollectorRegistry = metrics.REGISTRY,
                 ready: Gauge = metrics.READY) -> web.Application:
    """/healthz, /readyz and /metrics of one process (`serve`'s registry and gauge, or `keep`'s)."""
    app = web.Application()
    app[READY_KEY] = ready
    app[READINESS_KEY] = readiness
    app[DEGRADED_KEY] = degraded
    app[REGISTRY_KEY] = registry
    app.router.add_routes([web.get("/healthz", healthz), web.get("/readyz", readyz), web.get("/metrics", metrics_page)])
    return app
