"""What the keeper must remember beyond one leader and beyond KubeVirt's garbage collection, as it
is kept in the cluster (a ConfigMap the leader writes, `keeper.state_store`; `status` reads it
too). Pure: it is read from and written to the ConfigMap's one data key as JSON.

Two things live here and nowhere else:
- our migrations, as last seen: virt-controller keeps only the 5 newest finished migrations of a
  VMI (`garbageCollectFinalizedMigrations` in `pkg/virt-controller/watch/migration/migration.go`),
  and the per-day limit and the backoff after failures count ours over a day and more;
- the refusals of one VM's own actions (a create, a cancel or an unpause that failed for that object:
  refused, 5xx, 429, no answer): the API's words, how many in a row, and when to try again, so that a
  new leader neither hammers a policy that refuses a VM nor forgets to retry an unpause soon.
"""
from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from ..shared.times import parse_time, rfc3339
from .migrations import Migration

KEY = "state.json"  # the ConfigMap's data key
VERSION = 1
REMEMBER = timedelta(hours=48)  # our finished migrations: longer than the per-day window and the backoff cap
MOST_MIGRATIONS = 4000  # the newest kept: the ConfigMap stays far below the API's 1 MiB
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
    """`action` for one VM failed `count` times in a row (refused, or no answer about it), the last
    with `words`; the keeper tries again from `retry`."""

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


@dataclasses.dataclass(frozen=True)
class KeeperState:
    """Our migrations as last seen (oldest first) and the refusals of actions."""

    migrations: tuple[Migration, ...] = ()
    refusals: tuple[Refusal, ...] = ()

    def refusal(self, namespace: str, name: str, action: Action) -> Refusal | None:
        return next((h for h in self.refusals if h.key == (namespace, name, action)), None)

    def refused(self, namespace: str, name: str, action: Action, status: int, words: str,
                now: datetime) -> KeeperState:
        """One more refusal of `action` for the VM: its refusal counts one more."""
        old = self.refusal(namespace, name, action)
        count = (old.count if old is not None else 0) + 1
        new = Refusal(namespace=namespace, name=name, action=action, count=count,
                   retry=now + retry_delay(action, count), words=words, status=status)
        return dataclasses.replace(self, refusals=(*(h for h in self.refusals if h.key != new.key), new))

    def cleared(self, namespace: str, name: str, action: Action) -> KeeperState:
        """The VM's `action` went through: its refusal is forgotten."""
        if self.refusal(namespace, name, action) is None:
            return self
        return dataclasses.replace(self, refusals=tuple(h for h in self.refusals if h.key != (namespace, name, action)))

    def with_migrations(self, ours: Iterable[Migration], now: datetime) -> KeeperState:
        """Our migrations as now known, the old and many pruned; the refusals whose retry is long past
        forgotten."""
        kept = sorted((m for m in ours if m.ours and (not m.final or now - m.created <= REMEMBER)),
                      key=lambda m: (m.created, m.namespace, m.name))[-MOST_MIGRATIONS:]
        refusals = tuple(h for h in self.refusals if now - h.retry <= FORGET_REFUSAL)
        return KeeperState(migrations=tuple(kept), refusals=refusals)

    def only(self, running: Iterable[VmKey]) -> KeeperState:
        """The refusals of the VMs still running opted in; the others are forgotten."""
        keys = set(running)
        return dataclasses.replace(self, refusals=tuple(h for h in self.refusals if (h.namespace, h.name) in keys))


def _migration_json(m: Migration) -> dict[str, Any]:
    return {"namespace": m.namespace, "name": m.name, "vmi": m.vmi, "phase": m.phase, "uid": m.uid,
            "created": rfc3339(m.created), "ended": rfc3339(m.ended) if m.ended else None,
            "target": m.target, "recovers": m.recovers or None}


def _refusal_json(h: Refusal) -> dict[str, Any]:
    return {"namespace": h.namespace, "name": h.name, "action": str(h.action), "count": h.count,
            "retry": rfc3339(h.retry), "words": h.words, "status": h.status}


def dump(state: KeeperState) -> str:
    """The state as the ConfigMap keeps it: compact JSON, in a stable order."""
    return json.dumps({"version": VERSION, "migrations": [_migration_json(m) for m in state.migrations],
                       "refusals": [_refusal_json(h) for h in sorted(state.refusals, key=lambda h: h.key)]},
                      separators=(",", ":"), sort_keys=True)


class Unreadable(ValueError):
    """The ConfigMap holds something that is not the keeper's state."""


def _text(entry: Mapping[str, Any], key: str) -> str:
    value = entry.get(key)
    if value is not None and not isinstance(value, str):
        raise Unreadable(f"{key} is not a string")
    return value or ""


def _time(entry: Mapping[str, Any], key: str, *, required: bool = True) -> datetime | None:
    value = parse_time(entry.get(key))
    if value is None and required:
        raise Unreadable(f"{key} is not a time")
    return value


def _migration(entry: Any) -> Migration:
    if not isinstance(entry, dict):
        raise Unreadable("a migration is not an object")
    created = _time(entry, "created")
    assert created is not None
    return Migration(namespace=_text(entry, "namespace"), name=_text(entry, "name"), vmi=_text(entry, "vmi"),
                     phase=_text(entry, "phase"), ours=True, created=created,
                     ended=_time(entry, "ended", required=False), target=_text(entry, "target") or None,
                     uid=_text(entry, "uid"), recovers=_text(entry, "recovers"))


def _refusal(entry: Any) -> Refusal:
    if not isinstance(entry, dict):
        raise Unreadable("a refusal is not an object")
    count, status = entry.get("count"), entry.get("status", 0)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1 or not isinstance(status, int):
        raise Unreadable("a refusal's count or status is not a number")
    try:
        action = Action(_text(entry, "action"))
    except ValueError:
        raise Unreadable(f"unknown action {entry.get('action')!r}") from None
    retry = _time(entry, "retry")
    assert retry is not None
    return Refusal(namespace=_text(entry, "namespace"), name=_text(entry, "name"), action=action, count=count,
                retry=retry, words=_text(entry, "words"), status=status)


def load(text: str | None) -> KeeperState:
    """The state the ConfigMap's data key holds (none: an empty state); raises Unreadable."""
    if not text:
        return KeeperState()
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise Unreadable(f"not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("version") != VERSION:
        raise Unreadable(f"not version {VERSION} of the keeper's state")
    migrations, refusals = data.get("migrations", []), data.get("refusals", [])
    if not isinstance(migrations, list) or not isinstance(refusals, list):
        raise Unreadable("migrations or refusals is not a list")
    return KeeperState(migrations=tuple(_migration(m) for m in migrations), refusals=tuple(_refusal(h) for h in refusals))


def with_kept(watched: Iterable[Migration], kept: Iterable[Migration], now: datetime) -> list[Migration]:
    """Every migration to count: what the cluster shows, plus ours the state keeps that it no longer
    shows (garbage-collected, or deleted: one deleted unfinished was aborted, and counts as failed)."""
    watched = list(watched)
    shown = {(m.namespace, m.name) for m in watched}
    gone = [m if m.final else dataclasses.replace(m, phase="Failed", ended=now)
            for m in kept if (m.namespace, m.name) not in shown]
    return watched + gone
