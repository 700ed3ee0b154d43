"""The fields of a kind the rules read, each declared once: the readers read through the
declaration (`Field`, `Keyed`), and the caches keep what it declares (`stores/shapes.py`
builds its shapes from `Fields.keep`), so a rule cannot read a field the cache drops.

A path is dotted, `[]` after a key for every item of a list: "spec.volumes[].dataVolume.name". A
field with nothing declared beneath it is kept whole; one with fields beneath keeps those.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from ...config import Settings
from .reading import read_time, read_typed

KeySource = str | Callable[[Settings], str]  # an annotation or label key, or the setting that names it


class Undeclared(LookupError):
    """A rule read an annotation nobody declared: every cache drops it, so in production the rule
    would never see it. Raised at the read, in the first test that reaches it."""


class CachedAnnotations(dict[str, Any]):
    """The declared annotations of an object (a cached pod: `stores.shapes.pod_read`; a VMI read:
    `Fields.annotations_of`): a plain dict to every reader, `kinds.annotations` included, but a read of a key nobody
    declared raises `Undeclared`."""

    __slots__ = ("_declared", "_fields")

    def __init__(self, found: dict[str, Any], declared: Callable[[str], bool], fields: Fields):
        super().__init__(found)
        self._declared, self._fields = declared, fields

    def _check(self, key: object) -> None:
        if not self._declared(key := str(key)):  # naming the declaration to add
            raise Undeclared(f"the {self._fields.name} annotation {key!r} is read but not declared: declare it with "
                             f"`{self._fields.declared_as}.annotation({key!r})`, beside the rule that reads it or in "
                             "webhook/rules/shared/declared.py (the caches keep only what is declared)")

    def __getitem__(self, key: str) -> Any:
        self._check(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self._check(key)
        return super().__contains__(key)

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        self._check(key)
        return super().get(key, default)


@dataclasses.dataclass(frozen=True, slots=True)
class Field:
    """One declared field: its key in the object that holds it (each read takes that holder), and
    where that is, in the messages' words ("status.migrationState", the kind's name at the top)."""

    key: str
    where: str

    def value(self, holder: Mapping[str, Any]) -> Any:
        return holder.get(self.key)

    def obj(self, holder: Mapping[str, Any]) -> dict[str, Any]:
        """An object: {} when absent, Malformed when something else."""
        return read_typed(holder, self.key, self.where, dict)  # type: ignore[arg-type]

    def text(self, holder: Mapping[str, Any]) -> str:
        return read_typed(holder, self.key, self.where, str)  # type: ignore[arg-type]

    def flag(self, holder: Mapping[str, Any]) -> bool:
        return read_typed(holder, self.key, self.where, bool)  # type: ignore[arg-type]

    def items(self, holder: Mapping[str, Any]) -> list[Any]:
        return read_typed(holder, self.key, self.where, list)  # type: ignore[arg-type]

    def time(self, holder: Mapping[str, Any]) -> datetime | None:
        return read_time(holder, self.key, self.where)  # type: ignore[arg-type]


@dataclasses.dataclass(frozen=True, slots=True)
class Keyed:
    """A declared annotation or label key, fixed or named by a setting (then read through the settings)."""

    where: str  # "annotations" or "labels"
    key: KeySource

    def name(self) -> str:
        if not isinstance(self.key, str):
            raise TypeError("this key is named by a setting: read it through the settings")
        return self.key

    def of(self, obj: Any) -> Any:
        """The value on `obj`, None when absent."""
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        found = meta.get(self.where) if isinstance(meta, dict) else None
        return found.get(self.name()) if isinstance(found, dict) else None


class Fields:
    """What the rules read of one kind (`name`: how messages name it, "VMI"), declared in `declared`
    before any cache takes its shape: a declaration made after would be missing, so it raises."""

    def __init__(self, name: str, declared_as: str = ""):
        self.name = name
        self.declared_as = declared_as or name  # its name in `declared` (the line an Undeclared names)
        self.shaped = False  # a cache's shape was taken (`keep`): later declarations would be missing from it
        self.paths: set[tuple[str, ...]] = set()  # every declared path and its parents (list items "key[]")
        self.keys: dict[str, list[KeySource]] = {"annotations": [], "labels": []}
        self.prefixes: dict[str, list[KeySource]] = {"annotations": [], "labels": []}

    def _declaring(self, what: str) -> None:
        if self.shaped:
            raise RuntimeError(f"{self.name} {what} declared after the caches took their shape: declare it in "
                               "rules.shared.declared")

    def field(self, path: str) -> Field:
        self._declaring(f"field {path!r}")
        parts = tuple(path.split("."))
        self.paths.update(parts[:depth] for depth in range(1, len(parts) + 1))
        where = ".".join(parts[:-1]) if len(parts) > 1 else self.name
        return Field(parts[-1].removesuffix("[]"), where)

    def annotation(self, key: KeySource) -> Keyed:
        self._declaring(f"annotation {key!r}")
        self.keys["annotations"].append(key)
        return Keyed("annotations", key)

    def label(self, key: KeySource) -> Keyed:
        self._declaring(f"label {key!r}")
        self.keys["labels"].append(key)
        return Keyed("labels", key)

    def annotation_prefix(self, prefix: KeySource) -> None:
        """Every annotation whose key starts with `prefix` is read (ours: the decision's)."""
        self._declaring(f"annotation prefix {prefix!r}")
        self.prefixes["annotations"].append(prefix)

    def named(self, where: str, settings: Settings) -> Callable[[str], bool]:
        """Whether a key of `where` ("annotations", "labels") is one the rules read."""
        keys = frozenset(_resolve(self.keys[where], settings))
        prefixes = tuple(_resolve(self.prefixes[where], settings))
        if not prefixes:
            return keys.__contains__
        return lambda key: key in keys or key.startswith(prefixes)

    def annotations_of(self, obj: Any, settings: Settings, named: Callable[[str], bool]) -> CachedAnnotations:
        """The declared annotations `obj` carries (those with a string value); a read of any other
        raises `Undeclared`. `named`: `named("annotations", settings)` made once for many objects."""
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        found = meta.get("annotations") if isinstance(meta, dict) else None
        carried = {} if not isinstance(found, dict) else {
            key: value for key in _resolve(self.keys["annotations"], settings) if isinstance(value := found.get(key), str)}
        return CachedAnnotations(carried, named, self)

    def guarded(self, obj: dict[str, Any], declared: Callable[[str], bool]) -> dict[str, Any]:
        """`obj` (a cache's copy) with its annotations a `CachedAnnotations`, an empty one where it
        kept none: `declared` is `named("annotations", settings)`, what the cache kept."""
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            found = meta.get("annotations")
            meta["annotations"] = CachedAnnotations(found if isinstance(found, dict) else {}, declared, self)
        return obj

    def keep(self, settings: Settings) -> Any:
        """The caches' spec (`stores.shapes.trim`) of what is declared: every field, annotation and label."""
        self.shaped = True
        spec: dict[str, Any] = {}  # a leaf whole (True), an object by its parts, a list's items by their spec ([spec])
        for path in self.paths:
            below = spec
            for depth, part in enumerate(path, 1):
                key = part.removesuffix("[]")
                held = below.get(key)
                inner = held[0] if isinstance(held, list) else held
                if depth < len(path) or isinstance(inner, dict):  # something declared beneath it
                    inner = inner if isinstance(inner, dict) else {}
                    below[key] = [inner] if part.endswith("[]") or isinstance(held, list) else inner
                    below = inner
                else:
                    below[key] = True
        for where in ("annotations", "labels"):
            if self.keys[where] or self.prefixes[where]:
                spec.setdefault("metadata", {})[where] = self.named(where, settings)
        return spec


def _resolve(keys: Iterable[KeySource], settings: Settings) -> list[str]:
    return [key if isinstance(key, str) else key(settings) for key in keys]
