"""Watch-backed caches of the cluster objects the rules read: admissions answered from memory.

Each `Informer` applies the events of one `Reflector` (list, watch, relist: reflector.py) to a
`Table`. Objects are kept trimmed to the fields the rules read (`keep_fields`, built from
kinds.py), stored as compact JSON and indexed by what the rules look up. `get` decodes a
fresh dict (its caller may change it); the admission path reads through `peek` and the
checks' view, which hand out one decoded object per stored version, shared and read-only,
so that the objects every admission reads are decoded once, not once per admission.

`WatchedClusterStore` answers the Store protocol from these caches and falls back to a
direct GET (within the caller's timeout) before the caches have synced and on misses that
may just be watch lag.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

import orjson

from .. import kinds, metrics
from ..config import Settings
from ..kinds import NODE, POD, PV, PVC, SHARE_MANAGER, Resource
from ..rules import fit
from ..rules.facts import claims_of
from ..rules.memo import Memo
from .direct import ClusterStore
from .reflector import Event, EventType, Reflector, Timing
from .store import Stats, labels_match, volume_handle

log = logging.getLogger("webhook.cache")  # the logger names in the log lines are part of the interface


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
        return key == settings.opt_in_annotation or key.startswith(settings.decision_prefix) or key == kinds.EPHEMERAL_PROVISIONING

    pod = {
        "metadata": {"name": True, "namespace": True, "labels": True, "annotations": pod_annotation,
                     "creationTimestamp": True, "deletionTimestamp": True},
        "spec": {"nodeName": True, "volumes": [{"persistentVolumeClaim": {"claimName": True}}]},
        "status": {"phase": True},
    }
    return {
        PVC.kind: {"metadata": {"name": True, "namespace": True, "deletionTimestamp": True},
                   "spec": {"accessModes": True, "volumeName": True}, "status": {"phase": True}},
        # Labels and nodeAffinity: which nodes can mount the volume (the scheduler's VolumeBinding, VolumeZone).
        PV.kind: {"metadata": {"name": True, "labels": True},
                  "spec": {"csi": {"driver": True, "volumeHandle": True}, "claimRef": {"namespace": True, "name": True},
                           "nodeAffinity": True}},
        SHARE_MANAGER.kind: {"metadata": {"name": True, "namespace": True},
                             "status": {"state": True, "ownerID": True}},
        POD.kind: pod,
        NODE.kind: {"metadata": {"name": True, "labels": True},
                    "spec": {"unschedulable": True, "taints": True},
                    "status": {"conditions": [{"type": True, "status": True}], "allocatable": True}},
    }


# The scheduler's own pod informer leaves finished pods out (pkg/scheduler/scheduler.go); they take
# nothing from a node, and the rules do not trust them either.
NOT_FINISHED = "status.phase!=Succeeded,status.phase!=Failed"


def shape_pod(settings: Settings) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A pod reduced to what the rules and the scheduler checks read. Every pod of the cluster
    is kept, so this is written out rather than declared: ports only where a host port is
    taken, conditions only while the scheduler cannot place the pod, claims only of launchers."""
    keep_annotation = keep_fields(settings)[POD.kind]["metadata"]["annotations"]

    def container(value: Any, host_network: bool) -> Any:
        if not isinstance(value, dict):
            return value
        kept: dict[str, Any] = {}
        resources = value.get("resources")
        if isinstance(resources, dict):
            wanted = {k: resources[k] for k in ("requests", "limits") if resources.get(k)}
            if wanted:
                kept["resources"] = wanted
        ports = value.get("ports")
        if isinstance(ports, list):
            held = [p for p in ports if not isinstance(p, dict) or p.get("hostPort") or host_network]
            if held:
                kept["ports"] = held
        if value.get("restartPolicy"):
            kept["restartPolicy"] = value["restartPolicy"]
        return kept

    def shape(pod: dict[str, Any]) -> dict[str, Any]:
        meta, spec, status = kinds.meta(pod), kinds.spec(pod), kinds.status(pod)
        launcher = kinds.is_launcher(pod)
        kept_meta = {k: meta[k] for k in ("name", "namespace", "labels", "deletionTimestamp") if meta.get(k)}
        annotations = meta.get("annotations")
        ours = {k: v for k, v in annotations.items() if keep_annotation(k)} if isinstance(annotations, dict) else {}
        if ours:
            kept_meta["annotations"] = ours
        if (launcher or settings.decision_annotation in ours) and meta.get("creationTimestamp"):
            # Which pod of a VM is the newest; how long a pod we pinned has waited.
            kept_meta["creationTimestamp"] = meta["creationTimestamp"]
        owner = kinds.vmi_owner(pod) if launcher else None
        if owner is not None:  # the VMI an Event about the pod is about (its labels name the hostname)
            kept_meta["ownerReferences"] = [{k: owner[k] for k in ("apiVersion", "kind", "name", "uid", "controller")
                                             if k in owner}]
        host_network = spec.get("hostNetwork") is True
        kept_spec: dict[str, Any] = {}
        for key in ("nodeName", "overhead", "resources", "hostNetwork"):
            if spec.get(key):
                kept_spec[key] = spec[key]
        for key in ("containers", "initContainers"):
            if isinstance(spec.get(key), list):
                kept_spec[key] = [container(c, host_network) for c in spec[key]]
        anti = (spec.get("affinity") or {}).get("podAntiAffinity") if isinstance(spec.get("affinity"), dict) else None
        if isinstance(anti, dict) and anti.get("requiredDuringSchedulingIgnoredDuringExecution"):
            kept_spec["affinity"] = {"podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": anti["requiredDuringSchedulingIgnoredDuringExecution"]}}
        if launcher:
            claims = trim(spec.get("volumes"), [{"persistentVolumeClaim": {"claimName": True}}])
            if claims:
                kept_spec["volumes"] = claims
        kept_status: dict[str, Any] = {}
        if status.get("phase"):
            kept_status["phase"] = status["phase"]
        if spec.get("nodeName") and _resized(pod):
            # An in-place resize under way: the scheduler counts the larger of spec, allocated and
            # actuated (fit.pod_requests), so what it reads stays (with the containers' names).
            for key in ("containerStatuses", "initContainerStatuses"):
                entries = [{k: e[k] for k in ("name", "resources", "allocatedResources") if k in e}
                           for e in status.get(key) or () if isinstance(e, dict)]
                if entries:
                    kept_status[key] = entries
            pending = [c for c in status.get("conditions") or () if isinstance(c, dict) and c.get("type") == "PodResizePending"]
            if pending:
                kept_status["conditions"] = pending
            for key in ("containers", "initContainers"):
                for kept, whole in zip(kept_spec.get(key) or (), spec.get(key) or ()):
                    if isinstance(kept, dict) and isinstance(whole, dict) and whole.get("name") is not None:
                        kept["name"] = whole["name"]
        if not spec.get("nodeName") and isinstance(status.get("conditions"), list):
            waiting = [c for c in status["conditions"] if isinstance(c, dict) and c.get("type") == "PodScheduled"]
            if waiting:
                kept_status["conditions"] = waiting
        return {"metadata": kept_meta, "spec": kept_spec, "status": kept_status}

    return shape


