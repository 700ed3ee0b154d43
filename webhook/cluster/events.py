"""Kubernetes Events about decisions, posted in the background: `kubectl describe vmi` shows them. Admission never
waits for one (a full queue drops it); each POST gives way to the reviews (`AfterReviews`): it takes their core."""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from .. import kinds, metrics
from ..background import Background
from ..process.pace import AfterReviews
from ..kinds import EVENT
from . import client

log = logging.getLogger("webhook.events")
HOLD = 2.0  # the longest Events wait for the reviews in flight to be answered, then go as they come
QUIET = 0.1  # how long after the last review answered an Event still waits for more to come
OWNER_KINDS = ("VirtualMachineInstance", "ShareManager")  # an Event's object: a VM pod's VMI, a share-manager's


def identity() -> str:
    """This replica: the pod's name (downward API), else the host name (the pod's, in a cluster).
    It reports the Events and holds the keeper's lease."""
    return os.environ.get("POD_NAME") or socket.gethostname()


def involved_object(pod: dict[str, Any], namespace: str) -> dict[str, Any] | None:
    """What a decision about `pod` is about: its controlling owner, the VMI for a VM pod, the
    ShareManager for a share-manager pod (never a label's name)."""
    ref = kinds.controller(pod, OWNER_KINDS)
    return None if ref is None else {"apiVersion": ref.get("apiVersion", ""), "kind": ref["kind"], "name": ref["name"],
                                     "namespace": namespace, "uid": ref.get("uid", "")}


def vmi_reference(namespace: str, name: str, uid: str = "") -> dict[str, Any]:
    """The VMI as an Event's involvedObject."""
    reference = {"apiVersion": kinds.VMI.api_version, "kind": kinds.VMI.kind, "name": name, "namespace": namespace}
    return reference | ({"uid": uid} if uid else {})


def new_event(involved: dict[str, Any], reason: str, message: str, instance: str, *, warning: bool = False,
              name: str | None = None) -> dict[str, Any]:
    """A core/v1 Event about `involved` (an object reference), as `kubectl describe` shows it.
    A fixed `name` makes the Event said once however many replicas say it (the API keeps the first)."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name or f"{involved['name']}.{uuid.uuid4().hex[:16]}", "namespace": involved["namespace"]},
        "involvedObject": involved,
        "reason": reason,
        "message": message[:1024],
        "type": "Warning" if warning else "Normal",
        "source": {"component": kinds.COMPONENT},
        "reportingComponent": kinds.COMPONENT,
        "reportingInstance": instance,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


class Events:
    """Where Events about decisions go: the API (EventSink), or nowhere (these defaults, NO_EVENTS: `serve --events
    off`, a snapshot, a pass on its own)."""

    def emit_about(self, involved: dict[str, Any], reason: str, message: str, *, warning: bool = False,
                   name: str | None = None) -> None:
        """An Event about an object (a decision's, on the VMI or ShareManager; the keeper's, on a VMI)."""

    async def close(self, grace: float = 2.0) -> None:
        """Send what is queued (for at most `grace` seconds), then stop; later Events are dropped."""

    def yield_to(self, busy: Callable[[], bool]) -> None:
        """Hold the Events while `busy()` (reviews in flight), at most HOLD seconds at a time (`AfterReviews`)."""


NO_EVENTS = Events()


class EventSink(Events):
    """A bounded queue and one worker, started by the first Event, that POSTs them."""

    def __init__(self, api_client: Any, *, hold: float = HOLD):
        self._api = api_client
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(1000)
        self._worker = Background("events", self._send_next, log=log, failure="sending Events failed", retry=1.0)
        self.instance = identity()
        self._closed = False  # after close, nothing is queued: no worker would be left to stop
        self.after_reviews = AfterReviews(hold)  # serve's reviews in flight (`yield_to`)

    def emit_about(self, involved: dict[str, Any], reason: str, message: str, *, warning: bool = False,
                   name: str | None = None) -> None:
        if self._closed or self._queue.full():
            metrics.EVENTS.labels("dropped").inc()
            return
        self._queue.put_nowait(new_event(involved, reason, message, self.instance, warning=warning, name=name))
        self._worker.start()

    def yield_to(self, busy: Callable[[], bool]) -> None:
        self.after_reviews.busy = busy

    async def _send_next(self) -> None:
        event = await self._queue.get()
        try:
            await self.after_reviews.wait()
            status, _ = await client.request(self._api, "POST", EVENT.path(event["metadata"]["namespace"]), body=event,
                                             timeout=5.0)
            if status != 409 and not 200 <= status < 300:  # 409: a fixed name another replica has recorded
                raise RuntimeError(f"API answered {status}")
            metrics.EVENTS.labels("sent").inc()
        except Exception as exc:  # an Event is best effort; the decision is on the pod anyway
            metrics.EVENTS.labels("failed").inc()
            log.warning("event not sent", extra={"fields": {"error": f"{type(exc).__name__}: {exc}"}})
        finally:
            self._queue.task_done()

    async def close(self, grace: float = 2.0) -> None:
        self._closed = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), grace)
        await self._worker.stop()
