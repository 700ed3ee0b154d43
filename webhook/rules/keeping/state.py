"""What the keeper must remember beyond one pass, one leader and KubeVirt's garbage collection: one record
per VM (`VmRecord`), kept in the cluster (`keeper.state_store`, spelled by `record.py`; `status` reads it
too). Pure. Per VM:
- our migrations the watch no longer shows: virt-controller keeps a VMI's 5 newest finished ones
  (`garbageCollectFinalizedMigrations`, `pkg/virt-controller/watch/migration/migration.go`), and the
  per-day limit and the backoff count ours over a day and more;
- the refusals of its actions (a create, a cancel, an unpause): the API's words, how many in a row, when to
  retry, so that a new leader neither hammers a policy that refuses a VM nor forgets an unpause;
- of its VMI (`uid`): the keeper's unpauses, the Events said once (`NeedsRestart`, `WaitingForStorage`), the
  I/O errors it saw after a new share-manager served (`recovery.sightings`) and the evidence of a stale mount
  it found (`recovery.judge`): a new leader neither unpauses more, nor says again, nor waits to believe.
"""
from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from ...kinds import clip_reason
from ..shared.times import rfc3339
from .migrations import Migration

REMEMBER = timedelta(hours=48)  # our finished migrations: longer than the per-day window and the backoff cap
SAY_LOST = timedelta(hours=1)  # a rebuilt record is said (readiness, `status`) this long
WORDS = 300  # characters of the API's words kept for a refusal
FORGET_REFUSAL = timedelta(days=1)  # a refusal whose retry is this far past is forgotten (no longer "in a row")
UNPAUSES_KEPT = 8  # a VMI's latest unpauses kept (`resume.MOST_UNPAUSES` counts those in its pod)
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
    """Why the keeper took the VMI for one on a stale mount, dating from Longhorn's remount request `requested`;
    `last`: the I/O error that showed it (the evidence ends once the disk has run `recovery.PROVEN` past it)."""

    requested: datetime
    words: str
    last: datetime


@dataclasses.dataclass(frozen=True, slots=True)
class VmRecord:
    """All the keeper keeps of one VM: our migrations (oldest first) and its refusals; of its VMI `uid`, the
    keeper's unpauses, the Events said once (reason, when), the I/O errors seen after a new share-manager served
    (Longhorn volume, the last), the evidence of a stale mount."""

    namespace: str
    name: str
    migrations: tuple[Migration, ...] = ()
    refusals: tuple[Refusal, ...] = ()
    uid: str = ""
    unpaused: tuple[datetime, ...] = ()
    said: tuple[tuple[str, datetime], ...] = ()
    seen: tuple[tuple[str, datetime], ...] = ()
    stale: Evidence | None = None

    @property
    def key(self) -> VmKey:
        return self.namespace, self.name

    @property
    def empty(self) -> bool:
        return not (self.migrations or self.refusals or self.unpaused or self.said or self.seen or self.stale)

    def of_vmi(self, uid: str) -> VmRecord:
        """The record as it holds for VMI `uid`: what was kept of another VMI of the VM (a restart) is dropped."""
        if uid == self.uid:
            return self
        return dataclasses.replace(self, uid=uid, unpaused=(), said=(), seen=(), stale=None)

    def unpauses(self, since: datetime | None) -> int:
        """The keeper's unpauses of this VMI since `since` (its pod's start)."""
        return sum(1 for at in self.unpaused if since is None or at >= since)


