"""The HTTPS transport: routes, body limits, deadlines, TLS. Decisions live in mutate.py."""
from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time
from typing import Any

import orjson
from aiohttp import web

from . import admission, mutate
from .config import Settings
from .deadline import Deadline
from .store import Store

log = logging.getLogger(__name__)

# AdmissionReviews of large pods exceed aiohttp's 1 MiB default; take 8 MiB.
MAX_BODY = 8 * 1024 * 1024
STORE_KEY = web.AppKey("store", object)
SETTINGS_KEY = web.AppKey("settings", Settings)


def bad_request(message: str) -> web.Response:
    return web.json_response({"error": "bad AdmissionReview", "message": message}, status=400)


def request_timeout(request: web.Request, settings: Settings) -> float:
    """The apiserver appends ?timeout=<Go duration> to the webhook URL; default 10 s."""
    raw = request.query.get("timeout")
    if raw:
        try:
            value = admission.parse_go_duration(raw)
            if value > 0:
                return min(value, 30.0)  # the apiserver caps webhook timeouts at 30 s
        except ValueError:
            log.warning("ignoring unparsable ?timeout=%r", raw)
    return settings.default_timeout


async def handle_mutate(request: web.Request) -> web.Response:
    settings: Settings = request.app[SETTINGS_KEY]
    started = time.monotonic()
    deadline = Deadline.after(request_timeout(request, settings), settings.deadline_margin)
    if request.content_type != "application/json":
        return bad_request(f"Content-Type must be application/json, not {request.content_type!r}")
    raw = await request.read()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return bad_request(f"the body is not valid JSON: {exc}")
    try:
        review = admission.parse_review(body)
    except admission.BadReview as exc:
        return bad_request(str(exc))
    outcome = await mutate.admit(review, request.app[STORE_KEY], settings, deadline)
    log_admission(review, outcome, time.monotonic() - started)
    return web.Response(body=orjson.dumps(outcome.response.envelope()), content_type="application/json")


def log_admission(review: admission.AdmissionRequest, outcome: mutate.Outcome, seconds: float) -> None:
    pod = review.object if isinstance(review.object, dict) else {}
    decision = outcome.decision
    log.info(
        "admission",
        extra={
            "fields": {
                "uid": review.uid,
                "namespace": review.namespace,
                "pod": mutate._pod_name(pod),
                "rule": outcome.rule,
                "decision": decision.outcome if decision else "untouched",
                "node": decision.node if decision else None,
                "reason": decision.reason if decision else outcome.skipped,
                "duration_ms": round(seconds * 1000, 3),
            }
        },
    )


async def handle_healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def readiness(store: Store) -> tuple[int, str]:
    """Ready once the store answers from a complete view (its caches have synced)."""
    return (200, "ok") if store.synced() else (503, "caches not synced yet")


async def handle_readyz(request: web.Request) -> web.Response:
    status, text = readiness(request.app[STORE_KEY])
    return web.Response(status=status, text=text)


def make_app(store: Store, settings: Settings) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY)
    app[STORE_KEY] = store
    app[SETTINGS_KEY] = settings
    app.router.add_post("/mutate", handle_mutate)
    app.router.add_get("/healthz", handle_healthz)
    app.router.add_get("/readyz", handle_readyz)
    return app


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop when it is installed (a dependency on Linux), else asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def tls_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context


async def start(app: web.Application, host: str, port: int, context: ssl.SSLContext | None) -> web.AppRunner:
    """Start listening; returns the runner (cleanup() stops it). Port 0 picks a free port."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=context)
    await site.start()
    return runner


def bound_port(runner: web.AppRunner) -> int:
    for address in runner.addresses:
        if isinstance(address, tuple):
            return int(address[1])
    raise RuntimeError("the server is not listening")


def dumps(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=False)
