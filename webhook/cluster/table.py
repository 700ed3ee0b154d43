"""Trimmed cluster objects held in memory as compact JSON, indexed by what the rules look up.
`get` decodes a fresh dict; `read` hands out one shared, read-only object per stored version."""
from __future__ import annotations

import collections
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

import orjson

def object_key(namespace: str | None, name: str) -> str:
    return f"{namespace}/{name}" if namespace else name


Indexer = Callable[[dict[str, Any]], Iterable[Hashable]]
Watcher = Callable[[dict[str, Any] | None, dict[str, Any] | None], None]
# What a table keeps of an object that arrives (stores/shapes.py: what the rules read of its kind).
Shape = Callable[[dict[str, Any]], dict[str, Any]]


# Decoded objects a table keeps for `Table.read`: more than any admission reads, few enough
# that memory stays that of the JSON (a decoded object takes several times its bytes).
SHARED = 1024


class Table:
    """Objects by key ("namespace/name", or the name), plus indexes of a value to one key or a tuple
    of keys. Name and namespace live in the key only: with 100k+ objects that is tens of MiB."""

    __slots__ = ("objects", "indexes", "indexers", "watchers", "shared", "reader")

    def __init__(self, indexers: Mapping[str, Indexer], watchers: Iterable[Watcher] = ()):
        self.indexers = indexers
        # What each decoded object becomes before anyone reads it (pods: `shapes.pod_read`).
        self.reader: Callable[[dict[str, Any]], dict[str, Any]] | None = None
        # Told every change as (old, new) objects, for figures kept beside the table (usage per node).
        self.watchers = tuple(watchers)
        self.objects: dict[str, bytes] = {}
        self.indexes: dict[str, dict[Hashable, str | tuple[str, ...]]] = {name: {} for name in indexers}
        # What `read` handed out, by key, until it changes or is the oldest of more than SHARED.
        self.shared: collections.OrderedDict[str, dict[str, Any]] = collections.OrderedDict()

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
                self.shared.popitem(last=False)  # the oldest (a dict's first key is found past every one deleted)
            obj = self.shared[key] = self.decode(key, blob)
        return obj

    def decode(self, key: str, blob: bytes) -> dict[str, Any]:
        obj = orjson.loads(blob)
        namespace, _, name = key.rpartition("/")
        meta = {"name": name, "namespace": namespace} if namespace else {"name": name}
        rest = obj.get("metadata")
        obj["metadata"] = meta | rest if isinstance(rest, dict) else meta
        return obj if self.reader is None else self.reader(obj)

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
                keys = tuple(k for k in self.keys_of(name, value) if k != key)
                if keys:
                    index[value] = keys[0] if len(keys) == 1 else keys
                else:
                    index.pop(value, None)
            for value in after - before:
                held = self.keys_of(name, value)
                # The key itself as the value's key where they are equal (a PV's handle is often its name).
                index[key if value == key else value] = held + (key,) if held else key

