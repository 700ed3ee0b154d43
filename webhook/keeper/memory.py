"""What the leading keeper remembers between passes that it need not keep in the cluster: per running
opted-in VM what the last pass made of it (`VmReport`: `status`'s and the metrics' view) and its span apart,
the objects of unexpected shape already logged, and the last pass's errors (readiness notes). What must outlive
the leader is the VM's record (`rules.keeping.record.VmRecord`), kept in the cluster.
"""
from __future__ import annotations

import dataclasses
import logging
from datetime import datetime

from ..rules.keeping.apart import APART, VmState
from ..rules.keeping.keep import KeepDecision, VmFacts
from ..rules.shared.alone import Alone
from ..rules.shared.reading import Malformed
from .apart_spans import ApartSpan, VmKey
from .observe import Recall

log = logging.getLogger("webhook.keeper")


@dataclasses.dataclass(frozen=True, slots=True)
class VmReport:
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

    record: VmReport | None = None
    span: ApartSpan | None = None  # while it is apart


class Memory(Recall):
    """The keeper's memory of this term: what observing recalls of a VM."""

    def __init__(self) -> None:
        self.vms: dict[VmKey, Kept] = {}
        self.errors: list[str] = []  # what went wrong in the last pass: readiness notes
        self._skipped: set[str] = set()

    @property
    def records(self) -> dict[VmKey, VmReport]:
        return {key: kept.record for key, kept in self.vms.items() if kept.record is not None}

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

    def keep_only(self, running: set[VmKey]) -> None:
        """Forget the VMs no longer running opted in."""
        self.vms = {key: kept for key, kept in self.vms.items() if key in running}

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
        record = VmReport(namespace=vmi.namespace, name=vmi.name, state=where.state, since=self.since(vm, now),
                          why=where.why, node=where.node, target=where.target, hold=decision.hold,
                          decision=decision.reason, last_action=old.last_action if old else "",
                          last_action_at=old.last_action_at if old else None)
        kept.record = record
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
