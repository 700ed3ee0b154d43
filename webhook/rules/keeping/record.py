"""The keeper's memory beyond one pass, one leader and KubeVirt's garbage collection (virt-controller keeps a
VMI's 5 newest finished migrations): one record per VM (`VmRecord`), in the leader's memory and, gzipped, in one
ConfigMap key (`dump`, `load`), so that a new leader neither hammers a policy, nor unpauses more, nor says again,
nor waits to believe. Pure. A hint, never a gate: read leniently, what is lost or left out is said (`Loss`).
"""
from __future__ import annotations

import bisect
import dataclasses
import enum
import gzip
import json
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from ...kinds import clip_reason
from ..shared.times import rfc3339
from .migrations import doubled, Migration, NAME_INFIX
from .recovery import Sighting, Stale

REMEMBER = timedelta(hours=48)  # our finished migrations: longer than the per-day window and the backoff cap
SAY_LOST = timedelta(hours=1)  # a rebuilt record is said (readiness, `status`) this long
WORDS = 300  # characters of the API's words kept for a refusal
FORGET_REFUSAL = timedelta(days=1)  # a refusal whose retry is this far past is forgotten (no longer "in a row")
UNPAUSES_KEPT = 8  # a VMI's latest unpauses kept (`resume.MOST_UNPAUSES` counts those in its pod)
UNPAUSED_FOR = timedelta(minutes=2)  # an unpause is not made again this soon: longer than the watch's lag
VmKey = tuple[str, str]


class Action(enum.StrEnum):
    """What the keeper asked of the API for a VM."""

    MIGRATE = "migrate"
    CANCEL = "cancel"
    UNPAUSE = "unpause"


# A refusal's backoff per VM and action, as client-go's per-item rate limiter: doubling to a cap; an unpause soon.
FIRST = {Action.MIGRATE: timedelta(minutes=1), Action.CANCEL: timedelta(seconds=30),
         Action.UNPAUSE: timedelta(seconds=10)}
CAP = {Action.MIGRATE: timedelta(hours=1), Action.CANCEL: timedelta(minutes=10), Action.UNPAUSE: timedelta(minutes=5)}


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

    def in_words(self) -> str:
        times = "once" if self.count == 1 else f"{self.count} times in a row"
        verb = "was refused" if 400 <= self.status < 500 else "failed"
        what = {Action.MIGRATE: "its migration", Action.CANCEL: "cancelling its migration",
                Action.UNPAUSE: "its unpause"}[self.action]
        return f"{what} {verb} {times} ({self.words}); retrying after {rfc3339(self.retry)}"


@dataclasses.dataclass(frozen=True, slots=True)
class VmRecord:
    """All the keeper keeps of one VM: our migrations (oldest first), its refusals; of its VMI `uid`, our unpauses,
    the Events said (reason, when), the pauses seen by volume, the evidence of a stale mount, a full disk."""

    namespace: str
    name: str
    migrations: tuple[Migration, ...] = ()
    refusals: tuple[Refusal, ...] = ()
    uid: str = ""
    unpaused: tuple[datetime, ...] = ()
    said: tuple[tuple[str, datetime], ...] = ()
    seen: tuple[tuple[str, Sighting], ...] = ()
    stale: Stale | None = None
    full: str = ""

    @property
    def key(self) -> VmKey:
        return self.namespace, self.name

    @property
    def empty(self) -> bool:
        return not (self.migrations or self.refusals or self.unpaused or self.said or self.seen or self.stale or self.full)

    def of_vmi(self, uid: str) -> VmRecord:
        """The record as it holds for VMI `uid`: what was kept of another VMI of the VM (a restart) is dropped."""
        if uid == self.uid:
            return self
        return dataclasses.replace(self, uid=uid, unpaused=(), said=(), seen=(), stale=None, full="")

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
        """The state with the VM's record as given; itself when that changes nothing (a pass notes every VM)."""
        if (record.empty and record.key not in self.vms) or self.vms.get(record.key) == record:
            return self
        vms = {k: v for k, v in self.vms.items() if k != record.key}
        return dataclasses.replace(self, vms=vms if record.empty else {**vms, record.key: record})

    @property
    def migrations(self) -> tuple[Migration, ...]:
        return tuple(sorted((m for r in self.vms.values() for m in r.migrations),
                            key=lambda m: (m.created, m.namespace, m.name)))

    def just_unpaused(self, now: datetime) -> set[str]:
        """The uids of the VMIs the keeper unpaused a moment ago (UNPAUSED_FOR): the watch may not show it yet."""
        return {r.uid for r in self.vms.values() if r.unpaused and now - r.unpaused[-1] < UNPAUSED_FOR}

    def refusal(self, namespace: str, name: str, action: Action) -> Refusal | None:
        record = self.vms.get((namespace, name))  # most VMs have none: asked of every VM in a pass
        return None if record is None else next((h for h in record.refusals if h.action is action), None)

    def refused(self, namespace: str, name: str, action: Action, status: int, words: str,
                now: datetime) -> KeeperState:
        """One more refusal of `action` for the VM: its refusal counts one more."""
        old, record = self.refusal(namespace, name, action), self.vm(namespace, name)
        count = (old.count if old is not None else 0) + 1
        new = Refusal(namespace=namespace, name=name, action=action, count=count,
                      retry=now + doubled(FIRST[action], CAP[action], count), words=clip_reason(words, WORDS),
                      status=status)
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
        """This state, and all of `lost` (what this leader knew before) it does not hold: a bad record erases nothing."""
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
        said=tuple(sorted({*read.said, *mine.said})), seen=read.seen or mine.seen, stale=read.stale or mine.stale,
        full=read.full or mine.full)


