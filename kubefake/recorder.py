"""client-go's event recorder, as a KubeVirt component records Events on the apiserver.

k8s.io/client-go v0.34.2, as KubeVirt v1.9.0 vendors it (`vendor/k8s.io/client-go/tools/record/`):

- `event.go`, `makeEvent` and `generateEvent`: a new Event is named `<object>.<hex unix nanoseconds>`
  (`util.GenerateEventName`), in the object's namespace, `count` 1, `firstTimestamp` and
  `lastTimestamp` the moment, `source` the recorder's, `reportingComponent` and `reportingInstance`
  its component and host, no `eventTime`.
- `events_cache.go`, `EventCorrelate`: `eventObserve` first — an Event identical to one the cache
  holds (`getEventKey`: source, object, type, reason, message) becomes that Event again: its name,
  its `firstTimestamp`, its count + 1, the cache updated even when the spam filter then drops it —;
  then the spam filter (`EventSourceObjectSpamFilter`, `getSpamKey`: source, object and type) lets a
  source send a burst of 25 Events about one object, a token back every 5 minutes
  (`defaultSpamBurst`, `defaultSpamQPS`; x/time/rate's bucket, full at first).
- `events_cache.go`, `EventAggregate` before all: Events alike but for their message
  (`EventAggregatorByReasonFunc`: source, object, type, reason, reporting controller and instance)
  count their distinct messages while each comes within 10 minutes of the one before
  (`defaultAggregateIntervalInSeconds`); from the 10th (`defaultAggregateMaxEvents`) on, the Event
  becomes a new one, "(combined from similar events): " and the message, `count` 1, named and timed
  now, observed under the aggregate key: the later ones fold into it, its message the last one's.
- `event.go`, `recordEvent`: a repeat (count > 1) is a patch of `count`, `lastTimestamp` and
  `message`; an Event the apiserver no longer has (deleted, or gone at its TTL) is created again as
  it stands: the cache's name, first time and count. What the apiserver answers updates the cache
  (`UpdateState`).

Not played: the caches' LRU bound of 4096 keys, and a recorder's restart, which empties its caches.
"""
from __future__ import annotations

import dataclasses
import datetime
import uuid
from typing import Any

import kmock

from .objects import stamp

EVENTS = kmock.resource("", "v1", "events")
BURST = 25
REFILL = datetime.timedelta(minutes=5)  # one token each
AGGREGATE_MAX = 10  # distinct messages alike before they are combined
AGGREGATE_WITHIN = datetime.timedelta(minutes=10)
COMBINED = "(combined from similar events): "
TTL = datetime.timedelta(hours=1)  # kube-apiserver's --event-ttl by default


@dataclasses.dataclass
class Logged:
    """What the recorder's cache holds of an Event it wrote (`eventLog`)."""
    name: str
    count: int
    first: str


@dataclasses.dataclass
class Bucket:
    """One source's tokens for one object, as of `at`."""
    tokens: float
    at: datetime.datetime


@dataclasses.dataclass
class Recorder:
    """One `EventCorrelator`'s caches (a test plays one recorder per source)."""
    logged: dict[tuple[str, ...], Logged] = dataclasses.field(default_factory=dict)
    buckets: dict[tuple[str, ...], Bucket] = dataclasses.field(default_factory=dict)
    aggregates: dict[tuple[str, ...], tuple[set[str], datetime.datetime]] = dataclasses.field(default_factory=dict)
    burst: int = BURST
    refill: datetime.timedelta = REFILL

    def accepts(self, key: tuple[str, ...], at: datetime.datetime) -> bool:
        """The spam filter's `TryAccept` for a source and object at `at`."""
        bucket = self.buckets.get(key) or Bucket(float(self.burst), at)
        gained = max(0.0, (at - bucket.at) / self.refill)
        bucket = Bucket(min(float(self.burst), bucket.tokens + gained), max(at, bucket.at))
        accepted = bucket.tokens >= 1.0
        self.buckets[key] = Bucket(bucket.tokens - 1.0, bucket.at) if accepted else bucket
        return accepted

    def aggregate(self, event: dict[str, Any], at: datetime.datetime) -> tuple[dict[str, Any], tuple[str, ...]]:
        """`EventAggregate`: the Event as it goes on, and the key the cache observes it under."""
        key = (*spam_key(event), event.get("reason", ""), event.get("reportingComponent", ""),
               event.get("reportingInstance", ""))
        messages, last = self.aggregates.get(key, (set(), at))
        messages = set() if at - last > AGGREGATE_WITHIN else messages
        messages.add(event.get("message", ""))
        self.aggregates[key] = (messages, at)
        if len(messages) < AGGREGATE_MAX:
            return event, event_key(event)
        messages.discard(next(iter(messages)))  # `PopAny`
        combined = make_event(event["involvedObject"], event["source"], event.get("type", ""), event.get("reason", ""),
                              COMBINED + event.get("message", ""), at, later=len(self.logged) + 1)  # its own clock read
        return combined, key

    def observe(self, event: dict[str, Any], at: datetime.datetime) -> tuple[dict[str, Any] | None, tuple[str, ...]]:
        """`EventCorrelate`: the Event to write (a repeat carries the cache's name, first time and
        count + 1), or None when the spam filter drops it (its count kept all the same); the cache's key."""
        event, key = self.aggregate(event, at)
        seen = self.logged.get(key)
        if seen is not None:
            event = {**event, "metadata": {**event["metadata"], "name": seen.name},
                     "firstTimestamp": seen.first, "count": seen.count + 1}
        self.logged[key] = Logged(event["metadata"]["name"], event["count"], event["firstTimestamp"])
        return (event if self.accepts(spam_key(event), at) else None), key

    def update(self, written: dict[str, Any], key: tuple[str, ...]) -> None:
        """`UpdateState`: the apiserver's answer is what the cache holds now, under the key it was observed by."""
        self.logged[key] = Logged(written["metadata"]["name"], int(written.get("count") or 1),
                                  written.get("firstTimestamp") or "")


