"""The keeper beside admission: every replica campaigns for the Lease, the one holding it runs
the keeper. Admission never waits on any of this; on shutdown the keeper stops first.

`serve` runs this in a process of its own (`process.py`), with caches of its own listed only
while it leads; run in process (the tests), it keeps by the caches it is given."""
from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any, AsyncContextManager

from ..cluster.events import NO_EVENTS, Events
from ..cluster.store import WatchedStore
from ..config import Settings
from .keeper import Keeper, KeeperTiming
from .lease import Elector, LeaseTiming

Caches = Callable[[], AsyncContextManager[WatchedStore]]  # the caches a term keeps by, open for the term


def shared(store: WatchedStore) -> Caches:
    """Caches someone else started and closes (those of admission, in one process)."""
    @contextlib.asynccontextmanager
    async def term() -> AsyncIterator[WatchedStore]:
        yield store
    return term


class KeeperService:
    def __init__(self, api: Any, caches: Caches, settings: Settings, *, namespace: str, identity: str,
                 events: Events = NO_EVENTS, timing: KeeperTiming = KeeperTiming(), lease_timing: LeaseTiming = LeaseTiming()):
        if timing.request_timeout >= lease_timing.renew_deadline:
            # A migration is created only if its request ends within the renew deadline.
            raise ValueError("the keeper's request timeout must be shorter than the lease's renew deadline")
        self.api, self.caches, self.settings, self.events, self.timing = api, caches, settings, events, timing
        self.keeper: Keeper | None = None  # the keeper of this replica's current (or last) term
        self.elector = Elector(api, namespace=namespace, name=settings.lease_name, identity=identity,
                               lead=self._lead, timing=lease_timing)

    async def _lead(self) -> None:
        """One term: a keeper that remembers nothing of an earlier one, as a new leader elsewhere would."""
        async with self.caches() as store:
            self.keeper = Keeper(self.api, store, self.settings, events=self.events, timing=self.timing,
                                 authority=self._may_act)
            await self.keeper.run()

    def _may_act(self, within: float) -> bool:
        return self.elector.may_act(within)

    def start(self) -> None:
        self.elector.start()

    async def stop(self) -> None:
        await self.elector.stop()

    def degraded(self) -> list[str]:
        """Readiness notes: the Lease cannot be read or written; what the leading keeper cannot
        see or do (followers watch nothing)."""
        notes = [f"lease: {self.elector.error}"] if self.elector.error else []
        if self.elector.leading and self.keeper is not None:
            notes += self.keeper.degraded()
        return [f"keeper: {note}" for note in notes]
