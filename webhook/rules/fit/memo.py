"""Pure: what the rules worked out from cluster objects, kept by the store that holds them."""
from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import orjson

Answer = TypeVar("Answer")

SIZE = 4096  # answers held at most; the oldest goes first
# The content that stands for a version of an object without one is held with its answer: beyond
# this many bytes (no real pod's resources or terms come near) the answer is worked out again each
# time instead, so the memo holds SIZE × KEY_BYTES at most (16 MiB), whatever the pods carry.
KEY_BYTES = 4096


class Memo:
    """Answers of pure functions of objects, bounded, each by the name and resourceVersion of the objects
    (else the content read): reused only for what gave it."""

    __slots__ = ("size", "_held")

    def __init__(self, size: int = SIZE) -> None:
        self.size = size
        self._held: dict[tuple[Callable[[Any], Any], Hashable], tuple[Any, Any]] = {}

    def __len__(self) -> int:
        return len(self._held)

    def of(self, read: Callable[[Any], Answer], obj: Any, reads: Any) -> Answer:
        """`read(obj)`, kept per object name, a new version replacing the old one's answer. `reads` is
        what `read` looks at in `obj` (its JSON stands for the version when there is none)."""
        meta = obj.get("metadata") if type(obj) is dict else None
        name = meta.get("name") if type(meta) is dict else None
        if type(name) is not str:
            return read(obj)
        namespace = meta.get("namespace")  # type: ignore[union-attr]
        version = meta.get("resourceVersion")  # type: ignore[union-attr]
        if version is None:
            try:
                version = orjson.dumps(reads)
            except orjson.JSONEncodeError:  # a value JSON cannot hold: no key, read it again
                return read(obj)
            if len(version) > KEY_BYTES:
                return read(obj)
        return self.latest(read, (namespace if type(namespace) is str else None, name), version, obj)

    def latest(self, read: Callable[[Any], Answer], slot: Hashable, version: Hashable | None, obj: Any) -> Answer:
        """`read(obj)`, kept in `slot` while `version` is the one it was worked out at (None: not kept)."""
        if version is None:
            return read(obj)
        key = (read, slot)
        held = self._held.get(key)
        if held is not None and held[0] == version:
            return held[1]  # type: ignore[no-any-return]
        answer = read(obj)
        if held is None and len(self._held) >= self.size:
            del self._held[next(iter(self._held))]  # the oldest (dicts keep insertion order)
        self._held[key] = (version, answer)
        return answer
