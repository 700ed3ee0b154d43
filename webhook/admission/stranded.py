"""The safety net under the pin, in `serve`: report pods we pinned that stay unschedulable: logged once,
counted, and one Event on its VMI of a name fixed per pod (the other replicas' are refused, 409)."""
from __future__ import annotations

import datetime
import logging
from typing import Any

from .. import kinds, metrics
from ..background import Background, Companion
from ..cluster.events import NO_EVENTS, Events, vmi_reference
from ..stores.cache import WatchedClusterStore
from ..config import AdmissionSettings
from ..rules.placement.stranded import Stranded, stranded

log = logging.getLogger("webhook.stranded")
EVENT_REASON = "Stranded"


class StrandedReporter(Companion):
    """A companion of `serve` (start, stop, degraded): a look every `interval` seconds, once synced."""

    def __init__(self, store: WatchedClusterStore, settings: AdmissionSettings, events: Events = NO_EVENTS, *,
                 interval: float = 30.0):
        self.store, self.settings, self.events = store, settings, events
        self.reported: dict[str, Stranded] = {}  # namespace/pod -> what was said about it
        self.task = Background("stranded", self._look, log=log, failure="looking for stranded pods failed",
                                   period=interval, wait_first=True)

    def scan(self, now: datetime.datetime) -> list[Stranded]:
        """The stranded pods now; the new ones are reported, the ones gone are forgotten."""
        found: dict[str, Stranded] = {}
        for pod in self.store.pinned_waiting():
            namespace = kinds.meta(pod).get("namespace") or ""
            stuck = stranded(pod, namespace, self.settings, now)
            if stuck is None:
                continue
            key = f"{namespace}/{stuck.pod}"
            found[key] = stuck
            if key not in self.reported:
                self._report(pod, stuck, now)
        self.reported = found
        metrics.STRANDED_PODS.set(len(found))
        return list(found.values())

    def _report(self, pod: dict[str, Any], stuck: Stranded, now: datetime.datetime) -> None:
        what = stuck.describe(now)
        log.warning("pinned pod stranded", extra={"fields": {
            "namespace": stuck.namespace, "pod": stuck.pod, "vm": stuck.vm, "node": stuck.node,
            "scheduler": stuck.message, "since": stuck.since.isoformat()}})
        # On the VMI it runs, its controlling owner (the `vm.kubevirt.io/name` label is its hostname, which can differ).
        owner = kinds.vmi_owner(pod)
        if owner is not None:
            uid = owner.get("uid")
            involved = vmi_reference(stuck.namespace, owner["name"], uid if isinstance(uid, str) else "")
            self.events.emit_about(involved, EVENT_REASON, f"pod {stuck.pod} {what}", warning=True,
                                   name=f"{stuck.pod}.stranded")

    async def _look(self) -> None:
        if self.store.synced():
            self.scan(datetime.datetime.now(datetime.timezone.utc))

