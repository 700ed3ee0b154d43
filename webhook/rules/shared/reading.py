"""Reading KubeVirt objects for the keeper: typed fields, or why an object is of unexpected shape
(`Malformed`: raised while reading, returned by the reader, said and left out)."""
from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

from ... import kinds
from .times import parse_time


@dataclasses.dataclass(unsafe_hash=True)
class Malformed(ValueError):
    """An object of unexpected shape: raised while reading it (`reason`), returned by its reader
    with which object it is (`of(what)`), for the caller to say and leave out."""

    reason: str
    what: str = ""

    def of(self, what: str) -> Malformed:
        return Malformed(self.reason, what)

    def __str__(self) -> str:
        return f"{self.what}: {self.reason}" if self.what else self.reason


def read_time(container: dict[str, Any], key: str, where: str) -> datetime | None:
    """A timestamp field: None when absent, Malformed when present but unreadable."""
    value = container.get(key)
    if value is None or value == "":
        return None
    parsed = parse_time(value)
    if parsed is None:
        raise Malformed(f"{where}.{key} {str(value)[:40]!r} is not an RFC 3339 time")
    return parsed


KIND_NAMES = {dict: "an object", str: "a string", bool: "a boolean", list: "a list"}


def read_typed(container: dict[str, Any], key: str, where: str, kind: type) -> Any:
    """A field of `kind` (dict, str, bool or list): its empty value when absent, Malformed when of another type."""
    value = container.get(key)
    if value is None:
        return kind()
    if not isinstance(value, kind):
        raise Malformed(f"{where}.{key} is a {type(value).__name__}, not {KIND_NAMES[kind]}")
    return value


def read_identity(obj: Any, kind: str) -> tuple[str, str, dict[str, Any]]:
    if not isinstance(obj, dict):
        raise Malformed(f"a {kind} is a {type(obj).__name__}, not an object")
    metadata = read_typed(obj, "metadata", kind, dict)
    namespace, name = read_typed(metadata, "namespace", "metadata", str), read_typed(metadata, "name", "metadata", str)
    if not kinds.valid_name(name) or not kinds.valid_name(namespace):
        raise Malformed(f"metadata.namespace/name {namespace[:60]!r}/{name[:60]!r} is not a valid object name")
    return namespace, name, metadata
