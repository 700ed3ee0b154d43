"""A Store that notes each read and what it answered: an answer worked out through it holds while
every read answers the same (`changed`), whatever the rule read, with no list of what that was."""
from __future__ import annotations

from typing import Any

from ..deadline import Deadline
from ..stores.store import Store, StoreError

Read = tuple[str, tuple[Any, ...], Any]  # the Store's method, its arguments, what it answered


class Recording:
    """`store`, its reads noted in `reads` (the caches' objects are kept as the rules read them)."""

    def __init__(self, store: Store) -> None:
        self.store, self.reads = store, list[Read]()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def peek(self, *args: Any) -> tuple[bool, dict[str, Any] | None]:
        found = self.store.peek(*args)
        self.reads.append(("peek", args, found))
        return found

    async def get(self, *args: Any, timeout: float | None = None) -> Any:
        return self._noted("get", args, await self.store.get(*args, timeout=timeout))

    async def pvs_by_volume_handle(self, *args: Any, timeout: float | None = None) -> Any:
        return self._noted("pvs_by_volume_handle", args, await self.store.pvs_by_volume_handle(*args, timeout=timeout))

    async def pods_by_claim(self, *args: Any, timeout: float | None = None) -> Any:
        return self._noted("pods_by_claim", args, await self.store.pods_by_claim(*args, timeout=timeout))

    def _noted(self, method: str, args: tuple[Any, ...], found: Any) -> Any:
        self.reads.append((method, args, found))
        return found


def _named(args: tuple[Any, ...]) -> str:
    return " ".join(str(getattr(arg, "kind", arg)) for arg in args if arg)


async def changed(store: Store, reads: tuple[Read, ...], deadline: Deadline) -> str | None:
    """The first of `reads` that `store` answers otherwise now (or cannot answer), said; None if none."""
    for method, args, then in reads:
        try:
            now = store.peek(*args) if method == "peek" else await deadline.call(getattr(store, method), *args)
        except (StoreError, TimeoutError):
            return f"what it read of {_named(args)} cannot be read again"
        if now is not then and now != then:
            return f"what it read of {_named(args)} changed since"
    return None
