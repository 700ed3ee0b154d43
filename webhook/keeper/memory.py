"""What the leading keeper remembers between passes, in one place: per running opted-in VM its record
and its span apart (`Kept`), per VMI the I/O-error pauses its watch saw and this leader's unpauses
(`Pauses`), the objects of unexpected shape already logged, and the last pass's errors (readiness
notes). What must outlive the leader is the keeper's state (`rules.keeping.state`), kept in the cluster.
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from .. import kinds
from ..cluster.events import NO_EVENTS, Events, vmi_reference
from ..rules.keeping.apart import APART, VmState
from ..rules.keeping.keep import KeepDecision, VmFacts
from ..rules.keeping.recovery import Pauses
from ..rules.keeping.running import io_paused_since
from ..rules.shared.alone import Alone
from ..rules.shared.reading import Malformed
from .apart_spans import ApartSpan, VmKey
from .observe import Recall

log = logging.getLogger("webhook.keeper")
UNPAUSED_FOR = timedelta(minutes=2)  # an unpause is not made again this soon: longer than the watch's lag
UNPAUSES_KEPT = 8  # a VMI's latest unpauses remembered (`resume.MOST_UNPAUSES` counts those in its pod)
PAUSES_KEPT = 16  # a VMI's latest I/O-error pauses remembered


@dataclasses.dataclass(frozen=True, slots=True)
class VmRecord:
    """What the keeper last made of one running opted-in VM. Frozen: a pass's report keeps the
    records as that pass left them."""

    namespace: str
    name: str
    state: VmState
    since: datetime  # in this state since (apart: derived from the cluster, see `apart_spans.py`)
    why: str  # where the VM runs and where its disks are served
    node: str | None = None
    target: str | None = None  # where its disks are served, when apart
    hold: Alone | None = None  # what holds it where it is
    decision: str = ""  # the decision, in words
    last_action: str = ""
    last_action_at: datetime | None = None


@dataclasses.dataclass(slots=True)
class Kept:
    """What this leader remembers of one running opted-in VM."""

    record: VmRecord | None = None
    span: ApartSpan | None = None  # while it is apart


class Memory(Recall):
    """The keeper's memory: what observing recalls of a VM; `saw` watches the VMIs."""

    def __init__(self, clock: Callable[[], datetime], events: Events = NO_EVENTS):
        self.events, self.clock = events, clock
        self.vms: dict[VmKey, Kept] = {}
        self.vmis: dict[str, Pauses] = {}  # by VMI uid, while the watch shows it
        self.errors: list[str] = []  # what went wrong in the last pass: readiness notes
        self._skipped: set[str] = set()

    @property
    def records(self) -> dict[VmKey, VmRecord]:
        return {key: kept.record for key, kept in self.vms.items() if kept.record is not None}

    def saw(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        """A VMI table's watcher: each I/O-error pause as the watch streams it (every Paused condition's
        lastTransitionTime, KubeVirt's re-stamps included: a pause its retry lifts a moment later is seen
        too), and since when the watch has shown the VMI: what a pass cannot see in one look."""
        uid = kinds.meta(new if new is not None else old).get("uid")
        if not isinstance(uid, str):
            return
        if new is None:
            self.vmis.pop(uid, None)
            return
        known = self.vmis.get(uid) or Pauses()
        if known.watched_since is None:
            known = dataclasses.replace(known, watched_since=self.clock())
        at = io_paused_since(new)
        if at is not None and at not in known.at:
            known = dataclasses.replace(known, at=tuple(sorted((*known.at, at)))[-PAUSES_KEPT:])
        self.vmis[uid] = known

    def unwatched(self) -> None:
        """The watch stopped: the pauses it saw go with it, this leader's unpauses stay."""
        self.vmis = {uid: Pauses(unpaused=seen.unpaused) for uid, seen in self.vmis.items() if seen.unpaused}

    def pauses(self, uid: str) -> Pauses:
        return self.vmis.get(uid) or Pauses()

    def span(self, key: VmKey) -> ApartSpan | None:
        kept = self.vms.get(key)
        return kept.span if kept is not None else None

    def spanned(self, key: VmKey, span: ApartSpan | None) -> None:
        if span is not None or key in self.vms:
            self.vms.setdefault(key, Kept()).span = span

    def skip(self, skipped: Malformed) -> None:
        """One log line per object of unexpected shape (and per new reason), not one per pass."""
        if str(skipped) not in self._skipped:
            self._skipped.add(str(skipped))
            log.warning("keeper skipped an object", extra={"fields": {"object": skipped.what, "why": skipped.reason}})

    def keep_only(self, running: set[VmKey], uids: set[str]) -> None:
        """Forget the VMs no longer running opted in, and the unpauses of VMIs gone."""
        self.vms = {key: kept for key, kept in self.vms.items() if key in running}
        for uid in [u for u, seen in self.vmis.items() if seen.unpaused and u not in uids]:
            self.vmis[uid] = dataclasses.replace(self.vmis[uid], unpaused=())

    def since(self, vm: VmFacts, now: datetime) -> datetime:
        """Since when the VM is in its state: apart, when its span apart began (read from the
        cluster, `apart_spans.py`); otherwise since the first pass that saw it so."""
        if vm.where.state is APART and vm.apart_since is not None:
            return vm.apart_since
        record = self.vms.get((vm.vmi.namespace, vm.vmi.name), Kept()).record
        return record.since if record is not None and record.state is vm.where.state else now

    def record(self, vm: VmFacts, decision: KeepDecision, now: datetime) -> None:
        """Keep the VM's record; one log line when its state or what holds it changes."""
        vmi, where = vm.vmi, vm.where
        kept = self.vms.setdefault((vmi.namespace, vmi.name), Kept())
        old = kept.record
        record = VmRecord(namespace=vmi.namespace, name=vmi.name, state=where.state, since=self.since(vm, now),
                          why=where.why, node=where.node, target=where.target, hold=decision.hold,
                          decision=decision.reason, last_action=old.last_action if old else "",
                          last_action_at=old.last_action_at if old else None)
        kept.record = record
        if decision.hold is Alone.NEEDS_RESTART and (old is None or old.hold is not Alone.NEEDS_RESTART):
            self.events.emit_about(vmi_reference(vmi.namespace, vmi.name, vmi.uid), "NeedsRestart",
                                   f"needs a restart: {decision.reason}", warning=True)
        if old is None or (old.state, old.hold, old.node, old.target) != (record.state, record.hold, record.node,
                                                                        record.target):
            log.info("keeper decision", extra={"fields": {
                "vm": f"{vmi.namespace}/{vmi.name}", "state": str(where.state), "node": where.node,
                "target": where.target, "hold": str(decision.hold) if decision.hold is not None else None,
                "reason": decision.reason}})

    def acted(self, key: VmKey, action: str, now: datetime) -> None:
        """The VM's last action, in its record (if the VM still has one)."""
        kept = self.vms.get(key)
        if kept is not None and kept.record is not None:
            kept.record = dataclasses.replace(kept.record, last_action=action, last_action_at=now)

    def unpausing(self, uid: str, now: datetime) -> None:
        """The VMI was unpaused now: not again until the watch can show it, and counted."""
        seen = self.vmis.get(uid) or Pauses()
        self.vmis[uid] = dataclasses.replace(seen, unpaused=(*seen.unpaused, now)[-UNPAUSES_KEPT:])

    def just_unpaused(self, now: datetime) -> set[str]:
        """The uids of the VMIs unpaused a moment ago."""
        return {uid for uid, seen in self.vmis.items() if seen.unpaused and now - seen.unpaused[-1] < UNPAUSED_FOR}
