"""A drain's share-managers answered while they are on their way out, in `serve`."""
from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from .. import kinds
from ..kinds import POD
from ..background import Background, Companion
from ..config import AdmissionSettings, PinMode
from ..deadline import Deadline
from ..lookup.recorded import changed
from ..rules.placement.patch import as_created
from ..rules.placement.prepared import AGAIN_SECONDS, PREPARED_SECONDS
from ..stores.cache import WatchedClusterStore
from .admit import share_manager_rule
from .server import Admissions

log = logging.getLogger("webhook.prepare")

PERIOD = 1.0  # seconds between two looks: longhorn-manager creates a share-manager again seconds after its eviction
TIMEOUT = 5.0  # for one pod's answer, its wait in the lane included
MOST_PER_LOOK = 200  # answers worked out in one look at most: a drain of two full nodes
MOST_HELD = 2_000  # answers held at most: a drain of a node re-creates 110 share-managers at most


class Preparer(Companion):
    """A companion of `serve` (start, stop, degraded): a look every `period` seconds, once synced,
    at the share-manager pods on their way out; answers for those without a recent one."""

    def __init__(self, store: WatchedClusterStore, settings: AdmissionSettings, admissions: Admissions, *,
                 period: float = PERIOD, clock: Any = time.monotonic):
        self.store, self.settings, self.admissions, self.clock = store, settings, admissions, clock
        self.said: dict[str, str] = {}  # why each pod on its way out has no answer, as last logged
        self.task = Background("prepare", self.look, log=log, failure="preparing share-managers' answers failed",
                               period=period, wait_first=True)

    async def look(self) -> int:
        """Answers prepared for the share-manager pods on their way out now; how many."""
        settings, answers, promises = self.settings, self.admissions.shared.answers, self.admissions.shared.promises
        now = self.clock()
        let_go = [(key, answers.pop(key)) for key, old in list(answers.items()) if now - old.made > PREPARED_SECONDS]
        for (namespace, name), old in let_go:
            known, pod = self.store.peek(POD, namespace, name)
            if not known or pod is None or kinds.terminating(pod):  # not created again in time (by this
                promises.end(old.vm, made=old.made)  # replica or another): its VM is not coming
        if settings.pin is PinMode.OFF or not settings.share_manager_rule or not self.store.synced():
            return 0
        made, why_not = 0, {}
        for pod in self.store.share_managers_leaving():
            if made >= MOST_PER_LOOK:
                break
            namespace, name = kinds.meta(pod).get("namespace") or "", str(kinds.meta(pod).get("name") or "")
            held = answers.get((namespace, name))
            if held is not None and self.clock() - held.made < AGAIN_SECONDS and \
                    await changed(self.store, held.reads, Deadline.after(TIMEOUT, 0.0)) is None:
                continue  # recent, and what it read unchanged: worked out again otherwise
            shared = dataclasses.replace(self.admissions.shared, preparing=[])
            again = as_created(pod, settings)  # as longhorn-manager creates it again: unbound, without our answer,
            kinds.meta(again).pop("deletionTimestamp", None)  # and not terminating
            outcome = await share_manager_rule(namespace, again, self.store, settings, Deadline.after(TIMEOUT, 0.0),
                                               shared)  # in its turn in the lane, as the pod it stands for will be
            if not shared.preparing:  # the search for where its VM can follow made no answer: why
                decided = outcome.decision
                why_not[name] = outcome.detail or outcome.skipped or (decided.reason if decided else "no decision")
            elif (namespace, name) in answers or len(answers) < MOST_HELD:  # a newer answer replaces an older one
                answers[namespace, name] = shared.preparing[-1]
                made += 1
            else:
                promises.end(shared.preparing[-1].vm, made=shared.preparing[-1].made)
                why_not[name] = "too many answers held"
        new = {name: why for name, why in why_not.items() if self.said.get(name) != why}
        self.said = why_not  # a pod gone, or answered since, is forgotten
        if made or new or let_go:  # each reason once, not at every look while the pod terminates
            log.info("share-managers' answers prepared", extra={"fields": {
                "prepared": made, "held": len(answers), "let_go": len(let_go),
                "not_prepared": dict(list(new.items())[:10]), "not_prepared_count": len(new)}})
        return made
