"""The HTTPS transport: routes, body limits, deadlines, TLS. Decisions live in admit.py."""
from __future__ import annotations

import asyncio
import functools
import logging
import time
import urllib.parse

import orjson
from aiohttp import web

from .. import kinds, metrics
from ..cluster.events import NO_EVENTS, Events, involved_object, vmi_reference
from ..stores.store import Store
from ..config import AdmissionSettings, seconds
from ..deadline import Deadline
from ..rules.shared.alone import Alone
from . import review as reviews
from .admit import Shared, admit
from .budget import DEFAULT_BYTES, Budget, NoRoom
from .looplag import LoopLag
from .outcome import Outcome, Rule, decision_event
from ..process import heap
from ..process.listening import Arrivals

log = logging.getLogger("webhook.server")

# What the apiserver sends at most: the pod (etcd refuses objects over 1.5 MiB) in an AdmissionReview,
# about 3 MiB at worst. aiohttp's 1 MiB default is too small for large pods; a larger body is no review
# of the apiserver's, and answered 413 before it is held in memory.
MAX_BODY = 3 * 1024 * 1024


def bad_request(message: str) -> web.Response:
    metrics.BAD_REVIEWS.inc()
    return web.json_response({"error": "bad AdmissionReview", "message": message}, status=400)


@functools.lru_cache(maxsize=64)  # the apiserver sends each webhook's one timeout with every review
def timeout_in(query: str, default: float) -> float:
    """The seconds of `timeout` in a URL's query (the apiserver appends `?timeout=<Go duration>`; its
    first), at most the apiserver's 30 s; `default` without one. An unparsable one is said once."""
    raw = next(iter(urllib.parse.parse_qs(query).get("timeout", ())), "")
    if raw:
        try:
            value = seconds(raw)  # the apiserver writes a Go duration of whole seconds
            if value > 0:
                return min(value, 30.0)  # the apiserver caps webhook timeouts at 30 s
        except ValueError:
            log.warning("ignoring unparsable ?timeout=%r", raw)
    return default


class Webhook:
    """POST /mutate (else 404; another method 405) on aiohttp's low-level server: an Application's router,
    middlewares and signals cost every review about 20 µs of CPU in `serve`, and none is used."""

    PATH = "/mutate"

    def __init__(self, admissions: Admissions, arrivals: Arrivals | None = None) -> None:
        self.admissions, self.draining = admissions, False  # draining: this replica is shutting down
        # When each connection's request arrived (the port notes it): the start of its latency.
        self.arrivals = arrivals if arrivals is not None else Arrivals()

    async def __call__(self, request: web.BaseRequest) -> web.StreamResponse:
        transport = request.transport
        try:
            if request.path != self.PATH:
                raise web.HTTPNotFound()
            if request.method != "POST":
                raise web.HTTPMethodNotAllowed(request.method, ["POST"])
            response = await handle_mutate(request, self.admissions, self.arrivals.arrived(transport))
        finally:
            self.arrivals.answered(transport)  # the next request on this connection: from its first byte
        if self.draining:
            response.force_close()  # reconnect elsewhere: our endpoint is on its way out
        return response


async def handle_mutate(request: web.BaseRequest, endpoint: Admissions, arrived: float | None = None) -> web.Response:
    started = time.monotonic()
    deadline = endpoint.deadline(timeout_in(request.rel_url.raw_query_string, endpoint.settings.default_timeout))
    if request.content_type != "application/json":
        return bad_request(f"Content-Type must be application/json, not {request.content_type!r}")
    size = request.content_length or MAX_BODY  # a chunked body may be as large as any
    if size > MAX_BODY:
        raise web.HTTPRequestEntityTooLarge(max_size=MAX_BODY, actual_size=size)
    try:  # the body is read once there is room for it: until then it waits, unread, within the deadline
        await endpoint.budget.take(size, deadline.remaining())
    except NoRoom as exc:
        # Unread: the apiserver treats the error as failurePolicy Ignore, and the connection goes with it.
        response = web.Response(status=503, text=f"{exc}\n")
        response.force_close()
        return response
    try:
        raw = await body_of(request, deadline)
        body = await endpoint.answer(raw, deadline, started, arrived)
    except TimeoutError:
        metrics.BAD_REVIEWS.inc()
        return web.Response(status=408, text="the request body did not arrive before the deadline\n")
    except reviews.BadReview as exc:
        return bad_request(str(exc))
    finally:
        endpoint.budget.release(size)
    return web.Response(body=body, content_type="application/json")


async def body_of(request: web.BaseRequest, deadline: Deadline) -> bytes | bytearray:
    """The body in one buffer orjson reads as it is (`request.read()` would hold it twice); one still
    arriving must arrive within the deadline (TimeoutError)."""
    content = request.content
    if content.is_eof():  # no wait, so no timer: arming one is three system calls on Python 3.11
        body: bytes | bytearray = content.read_nowait()
    else:
        body = bytearray()
        async with asyncio.timeout(max(deadline.remaining(), 0.1)):  # no task of its own, as wait_for makes
            async for chunk in content.iter_any():
                body += chunk
                if len(body) > MAX_BODY:
                    break
    if len(body) > MAX_BODY:  # a chunked body says no length up front
        raise web.HTTPRequestEntityTooLarge(max_size=MAX_BODY, actual_size=len(body))
    return body