@dataclasses.dataclass(frozen=True)
class KeeperState:
    """The records by VM, and when the record was rebuilt and why (said for SAY_LOST)."""

    vms: Mapping[VmKey, VmRecord] = dataclasses.field(default_factory=dict)
    lost: tuple[datetime, str] | None = None

    @classmethod
    def of(cls, records: Iterable[VmRecord], lost: tuple[datetime, str] | None = None) -> KeeperState:
        return cls(vms={r.key: r for r in records if not r.empty}, lost=lost)

    def vm(self, namespace: str, name: str) -> VmRecord:
        return self.vms.get((namespace, name)) or VmRecord(namespace=namespace, name=name)

    def with_vm(self, record: VmRecord) -> KeeperState:
        vms = {k: v for k, v in self.vms.items() if k != record.key}
        return dataclasses.replace(self, vms=vms if record.empty else {**vms, record.key: record})

    @property
    def migrations(self) -> tuple[Migration, ...]:
        return tuple(sorted((m for r in self.vms.values() for m in r.migrations),
                            key=lambda m: (m.created, m.namespace, m.name)))

    @property
    def refusals(self) -> tuple[Refusal, ...]:
        return tuple(h for r in self.vms.values() for h in r.refusals)

    def refusal(self, namespace: str, name: str, action: Action) -> Refusal | None:
        return next((h for h in self.vm(namespace, name).refusals if h.action is action), None)

    def refused(self, namespace: str, name: str, action: Action, status: int, words: str,
                now: datetime) -> KeeperState:
        """One more refusal of `action` for the VM: its refusal counts one more."""
        old, record = self.refusal(namespace, name, action), self.vm(namespace, name)
        count = (old.count if old is not None else 0) + 1
        new = Refusal(namespace=namespace, name=name, action=action, count=count,
                      retry=now + retry_delay(action, count), words=clip_reason(words, WORDS), status=status)
        return self.with_vm(dataclasses.replace(record, refusals=(*(h for h in record.refusals if h.action is not action),
                                                                  new)))

    def cleared(self, namespace: str, name: str, action: Action) -> KeeperState:
        """The VM's `action` went through: its refusal is forgotten."""
        if self.refusal(namespace, name, action) is None:
            return self
        record = self.vm(namespace, name)
        return self.with_vm(dataclasses.replace(record, refusals=tuple(h for h in record.refusals if h.action is not action)))

    def with_migrations(self, ours: Iterable[Migration], now: datetime) -> KeeperState:
        """Our migrations as now known, the old pruned; the refusals whose retry is long past forgotten."""
        kept: dict[VmKey, list[Migration]] = {}
        for m in sorted(ours, key=lambda m: (m.created, m.namespace, m.name)):
            if m.ours and (not m.final or now - m.created <= REMEMBER):
                kept.setdefault((m.namespace, m.vmi), []).append(m)
        records = [dataclasses.replace(self.vm(*key), migrations=tuple(kept.get(key, ())),
                                       refusals=tuple(h for h in self.vm(*key).refusals if now - h.retry <= FORGET_REFUSAL))
                   for key in {*self.vms, *kept}]
        lost = self.lost if self.lost is not None and now - self.lost[0] < SAY_LOST else None
        return KeeperState.of(records, lost)

    def only(self, running: Mapping[VmKey, str]) -> KeeperState:
        """Of the VMs still running opted in (their VMI's uid), all; of the others, our migrations alone."""
        return KeeperState.of([r.of_vmi(running[k]) if k in running else VmRecord(namespace=r.namespace, name=r.name,
                                                                                  migrations=r.migrations)
                               for k, r in self.vms.items()], self.lost)

    def over(self, lost: KeeperState) -> KeeperState:
        """This state, and of `lost` (what this leader knew before its record was lost) all it does not hold: a
        record that cannot be read never erases what the leader knows."""
        records = dict(lost.vms)
        for key, record in self.vms.items():
            mine = records.get(key)
            records[key] = record if mine is None else _joined(record, mine)
        return KeeperState.of(records.values(), self.lost)


def _joined(read: VmRecord, mine: VmRecord) -> VmRecord:
    """One VM's record as read, with what the leader's own adds: its migrations, refusals and VMI facts."""
    if read.uid and mine.uid != read.uid:
        mine = mine.of_vmi(read.uid)
    names, actions = {m.name for m in read.migrations}, {h.action for h in read.refusals}
    return dataclasses.replace(
        read, uid=read.uid or mine.uid,
        migrations=tuple(sorted((*read.migrations, *(m for m in mine.migrations if m.name not in names)),
                                key=lambda m: (m.created, m.name))),
        refusals=(*read.refusals, *(h for h in mine.refusals if h.action not in actions)),
        unpaused=tuple(sorted({*read.unpaused, *mine.unpaused}))[-UNPAUSES_KEPT:],
        said=tuple(sorted({*read.said, *mine.said})), seen=read.seen or mine.seen, stale=read.stale or mine.stale)


def with_kept(watched: Iterable[Migration], kept: Iterable[Migration], now: datetime) -> list[Migration]:
    """Every migration to count: the cluster's, plus ours kept that it no longer shows (one unfinished was
    deleted, so aborted: failed)."""
    watched = list(watched)
    shown = {(m.namespace, m.name) for m in watched}
    gone = [m if m.final else dataclasses.replace(m, phase="Failed", ended=now)
            for m in kept if (m.namespace, m.name) not in shown]
    return watched + gone
