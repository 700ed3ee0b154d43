"""Leader election on a `coordination.k8s.io/v1` Lease with kubernetes-asyncio's `leaderelection` (its LeaseLock
extended in `leaselock.py`), its gaps closed: the campaign starts again once `run()` returns; each Lease call is
bounded; the term ends AT ONCE when a read names another holder or the renew deadline passes (the library waits
between calls); the Elector cancels the keeper itself; `stop()` clears the holder (client-go's ReleaseOnCancel).
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from .. import metrics
from ..background import Background
from ..cluster import client
from ..config import Settings
from ..kinds import LEASE
from ..rules.keeping.listed import read_lease

log = logging.getLogger("webhook.keeper")

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def lease_namespace(settings: Settings, env: Mapping[str, str] | None = None,
                    mounted: Path = SERVICE_ACCOUNT_NAMESPACE) -> str:
    """--lease-namespace, else the pod's own namespace (service-account mount, then POD_NAMESPACE)."""
    if settings.lease_namespace:
        return settings.lease_namespace
    env = os.environ if env is None else env
    try:
        own = mounted.read_text().strip()
    except OSError:
        own = ""
    if own or env.get("POD_NAMESPACE"):
        return own or env["POD_NAMESPACE"]
    raise ValueError("the keeper needs --lease-namespace (or COLOCATE_LEASE_NAMESPACE) outside a cluster: "
                     f"no {mounted} and no POD_NAMESPACE")


@dataclasses.dataclass(frozen=True)
class LeaseTiming:
    """client-go's defaults (the library wants whole seconds ≥ 1, retry_period × 1.2 < renew_deadline < lease_duration)."""

    lease_duration: int = 15  # a follower takes over this long after the last renewal it saw
    renew_deadline: float = 10.0  # a leader that has not renewed for this long stops acting
    retry_period: float = 2.0  # between attempts to acquire or renew
    request_timeout: float = 4.0  # each Lease call

    def __post_init__(self) -> None:
        if not 0 < self.request_timeout < self.renew_deadline < self.lease_duration:
            raise ValueError("lease timing: 0 < request_timeout < renew_deadline < lease_duration")


