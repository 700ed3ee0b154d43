"""List and watch one resource, as client-go's reflector does, and yield what happened:
list, watch from its resourceVersion with bookmarks, list again on 410 Gone, back off with jitter on other failures."""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import random
from collections.abc import AsyncIterator
from typing import Any

import orjson

from .. import kinds
from ..process.pace import Pacer
from . import client


@dataclasses.dataclass(frozen=True)
class Timing:
    # client-go's reflector: watches last minWatchTimeout (5 min) × [1, 2) and back off
    # from 800 ms, doubling, to 30 s with jitter.
    watch_seconds: tuple[float, float] = (300.0, 600.0)
    backoff_initial: float = 0.8
    backoff_cap: float = 30.0
    page_size: int = 500  # client-go's default page size for the initial list
    request_timeout: float = 60.0  # per list page
    # A watch that ends sooner than this with no event was not a healthy watch.
    short_watch: float = 1.0


class Gone(Exception):
    """410 Gone: the resourceVersion to resume from is too old; list again."""


class WatchError(Exception):
    pass


def answered(status: int, what: str, gone: str) -> None:
    """Gone (`gone` says why) on 410, WatchError on any other status but 200."""
    if status == 410:
        raise Gone(f"{what}: {gone}")
    if status != 200:
        raise WatchError(f"{what}: API answered {status}")


class EventType(enum.StrEnum):
    LISTED = "LISTED"  # one object of a list
    SYNCED = "SYNCED"  # the list is complete: what it did not return is gone
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    BOOKMARK = "BOOKMARK"  # only moves the resourceVersion on
    RELISTING = "RELISTING"  # 410 Gone: the resourceVersion is too old, a new list follows
    FAILED = "FAILED"  # a list or watch failed; the reflector retries after `retry_in`


@dataclasses.dataclass(frozen=True)
class Event:
    type: EventType
    object: Any = None
    error: str | None = None  # FAILED, RELISTING: why
    retry_in: float | None = None  # FAILED, RELISTING: the wait before the next attempt
    seconds: float | None = None  # SYNCED: how long the list took


WATCH_TYPES = {t.value: t for t in (EventType.ADDED, EventType.MODIFIED, EventType.DELETED, EventType.BOOKMARK)}


class ApiTransport:
    """What a reflector asks through (tests play one back): kubernetes-asyncio."""

    def __init__(self, api: Any, path: str):
        self.api, self.path = api, path

    async def get(self, query: list[tuple[str, str]], timeout: float) -> tuple[int, bytes]:
        """One list page, answered or failed within `timeout`: (status, body)."""
        return await client.request(self.api, "GET", self.path, query=query, timeout=timeout)

    @contextlib.asynccontextmanager
    async def stream(self, query: list[tuple[str, str]]) -> AsyncIterator[tuple[int, AsyncIterator[bytes]]]:
        """A watch: (status, chunks of the body as they arrive); closed on exit."""
        response = await client.open_response(self.api, "GET", self.path, query=query, timeout=None)
        try:
            yield response.status, response.content.iter_any()
        finally:
            response.close()


def split_lines(chunk: bytes, pending: bytearray) -> list[bytes]:
    """The lines a chunk completes; an unfinished line stays in `pending`."""
    pending += chunk
    if b"\n" not in chunk:
        return []
    *done, rest = pending.split(b"\n")
    pending[:] = rest
    return [line for line in done if line.strip()]


