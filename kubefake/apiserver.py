"""An apiserver's storage and writes over kmock's public object store, served two ways.

kmock's `KubernetesEmulator` stores a created object before any reaction sees the request,
keyed by the name it was sent with, and knows only PATCH: generated names, dry runs, creates
turned away whole and PUT with optimistic concurrency cannot be expressed as its reactions.
`Apiserver` does the reads and writes itself, on a `kmock.ObjectsArray` with a `kmock.Bus` of
watch events per resource. `KubernetesApi` serves it as kmock's scaffold's fallbacks, so that a
test's reactions answer first and see every request; `serve` serves it bare over aiohttp, for a
benchmark: no request history kept, nothing matched against it.

It keeps to what the keeper's tests and the benchmarks need of an apiserver, and to faults a
real one will not produce on demand (refused creates and deletes, 410 Gone and dropped watches
through kmock's reactions). What only a real apiserver judges (validation, defaulting, admission,
discovery, Helm's client-go) is tested on one: kubefake/envtest.py.
"""
from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import re
import secrets
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import kmock
from aiohttp import web

from . import kubevirt, validation
from .fields import field_selector
from .objects import stamp

__all__ = ["Apiserver", "Call", "KubernetesApi", "serve", "stamp"]

Key = tuple[Any, str | None, str]


@dataclasses.dataclass
class Call:
    """One API request as the apiserver reads it (kmock's `Request` fits too)."""
    method: str
    resource: Any  # kmock.resource, or None outside the resource paths
    namespace: str | None = None
    name: str | None = None
    params: dict[str, str] = dataclasses.field(default_factory=dict)
    data: Any = None
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    subresource: str | None = None  # e.g. KubeVirt's `unpause` of a VMI (kubefake.kubevirt)


def error(status: int, reason: str, message: str) -> kmock.KubernetesError:
    return kmock.KubernetesError(status, reason, message)


def precondition_failed(options: Any, stored: dict[str, Any]) -> str | None:
    """Why a DELETE's `preconditions` (DeleteOptions: uid, resourceVersion) do not hold for the
    stored object, in the apiserver's words (k8s.io/apiserver `pkg/registry/rest/delete.go`,
    `pkg/storage`), or None when they hold or there are none."""
    wanted = (options.get("preconditions") if isinstance(options, dict) else None) or {}
    meta = stored.get("metadata") or {}
    group = str(stored.get("apiVersion", "")).rpartition("/")[0]
    what = f'{stored.get("kind")}{"." + group if group else ""} "{meta.get("name")}"'
    if wanted.get("uid") and wanted["uid"] != meta.get("uid"):
        return (f"Operation cannot be fulfilled on {what}: the UID in the precondition ({wanted['uid']}) does not "
                f"match the UID in record ({meta.get('uid')}). The object might have been deleted and then recreated")
    if wanted.get("resourceVersion") and wanted["resourceVersion"] != meta.get("resourceVersion"):
        return (f"Operation cannot be fulfilled on {what}: Precondition failed: ResourceVersion in precondition: "
                f"{wanted['resourceVersion']}, ResourceVersion in object meta: {meta.get('resourceVersion')}")
    return None


# How many events of a resource a watch may resume over; an older resourceVersion is 410 Gone.
HISTORY = 10_000


class Versions:
    """resourceVersions from one counter, each above any the watches were told."""

    def __init__(self, first: int) -> None:
        self.last = first - 1

    def __iter__(self) -> Versions:
        return self

    def __next__(self) -> int:
        self.last += 1
        return self.last

    def seen(self, version: int) -> None:
        self.last = max(self.last, version)


def _number(text: Any) -> int | None:
    """A resourceVersion as a number, None when it is none."""
    return int(text) if isinstance(text, str) and text.isdigit() else None


