"""Our migrations from creation to their end. KubeVirt garbage-collects finished migrations and a new
one may not have reached the watch yet: counts and backoff go by the watch plus what is remembered here.
Each of ours seen unfinished is followed to its end (an Event and a metric then); one unfinished for an
hour stops counting as in flight (`migrations.STALE_AFTER`), left alone; one deleted under way, or
cancelled by the keeper (the scheduler's message), counts as failed.
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from datetime import datetime

from .. import metrics
from ..cluster.events import NO_EVENTS, Events, vmi_reference
from ..rules.keeping.migrations import attempts, backoff, Migration, MigrationPhase
from ..rules.keeping.record import REMEMBER
from ..rules.shared.times import rfc3339
from .apart_spans import VmKey

log = logging.getLogger("webhook.keeper")

MigrationKey = tuple[str, str]  # a migration's namespace and name


def _key(migration: Migration) -> MigrationKey:
    return migration.namespace, migration.name


class Follower:
    def __init__(self, events: Events = NO_EVENTS):
        self.events = events
        self._ours: dict[MigrationKey, Migration] = {}  # ours, as last seen (or as created)
        self._open: set[MigrationKey] = set()  # followed until they end
        self._seen: set[MigrationKey] = set()  # shown by the watch at least once
        self._cancelled: set[MigrationKey] = set()  # deleted by us: failed, whatever the watch shows
        self._shown: set[MigrationKey] = set()  # ours in the watch as last observed

    def remember(self, migrations: Sequence[Migration]) -> None:
        """Ours as the keeper's record keeps them, counted as the watch would show them, one unfinished followed;
        those ended that the watch no longer shows are the record's to keep."""
        for key in [k for k, m in self._ours.items() if m.final and k not in self._shown and k not in self._open]:
            del self._ours[key]
        for migration in migrations:
            key = _key(migration)
            if key in self._ours:
                continue
            self._ours[key] = migration
            self._seen.add(key)
            if not migration.final:
                self._open.add(key)

    def ours(self) -> list[Migration]:
        """Ours the watch does not show (garbage-collected, deleted, not yet shown): the record's."""
        return [m for key, m in self._ours.items() if key not in self._shown]

    def created(self, migration: Migration) -> None:
        """One we just created: remembered, and followed to its end."""
        key = _key(migration)
        self._ours[key] = migration
        self._open.add(key)

    def cancelled(self, migration: Migration, now: datetime, why: str, uid: str = "") -> None:
        """One of ours we deleted: failed now, announced with `why` (an Event on the VMI, `uid`)."""
        key = _key(migration)
        failed = dataclasses.replace(migration, phase=MigrationPhase.FAILED, ended=now)
        self._ours[key] = failed
        self._cancelled.add(key)
        self._open.discard(key)
        self._announce(failed, uid, why)

    def history(self, watched: Sequence[Migration]) -> list[Migration]:
        """Every migration to count: the watch's (ours cancelled as we know them), plus ours it does not show."""
        shown = {_key(m) for m in watched}
        return ([self._ours[key] if (key := _key(m)) in self._cancelled else m for m in watched]
                + [m for key, m in self._ours.items() if key not in shown])

    def observe(self, watched: Sequence[Migration], now: datetime,
                uids: dict[VmKey, str] | None = None) -> None:
        """Take in what the watch shows; announce those of ours that ended since."""
        shown = {_key(m): m for m in watched if m.ours}
        self._shown = set(shown)
        for key, migration in shown.items():
            if key in self._cancelled:
                continue  # failed as far as we count, until the watch lets go of it
            if key not in self._ours and migration.in_flight(now):
                self._open.add(key)  # a previous leader's, still under way: ours to follow now
            self._ours[key] = migration
            self._seen.add(key)
        for key in sorted(self._open):
            migration = self._ours[key]
            if key not in shown and key in self._seen:
                # Deleting a migration under way aborts it: remembered as failed, so it stops
                # counting as in flight and the VM backs off.
                self._open.discard(key)
                self._ours[key] = dataclasses.replace(migration, phase=MigrationPhase.FAILED, ended=now)
                log.warning("keeper migration gone", extra={"fields": {
                    "vm": f"{key[0]}/{migration.vmi}", "migration": key[1],
                    "why": "deleted before it ended: counted as failed"}})
            elif migration.final:
                self._open.discard(key)
                self._announce(migration, (uids or {}).get((migration.namespace, migration.vmi), ""))
            elif not migration.in_flight(now):
                self._open.discard(key)
                log.warning("keeper migration stale", extra={"fields": {
                    "vm": f"{key[0]}/{migration.vmi}", "migration": key[1],
                    "why": "unfinished for an hour: no longer counted as in flight (left alone)"}})
        for key in [k for k, m in self._ours.items() if k not in self._open and now - m.created > REMEMBER]:
            del self._ours[key]
            self._seen.discard(key)
            self._cancelled.discard(key)

    def _announce(self, migration: Migration, uid: str, why: str = "") -> None:
        vm = f"{migration.namespace}/{migration.vmi}"
        where = f" to {migration.target}" if migration.target else ""
        if migration.succeeded:
            metrics.KEEPER_MIGRATIONS.labels("succeeded").inc()
            message = f"migration {migration.name}{where}, where its disks are served, succeeded"
        else:
            metrics.KEEPER_MIGRATIONS.labels("failed").inc()
            state = backoff(attempts((migration.namespace, migration.vmi), self._ours.values()))
            until = f"; no new attempt before {rfc3339(state.until)}" if state.until is not None else ""
            cause = f": {why}" if why else ""
            message = f"migration {migration.name}{where} failed{cause}{until}"
        fields = {"vm": vm, "migration": migration.name, "result": migration.phase, "target": migration.target}
        log.info("keeper migration ended", extra={"fields": fields | ({"why": why} if why else {})})
        reason = "MigratedToStorage" if migration.succeeded else "MigrationToStorageFailed"
        self.events.emit_about(vmi_reference(migration.namespace, migration.vmi, uid), reason, message,
                               warning=not migration.succeeded)
