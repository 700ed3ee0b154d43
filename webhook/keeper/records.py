"""The keeper's memory: each VM's record (`rules.keeping.record`) as this leader holds it and as the cluster keeps
it, in the ConfigMap `<lease name>-state` beside the Lease (its account may `get` and `update` it alone, and
`create` ConfigMaps); and for this term, what the last pass made of each VM (`VmReport`), its span apart, our
migrations followed to their end. Nothing kept here ever stops a pass.
"""
from __future__ import annotations

import base64
import binascii
import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import orjson

from .. import metrics
from ..cluster.client import ApiUnreachable, request
from ..cluster.events import NO_EVENTS, Events, vmi_reference
from ..config import Settings
from ..kinds import CONFIGMAP, meta
from ..rules.keeping.apart import APART, VmState
from ..rules.keeping.keep import KeepDecision, VmFacts
from ..rules.keeping.migrations import attempts, backoff, FAILED, Migration
from ..rules.keeping.record import (Action, dump, KEY, KeeperState, load, Loss, REMEMBER, UNPAUSES_KEPT,
                                    VmKey, VmRecord, with_kept)
from ..rules.keeping.recovery import Stale
from ..rules.shared.alone import Alone
from ..rules.shared.reading import Malformed
from ..rules.shared.times import rfc3339
from .kubevirt_api import answered
from .observe import ApartSpan
from .writes import Result

log = logging.getLogger("webhook.keeper")
SAID_ONCE = ("NeedsRestart", "WaitingForStorage")  # Events said once per VMI, by any leader


class StateUnavailable(Exception):
    """The keeper's record could not be read or written; the message says why."""


def state_name(settings: Settings) -> str:
    return f"{settings.lease_name}-state"


async def _get(api: Any, namespace: str, name: str, timeout: float) -> tuple[bytes | None, str | None]:
    """The record (None: there is no ConfigMap) and the ConfigMap's resourceVersion."""
    try:
        status, raw = await request(api, "GET", CONFIGMAP.path(namespace, name), timeout=timeout)
    except ApiUnreachable as exc:
        raise StateUnavailable(f"ConfigMap {namespace}/{name}: {exc}") from None
    if status == 404:
        return None, None
    if status != 200:
        raise StateUnavailable(f"ConfigMap {namespace}/{name}: {answered(status, raw)}")
    return _answer(raw)


def _answer(raw: bytes) -> tuple[bytes, str | None]:
    """The record in a ConfigMap as answered (b"": none) and its resourceVersion (None: not said)."""
    try:
        obj = orjson.loads(raw)
    except ValueError:
        obj = None
    data, version = obj.get("binaryData") if isinstance(obj, dict) else None, meta(obj).get("resourceVersion")
    text = data.get(KEY) if isinstance(data, dict) else None
    try:
        packed = base64.b64decode(text, validate=True) if isinstance(text, str) else b""
    except binascii.Error:
        packed = b"\0"  # not base64: read as a record that cannot be read
    return packed, version if isinstance(version, str) else None


class StateStore:
    """The record's one ConfigMap, as this leader last read or wrote it."""

    def __init__(self, api: Any, namespace: str, name: str, *, timeout: float):
        self.api, self.namespace, self.name, self.timeout = api, namespace, name, timeout
        self.written: bytes | None = None  # the record as last read or written (None: none)
        self._read = False
        self._version: str | None = None

    async def read(self) -> tuple[KeeperState, Loss | None] | None:
        """The record taken in when another wrote it; what was lost is said, this leader's view standing for it."""
        packed, self._version = await _get(self.api, self.namespace, self.name, self.timeout)
        if self._read and packed == self.written:
            return None
        had, self.written, self._read = self._read and bool(self.written), packed, True
        if had and not packed:
            return KeeperState(), Loss(kind="deleted", why="deleted or emptied since the keeper last wrote it")
        return load(packed)

    async def write(self, state: KeeperState) -> bool:
        """The state written if it changed, whether it was; a conflict (an old leader) is read once and written over."""
        packed = dump(state)
        if packed == self.written:
            return False
        for attempt in range(2):
            status, raw = await self._send(packed)
            if status in (200, 201):
                self.written, self._version = packed, _answer(raw)[1]
                return True
            if status not in (404, 409) or attempt:
                break
            _, self._version = await _get(self.api, self.namespace, self.name, self.timeout)
        raise StateUnavailable(f"ConfigMap {self.namespace}/{self.name}: {answered(status, raw)}")

    async def _send(self, packed: bytes) -> tuple[int, bytes]:
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": self.name, "namespace": self.namespace,
                                             "labels": {"app.kubernetes.io/name": "kubevirt-colocate",
                                                        "app.kubernetes.io/component": "keeper"}},
                                "binaryData": {KEY: base64.b64encode(packed).decode()}}
        if self._version is not None:
            body["metadata"]["resourceVersion"] = self._version
        path = CONFIGMAP.path(self.namespace, None if self._version is None else self.name)
        try:
            return await request(self.api, "POST" if self._version is None else "PUT", path, body=body,
                                 timeout=self.timeout)
        except ApiUnreachable as exc:
            raise StateUnavailable(f"ConfigMap {self.namespace}/{self.name}: {exc}") from None