def _version(obj: Any) -> int | None:
    """An object's resourceVersion as a number, None when it has none that is one."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return _number(meta.get("resourceVersion")) if isinstance(meta, dict) else None


def gone(since: int, oldest: int) -> dict[str, Any]:
    """The watch event of a resourceVersion too old to resume from, as the apiserver sends it."""
    return {"type": "ERROR", "object": {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
                                        "message": f"too old resource version: {since} ({oldest})",
                                        "reason": "Expired", "code": 410}}


class Apiserver:
    """Names from generateName, uid, creationTimestamp and resourceVersion on create; what the
    apiserver refuses refused alike, on create, patch and update (`validation`); `dryRun=All`
    creates answered but never stored; a create `refuse` turns away and a delete `refuse_delete`
    turns away as a whole (request -> KubernetesError | None: nothing stored or deleted); PUT
    replacing an object (the Lease), 409 when its resourceVersion is stale; DELETE with
    `preconditions` (uid, resourceVersion), 409 when they do not hold. Otherwise as kmock's
    emulator: PATCH merges (or applies a JSON patch), DELETE of an
    object with finalizers marks it, its last finalizer gone deletes it; lists and watches by
    namespace and label selector, and core/v1 Events by field selector too (`kubefake.fields`: 400
    for a field the apiserver cannot select on). resourceVersions come from one counter: a list says the latest,
    and a watch from a resourceVersion sends only what changed after it, as the apiserver's watch
    cache does (410 Gone once those changes are no longer kept); a watch from none, or from "0",
    starts with every object ADDED."""

    def __init__(self, objects: Any = None, resources: Any = None, *, history: int = HISTORY):
        self.objects = kmock.ObjectsArray() if objects is None else objects
        self.resources = kmock.ResourcesArray() if resources is None else resources
        self.buses: collections.defaultdict[Any, kmock.Bus[dict[str, Any]]] = collections.defaultdict(kmock.Bus)
        self.lock = asyncio.Lock()
        self.versions = Versions(1000)
        # What each resource's watches were told, newest last: a watch resumes from it.
        self.history: collections.defaultdict[Any, collections.deque[tuple[int, dict[str, Any]]]] = \
            collections.defaultdict(lambda: collections.deque(maxlen=history))
        self.forgotten: dict[Any, int] = {}  # per resource, the newest resourceVersion no longer kept
        self.refuse: Callable[[Any], kmock.KubernetesError | None] | None = None
        self.refuse_delete: Callable[[Any], kmock.KubernetesError | None] | None = None
        self.recorders: dict[str, Any] = {}  # client-go's event recorders, by source (kubefake.recorder)

    # ----------------------------------------------------------------- what the watches see

    async def tell(self, resource: Any, event: dict[str, Any]) -> None:
        """Tell the watches of `resource`, under the lock: an apiserver's watch cache, up to date.
        Each event a resourceVersion newer than the resource's last (a write that set none gets
        one, a deletion its own), kept for the watches that resume."""
        kept = self.history[resource]
        version = _version(event.get("object"))
        if version is None or (kept and version <= kept[-1][0]) or event.get("type") == "DELETED":
            version = next(self.versions)
            obj = event.get("object")
            if isinstance(obj, dict):
                if event.get("type") == "DELETED":  # the stored object keeps its own
                    obj = {**obj, "metadata": {**(obj.get("metadata") or {})}}
                    event = {**event, "object": obj}
                obj.setdefault("metadata", {})["resourceVersion"] = str(version)
        self.versions.seen(version)
        if len(kept) == kept.maxlen:
            self.forgotten[resource] = kept[0][0]
        kept.append((version, event))
        await self.buses[resource].put(event)

    def stored(self, key: Key) -> Any:
        """The object under `key`, None if there is none or it was deleted."""
        return self.objects[key] if key in self.objects and not self.objects[key].deleted else None

    def key(self, call: Any, name: str | None = None) -> Key:
        return call.resource, call.namespace, name or call.name

    @staticmethod
    def kind(call: Any, obj: dict[str, Any]) -> str | None:
        if getattr(call.resource, "group", None) == "" and getattr(call.resource, "plural", None) == "pods":
            return "Pod"
        return obj.get("kind")

    def validate(self, call: Any, new: dict[str, Any], old: dict[str, Any] | None = None) -> None:
        """Refused as the apiserver refuses it (kubefake.validation), before anything is stored."""
        if (refused := validation.refusal(self.kind(call, old or new), new, old)) is not None:
            raise refused

    def known(self, resource: Any) -> bool:
        return any(r == resource for r in self.resources) or any(r == resource for r, _, _ in self.objects)

    def matching(self, call: Any) -> list[Any]:
        """Every live object of the call's resource in its namespace (all of them without one) that
        its `labelSelector` and `fieldSelector` select."""
        selector, fields = label_selector(call.params.get("labelSelector")), field_selector(call)
        return [obj for (resource, namespace, name), obj in self.objects.items()
                if resource == call.resource and not obj.deleted
                and (call.namespace is None or namespace == call.namespace)
                and (call.name is None or name == call.name)
                and selector(((obj.raw.get("metadata") or {}).get("labels")) or {}) and fields(obj.raw)]

    # ----------------------------------------------------------------- reads

    async def list(self, call: Any) -> dict[str, Any]:
        if not self.known(call.resource):
            raise kmock.KubernetesResourceNotFoundError()
        async with self.lock:
            items = [obj.raw for obj in self.matching(call)]
        listed: dict[str, Any] = {"metadata": {"resourceVersion": str(self.versions.last)}, "items": items}
        kind = self.resources[call.resource].kind if call.resource in self.resources else None
        if kind:  # a typed client (client-go) decodes a list by its kind
            group, version = call.resource.group, call.resource.version
            listed = {"apiVersion": f"{group}/{version}" if group else version, "kind": f"{kind}List", **listed}
        return listed

    async def events(self, call: Any) -> AsyncIterator[dict[str, Any]]:
        """From a resourceVersion, what changed after it; from none (or "0"), every object ADDED
        first; then the changes as they come, with nothing lost in between."""
        selector = label_selector(call.params.get("labelSelector"))
        bus = self.buses[call.resource]
        since = _number(call.params.get("resourceVersion"))
        async with self.lock:
            if since is None or since == 0:
                first = [{"type": "ADDED", "object": obj.raw} for obj in self.matching(call)]
            elif since < self.forgotten.get(call.resource, 0):
                first = [gone(since, self.forgotten[call.resource])]
            else:
                first = [event for version, event in self.history[call.resource]
                         if version > since and self.selects(call, selector, event)]
            mark = await bus.mark()
        for event in first:
            yield event
            if event["type"] == "ERROR":
                return
        async for event in bus.stream(since=mark):  # the mark let go with the stream
            if self.selects(call, selector, event):
                yield event

    @staticmethod
    def selects(call: Any, selector: Callable[[dict[str, str]], bool], event: dict[str, Any]) -> bool:
        """Whether a watch of the call's namespace, name, label and field selectors sees the event."""
        meta = (event.get("object") or {}).get("metadata") or {}
        return ((call.namespace is None or meta.get("namespace") == call.namespace)
                and (call.name is None or meta.get("name") == call.name) and selector(meta.get("labels") or {})
                and field_selector(call)(event.get("object") or {}))

    def found(self, call: Any) -> Any:
        """The live object the call names; 404 without one."""
        obj = self.stored(self.key(call))
        if obj is None:
            raise kmock.KubernetesObjectNotFoundError()
        return obj

    async def fetch(self, call: Any) -> dict[str, Any]:
        async with self.lock:
            return self.found(call).raw

    # ----------------------------------------------------------------- writes

    async def create(self, call: Any) -> dict[str, Any]:
        data = call.data
        metadata = data.setdefault("metadata", {})
        if not metadata.get("name") and metadata.get("generateName"):
            metadata["name"] = metadata["generateName"] + secrets.token_hex(3)[:5]
        metadata.setdefault("uid", str(uuid.uuid4()))
        metadata.setdefault("creationTimestamp", stamp())
        metadata["resourceVersion"] = str(next(self.versions))
        self.validate(call, data)
        if call.params.get("dryRun") == "All":
            return data  # answered, never stored
        if self.refuse is not None and (refused := self.refuse(call)) is not None:
            raise refused
        key = call.resource, call.namespace or metadata.get("namespace"), metadata.get("name")
        async with self.lock:
            return await self.insert(key, data)

    async def insert(self, key: Key, data: dict[str, Any]) -> dict[str, Any]:
        """Store a new object and tell the watches (under the lock)."""
        if self.stored(key) is not None:
            raise error(409, "AlreadyExists", f"{key[2]} already exists")
        if key in self.objects:
            self.objects[key].create(data)
        else:
            self.objects[key] = data
        raw = self.objects[key].raw
        await self.tell(key[0], {"type": "ADDED", "object": raw})
        return raw

    async def patch(self, call: Any) -> dict[str, Any]:
        """A JSON merge patch (a map) or a JSON patch (a list of operations), checked whole first."""
        async with self.lock:
            obj = self.found(call)
            self.validate(call, validation.patched(obj.raw, call.data), obj.raw)
            version = str(next(self.versions))  # every write a new resourceVersion
            if isinstance(call.data, list):
                changes: Any = [*call.data, {"op": "add", "path": "/metadata/resourceVersion", "value": version}]
            else:
                changes = validation.merged(call.data, {"metadata": {"resourceVersion": version}})
            await self.merge(self.key(call), changes)
            return obj.last.raw

    async def merge(self, key: Key, changes: dict[str, Any]) -> None:
        """Merge `changes` into a stored object and tell the watches; released by its last
        finalizer once marked for deletion, deleted (under the lock)."""
        obj = self.objects[key]
        obj.patch(changes)
        await self.tell(key[0], {"type": "MODIFIED", "object": obj.raw})
        meta = obj.raw.get("metadata") or {}
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            await self.drop(key)

    async def drop(self, key: Key) -> None:
        """Delete a stored object and tell the watches (under the lock)."""
        obj = self.objects[key]
        obj.delete()
        await self.tell(key[0], {"type": "DELETED", "object": obj.last.raw})

    async def replace(self, call: Any) -> dict[str, Any]:
        async with self.lock:
            if self.stored(self.key(call)) is None:
                raise error(404, "NotFound", f"{call.name} not found")
            stored = self.objects[self.key(call)].raw
            sent = (call.data.get("metadata") or {}).get("resourceVersion")
            if sent and sent != (stored.get("metadata") or {}).get("resourceVersion"):
                raise error(409, "Conflict",
                            "the object has been modified; please apply your changes to the latest version")
            new = json.loads(json.dumps(call.data))
            self.validate(call, new, stored)
            new.setdefault("metadata", {})["resourceVersion"] = str(next(self.versions))
            self.objects[self.key(call)] = new
            await self.tell(call.resource, {"type": "MODIFIED", "object": new})
            return new

    async def delete(self, call: Any) -> dict[str, Any]:
        if self.refuse_delete is not None and (refused := self.refuse_delete(call)) is not None:
            raise refused
        key = self.key(call)
        async with self.lock:
            obj = self.found(call)
            meta = obj.raw.get("metadata") or {}
            if (failed := precondition_failed(call.data, obj.raw)) is not None:
                raise error(409, "Conflict", failed)
            if meta.get("deletionTimestamp"):
                pass  # being deleted already
            elif meta.get("finalizers"):
                await self.merge(key, {"metadata": {"deletionTimestamp": stamp()}})
            else:
                await self.drop(key)
            return obj.last.raw

    async def answer(self, call: Any) -> Any:
        """The answer to a call on a resource: a body, or for a watch its events."""
        method, named = str(getattr(call.method, "value", call.method)).upper(), call.name is not None
        if kubevirt.is_kubevirt_subresource(call):  # virt-api's, not the apiserver's
            return await kubevirt.answer(self, call)
        if method == "GET":
            field_selector(call)  # a field the kind cannot be selected on: 400, before any watch event
        if method == "GET" and call.params.get("watch") == "true":
            return self.events(call)
        if method == "GET":
            return await (self.fetch(call) if named else self.list(call))
        if method == "POST" and not named and isinstance(call.data, dict):
            return await self.create(call)
        if method == "PATCH" and named:
            return await self.patch(call)
        if method == "PUT" and named:
            return await self.replace(call)
        if method == "DELETE" and named:
            return await self.delete(call)
        raise kmock.KubernetesEndpointNotFoundError()