def spam_key(event: dict[str, Any]) -> tuple[str, ...]:
    """`getSpamKey`: the source, the object and the type."""
    source, involved = event.get("source") or {}, event.get("involvedObject") or {}
    return (source.get("component", ""), source.get("host", ""),
            *(str(involved.get(k, "")) for k in ("kind", "namespace", "name", "uid", "apiVersion")), event.get("type", ""))


def event_key(event: dict[str, Any]) -> tuple[str, ...]:
    """`getEventKey`: the source, the object (its field path too), the type, reason and message."""
    involved = event.get("involvedObject") or {}
    return (*spam_key(event)[:-1], str(involved.get("fieldPath", "")), event.get("type", ""), event.get("reason", ""),
            event.get("message", ""))


def make_event(involved: dict[str, Any], source: dict[str, str], kind: str, reason: str, message: str,
               at: datetime.datetime, later: int = 0) -> dict[str, Any]:
    """`makeEvent` + `generateEvent`: a new Event about the object `involved` refers to, made `later`
    nanoseconds after `at` (the recorder reads its clock for each: two Events of one instant differ)."""
    nanoseconds = int(at.timestamp()) * 10**9 + at.microsecond * 1000 + later
    when = stamp(at)
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{involved['name']}.{nanoseconds:x}", "namespace": involved.get("namespace") or "default"},
            "involvedObject": involved, "reason": reason, "message": message, "type": kind,
            "source": dict(source), "firstTimestamp": when, "lastTimestamp": when, "count": 1, "eventTime": None,
            "reportingComponent": source.get("component", ""), "reportingInstance": source.get("host", "")}


async def record(apiserver: Any, recorder: Recorder, event: dict[str, Any], at: datetime.datetime) -> dict[str, Any] | None:
    """The recorder sends `event` at `at` (under the apiserver's lock): the Event as stored, None
    when the spam filter dropped it."""
    observed, observed_key = recorder.observe(event, at)
    if observed is None:
        return None
    meta = observed["metadata"]
    key = (EVENTS, meta["namespace"], meta["name"])
    version = str(next(apiserver.versions))
    if observed["count"] > 1 and apiserver.stored(key) is not None:
        await apiserver.merge(key, {"count": observed["count"], "lastTimestamp": observed["lastTimestamp"],
                                    "message": observed["message"], "metadata": {"resourceVersion": version}})
        written = apiserver.stored(key).raw
    else:  # new, or gone from the apiserver: created as it stands
        created = {**observed, "metadata": {**meta, "uid": str(uuid.uuid4()), "creationTimestamp": stamp(at),
                                            "resourceVersion": version}}
        written = await apiserver.insert(key, created)
    recorder.update(written, observed_key)
    return written


async def expire(apiserver: Any, now: datetime.datetime, ttl: datetime.timedelta = TTL) -> list[str]:
    """kube-apiserver's Event TTL at `now`: each Event not written for `ttl` is gone (the storage
    lease is renewed on each write: `pkg/registry/core/event/storage.go`, `TTLFunc`). The names
    deleted (under the apiserver's lock)."""
    gone = []
    async with apiserver.lock:
        for key, obj in list(apiserver.objects.items()):
            if key[0] != EVENTS or obj.deleted:
                continue
            written = obj.raw.get("lastTimestamp") or (obj.raw.get("metadata") or {}).get("creationTimestamp")
            if written and datetime.datetime.fromisoformat(written.replace("Z", "+00:00")) + ttl <= now:
                await apiserver.drop(key)
                gone.append(key[2])
    return gone
