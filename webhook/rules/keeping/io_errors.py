"""Which disk of a VM failed, and why, in KubeVirt's own words: virt-launcher's `IOerror` Event per disk with an
error, naming its VMI volume, "VM Paused due to IO error at the volume: <name>" or "… not enough space on volume:
<name>" (KubeVirt v1.9.0 `pkg/virt-launcher/notify-client/client.go`), recorded on the VMI by virt-handler. It is
re-sent on every callback while paused, so `count` is never read; client-go folds ten distinct messages in 10
minutes into one "(combined from similar events)" (`tools/record/events_cache.go`), whose times are no disk's.
"""
from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from ..shared.times import parse_time

REASON = "IOerror"
KIND = "VirtualMachineInstance"
# The watch's field selector: the apiserver filters Events on these (`ToSelectableFields`).
FIELDS = f"reason={REASON},involvedObject.kind={KIND}"


class Cause(enum.StrEnum):
    """Why libvirt says the disk failed."""
    IO_ERROR = "io-error"  # DOMAIN_DISK_ERROR_UNSPEC: the disk's I/O failed (a stale NFS mount, among others)
    NO_SPACE = "no-space"  # DOMAIN_DISK_ERROR_NO_SPACE: the storage is full; no move frees space


# KubeVirt's words for each cause, followed by the volume's name.
WORDS = {Cause.IO_ERROR: "VM Paused due to IO error at the volume: ",
         Cause.NO_SPACE: "VM Paused due to not enough space on volume: "}
# client-go's aggregator's prefix to a message folded with others of its reason; the last one's words follow.
COMBINED = "(combined from similar events): "

# What the reader reads of an Event (a cache keeps this, `stores.shapes.trim`).
KEPT: Any = {"metadata": {"name": True, "namespace": True},
             "involvedObject": {"kind": True, "namespace": True, "name": True, "uid": True},
             "reason": True, "message": True, "firstTimestamp": True, "lastTimestamp": True, "eventTime": True,
             "series": {"lastObservedTime": True}}


@dataclasses.dataclass(frozen=True, slots=True)
class IoError:
    """One disk's I/O error on a VMI as one Event tells it; `combined`: folded by client-go."""
    uid: str
    name: str
    volume: str  # the VMI volume, "" when KubeVirt found no disk of that target
    cause: Cause
    first: datetime
    last: datetime
    combined: bool = False


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def words_of(message: Any) -> tuple[Cause, str] | None:
    """The cause and the volume an IOerror Event's message names, None for other words."""
    text = _text(message).removeprefix(COMBINED)
    for cause, words in WORDS.items():
        if text.startswith(words):
            return cause, text[len(words):]
    return None


def _times(event: dict[str, Any]) -> tuple[datetime, datetime] | None:
    """First and last: core/v1's fields, else events.k8s.io's (`eventTime`, `series`)."""
    series = event.get("series") if isinstance(event.get("series"), dict) else {}
    first = parse_time(event.get("firstTimestamp")) or parse_time(event.get("eventTime"))
    last = parse_time(event.get("lastTimestamp")) or parse_time(series.get("lastObservedTime")) or first
    if first is None or last is None:
        return None
    return min(first, last), last


def read_io_error(event: Any) -> IoError | None:
    """One core/v1 Event as an IoError; None for an Event of another reason, object kind or shape."""
    if not isinstance(event, dict) or event.get("reason") != REASON:
        return None
    involved = event.get("involvedObject")
    if not isinstance(involved, dict) or involved.get("kind") != KIND:
        return None
    uid, name = _text(involved.get("uid")), _text(involved.get("name"))
    said, times = words_of(event.get("message")), _times(event)
    if not uid or not name or said is None or times is None:
        return None
    first, last = times
    return IoError(uid=uid, name=name, volume=said[1], cause=said[0], first=first, last=last,
                   combined=_text(event.get("message")).startswith(COMBINED))


def by_vmi(events: Iterable[Any]) -> dict[str, tuple[IoError, ...]]:
    """The IOerror Events among `events`, by VMI uid, each VMI's newest first (the others skipped)."""
    found: dict[str, list[IoError]] = {}
    for event in events:
        error = read_io_error(event)
        if error is not None:
            found.setdefault(error.uid, []).append(error)
    return {uid: tuple(sorted(errors, key=lambda e: (e.last, e.first, e.volume), reverse=True))
            for uid, errors in found.items()}