class KubernetesApi(kmock.KubernetesScaffold):
    """kmock's scaffold (discovery, reactions, the requests seen) with `Apiserver` answering every
    request on a resource no reaction answers; `objects`, `refuse` and `refuse_delete` are its."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.apiserver = Apiserver(resources=self.resources)
        for action in kmock.action:
            self.fallback[action] << self.answer
        self.fallback[kmock.method.PUT] << self.answer

    async def answer(self, request: kmock.Request) -> Any:
        if request.resource is None or request.resource.plural is None:
            raise NotImplementedError  # discovery: the scaffold's
        answer = await self.apiserver.answer(request)
        if isinstance(answer, AsyncIterator):  # JSON lines, said so (client-go decodes by the type)
            return kmock.Response(headers={"Content-Type": "application/json"}, payload=self.stream(answer))
        return answer

    @staticmethod
    async def stream(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[Any]:
        yield b""  # the headers go out before the first event
        async for event in events:
            yield event

    objects = property(lambda self: self.apiserver.objects)
    refuse = property(lambda self: self.apiserver.refuse, lambda self, value: setattr(self.apiserver, "refuse", value))
    refuse_delete = property(lambda self: self.apiserver.refuse_delete,
                             lambda self, value: setattr(self.apiserver, "refuse_delete", value))


def label_selector(text: str | None) -> Callable[[dict[str, str]], bool]:
    """A `labelSelector` query parameter as the apiserver reads it: `k=v`, `k==v`, `k!=v`, `k`,
    `!k`, `k in (a,b)`, `k notin (a,b)`, ANDed."""
    tests: list[Callable[[dict[str, str]], bool]] = []
    for term in re.findall(r"(?:[^,(]|\([^)]*\))+", text or ""):
        term = term.strip()
        if found := re.fullmatch(r"(\S+)\s+(in|notin)\s+\((.*)\)", term):
            key, op, values = found[1], found[2], {v.strip() for v in found[3].split(",")}
            tests.append(lambda labels, k=key, vs=values, inside=op == "in": (labels.get(k) in vs) is inside)
        elif found := re.fullmatch(r"([^!=\s]+)\s*(!=|==|=)\s*(\S*)", term):
            key, op, value = found[1], found[2], found[3]
            tests.append(lambda labels, k=key, v=value, eq=op != "!=": (labels.get(k) == v) is eq)
        elif term.startswith("!"):
            tests.append(lambda labels, k=term[1:].strip(): k not in labels)
        elif term:
            tests.append(lambda labels, k=term: k in labels)
    return lambda labels: all(test(labels) for test in tests)


# --------------------------------------------------------------------------- served bare

PATH = re.compile(r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
                  r"(?:/namespaces/(?P<namespace>[^/]+))?/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?/?$")


def call_of(method: str, path: str, params: dict[str, str], data: Any,
            headers: dict[str, str] | None = None) -> Call | None:
    """The call a request path makes, None outside the resource paths."""
    found = PATH.match(path)
    if found is None:
        return None
    parts = found.groupdict()
    namespace, plural, name = parts["namespace"], parts["plural"], parts["name"]
    group, version = ("", "v1") if parts["core"] else (parts["group"], parts["version"])
    return Call(method, kmock.resource(group, version, plural), namespace, name, params, data, headers or {})


def status(exc: kmock.KubernetesError) -> web.Response:
    return web.json_response({"apiVersion": "v1", "kind": "Status", "metadata": {}, "code": exc.status,
                              "status": "Failure", "reason": exc.reason or type(exc).__name__,
                              "message": exc.message or repr(exc), "details": exc.details or {}}, status=exc.status)


async def serve(apiserver: Apiserver, answer: Callable[[Call], Any] | None = None,
                counted: Callable[[Call], None] | None = None) -> web.AppRunner:
    """`apiserver` on loopback over aiohttp, started: `answer` (a call -> its answer, by default
    the apiserver's) answers each call; `counted` sees each. The runner's address is where."""
    answer = answer or apiserver.answer

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        call = call_of(request.method, request.path, dict(request.query), json.loads(body) if body else None)
        if call is None:
            return status(kmock.KubernetesEndpointNotFoundError())
        if counted is not None:
            counted(call)
        try:
            got = await answer(call)
        except kmock.KubernetesError as exc:
            return status(exc)
        if not isinstance(got, AsyncIterator):
            return web.json_response(got)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        try:
            async for event in got:
                await response.write(json.dumps(event).encode() + b"\n")
        except ConnectionResetError:
            pass  # the watcher went away
        return response

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner
