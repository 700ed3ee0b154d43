"""What the leading keeper remembers from one pass to the next, in one place: its record of each
running opted-in VM (state, since when, what holds it, its last action), the spans apart
(`apart_spans.py`), the VMIs it unpaused (not again a moment after: the watch may not show it yet; and
how often), the I/O-error pauses its watch saw (`kubevirt_api.PauseLog`), the objects of
unexpected shape already logged, and what went wrong in the last pass (its readiness notes). What
must outlive the leader (refused actions, our migrations) is the keeper's state
(`rules.keeping.state`), kept in the cluster.
"""
from __future__ import annotations

import dataclasses
import logging
from datetime import datetime, timedelta

from ..cluster.events import NO_EVENTS, Events, vmi_reference
from ..rules.keeping.apart import APART, VmState
from ..rules.keeping.recovery import Pauses
from ..rules.shared.alone import Alone
from ..rules.keeping.keep import KeepDecision, VmFacts
from ..rules.shared.reading import Malformed
from .apart_spans import ApartSpans, VmKey
from .kubevirt_api import PauseLog

log = logging.getLogger("webhook.keeper")
UNPAUSED_FOR = timedelta(minutes=2)  # an unpause is not made again this soon: longer than the watch's lag
UNPAUSES_KEPT = 8  # a VMI's latest unpauses remembered (`resume.MOST_UNPAUSES` counts those in its pod)


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


class Memory:
    """The keeper's memory; `records` by (namespace, name). It is what observing recalls of a VM
    (`observe.Recall`): the pauses the watch saw (`pause_log`, while one runs) and its unpauses."""

    def __init__(self, spans: ApartSpans, events: Events = NO_EVENTS):
        self.spans, self.events = spans, events
        self.records: dict[VmKey, VmRecord] = {}
        self.errors: list[str] = []  # what went wrong in the last pass: readiness notes
        self.unpaused: dict[str, tuple[datetime, ...]] = {}  # VMI uid -> when this leader unpaused it
        self.pause_log: PauseLog | None = None
        self._skipped: set[str] = set()

    def pauses(self, uid: str) -> Pauses:
        return self.pause_log.of(uid) if self.pause_log is not None else Pauses()

    def unpauses(self, uid: str, pod_started: datetime | None) -> int:
        """This leader's unpauses of the VMI since its pod started."""
        return sum(1 for at in self.unpaused.get(uid, ()) if pod_started is None or at >= pod_started)

    def skip(self, skipped: Malformed) -> None:
        """One log line per object of unexpected shape (and per new reason), not one per pass."""
        if str(skipped) not in self._skipped:
            self._skipped.add(str(skipped))
            log.warning("keeper skipped an object", extra={"fields": {"object": skipped.what, "why": skipped.reason}})

    def keep_only(self, running: set[VmKey], uids: set[str]) -> None:
        """Forget the VMs no longer running opted in, and the unpauses of VMIs gone."""
        for key in [k for k in self.records if k not in running]:
            del self.records[key]
        self.unpaused = {uid: times for uid, times in self.unpaused.items() if uid in uids}
        self.spans.keep_only(running)

    def since(self, vm: VmFacts, now: datetime) -> datetime:
        """Since when the VM is in its state: apart, when its span apart began (read from the
        cluster, `apart_spans.py`); otherwise since the first pass that saw it so."""
        if vm.where.state is APART and vm.apart_since is not None:
            return vm.apart_since
        record = self.records.get((vm.vmi.namespace, vm.vmi.name))
        return record.since if record is not None and record.state is vm.where.state else now

    def record(self, vm: VmFacts, decision: KeepDecision, now: datetime) -> None:
        """Keep the VM's record; one log line when its state or what holds it changes."""
        vmi, where = vm.vmi, vm.where
        key = (vmi.namespace, vmi.name)
        old = self.records.get(key)
        record = VmRecord(namespace=vmi.namespace, name=vmi.name, state=where.state, since=self.since(vm, now),
                          why=where.why, node=where.node, target=where.target, hold=decision.hold,
                          decision=decision.reason, last_action=old.last_action if old else "",
                          last_action_at=old.last_action_at if old else None)
        self.records[key] = record
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
        record = self.records.get(key)
        if record is not None:
            self.records[key] = dataclasses.replace(record, last_action=action, last_action_at=now)

    def unpausing(self, uid: str, now: datetime) -> None:
        """The VMI was unpaused now: not again until the watch can show it, and counted."""
        self.unpaused[uid] = (*self.unpaused.get(uid, ()), now)[-UNPAUSES_KEPT:]

    def just_unpaused(self, now: datetime) -> set[str]:
        """The uids of the VMIs unpaused a moment ago."""
        return {uid for uid, times in self.unpaused.items() if now - times[-1] < UNPAUSED_FOR}
