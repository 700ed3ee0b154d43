"""Watch-backed caches of the cluster objects the rules read: admissions answered from memory.

Each `Informer` keeps one resource the way client-go's reflector does
(k8s.io/client-go/tools/cache/reflector.go): list (paginated), then watch from the list's
resourceVersion; on 410 Gone list again; on any other failure reconnect after an
exponential backoff with jitter; ask for bookmarks (`allowWatchBookmarks=true`) so the
resourceVersion to resume from stays fresh. Objects are kept trimmed to the fields the
rules read (`keep_fields`), stored as compact JSON (each read decodes a fresh dict, so a caller
cannot corrupt the cache) and indexed by what the rules look up.

`WatchedClusterStore` answers the Store protocol from these caches and falls back to a
direct GET (within the caller's timeout) before the caches have synced and on misses that
may just be watch lag.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from typing import Any

import orjson

from . import metrics
from .config import Settings
from .store import (NODE, POD, PV, PVC, SHARE_MANAGER, VIRT_LAUNCHER_LABELS, ClusterStore, Resource, connect_api, raw_get,
                    labels_match, new_api_client, volume_handle)

log = logging.getLogger(__name__)

SHARE_MANAGER_POD_LABELS = {"longhorn.io/component": "share-manager"}
# Annotations of cached pods the rules read besides the opt-in and our own prefix.
EXTRA_POD_ANNOTATIONS = ("kubevirt.io/ephemeral-provisioning",)

# Kinds whose miss may be watch lag worth a GET: a PVC (and its PV) created a moment before
# the VM that mounts it, a node that just joined. A share-manager or its pod that is not in
# the cache yet cannot have a node yet either, so for them a miss is the answer.
MISS_FALLBACK = frozenset({PVC.kind, PV.kind, NODE.kind})

Keep = Any  # True | dict[str, Keep] | list[Keep] (one spec for every item) | Callable[[str], bool]


def keep_fields(settings: Settings) -> dict[str, Keep]:
    """What the rules read, per kind; everything else is dropped when an object arrives.

    A dict keeps the listed keys (True keeps the whole value, a dict recurses), a
    one-element list applies its spec to every item (items left empty are dropped), and a
    callable keeps the keys of a mapping it accepts.
    """

    def pod_annotation(key: str) -> bool:
        return key == settings.opt_in_annotation or key.startswith(settings.decision_prefix) or key in EXTRA_POD_ANNOTATIONS

    pod = {
        "metadata": {"name": True, "namespace": True, "labels": True, "annotations": pod_annotation,
                     "deletionTimestamp": True, "ownerReferences": True},
        "spec": {"nodeName": True, "volumes": [{"persistentVolumeClaim": {"claimName": True}}]},
        "status": {"phase": True},
    }
    return {
        PVC.kind: {"metadata": {"name": True, "namespace": True},
                   "spec": {"accessModes": True, "volumeName": True}},
        PV.kind: {"metadata": {"name": True},
                  "spec": {"csi": {"driver": True, "volumeHandle": True}, "claimRef": {"namespace": True, "name": True}}},
        SHARE_MANAGER.kind: {"metadata": {"name": True, "namespace": True},
                             "status": {"state": True, "ownerID": True}},
        POD.kind: pod,
        NODE.kind: {"metadata": {"name": True, "labels": True},
                    "spec": {"unschedulable": True, "taints": True},
                    "status": {"conditions": [{"type": True, "status": True}]}},
    }


def trim(value: Any, keep: Keep) -> Any:
    """`value` reduced to what `keep` lists; a value of an unexpected type is kept as it is."""
    if keep is True:
        return value
    if isinstance(keep, dict):
        if not isinstance(value, dict):
            return value
        return {key: trim(value[key], sub) for key, sub in keep.items() if value.get(key) is not None}
    if isinstance(keep, list):
        if not isinstance(value, list):
            return value
        return [item for item in (trim(v, keep[0]) for v in value) if item not in ({}, None)]
    if not isinstance(value, dict):
        return value
    return {key: v for key, v in value.items() if keep(key)}


def object_key(namespace: str | None, name: str) -> str:
    return f"{namespace}/{name}" if namespace else name


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


# --------------------------------------------------------------------------- timing


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


class Backoff:
    """Exponential delays with jitter: initial × 2ⁿ, capped, each drawn from [d/2, d]."""

    def __init__(self, initial: float, cap: float):
        self.initial, self.cap, self.failures = initial, cap, 0

    def next(self) -> float:
        delay = min(self.cap, self.initial * 2 ** self.failures)
        self.failures += 1
        return random.uniform(delay / 2, delay)

    def reset(self) -> None:
        self.failures = 0


class Gone(Exception):
    """410 Gone: the resourceVersion to resume from is too old; list again."""


class WatchError(Exception):
    pass


# --------------------------------------------------------------------------- table


Indexer = Callable[[dict[str, Any]], Iterable[Hashable]]


class Table:
    """Trimmed objects as compact JSON by key ("namespace/name", or the name), plus indexes.

    Name and namespace live in the key only, not again in the JSON; an index maps a value to
    one key or a tuple of keys. With 100k+ objects these bytes add up to tens of MiB.
    """

    __slots__ = ("objects", "indexes", "indexers")

    def __init__(self, indexers: Mapping[str, Indexer]):
        self.indexers = indexers
        self.objects: dict[str, bytes] = {}
        self.indexes: dict[str, dict[Hashable, str | tuple[str, ...]]] = {name: {} for name in indexers}

    def get(self, key: str) -> dict[str, Any] | None:
        blob = self.objects.get(key)
        return None if blob is None else self.decode(key, blob)

    @staticmethod
    def decode(key: str, blob: bytes) -> dict[str, Any]:
        obj = orjson.loads(blob)
        namespace, _, name = key.rpartition("/")
        meta = {"name": name, "namespace": namespace} if namespace else {"name": name}
        rest = obj.get("metadata")
        obj["metadata"] = meta | rest if isinstance(rest, dict) else meta
        return obj

    @staticmethod
    def encode(obj: dict[str, Any]) -> bytes:
        meta = obj.get("metadata")
        if isinstance(meta, dict) and ("name" in meta or "namespace" in meta):
            rest = {k: v for k, v in meta.items() if k not in ("name", "namespace")}
            obj = {k: v for k, v in obj.items() if k != "metadata"} | ({"metadata": rest} if rest else {})
        # orjson's bytes keep its whole write buffer (4 KiB and up); a copy keeps only the JSON.
        return bytes(memoryview(orjson.dumps(obj)))

    def put(self, key: str, obj: dict[str, Any]) -> None:
        blob = self.encode(obj)
        old = self.objects.get(key)
        if old == blob:
            return
        if self.indexers:
            self._reindex(key, self.decode(key, old) if old is not None else None, obj)
        self.objects[key] = blob

    def remove(self, key: str) -> None:
        old = self.objects.pop(key, None)
        if old is not None and self.indexers:
            self._reindex(key, self.decode(key, old), None)

    def lookup(self, index: str, value: Hashable) -> list[dict[str, Any]]:
        keys = self.indexes[index].get(value, ())
        return [self.decode(key, self.objects[key]) for key in ((keys,) if isinstance(keys, str) else keys)]

    def _reindex(self, key: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        for name, indexer in self.indexers.items():
            before = set(indexer(old)) if old is not None else set()
            after = set(indexer(new)) if new is not None else set()
            index = self.indexes[name]
            for value in before - after:
                held = index.get(value, ())
                keys = tuple(k for k in ((held,) if isinstance(held, str) else held) if k != key)
                if keys:
                    index[value] = keys[0] if len(keys) == 1 else keys
                else:
                    index.pop(value, None)
            for value in after - before:
                held = index.get(value)
                if held is None:
                    index[key if value == key else value] = key  # a PV's handle is often its name
                else:
                    index[value] = ((held,) if isinstance(held, str) else held) + (key,)


# --------------------------------------------------------------------------- informer


class Informer:
    """One resource (optionally one namespace and a label selector), listed and watched."""

    def __init__(
        self,
        api_client: Any,
        resource: Resource,
        keep: Keep,
        *,
        namespace: str | None = None,
        labels: dict[str, str] | None = None,
        indexers: Mapping[str, Indexer] | None = None,
        authoritative: bool | None = None,
        timing: Timing = Timing(),
        list_slots: asyncio.Semaphore | None = None,
    ):
        self.api = api_client
        self.resource = resource
        self.namespace = namespace if resource.namespaced else None
        self.labels = dict(labels or {})
        self.keep = keep
        # Whether a name lookup in our scope that misses means "absent". True when nothing is
        # filtered by labels; a label-scoped informer says so only when told to.
        self.authoritative = not self.labels if authoritative is None else authoritative
        self.timing = timing
        # Informers sharing these slots list one at a time: one page in memory at once.
        self.list_slots = list_slots or asyncio.Semaphore(1)
        self.table = Table(indexers or {})
        self.synced_event = asyncio.Event()
        self.resource_version: str | None = None
        self.resumable = False  # every event since the list carried a resourceVersion
        self.lists = 0  # completed lists (the first one, then relists)
        self.events = 0  # watch events applied
        self.last_sync: float | None = None  # wall-clock time of the last list or event
        self.error: str | None = None  # why the last list/watch failed, until one succeeds
        self._backoff = Backoff(timing.backoff_initial, timing.backoff_cap)
        self._path = resource.path(self.namespace)
        self._selector = ",".join(f"{k}={v}" for k, v in self.labels.items())

    @property
    def name(self) -> str:
        scope = f" in {self.namespace}" if self.namespace else ""
        return f"{self.resource.plural}{scope}" + (f" ({self._selector})" if self._selector else "")

    @property
    def synced(self) -> bool:
        return self.synced_event.is_set()

    def covers(self, namespace: str | None) -> bool:
        return self.namespace is None or namespace == self.namespace

    def covers_selector(self, labels: dict[str, str] | None) -> bool:
        """A list with these labels is a subset of what this informer holds."""
        return all((labels or {}).get(k) == v for k, v in self.labels.items())

    def get(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        return self.table.get(object_key(namespace if self.resource.namespaced else None, name))

    def items(self, namespace: str | None) -> Iterator[dict[str, Any]]:
        prefix = f"{namespace}/" if namespace and self.resource.namespaced else ""
        for key, blob in list(self.table.objects.items()):
            if key.startswith(prefix):
                yield self.table.decode(key, blob)

    # ----------------------------------------------------------------- objects

    def _key(self, obj: Mapping[str, Any]) -> str | None:
        meta = _meta(obj)
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            return None
        return object_key(meta.get("namespace") if self.resource.namespaced else None, name)

    def _wanted(self, obj: Mapping[str, Any]) -> bool:
        # Emulators may ignore the label selector: filter on our side too.
        if self.namespace is not None and _meta(obj).get("namespace") != self.namespace:
            return False
        return labels_match(obj, self.labels)

    def _apply(self, table: Table, kind: str, obj: Any) -> str | None:
        """Apply one object; the key when the table now holds it."""
        if not isinstance(obj, dict):
            return None
        key = self._key(obj)
        if key is None:
            return None
        if kind == "DELETED" or not self._wanted(obj):
            table.remove(key)
            return None
        table.put(key, trim(obj, self.keep))
        return key

    # ----------------------------------------------------------------- API

    async def _get(self, query: list[tuple[str, str]], timeout: float | None) -> Any:
        return await raw_get(self.api, self._path, query, timeout)

    async def list(self) -> None:
        """A full paginated list, applied in place (no second copy of a large table), then the
        objects it did not return are dropped; its resourceVersion is where the watch starts."""
        seen: set[str] = set()
        token: str | None = None
        resource_version: str | None = None
        async with self.list_slots:
            while True:
                query = [("limit", str(self.timing.page_size))]
                if self._selector:
                    query.append(("labelSelector", self._selector))
                if token:
                    query.append(("continue", token))
                async with asyncio.timeout(self.timing.request_timeout):
                    response = await self._get(query, self.timing.request_timeout)
                    try:
                        body = await response.read()
                    finally:
                        response.release()
                if response.status == 410:
                    raise Gone(f"list of {self.name}: the continue token expired")
                if response.status != 200:
                    raise WatchError(f"list of {self.name}: API answered {response.status}")
                page = orjson.loads(body)
                del body
                for item in page.get("items") or ():
                    key = self._apply(self.table, "ADDED", item)
                    if key is not None:
                        seen.add(key)
                metadata = page.get("metadata") or {}
                resource_version = metadata.get("resourceVersion") or None
                token = metadata.get("continue") or None
                del page
                if not token:
                    break
        for key in [key for key in self.table.objects if key not in seen]:
            self.table.remove(key)
        self.resource_version = resource_version
        self.resumable = resource_version is not None
        self.lists += 1
        self._healthy()

    async def watch(self) -> bool:
        """Stream events into the table until the watch ends; True when it was a healthy watch."""
        loop = asyncio.get_running_loop()
        seconds = random.uniform(*self.timing.watch_seconds)
        query = [("watch", "true"), ("allowWatchBookmarks", "true"), ("timeoutSeconds", str(max(1, int(seconds))))]
        if self.resource_version:
            query.append(("resourceVersion", self.resource_version))
        if self._selector:
            query.append(("labelSelector", self._selector))
        started, events = loop.time(), 0
        # The server ends the watch after timeoutSeconds; the grace bounds a server that does not.
        try:
            async with asyncio.timeout(seconds + min(30.0, seconds)):
                response = await self._get(query, None)
                try:
                    if response.status == 410:
                        raise Gone(f"watch of {self.name}: 410 Gone")
                    if response.status != 200:
                        raise WatchError(f"watch of {self.name}: API answered {response.status}")
                    pending = bytearray()
                    async for chunk in response.content.iter_any():
                        pending += chunk
                        if b"\n" not in chunk:
                            continue
                        *lines, rest = pending.split(b"\n")
                        pending = bytearray(rest)
                        for line in lines:
                            if line.strip():
                                self._event(orjson.loads(line))
                                events += 1
                finally:
                    response.close()
        except TimeoutError:
            pass
        return events > 0 or loop.time() - started >= self.timing.short_watch

    def _event(self, event: Any) -> None:
        kind = event.get("type") if isinstance(event, dict) else None
        obj = event.get("object") if isinstance(event, dict) else None
        if kind == "ERROR":
            status = obj if isinstance(obj, dict) else {}
            if status.get("code") == 410:
                raise Gone(f"watch of {self.name}: {status.get('message') or '410 Gone'}")
            raise WatchError(f"watch of {self.name}: error event {status.get('code')} {status.get('message') or ''}")
        if kind not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
            raise WatchError(f"watch of {self.name}: unexpected event {kind!r}")
        version = _meta(obj).get("resourceVersion") if isinstance(obj, dict) else None
        if version:
            self.resource_version = version
        elif kind != "BOOKMARK":
            # Nothing to resume from after this event: the next watch starts with a list.
            self.resumable = False
        if kind != "BOOKMARK":
            self._apply(self.table, kind, obj)
        self.events += 1
        self._healthy()

    def _healthy(self) -> None:
        self.last_sync = time.time()
        if self.error is not None or self.lists + self.events <= 1:
            metrics.CACHE_HEALTHY.labels(self.name).set(1)
        self.error = None

    def _failed(self, exc: Exception) -> None:
        self.error = f"{type(exc).__name__}: {exc}"
        metrics.WATCH_ERRORS.labels(self.name).inc()
        metrics.CACHE_HEALTHY.labels(self.name).set(0)

    # ----------------------------------------------------------------- loop

    async def run(self) -> None:
        """List, then watch, forever; cancel to stop."""
        need_list, gone_in_a_row = True, 0
        while True:
            try:
                if need_list:
                    started = asyncio.get_running_loop().time()
                    await self.list()
                    need_list = False
                    if not self.synced:
                        log.info("cache synced", extra={"fields": {
                            "resource": self.name, "objects": len(self.table.objects),
                            "seconds": round(asyncio.get_running_loop().time() - started, 3)}})
                    self.synced_event.set()
                healthy = await self.watch()
                gone_in_a_row = 0
                need_list = not self.resumable
                if not healthy:
                    raise WatchError(f"watch of {self.name} ended at once with no events")
                self._backoff.reset()
            except asyncio.CancelledError:
                raise
            except Gone as exc:
                # client-go relists at once on 410; a relist that is itself too old backs off.
                need_list = True
                gone_in_a_row += 1
                log.info("relisting", extra={"fields": {"resource": self.name, "reason": str(exc)}})
                if gone_in_a_row > 1:
                    await asyncio.sleep(self._backoff.next())
            except Exception as exc:  # API down, connection reset, 403, bad JSON: back off, then resume
                need_list = need_list or not self.resumable
                delay = self._backoff.next()
                self._failed(exc)
                log.warning("watch failed", extra={"fields": {
                    "resource": self.name, "error": f"{type(exc).__name__}: {exc}", "retry_in": round(delay, 3)}})
                await asyncio.sleep(delay)


# --------------------------------------------------------------------------- store


class WatchedClusterStore:
    """The Store protocol answered from watch caches, with direct GETs where the cache cannot tell."""

    def __init__(self, api_client: Any, settings: Settings = Settings(), timing: Timing = Timing()):
        self._api_client = api_client
        self._direct = ClusterStore(api_client)
        keep = keep_fields(settings)
        longhorn = settings.longhorn_namespace
        list_slots = asyncio.Semaphore(1)  # lists one at a time: the memory of one page, not six

        def informer(resource: Resource, **kwargs: Any) -> Informer:
            return Informer(api_client, resource, keep[resource.kind], timing=timing, list_slots=list_slots, **kwargs)

        self.pvcs = informer(PVC)
        self.pvs = informer(PV, indexers={"volumeHandle": _volume_handles})
        self.share_managers = informer(SHARE_MANAGER, namespace=longhorn)
        # Pods looked up by name in the Longhorn namespace are share-manager pods, which
        # Longhorn labels: a miss there is an answer.
        self.share_manager_pods = informer(POD, namespace=longhorn, labels=SHARE_MANAGER_POD_LABELS, authoritative=True)
        self.vm_pods = informer(POD, labels=VIRT_LAUNCHER_LABELS, indexers={"claim": _claims})
        self.nodes = informer(NODE)
        self.informers = (self.pvcs, self.pvs, self.share_managers, self.share_manager_pods, self.vm_pods, self.nodes)
        self._by_kind: dict[str, list[Informer]] = {}
        for i in self.informers:
            self._by_kind.setdefault(i.resource.kind, []).append(i)
        self._tasks: list[asyncio.Task[None]] = []

    @classmethod
    async def connect(cls, kubeconfig: str | None = None, settings: Settings = Settings(),
                      timing: Timing = Timing()) -> WatchedClusterStore:
        return cls(await connect_api(kubeconfig), settings, timing)

    @classmethod
    def for_host(cls, host: str, settings: Settings = Settings(), timing: Timing = Timing()) -> WatchedClusterStore:
        """An unauthenticated client for an API at `host` (local emulators, kubectl proxy)."""
        from kubernetes_asyncio import client

        return cls(new_api_client(client.Configuration(host=host)), settings, timing)

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Start listing and watching in the background (call once, from the running loop)."""
        if not self._tasks:
            self._tasks = [asyncio.create_task(i.run(), name=f"cache {i.name}") for i in self.informers]

    def synced(self) -> bool:
        return all(i.synced for i in self.informers)

    @property
    def api_client(self) -> Any:
        return self._api_client

    def stats(self) -> dict[str, tuple[int, float | None]]:
        """Objects held and last sync time per cache (read by the metrics at scrape time)."""
        return {i.name: (len(i.table.objects), i.last_sync) for i in self.informers}

    def degraded(self) -> list[str]:
        """Caches whose list or watch is failing now: they serve what they have meanwhile."""
        return [f"{i.name}: {i.error}" for i in self.informers if i.error]

    async def wait_synced(self, timeout: float | None = None) -> None:
        async with asyncio.timeout(timeout):
            for informer in self.informers:
                await informer.synced_event.wait()

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        await self._direct.close()

    # ----------------------------------------------------------------- reads

    def _informers(self, resource: Resource, namespace: str | None) -> list[Informer]:
        return [i for i in self._by_kind.get(resource.kind, ()) if i.resource == resource and i.covers(namespace)]

    def peek(self, resource: Resource, namespace: str | None, name: str) -> tuple[bool, dict[str, Any] | None]:
        """From memory: (True, object or None) when the caches can tell, (False, None) otherwise."""
        answered = False  # a synced informer that holds everything this look-up could be about
        for informer in self._by_kind.get(resource.kind, ()):
            if informer.synced and informer.covers(namespace) and informer.resource == resource:
                obj = informer.get(namespace, name)
                if obj is not None:
                    return True, obj
                answered = answered or informer.authoritative
        if answered and resource.kind not in MISS_FALLBACK:
            return True, None
        return False, None

    async def get(self, resource, namespace, name, *, timeout=None):
        known, obj = self.peek(resource, namespace, name)
        if known:
            return obj
        return await self._direct.get(resource, namespace, name, timeout=timeout)

    async def list(self, resource, namespace=None, labels=None, *, timeout=None):
        for informer in self._informers(resource, namespace):
            if informer.synced and informer.covers_selector(labels):
                return [obj for obj in informer.items(namespace) if labels_match(obj, labels)]
        return await self._direct.list(resource, namespace, labels, timeout=timeout)

    async def pvs_by_volume_handle(self, handle, *, timeout=None):
        if not self.pvs.synced:
            return await self._direct.pvs_by_volume_handle(handle, timeout=timeout)
        return self.pvs.table.lookup("volumeHandle", handle)

    async def pods_by_claim(self, namespace, claim, *, timeout=None):
        if not self.vm_pods.synced:
            return await self._direct.pods_by_claim(namespace, claim, timeout=timeout)
        return self.vm_pods.table.lookup("claim", object_key(namespace, claim))


def _volume_handles(pv: dict[str, Any]) -> list[str]:
    handle = volume_handle(pv)
    return [handle] if isinstance(handle, str) and handle else []


def _claims(pod: dict[str, Any]) -> list[str]:
    namespace = _meta(pod).get("namespace") or ""
    claims = []
    for volume in (pod.get("spec") or {}).get("volumes") or ():
        claim = ((volume.get("persistentVolumeClaim") or {}).get("claimName")) if isinstance(volume, dict) else None
        if isinstance(claim, str) and claim:
            claims.append(object_key(namespace, claim))
    return claims