def _resized(pod: dict[str, Any]) -> bool:
    """Whether the pod's status makes it take more than its spec asks (an in-place resize)."""
    try:
        return fit.pod_requests(pod, running=True) != fit.pod_requests(pod)
    except ValueError:
        return False


def not_finished(pod: dict[str, Any]) -> bool:
    return not kinds.finished(pod)


NO_PODS = fit.Usage()  # what a node without pods takes: nothing (never changed)


class NodeUsage:
    """What the pods bound to each node take (requests, slots, host ports), kept as pods come
    and go: a pod's share is worked out again from the object it was added as, so exactly
    that is taken away."""

    def __init__(self) -> None:
        self.by_node: dict[str, fit.Usage] = {}

    def __call__(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        for pod, sign in ((old, -1), (new, 1)):
            node = fit.bound_node(pod) if pod is not None else None
            if node is None:
                continue
            usage = self.by_node.get(node)
            if usage is None:
                usage = self.by_node[node] = fit.Usage()
            share = fit.PodUsage.of(pod)
            if sign > 0:
                usage.add(share)
            else:
                usage.remove(share)
                if usage.pods <= 0:
                    del self.by_node[node]

    def of(self, node: str) -> fit.Usage:
        """Read-only: the checks only read it (a node without pods gets the one empty Usage)."""
        return self.by_node.get(node) or NO_PODS


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


# --------------------------------------------------------------------------- table


Indexer = Callable[[dict[str, Any]], Iterable[Hashable]]
Watcher = Callable[[dict[str, Any] | None, dict[str, Any] | None], None]


# Decoded objects a table keeps for `Table.read`: more than any admission reads, few enough
# that memory stays that of the JSON (a decoded object takes several times its bytes).
SHARED = 1024


class Table:
    """Trimmed objects as compact JSON by key ("namespace/name", or the name), plus indexes.

    Name and namespace live in the key only, not again in the JSON; an index maps a value to
    one key or a tuple of keys. With 100k+ objects these bytes add up to tens of MiB.
    """

    __slots__ = ("objects", "indexes", "indexers", "watchers", "shared")

    def __init__(self, indexers: Mapping[str, Indexer], watchers: Iterable[Watcher] = ()):
        self.indexers = indexers
        # Told every change as (old, new) objects, for figures kept beside the table (usage per node).
        self.watchers = tuple(watchers)
        self.objects: dict[str, bytes] = {}
        self.indexes: dict[str, dict[Hashable, str | tuple[str, ...]]] = {name: {} for name in indexers}
        # The objects `read` handed out, by key, until they change (put, remove) or are the oldest of
        # more than SHARED.
        self.shared: dict[str, dict[str, Any]] = {}

    def get(self, key: str) -> dict[str, Any] | None:
        """A fresh copy: the caller may change it."""
        blob = self.objects.get(key)
        return None if blob is None else self.decode(key, blob)

    def read(self, key: str) -> dict[str, Any] | None:
        """The object itself, shared with every other reader: read it, never change it."""
        obj = self.shared.get(key)
        if obj is None:
            blob = self.objects.get(key)
            if blob is None:
                return None
            if len(self.shared) >= SHARED:
                del self.shared[next(iter(self.shared))]  # the oldest (dicts keep insertion order)
            obj = self.shared[key] = self.decode(key, blob)
        return obj

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
        if self.indexers or self.watchers:
            self._reindex(key, self.decode(key, old) if old is not None else None, obj)
        self.objects[key] = blob
        self.shared.pop(key, None)

    def remove(self, key: str) -> None:
        old = self.objects.pop(key, None)
        self.shared.pop(key, None)
        if old is not None and (self.indexers or self.watchers):
            self._reindex(key, self.decode(key, old), None)

    def keys_of(self, index: str, value: Hashable) -> tuple[str, ...]:
        keys = self.indexes[index].get(value, ())
        return (keys,) if isinstance(keys, str) else keys

    def lookup(self, index: str, value: Hashable) -> list[dict[str, Any]]:
        """Fresh copies of the objects an index holds for `value`."""
        return [self.decode(key, self.objects[key]) for key in self.keys_of(index, value)]

    def _reindex(self, key: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        for watcher in self.watchers:
            watcher(old, new)
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
    """One resource (optionally one namespace and a label selector) kept in a Table from the
    events of its reflector."""

    def __init__(
        self,
        resource: Resource,
        keep: Keep,
        *,
        namespace: str | None = None,
        labels: dict[str, str] | None = None,
        indexers: Mapping[str, Indexer] | None = None,
        watchers: Iterable[Watcher] = (),
        fields: str = "",
        wanted: Callable[[dict[str, Any]], bool] | None = None,
        shape: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ):
        self.resource = resource
        # A field selector the API applies (`fields`), and the same test on our side (`wanted`).
        self.fields, self.wanted = fields, wanted
        self.shape = shape or (lambda obj: trim(obj, keep))
        self.namespace = namespace if resource.namespaced else None
        self.labels = dict(labels or {})
        self.selector = ",".join(f"{k}={v}" for k, v in self.labels.items())
        # Whether a name lookup in our scope that misses means "absent": when nothing is
        # filtered by labels.
        self.authoritative = not self.labels
        self.table = Table(indexers or {}, watchers)
        self.synced_event = asyncio.Event()
        self.synced = False  # the event's state as a plain attribute: every look-up asks
        self.lists = 0  # completed lists (the first one, then relists)
        self.events = 0  # watch events applied
        self.last_sync: float | None = None  # wall-clock time of the last list or event
        self.error: str | None = None  # why the last list/watch failed, until one succeeds
        self._listed: set[str] = set()  # keys the list under way has returned

    @property
    def name(self) -> str:
        scope = f" in {self.namespace}" if self.namespace else ""
        return f"{self.resource.plural}{scope}" + (f" ({self.selector})" if self.selector else "")

    def get(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        """A fresh copy (see `Table.get`)."""
        return self.table.get(object_key(namespace if self.resource.namespaced else None, name))

    def read(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The shared, read-only object (see `Table.read`)."""
        return self.table.read(f"{namespace}/{name}" if namespace and self.resource.namespaced else name)

    def reflector(self, api: Any, timing: Timing = Timing(), list_slots: asyncio.Semaphore | None = None) -> Reflector:
        return Reflector.for_api(api, self.resource, self.name, namespace=self.namespace, selector=self.selector,
                                 fields=self.fields, timing=timing, list_slots=list_slots)

    async def run(self, events: Any) -> None:
        """Apply the reflector's events until it stops (cancel to stop)."""
        async for event in events:
            self.apply(event)

    # ----------------------------------------------------------------- events

    def apply(self, event: Event) -> None:
        """One event from the reflector into the table, the health figures and the logs."""
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
            self.lists += 1
            if not self.synced:
                log.info("cache synced", extra={"fields": {
                    "resource": self.name, "objects": len(self.table.objects), "seconds": round(event.seconds or 0.0, 3)}})
            self.synced = True
            self.synced_event.set()
        elif kind is EventType.DELETED:
            key = self._key(event.object)
            if key is not None:
                self.table.remove(key)
            self.events += 1
        elif kind is not EventType.BOOKMARK:
            self._put(event.object)
            self.events += 1
        else:
            self.events += 1
        self._healthy()

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
        # Emulators may ignore the label selector: filter on our side too.
        if (self.namespace is not None and kinds.meta(obj).get("namespace") != self.namespace) \
                or not labels_match(obj, self.labels) or (self.wanted is not None and not self.wanted(obj)):
            self.table.remove(key)
            return None
        self.table.put(key, self.shape(obj))
        return key

    def _healthy(self) -> None:
        self.last_sync = time.time()
        if self.error is not None or self.lists + self.events <= 1:
            metrics.CACHE_HEALTHY.labels(self.name).set(1)
        self.error = None


class Informers:
    """Informers run together: one task each, named `<task_prefix> <informer>`; their lists one at
    a time (the memory of one page, not one per informer), in the order of `informers`."""

    task_prefix = "informer"

    def __init__(self, api_client: Any, timing: Timing, informers: tuple[Informer, ...]):
        self._api, self._timing, self.informers = api_client, timing, informers
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        """Start listing and watching in the background (call once, from the running loop)."""
        if self._tasks:
            return
        list_slots = asyncio.Semaphore(1)
        for informer in self.informers:
            events = informer.reflector(self._api, self._timing, list_slots).events()
            self._tasks.append(asyncio.create_task(informer.run(events), name=f"{self.task_prefix} {informer.name}"))

    def synced(self) -> bool:
        return all(i.synced for i in self.informers)

    def degraded(self) -> list[str]:
        """Informers whose list or watch is failing now: they serve what they have meanwhile."""
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


# --------------------------------------------------------------------------- store


class WatchedClusterStore(Informers):
    """The Store protocol answered from watch caches, with direct GETs where the cache cannot tell."""

    task_prefix = "cache"

    def __init__(self, api_client: Any, settings: Settings = Settings(), timing: Timing = Timing()):
        self.direct = ClusterStore(api_client)  # reads from the API itself: full objects, no watch lag
        keep = keep_fields(settings)
        longhorn = settings.longhorn_namespace

        def informer(resource: Resource, **kwargs: Any) -> Informer:
            return Informer(resource, keep[resource.kind], **kwargs)

        self.pvcs = informer(PVC)
        self.pvs = informer(PV, indexers={"volumeHandle": _volume_handles})
        self.share_managers = informer(SHARE_MANAGER, namespace=longhorn)
        # Every pod that has not finished: share-manager pods by name, launcher pods by claim, and
        # what each node's pods take, for the scheduler's checks. A miss by name is an answer.
        self.usage = NodeUsage()
        self.pods = informer(POD, fields=NOT_FINISHED, wanted=not_finished, shape=shape_pod(settings),
                             indexers={"claim": _claims, "vmi": _created_by, "node": _node_of, "anti": _anti_affinity,
                                       "waiting": pinned_and_waiting(settings)},
                             watchers=[self.usage])
        self.nodes = informer(NODE)
        # Listed in this order, one at a time: what the scheduler checks need first.
        super().__init__(api_client, timing, (self.nodes, self.pods, self.pvcs, self.pvs, self.share_managers))
        self._view = CachedView(self)
        self._by_kind = {i.resource.kind: i for i in self.informers}  # one informer per kind
        assert len(self._by_kind) == len(self.informers)

    @classmethod
    def for_host(cls, host: str, settings: Settings = Settings(), timing: Timing = Timing()) -> WatchedClusterStore:
        """An unauthenticated client for an API at `host` (local emulators, kubectl proxy)."""
        from . import client

        return cls(client.for_host(host), settings, timing)

    # ----------------------------------------------------------------- lifecycle

    def stats(self) -> Stats:
        """Objects held and last sync time per cache (read by the metrics at scrape time)."""
        return {i.name: (len(i.table.objects), i.last_sync) for i in self.informers}

    async def close(self) -> None:
        await super().close()
        await self.direct.close()

    # ----------------------------------------------------------------- reads

    def peek(self, resource: Resource, namespace: str | None, name: str, *,
             copy: bool = False) -> tuple[bool, dict[str, Any] | None]:
        """From memory: (True, object or None) when the caches can tell, (False, None) otherwise.
        The object is shared with every other reader: read it, never change it; with `copy`, it
        is a fresh copy of the caller's own (what `get` returns)."""
        informer = self._by_kind.get(resource.kind)  # written out: every look-up comes here
        if informer is None or (informer.resource is not resource and informer.resource != resource) \
                or not informer.synced or (informer.namespace is not None and namespace != informer.namespace):
            return False, None  # outside what the informer holds, or not synced yet
        key = f"{namespace}/{name}" if namespace and resource.namespaced else name
        table = informer.table
        obj = table.get(key) if copy else (table.shared.get(key) or table.read(key))  # read()'s own first step, inline
        if obj is not None:
            return True, obj
        if informer.authoritative and resource.kind not in MISS_FALLBACK:
            return True, None
        return False, None

    async def get(self, resource, namespace, name, *, timeout=None):
        """A copy of the caller's own, from the caches when they can tell, else from the API."""
        known, obj = self.peek(resource, namespace, name, copy=True)
        if known:
            return obj
        return await self.direct.get(resource, namespace, name, timeout=timeout)

    async def pvs_by_volume_handle(self, handle, *, timeout=None):
        if not self.pvs.synced:
            return await self.direct.pvs_by_volume_handle(handle, timeout=timeout)
        return self.pvs.table.lookup("volumeHandle", handle)

    async def pods_by_claim(self, namespace, claim, *, timeout=None):
        if not self.pods.synced:
            return await self.direct.pods_by_claim(namespace, claim, timeout=timeout)
        return self.pods.table.lookup("claim", object_key(namespace, claim))

    def pinned_waiting(self) -> list[dict[str, Any]]:
        """Pods we pinned that no node has taken yet (what the safety net looks at)."""
        return self.pods.table.lookup("waiting", True) if self.pods.synced else []

    async def fit_view(self, namespace, node, *, timeout=None):
        # Before the caches have synced, what a node's pods take is unknown: no pin on a guess.
        return self._view if self.pods.synced and self.nodes.synced and self.pvcs.synced and self.pvs.synced else None

    def launcher_pods(self, namespace: str, vmi_uid: str) -> list[dict[str, Any]] | None:
        """The virt-launcher pods of one VMI (label kubevirt.io/created-by), trimmed; None until synced."""
        if not self.pods.synced:
            return None
        return self.pods.table.lookup("vmi", object_key(namespace, vmi_uid))


def _volume_handles(pv: dict[str, Any]) -> list[str]:
    handle = volume_handle(pv)
    return [handle] if handle else []


def _created_by(pod: dict[str, Any]) -> list[str]:
    if not kinds.is_launcher(pod):
        return []
    uid = kinds.labels(pod).get(kinds.CREATED_BY_LABEL)
    return [object_key(kinds.meta(pod).get("namespace") or "", uid)] if isinstance(uid, str) and uid else []


def _claims(pod: dict[str, Any]) -> list[str]:
    if not kinds.is_launcher(pod):
        return []
    namespace = kinds.meta(pod).get("namespace") or ""
    return [object_key(namespace, claim) for claim in claims_of(pod)]


def pinned_and_waiting(settings: Settings) -> Indexer:
    def waiting(pod: dict[str, Any]) -> list[bool]:
        pinned = kinds.annotations(pod).get(settings.decision_annotation) == "pinned"
        return [True] if pinned and not kinds.spec(pod).get("nodeName") else []

    return waiting


def _node_of(pod: dict[str, Any]) -> list[str]:
    node = fit.bound_node(pod)
    return [node] if node else []


def _anti_affinity(pod: dict[str, Any]) -> list[bool]:
    return [True] if fit.bound_node(pod) and fit.has_required_anti_affinity(pod) else []


class CachedView:
    """The scheduler checks' view of the cluster, from the caches (rules/fit/view.py `View`).

    Objects are the caches' shared ones (`Table.read`): the checks only read them. Pods with
    required anti-affinity are read on every check; each is decoded once per version and
    handed out as the same object while it is unchanged, so the checks' parse of its terms
    is reused too (kept apart from `Table.shared`, which may hold fewer than there are)."""

    def __init__(self, store: WatchedClusterStore):
        self._store = store
        self._decoded: dict[str, tuple[bytes, dict[str, Any]]] = {}
        self.memo = Memo()  # what the checks worked out from this store's objects

    def node(self, name):
        return self._store.nodes.read(None, name)

    def nodes(self):
        table = self._store.nodes.table
        return [table.read(key) for key in list(table.objects)]

    def usage(self, node_name):
        return self._store.usage.of(node_name)

    def pods_on(self, node_name):
        table = self._store.pods.table
        return [table.read(key) for key in table.keys_of("node", node_name)]

    def pods_with_required_anti_affinity(self):
        table = self._store.pods.table
        held = table.indexes["anti"].get(True, ())
        keys = (held,) if isinstance(held, str) else held
        found = []
        for key in keys:
            blob = table.objects[key]
            memo = self._decoded.get(key)
            if memo is None or memo[0] is not blob:
                memo = self._decoded[key] = (blob, table.decode(key, blob))
            found.append(memo[1])
        if len(self._decoded) > 2 * len(keys) + 64:  # forget pods that left the index
            live = set(keys)
            self._decoded = {k: v for k, v in self._decoded.items() if k in live}
        return found

    def pvc(self, namespace, name):
        table = self._store.pvcs.table
        key = f"{namespace}/{name}" if namespace else name
        return table.shared.get(key) or table.read(key)  # Table.read's first step, inline: every pin asks

    def pv(self, name):
        table = self._store.pvs.table
        return table.shared.get(name) or table.read(name)
