"""The keeper's state (`state.py`) as its ConfigMap keeps it: one JSON data key, bounded in size, read
leniently. Pure. A hint, never a gate: a record that is not JSON or of another version reads as empty, an
entry of an unexpected shape is dropped alone, each saying what was lost (`Loss`); the keeper rebuilds
the rest from the cluster. Version 2 groups each VM's entries under its namespace and name: a migration
of ours as its generated suffix, phase and Unix times (its node, uid and annotation only while
unfinished: KubeVirt never collects a VMI's latest migration), the refusals with clipped words. The
evidence of stale mounts first, then our migrations, then the refusals, the newest first, as many as fit
in BUDGET: well under the API's 1 MiB. Version 1 (flat lists, spelled out) is read too.
"""
from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from ...kinds import clip_reason
from ..shared.times import parse_time
from .migrations import Migration, NAME_INFIX
from .state import Action, Evidence, KeeperState, Refusal, WORDS

KEY = "state.json"  # the ConfigMap's data key
VERSION = 2
BUDGET = 480 * 1024  # bytes of the record at most: the newest that fit
MOST_COUNT = 99  # refusals in a row counted: the backoff reaches its cap long before
GENERATED = 58  # a generateName's prefix is cut to 58 characters before its 5 random ones (apiserver)


@dataclasses.dataclass(frozen=True)
class Loss:
    """What of the keeper's record was lost (`kind`, the metric's label) and why, in words."""

    kind: str  # unreadable, other version, malformed, deleted, not read, not written
    why: str


def _prefix(vmi: str) -> str:
    return f"{vmi}{NAME_INFIX}"[:GENERATED]


def _migration_json(m: Migration) -> list[Any]:
    prefix = _prefix(m.vmi)
    name = m.name[len(prefix):] if m.name.startswith(prefix) else "/" + m.name
    times = [name, m.phase, int(m.created.timestamp()), int(m.ended.timestamp()) if m.ended else None]
    return times if m.final else [*times, m.target or "", m.uid, m.recovers]


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def dump(state: KeeperState, budget: int = BUDGET) -> str:
    """The state as the ConfigMap keeps it: compact JSON in a stable order, the newest first within `budget` bytes."""
    items: list[tuple[int, float, str, str, str, Any]] = [
        (-1, 0.0, e.namespace, e.name, "s", [e.uid, int(e.requested.timestamp()), clip_reason(e.words, WORDS)])
        for e in state.stale]
    for m in state.migrations:
        items.append((0, -(m.ended or m.created).timestamp(), m.namespace, m.vmi, "m", _migration_json(m)))
    for h in state.refusals:
        items.append((1, -h.retry.timestamp(), h.namespace, h.name, str(h.action),
                      [min(h.count, MOST_COUNT), int(h.retry.timestamp()), h.status, clip_reason(h.words, WORDS)]))
    items.sort(key=lambda item: item[:5])
    head = {"version": VERSION} | ({"lost": [int(state.lost[0].timestamp()), clip_reason(state.lost[1], WORDS)]}
                                   if state.lost is not None else {})

    def first(count: int) -> str:  # the record of the first `count` items
        vms: dict[str, dict[str, dict[str, Any]]] = {}
        for _, _, namespace, vm, where, value in items[:count]:
            entry = vms.setdefault(namespace, {}).setdefault(vm, {})
            if where == "m":
                entry.setdefault("m", []).append(value)
            elif where == "s":
                entry["s"] = value
            else:
                entry.setdefault("r", {})[where] = value
        return _json(head | {"vms": vms})

    size, seen = len(first(0)), set()
    for count, (_, _, namespace, vm, where, value) in enumerate(items):
        # the bytes an item adds (at most): its value and key, and the keys of its namespace, VM and list or map
        size += len(_json(value)) + 1 + (0 if where == "m" else len(where) + 3)
        for key, cost in (((namespace,), len(_json(namespace)) + 4), ((namespace, vm), len(_json(vm)) + 4),
                          ((namespace, vm, where == "m"), 7)):
            size += 0 if key in seen else cost
            seen.add(key)
        if size > budget:
            return first(count)
    return first(len(items))