class Elector:
    """Campaigns for the Lease for ever; runs `lead()` while it holds it, and stops it itself."""

    def __init__(self, api: Any, *, namespace: str, name: str, identity: str,
                 lead: Callable[[], Awaitable[None]], timing: LeaseTiming = LeaseTiming()):
        self.api, self.namespace, self.name, self.identity = api, namespace, name, identity
        self.lead, self.timing = lead, timing
        self.leading = False
        self.reads = 0  # reads of the Lease tried (one each try to acquire or renew), answered or not
        self.error: str | None = None  # why the last read or write of the Lease failed, until one works
        self.renewed_at: float | None = None  # loop time of the last successful write of the Lease
        self._term: asyncio.Task[None] | None = None  # the keeper, while leading
        self._deadline: asyncio.Task[None] | None = None
        self._deposed = asyncio.Event()
        self._resume_at = 0.0  # loop time before which no campaign starts (hold_off)
        # A campaign ends with the term; the next one starts a retry period later.
        self._campaigns = Background("lease", self.campaign, log=log, failure="campaigning for the lease failed",
                                     period=timing.retry_period)

    # ----------------------------------------------------------------- queries

    def may_act(self, within: float = 0.0) -> bool:
        """Leading, and within the renew deadline `within` seconds from now (before a follower could take over)."""
        return (self.leading and self.renewed_at is not None
                and asyncio.get_running_loop().time() + within < self.renewed_at + self.timing.renew_deadline)

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Campaign, lead, and campaign again when the term ends, until stop()."""
        metrics.show(metrics.KEEPER_LEADER).set(0)
        self._campaigns.start()

    async def stop(self) -> None:
        """Stop the keeper first, then campaigning, then hand the lease over (best effort)."""
        was_leading = self.leading
        self.step_down("shutting down")
        await self._campaigns.stop()
        if was_leading:
            await self.release()

    def hold_off(self, seconds: float) -> None:
        """No campaign for `seconds`: another replica may take the Lease meanwhile."""
        self._resume_at = asyncio.get_running_loop().time() + seconds

    async def campaign(self) -> None:
        """Acquire the Lease and lead while it is renewed; returns when the term ends (at once while held off)."""
        if asyncio.get_running_loop().time() < self._resume_at:
            return
        from kubernetes_asyncio.leaderelection.electionconfig import Config
        from kubernetes_asyncio.leaderelection.leaderelection import LeaderElection

        from .leaselock import ReportingLeaseLock  # kubernetes-asyncio's models: only when the keeper runs

        self._deposed = asyncio.Event()
        config = Config(ReportingLeaseLock(self), lease_duration=self.timing.lease_duration,
                        renew_deadline=self.timing.renew_deadline, retry_period=self.timing.retry_period,
                        onstarted_leading=self._take_office, onstopped_leading=self._not_renewed)
        campaign = asyncio.create_task(LeaderElection(config).run(), name="lease campaign")
        deposed = asyncio.create_task(self._deposed.wait(), name="lease term")
        try:
            await asyncio.wait({campaign, deposed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.step_down("campaign ended")
            for task in (campaign, deposed):
                task.cancel()
            await asyncio.gather(campaign, deposed, *self._term_tasks(), return_exceptions=True)
        if campaign.done() and not campaign.cancelled() and campaign.exception() is not None:
            error = campaign.exception()
            log.warning("lease campaign failed", extra={"fields": {"error": f"{type(error).__name__}: {error}"}})

    async def release(self) -> None:
        """Clear the holder of a Lease we hold, so a follower acquires it at its next try."""
        path = LEASE.path(self.namespace, self.name)
        timeout = self.timing.request_timeout
        try:
            async with asyncio.timeout(timeout):
                status, body = await client.request(self.api, "GET", path, timeout=timeout)
                lease = orjson.loads(body) if status == 200 else {}
                if not isinstance(lease, dict) or read_lease(lease).holder != self.identity:
                    return
                spec = lease["spec"]  # it names us: an object
                now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
                spec.update(holderIdentity="", leaseDurationSeconds=1, acquireTime=now, renewTime=now)
                status, _ = await client.request(self.api, "PUT", path, body=lease, timeout=timeout)
            if 200 <= status < 300:
                log.info("lease released", extra={"fields": {"lease": f"{self.namespace}/{self.name}"}})
            else:
                log.warning("lease not released", extra={"fields": {"error": f"API answered {status}"}})
        except (TimeoutError, client.ApiUnreachable, ValueError) as exc:
            log.warning("lease not released", extra={"fields": {"error": f"{type(exc).__name__}: {exc}"}})

    # ----------------------------------------------------------------- the term

    def observed(self, holder: str | None) -> None:
        """A read of the Lease named `holder`: another one means we lost it."""
        if self.leading and holder != self.identity:
            self.step_down(f"the lease is held by {holder or 'nobody'}")

    def step_down(self, why: str) -> None:
        """End the term now: the keeper is cancelled before anything else can run."""
        if not self.leading:
            return
        self.leading = False
        current = asyncio.current_task()
        for task in self._term_tasks():
            if task is not current:
                task.cancel()
        metrics.KEEPER_LEADER.set(0)
        (log.info if why == "shutting down" else log.warning)("keeper stopped leading", extra={"fields": {
            "identity": self.identity, "lease": f"{self.namespace}/{self.name}", "why": why}})
        self._deposed.set()

    def _term_tasks(self) -> list[asyncio.Task[None]]:
        return [t for t in (self._term, self._deadline) if t is not None]

    async def _take_office(self) -> None:
        """The library acquired the Lease (its renewal loop carries on apart from this)."""
        if self._deposed.is_set() or self.leading:
            return
        self.leading = True
        metrics.KEEPER_LEADER.set(1)
        log.info("keeper leading", extra={"fields": {"identity": self.identity, "lease": f"{self.namespace}/{self.name}"}})
        self._term = asyncio.create_task(self._serve(), name="keeper")
        self._deadline = asyncio.create_task(self._watch_renewals(), name="lease deadline")

    async def _serve(self) -> None:
        try:
            await self.lead()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must not leave a leader that does nothing
            log.exception("keeper failed", extra={"fields": {"error": f"{type(exc).__name__}: {exc}"}})
        self.step_down("the keeper stopped")

    async def _watch_renewals(self) -> None:
        """Depose at the renew deadline unless a renewal moved it."""
        loop = asyncio.get_running_loop()
        while self.leading:
            left = (self.renewed_at or 0.0) + self.timing.renew_deadline - loop.time()
            if left <= 0:
                self.step_down(f"the lease was not renewed for {self.timing.renew_deadline:g}s")
                return
            await asyncio.sleep(left)

    async def _not_renewed(self) -> None:
        self.step_down("the lease could not be renewed")
