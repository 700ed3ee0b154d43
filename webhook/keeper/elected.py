"""`keep`: the keeper, leader-elected (`lease.Elector`), acting only while the Lease lets it (`Elector.may_act`).
The caches are listed at the first term and held until the process stops: a term won back lists nothing again.
A term whose keeper fails hands the Lease over and holds off (BACKOFF) so another can lead.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from .. import metrics
from ..cluster import client
from ..stores.cache import WatchedClusterStore
from ..cluster.events import NO_EVENTS, EventSink
from ..config import Settings
from .keeper import Keeper, KeeperTiming
from .kubevirt_api import KubeVirtWatch
from .records import state_name, StateStore
from .lease import Elector, LeaseTiming

log = logging.getLogger("webhook.keeper")

BACKOFF = (5.0, 300.0)  # no campaign after a term whose keeper failed: first, at most (doubling)
STEADY = 600.0  # this long after the last failure, the backoff starts afresh


class ElectedKeeper:
    """The campaign, and the keeper while this replica leads (`keeper`, None on a follower)."""

    def __init__(self, api: Any, settings: Settings, *, namespace: str, identity: str, kubeconfig: str | None = None,
                 events: bool = True, timing: KeeperTiming = KeeperTiming(), lease_timing: LeaseTiming = LeaseTiming()):
        if timing.request_timeout >= lease_timing.renew_deadline:
            # A migration is created only if its request ends within the renew deadline.
            raise ValueError("the keeper's request timeout must be shorter than the lease's renew deadline")
        self.settings, self.kubeconfig, self.events, self.timing = settings, kubeconfig, events, timing
        self.namespace = namespace  # of the Lease, and of the keeper's state beside it
        self.elector = Elector(api, namespace=namespace, name=settings.lease_name, identity=identity,
                               lead=self._term, timing=lease_timing)
        self.keeper: Keeper | None = None
        self.ended: str | None = None  # how the last term's keeper failed, until the next term
        self.failures = 0  # terms that failed in a row
        self._ended_at = 0.0
        # The connection, the caches and the KubeVirt watches: listed at the first term, closed by stop().
        self.held: tuple[Any, WatchedClusterStore, KubeVirtWatch] | None = None

    def start(self) -> None:
        self.elector.start()

    async def stop(self) -> None:
        """Stop acting at once, hand the Lease over (Elector.stop), then close the caches."""
        await self.elector.stop()
        if self.held is not None:
            (_, store, watch), self.held = self.held, None
            await watch.close()
            await store.close()  # closes its connection
            metrics.STORE.source = None
            metrics.CACHE_HEALTHY.clear()  # the caches are gone: a follower reports none

    def degraded(self) -> list[str]:
        """Readiness notes: the Lease, the last term's failure, what the leader cannot see or do."""
        notes = [f"lease: {self.elector.error}"] if self.elector.error else []
        if self.ended and (self.elector.leading or time.monotonic() - self._ended_at < BACKOFF[1]):
            notes.append(self.ended)
        if self.keeper is not None:
            notes += self.keeper.store.degraded() + self.keeper.degraded()
        return notes

    async def _term(self) -> None:
        """One term, until the Elector cancels it or the keeper fails (then: hand over, hold off)."""
        self.ended = None
        try:
            await self._keep()
        except Exception as exc:  # a bug, or what the keeper cannot start with: another replica may lead
            log.exception("keeper failed", extra={"fields": {"error": f"{type(exc).__name__}: {exc}"}})
            await self._failed(f"the keeper failed: {type(exc).__name__}: {exc}")

    async def _keep(self) -> None:
        if self.held is None:
            api = await client.connect(self.kubeconfig)  # the caches' own connection, apart from the Lease's
            store = WatchedClusterStore(api, self.settings, vmis=False)  # closing it closes `api`
            self.held = api, store, KubeVirtWatch(api, self.settings, self.timing.watch)
            metrics.STORE.source = store.stats
            store.start()
            self.held[2].start()
        api, store, watch = self.held
        events = EventSink(api) if self.events else NO_EVENTS
        try:
            state = StateStore(api, self.namespace, state_name(self.settings), timeout=self.timing.request_timeout)
            self.keeper = Keeper(api, store, self.settings, events=events, timing=self.timing,
                                 authority=self.elector.may_act, state=state)
            self.keeper.held = watch
            await self.keeper.run()
        finally:
            self.keeper = None
            await events.close()

    async def _failed(self, what: str) -> None:
        """Say it, step down, hand the Lease over and hold off, doubling for failures in a row."""
        now = time.monotonic()
        self.failures = 1 if now - self._ended_at > STEADY else self.failures + 1
        pause = min(BACKOFF[1], BACKOFF[0] * 2 ** (self.failures - 1))
        self._ended_at = now
        self.elector.hold_off(pause)
        self.elector.step_down(what)
        await self.elector.release()
        self.ended = f"{what}; campaigning again in {pause:g}s"  # said once the Lease is handed over
