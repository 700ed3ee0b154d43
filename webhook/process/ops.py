"""The plain-HTTP operations port: probes and metrics, kept off the TLS admission port (`serve`),
and the keeper's own (`keep`)."""
from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Gauge, generate_latest

from .. import metrics
from . import listening
from .loop import new_event_loop

@dataclasses.dataclass(frozen=True)
class Probes:
    """What one process's operations port answers from (`serve`'s registry and gauge, or `keep`'s)."""

    readiness: Callable[[], list[str]]  # why the process is not ready; none: ready
    degraded: Callable[[], list[str]] = list
    registry: CollectorRegistry = metrics.REGISTRY
    ready: Gauge = metrics.READY

    def answer(self, path: str) -> tuple[int, str]:
        """/healthz: the event loop answers, never depending on the API server (no restart storms)."""
        if path == "/healthz":
            return 200, "ok\n"
        reasons = self.readiness()
        self.ready.set(0 if reasons else 1)
        if reasons:
            return 503, "not ready: " + "; ".join(reasons) + "\n"
        # A failing watch keeps serving what it has (all replicas going unready in an API outage
        # would only turn every answer into failurePolicy Ignore): ready, and say so.
        degraded = self.degraded()
        return 200, ("ok, degraded: " + "; ".join(degraded) if degraded else "ok") + "\n"


ASK_SECONDS = 0.25
UNSAID = {"/healthz": (200, "ok\n"), "/readyz": (503, "not ready: the process has not answered yet\n")}
STALLED_SECONDS = 20.0
BEAT_SECONDS = 1.0


class Apart:
    """The operations port of `probes` on a thread of its own, so that no long work on the process's loop delays a
    probe past the kubelet's 1 s: each is asked of the loop, answered from what it last said when it does not answer
    within ASK_SECONDS; /healthz fails once the loop has not turned for STALLED_SECONDS. Closed as a Port is."""

    def __init__(self, probes: Probes) -> None:
        self.probes, self.loop = probes, asyncio.get_running_loop()
        self.beat = time.monotonic()  # the last turn of the process's loop seen
        self.said: dict[str, tuple[int, str]] = {}  # each probe's last answer from the process's loop
        self.thread_loop = new_event_loop()
        self.thread = threading.Thread(target=self.thread_loop.run_forever, name="ops-port", daemon=True)
        self.port: listening.Port | None = None
        self._beating: asyncio.TimerHandle | None = None

    async def start(self, host: str, port: int) -> Apart:
        """Serve from the thread; port 0 picks a free port."""
        self._beat()
        self.thread.start()
        served = web.Application()
        served.router.add_routes([web.get(path, self._asked) for path in UNSAID] + [web.get("/metrics", self._metrics)])
        made = asyncio.run_coroutine_threadsafe(listening.start(served, host, port, None), self.thread_loop)
        self.port = await asyncio.wrap_future(made)
        return self

    def _beat(self) -> None:
        self.beat = time.monotonic()
        self._beating = self.loop.call_later(BEAT_SECONDS, self._beat)

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.probes.registry),
                            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    async def _asked(self, request: web.Request) -> web.Response:
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
        self.said[path] = said = self.probes.answer(path)
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