@dataclasses.dataclass(frozen=True, slots=True)
class VmReport:
    """What the keeper last made of one running opted-in VM. Frozen: a pass's report keeps them as it left them."""

    namespace: str
    name: str
    state: VmState
    since: datetime  # in this state since (apart: read from the cluster, `observe.Observer`)
    why: str  # where the VM runs and where its disks are served
    node: str | None = None
    target: str | None = None  # where its disks are served, when apart
    hold: Alone | None = None  # what holds it where it is
    decision: str = ""  # the decision, in words
    last_action: str = ""
    last_action_at: datetime | None = None


MigrationKey = tuple[str, str]  # a migration's namespace and name


class Records:
    """The keeper's memory (the module's docstring); `store`: its ConfigMap (None: this process's alone)."""

    def __init__(self, store: StateStore | None = None, events: Events = NO_EVENTS):
        self.store, self.events = store, events
        self.state = KeeperState()  # each VM's record, this leader's; the cluster's taken in whenever it changed
        self.reports: dict[VmKey, VmReport] = {}
        self.spans: dict[VmKey, ApartSpan] = {}  # each VM's span apart, as observing last read it
        self.errors: list[str] = []  # what went wrong in the last pass: readiness notes
        self.unread = ""  # why the record could not be read this pass
        self._skipped: set[str] = set()
        self._ours: dict[MigrationKey, Migration] = {}  # ours, as last seen (or as created)
        self._open: set[MigrationKey] = set()  # followed until they end
        self._seen: set[MigrationKey] = set()  # shown by the watch at least once
        self._cancelled: set[MigrationKey] = set()  # deleted by us: failed, whatever the watch shows
        self._shown: set[MigrationKey] = set()  # ours in the watch as last observed

    def skip(self, skipped: Malformed) -> None:
        """One log line per object of unexpected shape (and per new reason), not one per pass."""
        if str(skipped) not in self._skipped:
            self._skipped.add(str(skipped))
            log.warning("keeper skipped an object", extra={"fields": {"object": skipped.what, "why": skipped.reason}})

    # ------------------------------------------------------------ the record in the cluster
    async def read(self, now: datetime) -> KeeperState:
        """The record taken in when another wrote it; what was lost is said, this leader's view standing for it."""
        self.unread = ""
        try:
            read = await self.store.read() if self.store is not None else None
        except StateUnavailable as exc:
            self.unread = f"the keeper's record could not be read: {exc}"
            _said("not read", str(exc), "acting on what this leader knows")
            return self.state
        if read is not None:
            state, loss = read
            self._remember(state.migrations)
            if loss is not None:  # what could not be read never erases what this leader knows
                state = dataclasses.replace(state, lost=(now, f"{loss.kind}: {loss.why}")).over(self.state)
                _said(loss.kind, loss.why, "what this leader knows kept, the rest rebuilt from the cluster")
            self.state = state
        return self.state

    async def write(self, now: datetime, running: Mapping[VmKey, str], errors: list[str], *, leads: bool) -> None:
        """Our migrations into the records, VMs not `running` pruned; written when changed, by the leader (`leads`)."""
        self.state = self.state.with_migrations(self.ours(), now).only(running)
        self.reports = {key: r for key, r in self.reports.items() if key in running}
        self.spans = {key: s for key, s in self.spans.items() if key in running}
        errors.extend([self.unread] if self.unread else [])
        if self.store is None or not leads:
            return
        try:
            await self.store.write(self.state)
        except StateUnavailable as exc:
            errors.append(f"the keeper's record could not be written: {exc}")
            _said("not written", str(exc), "tried again next pass")

    # ------------------------------------------------------------ what a pass made of a VM
    def reported(self, vm: VmFacts, decision: KeepDecision, now: datetime) -> None:
        """The pass's view of the VM (logged when it changes), its I/O errors and evidence into its record; Events said once."""
        vmi, where, key = vm.vmi, vm.where, (vm.vmi.namespace, vm.vmi.name)
        old = self.reports.get(key)
        since = vm.apart_since if where.state is APART and vm.apart_since is not None else (
            old.since if old is not None and old.state is where.state else now)
        report = VmReport(namespace=vmi.namespace, name=vmi.name, state=where.state, since=since, why=where.why,
                          node=where.node, target=where.target, hold=decision.hold, decision=decision.reason,
                          last_action=old.last_action if old else "", last_action_at=old.last_action_at if old else None)
        self.reports[key] = report
        if old is None or (old.state, old.hold, old.node, old.target) != (report.state, report.hold, report.node,
                                                                        report.target):
            log.info("keeper decision", extra={"fields": {
                "vm": f"{vmi.namespace}/{vmi.name}", "state": str(where.state), "node": where.node,
                "target": where.target, "hold": str(decision.hold) if decision.hold is not None else None,
                "reason": decision.reason}})
        self.state = self.state.with_vm(self._noted(vm, decision, now))

    def _noted(self, vm: VmFacts, decision: KeepDecision, now: datetime) -> VmRecord:
        vmi = vm.vmi
        kept = self.state.vms.get((vmi.namespace, vmi.name))
        says = (f"needs a restart: {decision.reason}" if decision.hold is Alone.NEEDS_RESTART else "",
                vm.waits_for_storage or "")
        if vm.mount is None and not any(says) and (kept is None or kept.uid == vmi.uid and not kept.said):
            return kept or VmRecord(namespace=vmi.namespace, name=vmi.name)  # most VMs, most passes: nothing to note
        record = (kept or VmRecord(namespace=vmi.namespace, name=vmi.name)).of_vmi(vmi.uid)
        if vm.mount is not None:
            stale = Stale(requested=vm.stale_since, words=vm.stale, last=vm.stale_last or now) \
                if vm.stale and vm.stale_since is not None else None
            record = dataclasses.replace(record, seen=vm.seen, stale=stale, full=vm.full or "")
        said = dict(record.said)
        for reason, words in zip(SAID_ONCE, says, strict=True):
            if words and reason not in said:
                self.events.emit_about(vmi_reference(vmi.namespace, vmi.name, vmi.uid), reason, words, warning=True)
                said[reason] = now
            elif not words and reason == "WaitingForStorage":  # served again: a new wait is said again
                said.pop(reason, None)
        return dataclasses.replace(record, said=tuple(sorted(said.items())))

    def acted(self, result: Result, now: datetime) -> KeeperState:
        """An action's result in the VM's record, at once: one more refusal in a row, or none; an unpause counted."""
        namespace, name = result.key
        if result.holds:
            self.state = self.state.refused(namespace, name, result.action, result.status, result.words, now)
        elif result.done:
            self.state = self.state.cleared(namespace, name, result.action)
        if result.done and result.action is Action.UNPAUSE and result.uid:
            record = self.state.vm(namespace, name).of_vmi(result.uid)
            self.state = self.state.with_vm(dataclasses.replace(record, unpaused=(*record.unpaused, now)[-UNPAUSES_KEPT:]))
        return self.state

    def said(self, result: Result, now: datetime) -> None:
        """An action's result as the VM's last action, once the pass has reported the VM."""
        if result.words and result.key in self.reports:
            self.reports[result.key] = dataclasses.replace(self.reports[result.key], last_action=result.words,
                                                           last_action_at=now)

    # ------------------------------------------------------------ our migrations, followed to their end
    def _remember(self, migrations: Sequence[Migration]) -> None:
        """Ours as the record keeps them, one unfinished followed; those the watch no longer shows are the record's."""
        for key in [k for k, m in self._ours.items() if m.final and k not in self._shown and k not in self._open]:
            del self._ours[key]
        for migration in migrations:
            key = (migration.namespace, migration.name)
            if key not in self._ours:
                self._ours[key] = migration
                self._seen.add(key)
                self._open.update([key] if not migration.final else [])

    def ours(self) -> list[Migration]:
        """Ours the watch does not show (garbage-collected, deleted, not yet shown): the record's."""
        return [m for key, m in self._ours.items() if key not in self._shown]

    def created(self, migration: Migration) -> None:
        """One we just created: remembered, and followed to its end."""
        key = (migration.namespace, migration.name)
        self._ours[key] = migration
        self._open.add(key)

    def cancelled(self, migration: Migration, now: datetime, why: str, uid: str = "") -> None:
        """One of ours we deleted: failed now, announced with `why` (an Event on the VMI, `uid`)."""
        key = (migration.namespace, migration.name)
        self._ours[key] = failed = dataclasses.replace(migration, phase=FAILED, ended=now)
        self._cancelled.add(key)
        self._open.discard(key)
        self._announce(failed, uid, why)

    def history(self, watched: Sequence[Migration]) -> list[Migration]:
        """Every migration to count (`record.with_kept`): the watch's, ours we cancelled as we know them."""
        return with_kept([self._ours.get((m.namespace, m.name), m) if (m.namespace, m.name) in self._cancelled else m
                          for m in watched], self._ours.values())

    def observe(self, watched: Iterable[Migration], now: datetime, uids: Mapping[VmKey, str]) -> None:
        """Take in the watch and announce ours that ended: one deleted under way failed; unfinished for an hour, left."""
        shown = {(m.namespace, m.name): m for m in watched if m.ours}
        self._shown = set(shown)
        for key, migration in shown.items():
            if key in self._cancelled:
                continue  # failed as far as we count, until the watch lets go of it
            if key not in self._ours and migration.in_flight(now):
                self._open.add(key)  # a previous leader's, still under way: ours to follow now
            self._ours[key] = migration
            self._seen.add(key)
        for key in sorted(self._open):
            migration, vm = self._ours[key], f"{key[0]}/{self._ours[key].vmi}"
            if key not in shown and key in self._seen:
                self._open.discard(key)
                self._ours[key] = dataclasses.replace(migration, phase=FAILED, ended=now)
                log.warning("keeper migration gone", extra={"fields": {
                    "vm": vm, "migration": key[1], "why": "deleted before it ended: counted as failed"}})
            elif migration.final:
                self._open.discard(key)
                self._announce(migration, uids.get((migration.namespace, migration.vmi), ""))
            elif not migration.in_flight(now):
                self._open.discard(key)
                log.warning("keeper migration stale", extra={"fields": {
                    "vm": vm, "migration": key[1],
                    "why": "unfinished for an hour: no longer counted as in flight (left alone)"}})
        for key in [k for k, m in self._ours.items() if k not in self._open and now - m.created > REMEMBER]:
            del self._ours[key]
            self._seen.discard(key)
            self._cancelled.discard(key)

    def _announce(self, migration: Migration, uid: str, why: str = "") -> None:
        where = f" to {migration.target}" if migration.target else ""
        if migration.succeeded:
            metrics.KEEPER_MIGRATIONS.labels("succeeded").inc()
            message = f"migration {migration.name}{where}, where its disks are served, succeeded"
        else:
            metrics.KEEPER_MIGRATIONS.labels("failed").inc()
            state = backoff(attempts((migration.namespace, migration.vmi), self._ours.values()))
            until = f"; no new attempt before {rfc3339(state.until)}" if state.until is not None else ""
            message = f"migration {migration.name}{where} failed{f': {why}' if why else ''}{until}"
        fields = {"vm": f"{migration.namespace}/{migration.vmi}", "migration": migration.name,
                  "result": migration.phase, "target": migration.target}
        log.info("keeper migration ended", extra={"fields": fields | ({"why": why} if why else {})})
        self.events.emit_about(vmi_reference(migration.namespace, migration.vmi, uid),
                               "MigratedToStorage" if migration.succeeded else "MigrationToStorageFailed", message,
                               warning=not migration.succeeded)


def _said(problem: str, why: str, then: str) -> None:
    metrics.KEEPER_RECORD.labels(problem).inc()
    log.warning("keeper record problem", extra={"fields": {"problem": problem, "why": why, "then": then}})
