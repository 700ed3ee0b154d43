"""A Store over a YAML snapshot, as `kubectl get -o yaml` prints it: `review`, `serve --state`."""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

from .. import kinds
from ..kinds import POD, PV, RULE_RESOURCES, Resource
from ..kinds import NODE, PVC
from ..rules import fit
from ..rules.facts import claims_of
from .store import Unwatched, labels_match, volume_handle


class SnapshotStore(Unwatched):
    """Objects from a YAML stream (documents or Lists); every answer from memory."""

    def __init__(self, objects: Iterable[dict[str, Any]]):
        self._objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        by_kind = {(r.api_version, r.kind): r for r in RULE_RESOURCES}
        for obj in objects:
            resource = by_kind.get((obj.get("apiVersion"), obj.get("kind")))
            if resource is None:
                continue
            meta = kinds.meta(obj)
            namespace = (meta.get("namespace") or "") if resource.namespaced else ""
            self._objects[(resource.kind, namespace, meta.get("name") or "")] = obj
        self._view: fit.StaticView | None = None

    @classmethod
    def from_file(cls, path: str | Path) -> SnapshotStore:
        text = Path(path).read_text(encoding="utf-8")
        return cls(flatten(yaml.safe_load_all(text)))

    def _all(self, resource: Resource, namespace: str | None = None) -> Iterator[dict[str, Any]]:
        for (kind, ns, _), obj in self._objects.items():
            if kind == resource.kind and (namespace is None or ns == namespace):
                yield obj

    async def fit_view(self, namespace, node, *, timeout=None):
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

    async def pods_by_claim(self, namespace, claim, *, timeout=None):
        launcher = dict([kinds.VIRT_LAUNCHER])
        return [pod for pod in self._all(POD, namespace) if labels_match(pod, launcher) and claim in claims_of(pod)]

    async def close(self) -> None:
        return None


def flatten(documents: Iterable[Any]) -> Iterator[dict[str, Any]]:
    """Yield objects from documents that may be `kind: List` (as `kubectl get -o yaml` prints)."""
    for doc in documents:
        if not isinstance(doc, dict):
            continue
        if str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
            yield from flatten(doc["items"])
        else:
            yield doc
