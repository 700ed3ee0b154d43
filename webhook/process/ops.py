"""The plain-HTTP operations port: probes and metrics, kept off the TLS admission port (`serve`),
and the keeper's own (`keep`)."""
from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Gauge

from .. import metrics
from . import listening
from .loop import new_event_loop

# Why the process is not ready; an empty list means ready.
Readiness = Callable[[], list[str]]
READINESS_KEY = web.AppKey("readiness", object)
DEGRADED_KEY = web.AppKey("degraded", object)
REGISTRY_KEY = web.AppKey("registry", CollectorRegistry)
READY_KEY = web.AppKey("ready", Gauge)


def alive(app: web.Application) -> tuple[int, str]:
    """Alive: the event loop answers. Never depends on the API server (no restart storms)."""
    return 200, "ok\n"


def ready(app: web.Application) -> tuple[int, str]:
    reasons = app[READINESS_KEY]()
    app[READY_KEY].set(0 if reasons else 1)
    if reasons:
        return 503, "not ready: " + "; ".join(reasons) + "\n"
    # A failing watch keeps serving what it has (all replicas going unready in an API outage
    # would only turn every answer into failurePolicy Ignore): ready, and say so.
    degraded = app[DEGRADED_KEY]()
    if degraded:
        return 200, "ok, degraded: " + "; ".join(degraded) + "\n"
    return 200, "ok\n"


PROBES = {"/healthz": alive, "/readyz": ready}


async def probe(request: web.Request) -> web.Response:
    status, text = PROBES[request.path](request.app)
    return web.Response(status=status, text=text)


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
    app.router.add_routes([web.get("/healthz", probe), web.get("/readyz", probe), web.get("/metrics", metrics_page)])
    return app


# The probes are answered on a thread of their own (`Apart`), so that no long work on the process's loop
# delays them past the kubelet's 1 s: each is asked of the loop, and answered from what it last said when
# it does not answer within ASK_SECONDS; /healthz fails once the loop has not turned for STALLED_SECONDS.
ASK_SECONDS = 0.25
UNSAID = {"/healthz": (200, "ok\n"), "/readyz": (503, "not ready: the process has not answered yet\n")}
STALLED_SECONDS = 20.0
BEAT_SECONDS = 1.0


class Apart:
    """The operations port of `app` served from a thread of its own; `addresses` and `cleanup()` as a
    listening.Port's."""

    def __init__(self, app: web.Application) -> None:
        self.app, self.loop = app, asyncio.get_running_loop()
        self.beat = time.monotonic()  # the last turn of the process's loop seen
        self.said: dict[str, tuple[int, str]] = {}  # each probe's last answer from the process's loop
        self.thread_loop = new_event_loop()
        self.thread = threading.Thread(target=self.thread_loop.run_forever, name="ops-port", daemon=True)
        self.port: listening.Port | None = None
        self._beating: asyncio.TimerHandle | None = None

    async def start(self, host: str, port: int) -> Apart:
        self._beat()
        self.thread.start()
        served = web.Application(middlewares=[self._asked])
        served.router.add_route("GET", "/metrics", metrics_page)
        served[REGISTRY_KEY] = self.app[REGISTRY_KEY]
        made = asyncio.run_coroutine_threadsafe(listening.start(served, host, port, None), self.thread_loop)
        self.port = await asyncio.wrap_future(made)
        return self

    def _beat(self) -> None:
        self.beat = time.monotonic()
        self._beating = self.loop.call_later(BEAT_SECONDS, self._beat)

    @web.middleware
    async def _asked(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path not in PROBES:
            return await handler(request)
        asked = asyncio.run_coroutine_threadsafe(self._on_loop(request.path), self.loop)
        try:
            status, text = await asyncio.wait_for(asyncio.wrap_future(asked), ASK_SECONDS)
        except TimeoutError:  # the loop is busy: what it said last (ready only once it said so), or
            stalled = time.monotonic() - self.beat  # for /healthz whether it turns
            if request.path == "/healthz" and stalled > STALLED_SECONDS:
                return web.Response(status=500, text=f"the event loop has not turned for {stalled:.0f} s\n")
            status, text = self.said.get(request.path) or UNSAID[request.path]
        return web.Response(status=status, text=text)

    async def _on_loop(self, path: str) -> tuple[int, str]:
        self.beat = time.monotonic()
        self.said[path] = said = PROBES[path](self.app)
        return said

    @property
    def addresses(self) -> list[Any]:
        return self.port.addresses if self.port is not None else []

    async def cleanup(self) -> None:
        if self._beating is not None:
            self._beating.cancel()
        if self.port is not None:
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self.port.cleanup(), self.thread_loop))
        self.thread_loop.call_soon_threadsafe(self.thread_loop.stop)
        await asyncio.to_thread(self.thread.join)
        self.thread_loop.close()


async def start(app: web.Application, host: str, port: int) -> Apart:
    """Serve the operations port `app` (make_ops_app's) from a thread of its own; port 0 picks a free port."""
    return await Apart(app).start(host, port)
