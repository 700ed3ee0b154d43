"""The stores the tests read: objects seeded into the kmock emulator as if created through its
API, the watch-backed store on it, and the caches' shared objects frozen (whatever changes one fails)."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kubernetes_asyncio.client import Configuration

from webhook.stores.cache import WatchedClusterStore
from webhook.cluster import client
from webhook.cluster.informer import Informer
from webhook.cluster.table import object_key
from webhook.cluster.reflector import Event, EventType, Timing
from webhook.config import Settings
from webhook.kinds import LONGHORN_SETTING, RULE_RESOURCES, VMIM

RESOURCES = (*RULE_RESOURCES, LONGHORN_SETTING, VMIM)

# Quick recovery in tests; the watch itself lasts as long as in production.
TEST_TIMING = Timing(backoff_initial=0.02, backoff_cap=0.2)

BY_KIND = {(r.api_version, r.kind): r for r in RESOURCES}


def for_host(host: str) -> Any:
    """An unauthenticated client for the API at `host` (the emulator)."""
    return client.new_api_client(Configuration(host=host))


def in_cache(informer: Informer, namespace: str | None, name: str) -> dict[str, Any] | None:
    """A fresh copy of the object `informer` holds (`Table.get`), or None."""
    return informer.table.get(object_key(namespace if informer.resource.namespaced else None, name))


def seed(emulator: Any, objects: Iterable[dict[str, Any]]) -> None:
    """Put objects into the kmock Kubernetes emulator, as if created through its API."""
    for resource in RESOURCES:
        emulator.resources[resource] = {}
    for obj in objects:
        resource = BY_KIND[(obj["apiVersion"], obj["kind"])]
        meta = obj["metadata"]
        emulator.objects[resource, meta.get("namespace") if resource.namespaced else None, meta["name"]] = obj


def requests_since(emulator: Any, mark: int) -> list[Any]:
    """The requests the emulator served after the first `mark`, its open watches left out."""
    return [r for r in list(emulator)[mark:] if r.params.get("watch") != "true"]


def api_host(emulator: Any) -> str:
    return str(emulator.url).rstrip("/")


async def watched_store(emulator: Any, settings: Settings | None = None, timing: Timing = TEST_TIMING) -> WatchedClusterStore:
    """The watch-backed store on the emulator, started and synced."""
    store = WatchedClusterStore(for_host(api_host(emulator)), settings or Settings(), timing)
    store.start()
    try:
        await store.wait_synced(timeout=10)
    except BaseException:
        await store.close()
        raise
    return store


class ReadOnly(Exception):
    """Raised by a change to an object the caches share between readers."""


class FrozenDict(dict):
    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise ReadOnly("an object the caches share was changed")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _refuse


class FrozenList(list):
    _refuse = FrozenDict._refuse
    __setitem__ = __delitem__ = __iadd__ = __imul__ = append = extend = insert = pop = remove = clear = sort = reverse = _refuse


def frozen(value: Any) -> Any:
    if isinstance(value, dict):
        return FrozenDict((k, frozen(v)) for k, v in value.items())
    if isinstance(value, list):
        return FrozenList(frozen(v) for v in value)
    return value


def listed_store(objects: Iterable[dict[str, Any]], settings: Settings | None = None) -> WatchedClusterStore:
    """The production caches holding `objects`, delivered by their informers as a list, synced."""
    objects = list(objects)
    store = WatchedClusterStore(None, settings or Settings())
    for informer in store.informers:
        for obj in objects:
            if obj["kind"] == informer.resource.kind:
                informer.apply(Event(EventType.LISTED, obj))
        informer.apply(Event(EventType.SYNCED, seconds=0.0))
    return store
