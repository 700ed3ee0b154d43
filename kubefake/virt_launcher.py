"""A VM's domain on an NFS mount that fails, played over time as KubeVirt v1.9.0 runs it: QEMU pauses it
on an I/O error, virt-handler's `io-error-retry` resumes it (kubefake.io_error_retry says when), anyone
else's resume (the keeper's `unpause`) counts as well, and virt-launcher tells its IOerror Event again
on every domain callback while it stays paused.

- `pkg/virt-launcher/notify-client/client.go`, `eventCallback`: on each callback with the domain paused
  for an I/O error it sends one IOerror Event per disk with an error; the callbacks come from libvirt's
  lifecycle events and from `StartDomainNotifier`'s `select` (`agentStore.AgentUpdated`, `reconnectChan`,
  `metadataCache.Listen()`). A VMI with guest-agent access credentials stores a result every 15 s
  (`pkg/virt-launcher/virtwrap/access-credentials/access_credentials.go`) and each store notifies:
  `every`.
- QEMU forgets a disk's error when the VM is resumed (`qmp_cont` resets each block device's io-status):
  after a resume the Events name the disks that failed again, `volumes`.
- A resume that the next pause follows at once may never be seen by virt-handler (`seen=False`): the
  VMI keeps its Paused condition (kubefake.virt_handler.play_io_errors).

The mount fails on each resume before `works_at` (never, None), pausing the VM `runs_for` after it (a
sequence: the n-th resume runs for its n-th, and past its end the mount works); once a migration moved
the VM, its mount is fresh and nothing fails any more.
"""
from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence

from .io_error_retry import Backoff, IoErrorRetry
from .virt_handler import IO_ERROR, io_error_pause, io_retry_resume, paused, record_io_errors, stored_vmi

CREDENTIALS = datetime.timedelta(seconds=15)  # a VMI with access credentials: a callback this often
ZERO = datetime.timedelta(0)


@dataclasses.dataclass
class Domain:
    """One VMI's domain (the module's docstring says how it goes); `__call__(until)` plays it up to `until`."""

    apiserver: object
    namespace: str
    name: str
    works_at: datetime.datetime | None = None
    runs_for: datetime.timedelta | Sequence[datetime.timedelta] = ZERO
    every: datetime.timedelta | None = CREDENTIALS
    volumes: Sequence[str] | None = None
    cause: str = IO_ERROR
    seen: bool = True
    retry: IoErrorRetry = dataclasses.field(default_factory=IoErrorRetry)
    # what is going on: paused or not, the moment played to, the next pause, resume and callback
    is_paused: bool = False
    at: datetime.datetime | None = None
    pause_at: datetime.datetime | None = None
    resume_at: datetime.datetime | None = None
    tell_at: datetime.datetime | None = None
    backoff: Backoff | None = None
    fresh: bool = False
    pauses: list[datetime.datetime] = dataclasses.field(default_factory=list)
    resumes: list[datetime.datetime] = dataclasses.field(default_factory=list)

    def _runs(self, at: datetime.datetime) -> datetime.timedelta | None:
        """How long a resume at `at` runs before the mount fails again; None: it works."""
        runs, n = self.runs_for, len(self.resumes) - 1
        if self.fresh or (self.works_at is not None and at >= self.works_at):
            return None
        if isinstance(runs, datetime.timedelta):
            return runs
        return runs[n] if n < len(runs) else None

    def start(self, at: datetime.datetime) -> Domain:
        """The first pause comes at `at`."""
        self.pause_at, self.at = at, at
        return self

    async def __call__(self, until: datetime.datetime) -> None:
        self._look()
        while (step := self._next()) is not None and step[0] <= until:
            await self._step(*step)
        self.at = max(self.at or until, until)

    async def paused_at(self, after: datetime.datetime) -> datetime.datetime:
        """Played up to the next pause after `after`, that pause alone (not the resume that may follow at once)."""
        self._look()
        while (step := self._next()) is not None:
            await self._step(*step)
            if step[1] == "pause" and step[0] > after:
                return step[0]
        raise ValueError("the domain pauses no more")

    async def _step(self, at: datetime.datetime, what: str) -> None:
        await {"pause": self._pause, "resume": self._resume, "tell": self._tell}[what](at)
        self.at = at

    def _look(self) -> None:
        """What someone else did since: resumed it (the keeper's unpause, at the moment played to) or moved it."""
        vmi = stored_vmi(self.apiserver, self.namespace, self.name)
        moved = (vmi.get("status") or {}).get("migrationState") or {}
        if moved.get("completed") and not moved.get("failed"):  # KubeVirt's retry no longer resumes it, nor is it told
            self.fresh, self.pause_at, self.resume_at, self.tell_at = True, None, None, None
        if self.is_paused and not paused(vmi) and self.at is not None:
            self.is_paused, self.resume_at, self.tell_at = False, None, None
            self._ran(self.at)

    def _next(self) -> tuple[datetime.datetime, str] | None:
        steps = [(t, w) for t, w in ((self.pause_at, "pause"), (self.resume_at, "resume"), (self.tell_at, "tell"))
                 if t is not None]
        return min(steps, default=None)

    def _ran(self, at: datetime.datetime) -> None:
        self.resumes.append(at)
        runs = self._runs(at)
        self.pause_at = None if runs is None else at + runs

    async def _pause(self, at: datetime.datetime) -> None:
        if paused(stored_vmi(self.apiserver, self.namespace, self.name)):  # a resume virt-handler never saw
            async with self.apiserver.lock:  # the condition kept: the Events told all the same
                await record_io_errors(self.apiserver, stored_vmi(self.apiserver, self.namespace, self.name), at,
                                       volumes=self.volumes, cause=self.cause)
        else:
            await io_error_pause(self.apiserver, self.namespace, self.name, at, volumes=self.volumes, cause=self.cause)
        self.pauses.append(at)
        self.is_paused, self.pause_at = True, None
        self.tell_at = at + self.every if self.every else None
        self.backoff, until = self.retry.should_delay(self.backoff, at)
        if until is not None:
            self.backoff, _ = self.retry.should_delay(self.backoff, until)
        self.resume_at = until or at

    async def _resume(self, at: datetime.datetime) -> None:
        self.is_paused, self.resume_at, self.tell_at = False, None, None
        self._ran(at)
        if not (self.pause_at == at and not self.seen):
            await io_retry_resume(self.apiserver, self.namespace, self.name, at)

    async def _tell(self, at: datetime.datetime) -> None:
        async with self.apiserver.lock:
            await record_io_errors(self.apiserver, stored_vmi(self.apiserver, self.namespace, self.name), at,
                                   volumes=self.volumes, cause=self.cause)
        self.tell_at = at + self.every if self.every else None
