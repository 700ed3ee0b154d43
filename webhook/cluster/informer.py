"""Informers: each applies the events of one `Reflector` (reflector.py) to a `Table`, each object in its
kind's shape (shapes.py), and reports its health (metrics, log lines, readiness notes)."""
from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .. import kinds, metrics
from ..background import Background
from ..kinds import Resource
from .reflector import ApiTransport, Event, EventType, Reflector, Timing
from .table import Indexer, Shape, Table, Watcher, object_key

log = logging.getLogger("webhook.cache")  # the logger names in the log lines are part of the interface


class Informer:
    """One resource (optionally of one namespace) kept in a Table from the events of its reflector."""

    def __init__(self, resource: Resource, shape: Shape, *, namespace: str | None = None,
                 indexers: Mapping[str, Indexer] | None = None, watchers: Iterable[Watcher] = (), fields: str = "",
                 wanted: Callable[[dict[str, Any]], bool] | None = None):
        self.resource = resource
        # A field selector the API applies (`fields`), and the same test on our side (`wanted`).
        self.fields, self.wanted = fields, wanted
        self.shape = shape  # what is kept of each object (shapes.py)
        self.namespace = namespace if resource.namespaced else None
        self.name = f"{resource.plural} in {self.namespace}" if self.namespace else resource.plural
        self.table = Table(indexers or {}, watchers)
        self.synced_event = asyncio.Event()
        self.synced = False  # the event's state as a plain attribute: every look-up asks
        self.last_sync: float | None = None  # wall-clock time of the last list or event
        self.error: str | None = None  # why the last list/watch failed, until one succeeds
        self._listed: set[str] = set()  # keys the list under way has returned

    async def run(self, api: Any, timing: Timing, list_slots: asyncio.Semaphore) -> None:
        self._listed = set()  # from a list cut short before
        reflector = Reflector(ApiTransport(api, self.resource.path(self.namespace)), self.name, fields=self.fields,
                              timing=timing, list_slots=list_slots)
        async for event in reflector.events():
            self.apply(event)

    def apply(self, event: Event) -> None:
        kind = event.type
        if kind in (EventType.FAILED, EventType.RELISTING):
            self._listed = set()  # a list cut short: the next one starts over
        if kind is EventType.FAILED:
            self.error = event.error
            metrics.WATCH_ERRORS.labels(self.name).inc()
            metrics.CACHE_HEALTHY.labels(self.name).set(0)
            log.warning("watch failed", extra={"fields": {
                "resource": self.name, "error": event.error, "retry_in": round(event.retry_in or 0.0, 3)}})
            return
        if kind is EventType.RELISTING:
            log.info("relisting", extra={"fields": {"resource": self.name, "reason": event.error}})
            return
        if kind is EventType.LISTED:
            key = self._put(event.object)
            if key is not None:
                self._listed.add(key)
            return
        if kind is EventType.SYNCED:
            # The list replaced what we held: drop what it did not return (in place: no second copy).
            for key in [key for key in self.table.objects if key not in self._listed]:
                self.table.remove(key)
            self._listed = set()
            if not self.synced:
                log.info("cache synced", extra={"fields": {
                    "resource": self.name, "objects": len(self.table.objects), "seconds": round(event.seconds or 0.0, 3)}})
            self.synced = True
            self.synced_event.set()
        elif kind is EventType.DELETED:  # a watch event
            key = self._key(event.object)
            if key is not None:
                self.table.remove(key)
        elif kind is not EventType.BOOKMARK:
            self._put(event.object)
        if self.error is not None or self.last_sync is None:  # healthy again, or for the first time
            metrics.CACHE_HEALTHY.labels(self.name).set(1)
        self.last_sync = time.time()
        self.error = None

    def _key(self, obj: Any) -> str | None:
        name = kinds.meta(obj).get("name")
        if not isinstance(name, str) or not name:
            return None
        return object_key(kinds.meta(obj).get("namespace") if self.resource.namespaced else None, name)

    def _put(self, obj: Any) -> str | None:
        """Keep one object (trimmed); the key when the table now holds it."""
        key = self._key(obj)
        if key is None:
            return None
        # Emulators may ignore the field selector: filter on our side too.
        if (self.namespace is not None and kinds.meta(obj).get("namespace") != self.namespace) \
                or (self.wanted is not None and not self.wanted(obj)):
            self.table.remove(key)
            return None
        self.table.put(key, self.shape(obj))
        return key


class Informers:
    """Informers run together: one task each, named `<task_prefix> <informer>`; their lists one at
    a time (the memory of one page, not one per informer), in the order of `informers`."""

    task_prefix = "informer"

    def __init__(self, api_client: Any, timing: Timing, informers: tuple[Informer, ...]):
        self._api, self._timing, self.informers = api_client, timing, informers
        self._runs: list[Background] = []

    def start(self) -> None:
        """Start listing and watching in the background (from the running loop; again: nothing)."""
        if self._runs:
            return
        list_slots = asyncio.Semaphore(1)
        for informer in self.informers:
            # A reflector retries on its own; should applying its events ever fail, a new one lists again.
            self._runs.append(Background(f"{self.task_prefix} {informer.name}",
                                         functools.partial(informer.run, self._api, self._timing, list_slots),
                                         log=log, failure=f"{informer.name}: following the API failed",
                                         period=self._timing.backoff_cap))
        for run in self._runs:
            run.start()

    def degraded(self) -> list[str]:
        """Informers whose list or watch is failing now: they serve what they have meanwhile."""
        return [f"{i.name}: {i.error}" for i in self.informers if i.error] + \
            [note for run in self._runs for note in run.degraded()]

    async def wait_synced(self, timeout: float | None = None) -> None:
        async with asyncio.timeout(timeout):
            for informer in self.informers:
                await informer.synced_event.wait()

    async def close(self) -> None:
        await asyncio.gather(*(run.stop() for run in self._runs))
        self._runs = []