def _text(value: Any, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{what} {value!r} is not a string")
    return value


def _number(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{what} {value!r} is not a number")
    return value


def _time(value: Any, what: str) -> datetime:
    """Unix seconds (version 2) or RFC 3339 (version 1)."""
    moment = datetime.fromtimestamp(_number(value, what), UTC) if not isinstance(value, str) else parse_time(value)
    if moment is None:
        raise ValueError(f"{what} {value!r} is not a time")
    return moment


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


def _evidence(namespace: str, vm: str, entry: Any) -> Evidence:
    uid, requested, words = entry
    return Evidence(namespace=namespace, name=vm, uid=_text(uid, "a VMI's uid"), requested=_time(requested, "requested"),
                    words=_text(words, "the evidence of a stale mount"))


Entry = Callable[[], Migration | Refusal | Evidence | tuple[datetime, str]]


def _items(value: Any) -> Iterator[tuple[str, Any]]:
    """A mapping's items; anything else one entry that cannot be read."""
    yield from value.items() if isinstance(value, dict) else [("", None)]


def _version_2(data: dict[str, Any]) -> Iterator[Entry]:
    if "lost" in data:
        yield functools.partial(_lost, data["lost"])
    for namespace, vms in _items(data.get("vms", {})):
        for vm, entry in _items(vms):
            entry = entry if isinstance(entry, dict) else {"m": [None]}
            for migration in entry.get("m", []) if isinstance(entry.get("m", []), list) else [None]:
                yield functools.partial(_migration, namespace, vm, migration)
            for action, refusal in _items(entry.get("r", {})):
                yield functools.partial(_refusal, namespace, vm, action, refusal)
            if "s" in entry:
                yield functools.partial(_evidence, namespace, vm, entry["s"])


def _version_1(data: dict[str, Any]) -> Iterator[Entry]:
    """Flat lists of objects, their names and times spelled out."""
    def migration(m: Any) -> Migration:
        return _migration(m["namespace"], m["vmi"], ["/" + m["name"], m["phase"], m["created"], m.get("ended"),
                                                     m.get("target"), m.get("uid"), m.get("recovers")])

    def refusal(h: Any) -> Refusal:
        return _refusal(h["namespace"], h["name"], h["action"], [h["count"], h["retry"], h.get("status", 0),
                                                                 h.get("words")])

    for kind, read in (("migrations", migration), ("refusals", refusal)):
        entries = data.get(kind, [])
        yield from (functools.partial(read, entry) for entry in (entries if isinstance(entries, list) else [None]))


def load(text: str | None) -> tuple[KeeperState, Loss | None]:
    """The state the ConfigMap's data key holds (none: an empty state), and what of it was lost."""
    if not text:
        return KeeperState(), None
    try:
        data = json.loads(text)
    except ValueError as exc:
        return KeeperState(), Loss(kind="unreadable", why=f"not JSON ({exc})")
    version = data.get("version") if isinstance(data, dict) else None
    if version not in (1, VERSION):
        return KeeperState(), Loss(kind="other version", why=f"version {version!r}, where this keeper reads 1 and {VERSION}")
    read, dropped = [], []
    for entry in (_version_1 if version == 1 else _version_2)(data):
        try:
            read.append(entry())
        except (ValueError, TypeError, KeyError, AttributeError, ArithmeticError, OSError) as exc:
            dropped.append(str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__} {exc}")
    state = KeeperState(migrations=tuple(sorted((m for m in read if isinstance(m, Migration)),
                                                key=lambda m: (m.created, m.namespace, m.name))),
                        refusals=tuple(h for h in read if isinstance(h, Refusal)),
                        stale=tuple(e for e in read if isinstance(e, Evidence)),
                        lost=next((lost for lost in read if isinstance(lost, tuple)), None))
    many = "an entry" if len(dropped) == 1 else f"{len(dropped)} entries"
    return state, Loss(kind="malformed", why=f"{many} dropped ({dropped[0]})") if dropped else None
