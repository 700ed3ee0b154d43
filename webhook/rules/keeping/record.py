"""The keeper's state (`state.py`) as its ConfigMap keeps it: one JSON data key, bounded in size, read
leniently. Pure. A hint, never a gate: a record that is not JSON or of another version reads as empty, an
entry of an unexpected shape is dropped alone, each saying what was lost (`Loss`); the keeper rebuilds
the rest from the cluster. Version 2 groups each VM's entries under its namespace and name: a migration
of ours as its generated suffix, phase and Unix times (its node, uid and annotation only while
unfinished: KubeVirt never collects a VMI's latest migration), the refusals with clipped words. The
evidence of stale mounts first, then our migrations, then the refusals, the newest first, as many as fit
in BUDGET: well under the API's 1 MiB. Version 3 adds, per VM, what it keeps of the VMI (`state.VmRecord`):
its uid, the keeper's unpauses, the Events said once and the I/O errors seen. Versions 1 (flat lists, spelled
out) and 2 are read too.
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
from .state import Action, Evidence, KeeperState, Refusal, VmRecord, WORDS

KEY = "state.json"  # the ConfigMap's data key
VERSION = 3
READ = (1, 2, VERSION)
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


def _vmi_items(r: VmRecord) -> list[tuple[str, Any]]:
    """What a VM's record keeps of its VMI, as (key, value): kept first, whatever the budget."""
    found: list[tuple[str, Any]] = [("u", r.uid)] if r.uid else []
    found += [("p", [int(at.timestamp()) for at in r.unpaused])] if r.unpaused else []
    found += [("e", {reason: int(at.timestamp()) for reason, at in r.said})] if r.said else []
    found += [("v", {volume: int(at.timestamp()) for volume, at in r.seen})] if r.seen else []
    if r.stale is not None:
        e = r.stale
        found.append(("s", [int(e.requested.timestamp()), clip_reason(e.words, WORDS), int(e.last.timestamp())]))
    return found


def dump(state: KeeperState, budget: int = BUDGET) -> str:
    """The state as the ConfigMap keeps it: compact JSON in a stable order, the newest first within `budget` bytes."""
    items: list[tuple[int, float, str, str, str, Any]] = []
    for r in state.vms.values():
        items += [(-1, 0.0, r.namespace, r.name, where, value) for where, value in _vmi_items(r)]
        items += [(0, -(m.ended or m.created).timestamp(), m.namespace, m.vmi, "m", _migration_json(m))
                  for m in r.migrations]
        items += [(1, -h.retry.timestamp(), h.namespace, h.name, str(h.action),
                   [min(h.count, MOST_COUNT), int(h.retry.timestamp()), h.status, clip_reason(h.words, WORDS)])
                  for h in r.refusals]
    items.sort(key=lambda item: item[:5])
    head = {"version": VERSION} | ({"lost": [int(state.lost[0].timestamp()), clip_reason(state.lost[1], WORDS)]}
                                   if state.lost is not None else {})

    def first(count: int) -> str:  # the record of the first `count` items
        vms: dict[str, dict[str, dict[str, Any]]] = {}
        for order, _, namespace, vm, where, value in items[:count]:
            entry = vms.setdefault(namespace, {}).setdefault(vm, {})
            if where == "m":
                entry.setdefault("m", []).append(value)
            elif order < 0:
                entry[where] = value
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


def _vmi_part(where: str, value: Any) -> Any:
    """One of what a VM's record keeps of its VMI (`_vmi_items`), read back; version 2's evidence too."""
    if where == "u":
        return _text(value, "a VMI's uid")
    if where == "p":
        return tuple(sorted(_time(at, "an unpause") for at in value))
    if where in ("e", "v"):
        return tuple(sorted((_text(k, "a name"), _time(at, "a time")) for k, at in value.items()))
    if len(value) == 3 and isinstance(value[0], str):  # version 2: [uid, requested, words]
        return _text(value[0], "a VMI's uid"), Evidence(requested=_time(value[1], "requested"),
                                                        words=_text(value[2], "evidence"), last=_time(value[1], "requested"))
    requested, words, last = value
    return Evidence(requested=_time(requested, "requested"), words=_text(words, "the evidence of a stale mount"),
                    last=_time(last, "the last I/O error"))


