"""A Store that notes each read and what it answered: an answer worked out through it holds while
every read answers the same (`changed`), whatever the rule read, with no list of what that was."""
from __future__ import annotations

from typing import Any

from ..deadline import Deadline
from ..stores.store import Store, StoreError

Read = tuple[str, tuple[Any, ...], Any]  # the Store's method, its arguments, what it answered


class Recording:
    """`store`, its reads noted in `reads` (the caches' objects are kept as the rules read them)."""

    READS = frozenset({"get", "pvs_by_volume_handle", "pods_by_claim", "migrations"})  # besides `peek`

    def __init__(self, store: Store) -> None:
        self.store, self.reads = store, list[Read]()

    def __getattr__(self, method: str) -> Any:
        read = getattr(self.store, method)
        if method not in self.READS:
            return read

        async def noted(*args: Any, timeout: float | None = None) -> Any:
            found = await read(*args, timeout=timeout)
            self.reads.append((method, args, found))
            return found

        return noted

    def peek(self, *args: Any) -> tuple[bool, dict[str, Any] | None]:
        found = self.store.peek(*args)
        self.reads.append(("peek", args, found))
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
