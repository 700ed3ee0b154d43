"""A Store over a YAML snapshot, as `kubectl get -o yaml` prints it: `review`, `serve --state`."""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from .. import kinds
from ..kinds import NODE, POD, PV, PVC, RULE_RESOURCES, VMI, VMIM, Resource
from ..rules import fit
from . import documents
from .store import Store, using, volume_handle


def malformed(obj: Any) -> str | None:
    """What makes `obj` unusable as a Kubernetes object of a snapshot, or None."""
    if not isinstance(obj, dict):
        return f"is a {type(obj).__name__}, not an object"
    for key in ("apiVersion", "kind"):
        if not isinstance(obj.get(key), str):
            return f"{key} is {_shown(obj.get(key))}, not a string"
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return f"metadata is {_shown(meta)}, not an object"
    if not isinstance(meta.get("name"), str) or not meta["name"]:
        return f"metadata.name is {_shown(meta.get('name'))}, not a name"
    if meta.get("namespace") is not None and not isinstance(meta["namespace"], str):
        return f"metadata.namespace is {_shown(meta['namespace'])}, not a string"
    return None


def _shown(value: Any) -> str:
    return "missing" if value is None else f"a {type(value).__name__}"


class SnapshotStore(Store):
    """Objects from a YAML stream (documents or Lists); every answer from memory."""

    def __init__(self, objects: Iterable[dict[str, Any]]):
        self._objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        for obj in objects:
            resource = _BY_KIND.get((obj.get("apiVersion"), obj.get("kind")))
            if resource is None:
                continue
            meta = kinds.meta(obj)
            namespace = (meta.get("namespace") or "") if resource.namespaced else ""
            self._objects[(resource.kind, namespace, meta.get("name") or "")] = obj
        self._view: fit.StaticView | None = None

    @classmethod
    def from_file(cls, path: str | Path) -> SnapshotStore:
        """The snapshot in `path`; ValueError (one line: the file, the object, what is wrong) when
        it is not YAML or an object in it is not a Kubernetes object."""
        found = documents.read(str(path), str(path))
        objects = list(flatten(found))
        for index, obj in enumerate(objects, 1):
            problem = malformed(obj)
            if problem is not None:  # the object named as well as it can be
                kind, name = obj.get("kind") if isinstance(obj, dict) else None, kinds.meta(obj).get("name")
                named = f" ({kind} {name})" if isinstance(kind, str) and isinstance(name, str) and name else ""
                raise ValueError(f"{path}: object {index}{named} {problem}")
        return cls(objects)

    def usable(self) -> int:
        """How many objects the rules can read (PVCs, PVs, Nodes, Pods, ShareManagers, VMIs)."""
        return len(self._objects)

    def _all(self, resource: Resource, namespace: str | None = None) -> Iterator[dict[str, Any]]:
        for (kind, ns, _), obj in self._objects.items():
            if kind == resource.kind and (namespace is None or ns == namespace):
                yield obj

    async def fit_view(self, namespace, *, timeout=None):
        if self._view is None:
            self._view = fit.StaticView(self._all(NODE), self._all(POD), self._all(PVC), self._all(PV))
        return self._view

    def peek(self, resource, namespace, name):
        namespace = (namespace or "") if resource.namespaced else ""
        return True, self._objects.get((resource.kind, namespace, name))

    async def get(self, resource, namespace, name, *, timeout=None):
        return self.peek(resource, namespace, name)[1]

    async def pvs_by_volume_handle(self, handle, *, timeout=None):
        return [pv for pv in self._all(PV) if volume_handle(pv) == handle]

    async def migrations(self, *, timeout=None):
        return list(self._all(VMIM))

    async def pods_by_claim(self, namespace, claim, *, timeout=None):
        launchers = [pod for pod in self._all(POD, namespace) if kinds.is_launcher(pod)]
        return using(launchers, list(self._all(VMI, namespace)), claim)


_BY_KIND = {(r.api_version, r.kind): r for r in (*RULE_RESOURCES, VMIM)}


def flatten(documents: Iterable[Any]) -> Iterator[Any]:
    """Yield objects from documents that may be `kind: List` (as `kubectl get -o yaml` prints)."""
    for doc in documents:
        if isinstance(doc, dict) and str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
            yield from flatten(doc["items"])
        else:
            yield doc