Part = tuple[tuple[str, str], str, Any]  # (namespace, VM), what of its record, the value
Entry = Callable[[], Part | tuple[datetime, str]]
VMI_PARTS = ("u", "p", "e", "v", "s")


def _items(value: Any) -> Iterator[tuple[str, Any]]:
    """A mapping's items; anything else one entry that cannot be read."""
    yield from value.items() if isinstance(value, dict) else [("", None)]


def _part(namespace: str, vm: str, where: str, read: Callable[..., Any], *args: Any) -> Part:
    return (namespace, vm), where, read(*args)


def _version_2(data: dict[str, Any]) -> Iterator[Entry]:
    """Versions 2 and 3: each VM's entries under its namespace and name."""
    if "lost" in data:
        yield functools.partial(_lost, data["lost"])
    for namespace, vms in _items(data.get("vms", {})):
        for vm, entry in _items(vms):
            entry = entry if isinstance(entry, dict) else {"m": [None]}
            for migration in entry.get("m", []) if isinstance(entry.get("m", []), list) else [None]:
                yield functools.partial(_part, namespace, vm, "m", _migration, namespace, vm, migration)
            for action, refusal in _items(entry.get("r", {})):
                yield functools.partial(_part, namespace, vm, "r", _refusal, namespace, vm, action, refusal)
            for where in (w for w in VMI_PARTS if w in entry):
                yield functools.partial(_part, namespace, vm, where, _vmi_part, where, entry[where])


def _version_1(data: dict[str, Any]) -> Iterator[Entry]:
    """Flat lists of objects, their names and times spelled out."""
    def migration(m: Any) -> Part:
        return (m["namespace"], m["vmi"]), "m", _migration(m["namespace"], m["vmi"], [
            "/" + m["name"], m["phase"], m["created"], m.get("ended"), m.get("target"), m.get("uid"), m.get("recovers")])

    def refusal(h: Any) -> Part:
        return (h["namespace"], h["name"]), "r", _refusal(h["namespace"], h["name"], h["action"], [
            h["count"], h["retry"], h.get("status", 0), h.get("words")])

    for kind, read in (("migrations", migration), ("refusals", refusal)):
        entries = data.get(kind, [])
        yield from (functools.partial(read, entry) for entry in (entries if isinstance(entries, list) else [None]))


def _records(parts: list[Part]) -> list[VmRecord]:
    """The records the parts read make up, one per VM."""
    fields: dict[tuple[str, str], dict[str, Any]] = {}
    names = {"u": "uid", "p": "unpaused", "e": "said", "v": "seen", "s": "stale"}
    for key, where, value in parts:
        mine = fields.setdefault(key, {"migrations": [], "refusals": []})
        if where in ("m", "r"):
            mine["migrations" if where == "m" else "refusals"].append(value)
        elif isinstance(value, tuple) and isinstance(value[-1], Evidence):  # version 2's evidence: [uid, …]
            mine["uid"], mine["stale"] = value
        else:
            mine[names[where]] = value
    return [VmRecord(namespace=namespace, name=vm, **{**f, "migrations": tuple(sorted(
        f["migrations"], key=lambda m: (m.created, m.name))), "refusals": tuple(f["refusals"])})
            for (namespace, vm), f in fields.items()]


def load(text: str | None) -> tuple[KeeperState, Loss | None]:
    """The state the ConfigMap's data key holds (none: an empty state), and what of it was lost."""
    if not text:
        return KeeperState(), None
    try:
        data = json.loads(text)
    except ValueError as exc:
        return KeeperState(), Loss(kind="unreadable", why=f"not JSON ({exc})")
    version = data.get("version") if isinstance(data, dict) else None
    if version not in READ:
        return KeeperState(), Loss(kind="other version",
                                   why=f"version {version!r}, where this keeper reads {', '.join(map(str, READ))}")
    read, dropped = [], []
    for entry in (_version_1 if version == 1 else _version_2)(data):
        try:
            read.append(entry())
        except (ValueError, TypeError, KeyError, AttributeError, ArithmeticError, OSError) as exc:
            dropped.append(str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__} {exc}")
    lost = next((x for x in read if len(x) == 2), None)
    state = KeeperState.of(_records([x for x in read if len(x) == 3]), lost)
    many = "an entry" if len(dropped) == 1 else f"{len(dropped)} entries"
    return state, Loss(kind="malformed", why=f"{many} dropped ({dropped[0]})") if dropped else None
