"""Whether Longhorn reboots co-located VMs when their share-manager restarts, as the Longhorn that
runs is set now (`rules.shared.longhorn.restarts_vms`): read once a pass (one list of Longhorn's
Settings), exported as `colocate_longhorn_restarts_vms`, and said in one log line at the first pass
and whenever one of the Settings it reads changes. It changes nothing: the fix is the admin's
(docs/operations.md)."""
from __future__ import annotations

import logging

from .. import metrics
from ..cluster.direct import ClusterStore
from ..cluster.replicas import read_settings
from ..config import Settings
from ..rules.shared.longhorn import SETTINGS, Answer, Restarts, restarts_vms

log = logging.getLogger("webhook.keeper")


class Remount:
    def __init__(self, store: ClusterStore, settings: Settings, timeout: float):
        self.store, self.settings, self.timeout = store, settings, timeout
        self.read: tuple[tuple[str, str | None], ...] | None = None  # the Settings as last said (None: not yet)

    async def check(self) -> Restarts:
        values = await read_settings(self.store, self.settings, self.timeout)
        restarts = restarts_vms(values)
        gauge = metrics.show(metrics.LONGHORN_RESTARTS_VMS)
        for answer in Answer:
            gauge.labels(answer.replace(" ", "_")).set(1 if answer is restarts.answer else 0)
        read = (("read", "yes" if values is not None else None),
                *((name, (values or {}).get(name)) for name in SETTINGS))
        if read != self.read:
            self.read = read
            level = logging.INFO if restarts.answer is Answer.NO else logging.WARNING
            log.log(level, "longhorn and share-manager restarts", extra={"fields": {"answer": str(restarts.answer), "why": restarts.warning() or restarts.why,
                                      "settings": {k: v for k, v in read[1:] if v is not None}}})
        return restarts