def with_kept(watched: Iterable[Migration], kept: Iterable[Migration], now: datetime | None = None) -> list[Migration]:
    """Every migration to count (the keeper's and `status`'s): the cluster's, and ours kept it does not show; one
    unfinished, deleted, failed at `now` (None: as kept, for the keeper that follows its own)."""
    watched = list(watched)
    shown = {(m.namespace, m.name) for m in watched}
    gone = [m if m.final or now is None else dataclasses.replace(m, phase="Failed", ended=now)
            for m in kept if (m.namespace, m.name) not in shown]
    return watched + gone


KEY = "state.json.gz"  # the ConfigMap's binaryData key
VERSION = 3
# Bytes of the record at most (gzipped: a VM recovered in an incident takes about 60): the API takes 1 MiB.
BUDGET = 768 * 1024
MOST_COUNT = 99  # refusals in a row counted: the backoff reaches its cap long before
GENERATED = 58  # a generateName's prefix is cut to 58 characters before its 5 random ones (apiserver)


@dataclasses.dataclass(frozen=True)
class Loss:
    """What of the keeper's record was lost (`kind`, the metric's label) and why, in words."""

    kind: str  # unreadable, other version, malformed, left out, deleted, not read, not written
    why: str


def _prefix(vmi: str) -> str:
    return f"{vmi}{NAME_INFIX}"[:GENERATED]


def _migration_json(m: Migration) -> list[Any]:
    prefix = _prefix(m.vmi)
    name = m.name[len(prefix):] if m.name.startswith(prefix) else "/" + m.name
    times = [name, m.phase, int(m.created.timestamp()), int(m.ended.timestamp()) if m.ended else None]
    return times if m.final else [*times, m.target or "", m.uid, m.recovers]


def dump(state: KeeperState, budget: int = BUDGET) -> bytes:
    """The state as the ConfigMap keeps it, gzipped JSON in a stable order: past `budget` bytes, the entries that fit
    (each VMI's first, then the newest migrations, then refusals), and how many were left out."""
    items: list[tuple[int, float, str, str, str, Any]] = []
    for r in state.vms.values():
        items += [(-1, 0.0, r.namespace, r.name, where, write(getattr(r, field)))
                  for where, (field, write, _) in VMI_PARTS.items() if getattr(r, field)]
        items += [(0, -(m.ended or m.created).timestamp(), m.namespace, m.vmi, "m", _migration_json(m))
                  for m in r.migrations]
        items += [(1, -h.retry.timestamp(), h.namespace, h.name, str(h.action),
                   [min(h.count, MOST_COUNT), int(h.retry.timestamp()), h.status, clip_reason(h.words, WORDS)])
                  for h in r.refusals]
    items.sort(key=lambda item: item[:5])
    head = {"version": VERSION} | ({"lost": [int(state.lost[0].timestamp()), clip_reason(state.lost[1], WORDS)]}
                                   if state.lost is not None else {})

    def first(count: int) -> bytes:  # the record of the first `count` items
        vms: dict[str, dict[str, dict[str, Any]]] = {}
        for order, _, namespace, vm, where, value in items[:count]:
            entry = vms.setdefault(namespace, {}).setdefault(vm, {})
            if where == "m":
                entry.setdefault("m", []).append(value)
            else:  # what it keeps of the VMI, by its key; a refusal, by its action
                (entry if order < 0 else entry.setdefault("r", {}))[where] = value
        left = {"left out": len(items) - count} if count < len(items) else {}
        return gzip.compress(json.dumps(head | left | {"vms": vms}, separators=(",", ":"), sort_keys=True).encode(),
                             mtime=0)

    whole = first(len(items))
    if len(whole) <= budget:
        return whole
    return first(max(bisect.bisect_right(range(len(items)), budget, key=lambda count: len(first(count))) - 1, 0))


def _text(value: Any, what: str) -> str:
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{what} {value!r} is not a string")
    return value or ""


