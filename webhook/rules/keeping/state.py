"""What the keeper must remember beyond one leader and KubeVirt's garbage collection, as kept in the
cluster (`keeper.state_store`, spelled by `record.py`; `status` reads it too). Pure. Only here:
- our migrations the watch no longer shows: virt-controller keeps a VMI's 5 newest finished ones
  (`garbageCollectFinalizedMigrations`, `pkg/virt-controller/watch/migration/migration.go`), and the
  per-day limit and the backoff count ours over a day and more;
- the refusals of one VM's actions (a create, a cancel, an unpause): the API's words, how many in a row,
  when to retry, so that a new leader neither hammers a policy that refuses a VM nor forgets an unpause;
- the evidence that a VM is on a stale mount (`recovery.judge`), resting on pauses the leader's watch saw.
"""
from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable
from datetime import datetime, timedelta

from ...kinds import clip_reason
from ..shared.times import rfc3339
from .migrations import Migration

REMEMBER = timedelta(hours=48)  # our finished migrations: longer than the per-day window and the backoff cap
SAY_LOST = timedelta(hours=1)  # a rebuilt record is said (readiness, `status`) this long
WORDS = 300  # characters of the API's words kept for a refusal
FORGET_REFUSAL = timedelta(days=1)  # a refusal whose retry is this far past is forgotten (no longer "in a row")
VmKey = tuple[str, str]


class Action(enum.StrEnum):
    """What the keeper asked of the API for a VM."""

    MIGRATE = "migrate"
    CANCEL = "cancel"
    UNPAUSE = "unpause"


# A refusal's backoff, per VM and action, as client-go's per-item rate limiter grows it: the first
# retry soon, doubling with each refusal in a row, up to a cap. An unpause is retried within a pass
# or two (a frozen VM waits on it); a refused migration waits longer (a policy rarely changes at once).
FIRST = {Action.MIGRATE: timedelta(minutes=1), Action.CANCEL: timedelta(seconds=30),
         Action.UNPAUSE: timedelta(seconds=10)}
CAP = {Action.MIGRATE: timedelta(hours=1), Action.CANCEL: timedelta(minutes=10), Action.UNPAUSE: timedelta(minutes=5)}


def retry_delay(action: Action, count: int) -> timedelta:
    """How long a VM waits after `count` refusals in a row of `action`."""
    return min(FIRST[action] * 2 ** min(max(count - 1, 0), 16), CAP[action])


@dataclasses.dataclass(frozen=True, slots=True)
class Refusal:
    """`action` for one VM failed `count` times in a row, the last with `words`; tried again from `retry`."""

    namespace: str
    name: str
    action: Action
    count: int
    retry: datetime
    words: str
    status: int = 0  # the API's answer (0: none came)

    @property
    def key(self) -> tuple[str, str, Action]:
        return self.namespace, self.name, self.action

    def in_words(self) -> str:
        times = "once" if self.count == 1 else f"{self.count} times in a row"
        verb = "was refused" if 400 <= self.status < 500 else "failed"
        what = {Action.MIGRATE: "its migration", Action.CANCEL: "cancelling its migration",
                Action.UNPAUSE: "its unpause"}[self.action]
        return f"{what} {verb} {times} ({self.words}); retrying after {rfc3339(self.retry)}"


@dataclasses.dataclass(frozen=True, slots=True)
class Evidence:
    """Why the keeper took a VMI for one on a stale mount, dating from Longhorn's remount request `requested`."""

    namespace: str
    name: str
    uid: str
    requested: datetime
    words: str


@dataclasses.dataclass(frozen=True)
class KeeperState:
    """Our migrations as last seen (oldest first), the refusals, when the record was rebuilt and why
    (said for SAY_LOST), the evidence of stale mounts."""

    migrations: tuple[Migration, ...] = ()
    refusals: tuple[Refusal, ...] = ()
    lost: tuple[datetime, str] | None = None
    stale: tuple[Evidence, ...] = ()

    def evidence(self, namespace: str, name: str, uid: str) -> Evidence | None:
        return next((e for e in self.stale if (e.namespace, e.name, e.uid) == (namespace, name, uid)), None)

    def refusal(self, namespace: str, name: str, action: Action) -> Refusal | None:
        return next((h for h in self.refusals if h.key == (namespace, name, action)), None)

    def refused(self, namespace: str, name: str, action: Action, status: int, words: str,
                now: datetime) -> KeeperState:
        """One more refusal of `action` for the VM: its refusal counts one more."""
        old = self.refusal(namespace, name, action)
        count = (old.count if old is not None else 0) + 1
        new = Refusal(namespace=namespace, name=name, action=action, count=count,
                   retry=now + retry_delay(action, count), words=clip_reason(words, WORDS), status=status)
        return dataclasses.replace(self, refusals=(*(h for h in self.refusals if h.key != new.key), new))

    def cleared(self, namespace: str, name: str, action: Action) -> KeeperState:
        """The VM's `action` went through: its refusal is forgotten."""
        if self.refusal(namespace, name, action) is None:
            return self
        return dataclasses.replace(self, refusals=tuple(h for h in self.refusals if h.key != (namespace, name, action)))

    def with_migrations(self, ours: Iterable[Migration], now: datetime) -> KeeperState:
        """Our migrations as now known, the old pruned; the refusals whose retry is long past forgotten."""
        kept = sorted((m for m in ours if m.ours and (not m.final or now - m.created <= REMEMBER)),
                      key=lambda m: (m.created, m.namespace, m.name))
        refusals = tuple(h for h in self.refusals if now - h.retry <= FORGET_REFUSAL)
        lost = self.lost if self.lost is not None and now - self.lost[0] < SAY_LOST else None
        return KeeperState(migrations=tuple(kept), refusals=refusals, lost=lost, stale=self.stale)

    def only(self, running: Iterable[VmKey]) -> KeeperState:
        """The refusals of the VMs still running opted in; the others are forgotten."""
        keys = set(running)
        return dataclasses.replace(self, refusals=tuple(h for h in self.refusals if (h.namespace, h.name) in keys))

    def with_stale(self, stale: Iterable[Evidence]) -> KeeperState:
        """The evidence of the VMs a pass found on a stale mount, in place of the last pass's."""
        return dataclasses.replace(self, stale=tuple(sorted(stale, key=lambda e: (e.namespace, e.name))))


def with_kept(watched: Iterable[Migration], kept: Iterable[Migration], now: datetime) -> list[Migration]:
    """Every migration to count: the cluster's, plus ours kept that it no longer shows (one unfinished was
    deleted, so aborted: failed)."""
    watched = list(watched)
    shown = {(m.namespace, m.name) for m in watched}
    gone = [m if m.final else dataclasses.replace(m, phase="Failed", ended=now)
            for m in kept if (m.namespace, m.name) not in shown]
    return watched + gone