class Admissions:
    """The admission endpoint without HTTP: a review's bytes in, the answer's out, with its Event, metrics, log."""

    def __init__(self, store: Store, settings: AdmissionSettings, events: Events = NO_EVENTS, *,
                 lag: LoopLag | None = None, budget: Budget | None = None):
        self.lag = lag  # the event loop's lag, for each log line (service.py measures it)
        self.budget = budget or Budget()  # the bodies held at once (budget.py)
        self.shared = Shared(answers={})  # a drain's share-managers' lane, promises, prepared answers
        self.store, self.settings, self.events = store, settings, events

    def deadline(self, timeout: float) -> Deadline:
        return Deadline.after(timeout, self.settings.deadline_margin)

    async def answer(self, raw: bytes | bytearray, deadline: Deadline, started: float,
                     arrived: float | None = None) -> bytes:
        """The AdmissionReview answer as JSON; raises BadReview (answered 400) when `raw` is not a review."""
        review = parsed(raw)
        outcome = await admit(review, self.store, self.settings, deadline, self.shared)
        answer = orjson.dumps(reviews.build_response(review.uid, outcome))
        try:  # bookkeeping must never turn an answer into a 500
            if outcome.decision is not None and not review.dry_run:  # the Event on its VMI (or ShareManager)
                involved = vmi_reference(review.namespace, str(kinds.spec(review.object).get("vmiName") or "")) \
                    if outcome.rule is Rule.EVACUATION else involved_object(review.object, review.namespace)
                if involved is not None:
                    reason, message, warning = decision_event(outcome.decision)
                    self.events.emit_about(involved, reason, message, warning=warning)
            now = time.monotonic()
            count_admission(outcome, now - started)
            waited = None if arrived is None else now - arrived
            if waited is not None:
                metrics.ADMISSION_LATENCIES(KIND_OF_RULE[outcome.rule]).observe(waited)
            log_admission(review, outcome, now - started, waited=waited,
                          loop_lag=self.lag.recent() if self.lag is not None else None)
        except Exception:
            log.exception("bookkeeping after admission %s failed", review.uid)
        return answer


def parsed(raw: bytes | bytearray) -> reviews.AdmissionRequest:
    """The AdmissionReview in a request's body, read with the collector paused (process/heap.py); else BadReview."""
    try:
        with heap.paused():
            body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise reviews.BadReview(f"the body is not valid JSON: {exc}") from None
    except RecursionError:
        raise reviews.BadReview("the body is nested too deeply") from None
    return reviews.parse_review(body)


def count_admission(outcome: Outcome, seconds: float) -> None:
    """The admission's duration and outcome in the metrics; an internal error counts as outcome "error"."""
    metrics.ADMISSION_DURATIONS(outcome.rule).observe(seconds)
    if outcome.decision is not None:
        metrics.ADMISSION_OUTCOMES(outcome.rule, outcome.decision.outcome, "").inc()
    else:
        failed = outcome.skipped is Alone.INTERNAL_ERROR  # a bug in the rules: the pod was admitted untouched
        metrics.ADMISSION_OUTCOMES(outcome.rule, "error" if failed else "skipped", outcome.skipped or "").inc()


# The kind of pod a review's latency is counted under, by the rule that took it.
KIND_OF_RULE = {Rule.VM: "vm", Rule.SHARE_MANAGER: "share-manager", Rule.EVACUATION: "migration", Rule.NONE: "other"}


def log_admission(review: reviews.AdmissionRequest, outcome: Outcome, seconds: float, *, waited: float | None = None,
                  loop_lag: float | None = None) -> None:
    """One JSON line per admission: why the VM is there, and how long it took (`duration_ms` from the handler's start;
    `latency_ms` from its request's arrival, when known; `loop_lag_ms`: the loop's longest lag of the second before)."""
    decision = outcome.decision
    fields: dict[str, object] = {
        "uid": review.uid,
        "namespace": review.namespace,
        "pod": kinds.pod_name(review.object),
        "vm": kinds.vm_name(review.object),
        "rule": outcome.rule,
        "disks": {f.subject: f.node for f in outcome.facts},
        "decision": decision.outcome if decision else "untouched",
        "node": decision.node if decision else None,
        "nodes": decision.nodes if decision else [],
        "reason": decision.reason if decision else outcome.skipped,
        "detail": outcome.detail,
        "dry_run": review.dry_run,
        "duration_ms": round(seconds * 1000, 3),
    }
    if waited is not None:
        fields["latency_ms"] = round(waited * 1000, 3)
    if loop_lag is not None:
        fields["loop_lag_ms"] = round(loop_lag * 1000, 3)
    log.info("admission", extra={"fields": fields})


def make_webhook(store: Store, settings: AdmissionSettings, *, events: Events = NO_EVENTS, lag: LoopLag | None = None,
                 body_budget: int = DEFAULT_BYTES, arrivals: Arrivals | None = None) -> Webhook:
    return Webhook(Admissions(store, settings, events, lag=lag, budget=Budget(body_budget)), arrivals)