def _number(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{what} {value!r} is not a number")
    return value


def _time(value: Any, what: str) -> datetime:
    """Unix seconds."""
    return datetime.fromtimestamp(_number(value, what), UTC)


def _lost(entry: Any) -> tuple[datetime, str]:
    at, why = entry
    return _time(at, "when the record was rebuilt"), _text(why, "why it was rebuilt")


def _migration(namespace: str, vm: str, entry: Any) -> Migration:
    name, phase, created, ended, *more = entry
    target, uid, recovers = (*more, None, None, None)[:3]
    name = _text(name, "a migration's name")
    return Migration(namespace=namespace, name=name[1:] if name.startswith("/") else _prefix(vm) + name, vmi=vm,
                     phase=_text(phase, "a migration's phase"), ours=True, created=_time(created, "created"),
                     ended=None if ended is None else _time(ended, "ended"),
                     target=_text(target, "a migration's node") or None, uid=_text(uid, "a migration's uid"),
                     recovers=_text(recovers, "recovers"))


def _refusal(namespace: str, vm: str, action: Any, entry: Any) -> Refusal:
    count, retry, status, words = entry
    if _number(count, "a refusal's count") == 0:
        raise ValueError("a refusal's count is 0")
    return Refusal(namespace=namespace, name=vm, action=Action(action), count=count, retry=_time(retry, "retry"),
                   words=_text(words, "a refusal's words"), status=_number(status, "a refusal's status"))


def _stale(value: Any) -> Stale:
    requested, words, last = value
    return Stale(requested=_time(requested, "requested"), words=_text(words, "the evidence of a stale mount"),
                 last=_time(last, "the last I/O error"))


# What a VM's record keeps of its VMI (kept first, whatever the budget): by its key, its field, as written, as read.
VMI_PARTS: dict[str, tuple[str, Callable[[Any], Any], Callable[[Any], Any]]] = {
    "u": ("uid", str, lambda value: _text(value, "a VMI's uid")),
    "p": ("unpaused", lambda unpaused: [int(at.timestamp()) for at in unpaused],
          lambda value: tuple(sorted(_time(at, "an unpause") for at in value))),
    "e": ("said", lambda said: {reason: int(at.timestamp()) for reason, at in said},
          lambda value: tuple(sorted((_text(k, "a name"), _time(at, "a time")) for k, at in value.items()))),
    "v": ("seen", lambda seen: {volume: [int(s.paused.timestamp()), int(s.ran.timestamp()) if s.ran else None]
                                for volume, s in seen},
          lambda value: tuple(sorted((_text(k, "a volume"), Sighting(_time(paused, "a pause"), None if ran is None
                                                                      else _time(ran, "running again")))
                                     for k, (paused, ran) in value.items()))),
    "s": ("stale", lambda e: [int(e.requested.timestamp()), clip_reason(e.words, WORDS), int(e.last.timestamp())],
          _stale),
    "f": ("full", lambda full: clip_reason(full, WORDS), lambda value: _text(value, "a full disk")),
}


def _items(value: Any) -> Iterator[tuple[str, Any]]:  # a mapping's items; anything else one that cannot be read
    yield from value.items() if isinstance(value, dict) else [("", None)]


def _record(namespace: str, vm: str, entry: Any, read: Callable[..., Any]) -> VmRecord:
    """One VM's record of the entries `read` reads, each alone (None: dropped)."""
    entry = entry if isinstance(entry, dict) else {"m": [None]}
    listed = entry.get("m", [])
    migrations = [read(_migration, namespace, vm, m) for m in (listed if isinstance(listed, list) else [None])]
    refusals = [read(_refusal, namespace, vm, action, h) for action, h in _items(entry.get("r", {}))]
    vmi = {field: value for where, (field, _, read_back) in VMI_PARTS.items()
           if where in entry and (value := read(read_back, entry[where])) is not None}
    migrations = sorted((m for m in migrations if m is not None), key=lambda m: (m.created, m.name))
    return VmRecord(namespace=namespace, name=vm, **vmi, refusals=tuple(h for h in refusals if h is not None),
                    migrations=tuple(migrations))


def load(packed: bytes | None) -> tuple[KeeperState, Loss | None]:
    """The state the ConfigMap's binaryData key holds (none: an empty state), and what of it was lost."""
    if not packed:
        return KeeperState(), None
    try:
        data = json.loads(gzip.decompress(packed))
    except (OSError, EOFError, zlib.error, ValueError) as exc:
        return KeeperState(), Loss(kind="unreadable", why=f"not gzipped JSON ({exc})")
    version = data.get("version") if isinstance(data, dict) else None
    if version != VERSION:
        return KeeperState(), Loss(kind="other version", why=f"version {version!r}, where this keeper reads {VERSION}")
    dropped: list[str] = []

    def read(parse: Callable[..., Any], *args: Any) -> Any:
        try:
            return parse(*args)
        except (ValueError, TypeError, KeyError, AttributeError, ArithmeticError, OSError) as exc:
            dropped.append(str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__} {exc}")
            return None

    lost = read(_lost, data["lost"]) if "lost" in data else None
    state = KeeperState.of([_record(namespace, vm, entry, read) for namespace, vms in _items(data.get("vms", {}))
                            for vm, entry in _items(vms)], lost)
    many = "an entry" if len(dropped) == 1 else f"{len(dropped)} entries"
    if dropped:
        return state, Loss(kind="malformed", why=f"{many} dropped ({dropped[0]})")
    left = data.get("left out")
    return state, Loss(kind="left out", why=f"{left} entries, the oldest, did not fit in {BUDGET // 1024} KiB") \
        if left else None
