"""The keeper inside `serve`: every replica campaigns for the Lease, the one holding it runs
the keeper. Admission never waits on any of this; on shutdown the keeper stops first."""
from __future__ import annotations

from typing import Any

from ..cluster.events import NO_EVENTS, Events
from ..cluster.store import WatchedStore
from ..config import Settings
from .keeper import Keeper, KeeperTiming
from .lease import Elector, LeaseTiming


class KeeperService:
    def __init__(self, api: Any, store: WatchedStore, settings: Settings, *, namespace: str, identity: str,
                 events: Events = NO_EVENTS, timing: KeeperTiming = KeeperTiming(), lease_timing: LeaseTiming = LeaseTiming()):
        if timing.request_timeout >= lease_timing.renew_deadline:
            # A migration is created only if its request ends within the renew deadline.
            raise ValueError("the keeper's request timeout must be shorter than the lease's renew deadline")
        self.keeper = Keeper(api, store, settings, events=events, timing=timing, authority=self._may_act)
        self.elector = Elector(api, namespace=namespace, name=settings.lease_name, identity=identity,
                               lead=self.keeper.run, timing=lease_timing)

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
        if self.elector.leading:
            notes += self.keeper.degraded()
        return [f"keeper: {note}" for note in notes]