class Reflector:
    """One resource (optionally of one namespace), listed and watched."""

    def __init__(self, transport: ApiTransport, name: str, *, fields: str = "", timing: Timing = Timing(),
                 list_slots: asyncio.Semaphore | None = None):
        self.transport, self.name, self.timing = transport, name, timing
        # A field selector every list and watch asks with, e.g. the scheduler's "not finished" for pods.
        self.selectors = [("fieldSelector", fields)] if fields else []
        # Reflectors sharing these slots list one at a time: one page in memory at once.
        self.list_slots = list_slots or asyncio.Semaphore(1)
        self.resource_version: str | None = None
        self.resumable = False  # every event since the list carried a resourceVersion
        self.failures = 0  # in a row: the next backoff

    def backoff(self) -> float:
        """Exponential delays with jitter: initial × 2ⁿ, capped, each drawn from [d/2, d]."""
        delay = min(self.timing.backoff_cap, self.timing.backoff_initial * 2 ** self.failures)
        self.failures += 1
        return random.uniform(delay / 2, delay)

    async def list(self) -> AsyncIterator[Event]:
        """A full paginated list: LISTED per object, then SYNCED with the list's resourceVersion kept."""
        token: str | None = None
        resource_version: str | None = None
        loop = asyncio.get_running_loop()
        started = loop.time()
        async with self.list_slots:
            while True:
                query = [("limit", str(self.timing.page_size)), *self.selectors]
                if token:
                    query.append(("continue", token))
                status, body = await self.transport.get(query, self.timing.request_timeout)
                answered(status, f"list of {self.name}", "the continue token expired")
                page = orjson.loads(body)
                del body
                pacer = Pacer()  # the page kept in slices (the consumer's work counts): the loop given back
                for item in page.get("items") or ():
                    yield Event(EventType.LISTED, item)
                    await pacer()
                metadata = page.get("metadata") or {}
                resource_version = metadata.get("resourceVersion") or None
                token = metadata.get("continue") or None
                del page
                if not token:
                    break
        self.resource_version = resource_version
        self.resumable = resource_version is not None
        yield Event(EventType.SYNCED, seconds=loop.time() - started)

    async def watch(self) -> AsyncIterator[Event]:
        """One watch from the kept resourceVersion until the server ends it."""
        loop = asyncio.get_running_loop()
        seconds = random.uniform(*self.timing.watch_seconds)
        query = [("watch", "true"), ("allowWatchBookmarks", "true"), ("timeoutSeconds", str(max(1, int(seconds))))]
        if self.resource_version:
            query.append(("resourceVersion", self.resource_version))
        query += self.selectors
        # The server ends the watch after timeoutSeconds; the grace bounds a server that does not.
        deadline = loop.time() + seconds + min(30.0, seconds)
        try:
            async with asyncio.timeout_at(deadline):
                opened = self.transport.stream(query)
                status, chunks = await opened.__aenter__()
        except TimeoutError:
            return
        try:
            answered(status, f"watch of {self.name}", "410 Gone")
            pending = bytearray()
            while True:
                try:
                    async with asyncio.timeout_at(deadline):  # never around a yield
                        chunk = await anext(chunks)
                except (StopAsyncIteration, TimeoutError):
                    return
                pacer = Pacer()  # what came at once (a backlog), in slices as a list's page
                for line in split_lines(chunk, pending):
                    yield self.event(orjson.loads(line))
                    await pacer()
        finally:
            await opened.__aexit__(None, None, None)

    def event(self, raw: Any) -> Event:
        """One watch event: the resourceVersion kept; ERROR events raised as Gone or WatchError."""
        kind = raw.get("type") if isinstance(raw, dict) else None
        obj = raw.get("object") if isinstance(raw, dict) else None
        if kind == "ERROR":
            status = obj if isinstance(obj, dict) else {}
            if status.get("code") == 410:
                raise Gone(f"watch of {self.name}: {status.get('message') or '410 Gone'}")
            raise WatchError(f"watch of {self.name}: error event {status.get('code')} {status.get('message') or ''}")
        if kind not in WATCH_TYPES:
            raise WatchError(f"watch of {self.name}: unexpected event {kind!r}")
        version = kinds.meta(obj).get("resourceVersion")
        if version:
            self.resource_version = version
        elif kind != "BOOKMARK":
            # Nothing to resume from after this event: the next watch starts with a list.
            self.resumable = False
        return Event(WATCH_TYPES[kind], obj)

    async def events(self) -> AsyncIterator[Event]:
        """List, then watch, forever; close or cancel to stop."""
        need_list, gone_in_a_row = True, 0
        loop = asyncio.get_running_loop()
        while True:
            try:
                if need_list:
                    async for event in self.list():
                        yield event
                    need_list = False
                seen, started = 0, loop.time()
                async for event in self.watch():
                    seen += 1
                    yield event
                gone_in_a_row = 0
                need_list = not self.resumable
                if seen == 0 and loop.time() - started < self.timing.short_watch:
                    raise WatchError(f"watch of {self.name} ended at once with no events")
                self.failures = 0
            except Gone as exc:
                # client-go relists at once on 410; a relist that is itself too old backs off.
                need_list = True
                gone_in_a_row += 1
                retry_in = self.backoff() if gone_in_a_row > 1 else 0.0
                yield Event(EventType.RELISTING, error=str(exc), retry_in=retry_in)
                if retry_in:
                    await asyncio.sleep(retry_in)
            except Exception as exc:  # API down, reset, 403, bad JSON: back off, then resume
                need_list = need_list or not self.resumable
                delay = self.backoff()
                yield Event(EventType.FAILED, error=f"{type(exc).__name__}: {exc}", retry_in=delay)
                await asyncio.sleep(delay)
